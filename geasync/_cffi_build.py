"""Build script of the native extension ``geasync._twin`` (cffi API mode, C++17).

It compiles the shim (``_native/shim``: the C ABI of ``_native/include/geasync.h`` over the GE v2 / ACL C++ API)
together with the twin (``_native/twin``: a CPU implementation of that API subset with an ONNX engine).
The cdef is read from the C headers themselves (geasync.h between its CDEF markers, the twin's control header from
its extern "C" block), so declarations exist once. The package version is compiled in (``ga_version``), so geasync
refuses an extension built for another version.
``make_cann_builder`` builds ``geasync._cann`` from the same shim against an installed CANN toolkit (listed by
setup.py only when one is named: GEASYNC_CANN_HOME / ASCEND_HOME_PATH / ASCEND_TOOLKIT_HOME).

Environment:
  GEASYNC_SANITIZE=1   build with AddressSanitizer + UndefinedBehaviorSanitizer (see tools/run_sanitized_tests.sh)
  GEASYNC_SANITIZE=thread  build with ThreadSanitizer (see tools/tsan_stress.sh)
  GEASYNC_DEBUG=1      build with -O0 -g
  GEASYNC_WERROR=1     warnings are errors (-Werror): set by .ci/run and for development; a user's build with
                       another compiler version must not stop on a new warning
  CXXFLAGS             appended after geasync's own flags, so a user's flags win
"""

from __future__ import annotations

import os
import pathlib
import re
import shlex
from types import ModuleType
from typing import Any

from cffi import FFI

HERE = pathlib.Path(__file__).resolve().parent
NATIVE = HERE / "_native"
ROOT = HERE.parent


def _rel(path: pathlib.Path) -> str:
    # setuptools wants source paths relative to the project root
    return os.path.relpath(path, ROOT)


def _cdef_from_header(path: pathlib.Path) -> str:
    text = path.read_text()
    match = re.search(r"/\* CDEF BEGIN \*/(.*?)/\* CDEF END \*/", text, re.S)
    if match is None:
        raise RuntimeError(f"{path}: CDEF markers not found")
    return match.group(1)


def _cdef_from_extern_c(path: pathlib.Path) -> str:
    """The declarations of a header's ``extern "C"`` block (a header with no CDEF markers, and no preprocessor
    directives inside that block)."""
    text = path.read_text()
    match = re.search(r'extern "C" \{\n#endif\n(.*)\n#ifdef __cplusplus\n\}', text, re.S)
    if match is None:
        raise RuntimeError(f"{path}: no extern \"C\" block found")
    return match.group(1)


def package_version() -> str:
    """geasync's version (geasync/_version.py, read as text: geasync is not importable while it is built)."""
    match = re.search(r'^__version__ = "([^"]+)"$', (HERE / "_version.py").read_text(), re.M)
    if match is None:
        raise RuntimeError("geasync/_version.py: __version__ not found")
    return match.group(1)


def _version_source() -> str:
    # ga_version is defined in the extension's own generated source, not with a -D flag on every file: a version
    # bump then recompiles one file, not the twin
    return f'extern "C" const char *ga_version(void) {{ return {_c_string(package_version())}; }}\n'


# Python callbacks that the shim calls on the thread that called into the runtime (allocator bridge).
_CALLBACKS = """
extern "Python" void *_ga_py_alloc_malloc(void *user, size_t size);
extern "Python" void _ga_py_alloc_free(void *user, void *addr);
extern "Python" void _ga_py_alloc_release(void *user);
"""

def _blas_args() -> tuple[list[str], list[str]]:
    # The twin's MatMul/Gemm/Conv call OpenBLAS from the scipy-openblas32 wheel (a build requirement and a runtime
    # dependency). No rpath: geasync._preload loads the library (RTLD_GLOBAL) before the extension is imported.
    import scipy_openblas32

    return (["-I" + scipy_openblas32.get_include_dir(), "-DGEASYNC_HAVE_OPENBLAS=1"],
            ["-L" + scipy_openblas32.get_lib_dir(), "-l" + scipy_openblas32.get_library()])


def _werror() -> list[str]:
    return ["-Werror"] if os.environ.get("GEASYNC_WERROR") == "1" else []


def _user_cxxflags() -> list[str]:
    # setuptools passes CFLAGS but not CXXFLAGS to the compiler; these are C++ sources
    return shlex.split(os.environ.get("CXXFLAGS", ""))


def _compile_args() -> tuple[list[str], list[str]]:
    blas_compile, blas_link = _blas_args()
    compile_args = ["-std=c++17", "-Wall", "-Wextra", *_werror(), "-fvisibility=hidden", "-pthread", *blas_compile]
    link_args = ["-pthread", "-lstdc++", *blas_link]
    if os.environ.get("GEASYNC_SANITIZE") == "1":
        san = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"]
        compile_args += ["-O1", "-g"] + san
        link_args += san
    elif os.environ.get("GEASYNC_SANITIZE") == "thread":  # ThreadSanitizer (tools/tsan_stress.sh builds its own)
        san = ["-fsanitize=thread", "-fno-omit-frame-pointer"]
        compile_args += ["-O1", "-g"] + san
        link_args += san
    elif os.environ.get("GEASYNC_DEBUG") == "1":
        compile_args += ["-O0", "-g"]
    else:
        compile_args += ["-O2"]
    return compile_args + _user_cxxflags(), link_args


def make_twin_builder() -> FFI:
    ffi = FFI()
    ffi.cdef(_cdef_from_header(NATIVE / "include" / "geasync.h") + _CALLBACKS
             + _cdef_from_extern_c(NATIVE / "twin" / "include" / "twin" / "twin_control.h"))
    sources = sorted(
        [*(NATIVE / "shim").glob("*.cc"), *(NATIVE / "twin" / "src").glob("*.cc"),
         *(NATIVE / "twin" / "onnx").glob("*.cc")]
    )
    compile_args, link_args = _compile_args()
    ffi.set_source(
        "geasync._twin",
        '#include "geasync.h"\n#include "twin/twin_control.h"\n' + _version_source(),
        source_extension=".cpp",
        sources=[_rel(p) for p in sources],
        # Only public headers are on the include path (the twin's own sources reach their private headers
        # relative to themselves): the shim cannot name anything CANN does not publish.
        include_dirs=[
            _rel(NATIVE / "include"),
            _rel(NATIVE / "shim"),
            _rel(NATIVE / "twin" / "include"),
        ],
        define_macros=[("GEASYNC_BACKEND_NAME", '"twin"')],
        extra_compile_args=compile_args,
        extra_link_args=link_args,
    )
    return ffi



# --- geasync._cann: the same shim against an installed CANN toolkit ------------------------------------------------

def _load_toolkit_module() -> ModuleType:
    # geasync/_toolkit.py by path: this script runs before geasync is importable (cffi execs it from setup.py).
    import importlib.util
    import sys

    name = "_geasync_build_toolkit"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / "_toolkit.py")
        assert spec is not None and spec.loader is not None  # a .py path always has a source loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _c_string(text: str) -> str:
    return '"' + "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\{b:03o}"
                         for b in text.encode()) + '"'


# CANN-only: what the extension was built against (for `python -m geasync info`). No twin-only declarations.
_CANN_CDEF = """
const char *geasync_cann_build_info(void);
"""


def _cann_compile_args() -> tuple[list[str], list[str]]:
    # The twin's flags minus what only the twin's kernels need (BLAS): the shim alone goes into geasync._cann.
    compile_args, link_args = _compile_args()
    twin_only = globals().get("_blas_args")
    if twin_only is not None:
        drop_compile, drop_link = twin_only()
        compile_args = [a for a in compile_args if a not in drop_compile]
        link_args = [a for a in link_args if a not in drop_link]
    return compile_args, link_args


def make_cann_builder(toolkit: Any = None, absolute_paths: bool = False) -> FFI:
    """geasync._cann: the shim (not the twin) compiled against the CANN toolkit named by GEASYNC_CANN_HOME,
    ASCEND_HOME_PATH or ASCEND_TOOLKIT_HOME (see geasync/_toolkit.py), linked to libge_runner_v2, libascendcl and
    libfmk_onnx_parser with an rpath (DT_RPATH, so their own dependencies in the toolkit resolve too) so that it
    loads without LD_LIBRARY_PATH. Raises ToolkitError naming what a broken toolkit lacks.
    ``absolute_paths``: for ffi.compile() outside setup.py (setuptools wants paths relative to the project)."""
    tk_module = _load_toolkit_module()
    tk = tk_module.find_toolkit() if toolkit is None else toolkit
    if tk is None:
        raise tk_module.ToolkitError(
            "no CANN toolkit to build geasync._cann against: set GEASYNC_CANN_HOME or `source <toolkit>/set_env.sh` "
            "(ASCEND_HOME_PATH)")
    path = str if absolute_paths else _rel
    info = f"home={tk.home}\n" + "".join(f"{rel}: {summary}\n" for rel, summary in tk.versions)
    ffi = FFI()
    ffi.cdef(_cdef_from_header(NATIVE / "include" / "geasync.h") + _CALLBACKS + _CANN_CDEF)
    compile_args, link_args = _cann_compile_args()
    library_dirs = [str(d) for d in tk.library_dirs]
    ffi.set_source(
        "geasync._cann",
        '#include "geasync.h"\n' + _version_source() +
        f"static const char *geasync_cann_build_info(void) {{ return {_c_string(info)}; }}\n",
        source_extension=".cpp",
        sources=[path(p) for p in sorted((NATIVE / "shim").glob("*.cc"))],
        include_dirs=[path(NATIVE / "include"), path(NATIVE / "shim"), *(str(d) for d in tk.include_dirs)],
        library_dirs=library_dirs,
        libraries=list(tk_module.LIBRARIES),
        define_macros=[("GEASYNC_BACKEND_NAME", '"cann"')],
        extra_compile_args=compile_args,
        extra_link_args=link_args + ["-Wl,--disable-new-dtags"] + [f"-Wl,-rpath,{d}" for d in library_dirs],
    )
    return ffi


ffibuilder = make_twin_builder()

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
