# The native extensions are described in geasync/_cffi_build.py (cffi API mode); everything else is in pyproject.toml.
#   geasync._twin   always: the shim with the embedded CPU twin of the runtime
#   geasync._cann   only when a CANN toolkit is named (GEASYNC_CANN_HOME, else ASCEND_HOME_PATH, else
#                   ASCEND_TOOLKIT_HOME, as `source <toolkit>/set_env.sh` sets them); a named toolkit that lacks a
#                   header or library fails the build, naming what is missing. GEASYNC_CANN_HOME=none skips it.
# The sources of one extension compile in parallel (GEASYNC_BUILD_JOBS, default: the CPU count); each file is
# reported as it starts, so `pip install -v` shows progress.
import concurrent.futures
import importlib.util
import os
import pathlib
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext


def _cann_toolkit_named() -> bool:
    # geasync/_toolkit.py by path: geasync itself is not importable while it is being built.
    spec = importlib.util.spec_from_file_location(
        "_geasync_setup_toolkit", pathlib.Path(__file__).resolve().parent / "geasync" / "_toolkit.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.toolkit_home() is not None


def _build_jobs() -> int:
    value = os.environ.get("GEASYNC_BUILD_JOBS", "")
    if value.isdigit() and int(value) >= 1:
        return int(value)
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


def _parallel_compile(compiler, sources, output_dir=None, macros=None, include_dirs=None, debug=0,
                      extra_preargs=None, extra_postargs=None, depends=None):
    # CCompiler.compile, with its per-file loop run on a thread pool: setuptools' own `parallel` option only spreads
    # whole extensions, and geasync._twin is one extension of ~40 C++ files.
    macros, objects, extra_postargs, pp_opts, build = compiler._setup_compile(
        output_dir, macros, include_dirs, sources, depends, extra_postargs)
    cc_args = compiler._get_cc_args(pp_opts, debug, extra_preargs)
    todo = [(obj, *build[obj]) for obj in objects if obj in build]
    jobs = min(_build_jobs(), max(1, len(todo)))

    def one(index_and_item):
        index, (obj, src, ext) = index_and_item
        print(f"geasync: [{index + 1}/{len(todo)}] compiling {src}", file=sys.stderr, flush=True)
        compiler._compile(obj, src, ext, cc_args, extra_postargs, pp_opts)

    print(f"geasync: compiling {len(todo)} native sources, {jobs} at a time (GEASYNC_BUILD_JOBS)",
          file=sys.stderr, flush=True)
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for future in [pool.submit(one, item) for item in enumerate(todo)]:
            future.result()  # the first CompileError stops the build, with the compiler's message above it
    return objects


class ParallelBuildExt(build_ext):
    def build_extension(self, ext):
        compiler = self.compiler
        compiler.compile = lambda *args, **kwargs: _parallel_compile(compiler, *args, **kwargs)
        try:
            super().build_extension(ext)
        finally:
            del compiler.compile  # back to the class's method


def main() -> None:
    cffi_modules = ["geasync/_cffi_build.py:ffibuilder"]
    if _cann_toolkit_named():
        cffi_modules.append("geasync/_cffi_build.py:make_cann_builder")
    setup(cffi_modules=cffi_modules, cmdclass={"build_ext": ParallelBuildExt})


if __name__ == "__main__":  # pip (setuptools.build_meta) and `python setup.py` both run it as __main__
    main()
