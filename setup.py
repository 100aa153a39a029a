# The native extensions are described in geasync/_cffi_build.py (cffi API mode); everything else is in pyproject.toml.
#   geasync._twin   always: the shim with the embedded CPU twin of the runtime
#   geasync._cann   only when a CANN toolkit is named (GEASYNC_CANN_HOME, else ASCEND_HOME_PATH, else
#                   ASCEND_TOOLKIT_HOME, as `source <toolkit>/set_env.sh` sets them); a named toolkit that lacks a
#                   header or library fails the build, naming what is missing. GEASYNC_CANN_HOME=none skips it.
import importlib.util
import pathlib

from setuptools import setup


def _cann_toolkit_named() -> bool:
    # geasync/_toolkit.py by path: geasync itself is not importable while it is being built.
    spec = importlib.util.spec_from_file_location(
        "_geasync_setup_toolkit", pathlib.Path(__file__).resolve().parent / "geasync" / "_toolkit.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.toolkit_home() is not None


cffi_modules = ["geasync/_cffi_build.py:ffibuilder"]
if _cann_toolkit_named():
    cffi_modules.append("geasync/_cffi_build.py:make_cann_builder")

setup(cffi_modules=cffi_modules)
