"""Loads the shared libraries the native extension links against before it is imported.

Called by ``geasync._lib`` right before importing the extension. The twin's MatMul, Gemm and Conv call OpenBLAS
from the ``scipy-openblas32`` wheel; the extension is linked against ``libscipy_openblas.so`` without an rpath, so
the library is loaded here, process-wide (RTLD_GLOBAL), and the dynamic linker resolves the extension's dependency
to it whatever the install location. The number of BLAS threads is set by the twin itself (GEASYNC_BLAS_THREADS,
default 1: see docs/operators.md).
"""

from __future__ import annotations

import ctypes
import os
import threading

_lock = threading.Lock()
_loaded: list[ctypes.CDLL] = []  # keeps the handle alive for the life of the process


def preload() -> None:
    with _lock:
        if _loaded:
            return
        try:
            import scipy_openblas32
        except ImportError as exc:  # pragma: no cover - a broken install
            raise ImportError(
                "geasync's twin needs the scipy-openblas32 package (OpenBLAS) at run time: "
                "pip install scipy-openblas32") from exc
        lib_dir = scipy_openblas32.get_lib_dir()
        name = scipy_openblas32.get_library(fullname=True)
        # OpenBLAS sizes its thread pool when it loads: start it with the twin's BLAS thread count so that no idle
        # pool threads exist beyond it (the variable is restored at once: other OpenBLAS copies are not affected).
        threads = os.environ.get("GEASYNC_BLAS_THREADS", "1")
        saved = os.environ.get("OPENBLAS_NUM_THREADS")
        os.environ["OPENBLAS_NUM_THREADS"] = threads if threads.isdigit() and int(threads) >= 1 else "1"
        try:
            lib = ctypes.CDLL(os.path.join(lib_dir, name), mode=ctypes.RTLD_GLOBAL)
            _loaded.append(lib)
            try:  # the twin sets it again on first use (GEASYNC_BLAS_THREADS, clamped to the cores)
                lib.scipy_openblas_set_num_threads(int(os.environ["OPENBLAS_NUM_THREADS"]))
            except AttributeError:  # pragma: no cover - an OpenBLAS build without the scipy_ prefix
                pass
        finally:
            if saved is None:
                del os.environ["OPENBLAS_NUM_THREADS"]
            else:
                os.environ["OPENBLAS_NUM_THREADS"] = saved


def check_built(package_dir: str) -> None:
    """Raises ImportError, saying what to do, when no backend extension was built next to this package.

    The usual cause: Python imported the unbuilt source tree (a clone's ``geasync/`` from the current directory)
    instead of the installed package. Called by ``geasync/__init__.py`` before anything loads the extension."""
    import importlib.util

    if any(importlib.util.find_spec(f"geasync.{name}") is not None for name in ("_twin", "_cann")):
        return
    root = os.path.dirname(os.path.abspath(package_dir))
    if any(os.path.exists(os.path.join(root, marker)) for marker in ("setup.py", "pyproject.toml")):
        raise ImportError(
            f"geasync: you are importing the source tree at {package_dir}, which has no compiled extension "
            f"(python looks in the current directory first). Run from another directory (the installed geasync "
            f"is then used), or build in place for development: pip install -e . (in {root})")
    raise ImportError(
        f"geasync: the native extension (geasync._twin) is missing from {package_dir}: the install did not build it. "
        "Reinstall it and read the compiler's messages: in the clone, pip install --force-reinstall --no-deps "
        "--no-cache-dir -v . (a C++17 compiler is needed: g++ >= 9 or clang++ >= 10)")
