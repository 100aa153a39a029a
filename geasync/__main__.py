"""Command line: ``python -m geasync info``.

Prints the geasync version, the backends this install has (and which one "auto" picks), what the CANN backend was
built against, and the CANN toolkit the environment names (GEASYNC_CANN_HOME, ASCEND_HOME_PATH or
ASCEND_TOOLKIT_HOME) with the versions found in it. It loads the backend modules to check that they load, but
initialises no runtime.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pathlib
import platform
import sys
from typing import Callable, TextIO

_CANN_HINT = ("to build it: install the CANN toolkit, `source <toolkit>/set_env.sh` (or set GEASYNC_CANN_HOME), "
              "then reinstall geasync (see docs/ascend.md)")


def _module_report(name: str, emit: Callable[[str], None]) -> None:
    from . import _preload

    try:
        _preload.preload()
        module = importlib.import_module(f"geasync._{name}")
    except Exception as exc:  # a backend that does not load is exactly what this command is for
        emit(f"  {name}: built, but does not load: {type(exc).__name__}: {exc}")
        return
    emit(f"  {name}: {module.__file__}")
    built = getattr(module.lib, "geasync_cann_build_info", None)
    if built is not None:
        lines = module.ffi.string(built()).decode("utf-8", "replace").splitlines()
        for line in lines:
            key, _, value = line.partition("=")
            emit(f"    built against: {value}" if key == "home" else f"    {line}")


def info(out: TextIO | None = None) -> int:
    stream = sys.stdout if out is None else out

    def emit(text: str) -> None:
        print(text, file=stream)

    import geasync
    from . import _toolkit
    from ._lib import backends

    emit(f"geasync {geasync.__version__} ({pathlib.Path(geasync.__file__).parent})")
    try:
        import numpy

        numpy_version = numpy.__version__
    except ImportError:  # pragma: no cover - numpy is a dependency
        numpy_version = "missing"
    emit(f"python {platform.python_version()} ({sys.executable}), numpy {numpy_version}")

    available = backends()
    requested = os.environ.get("GEASYNC_BACKEND") or ""
    auto = "cann" if "cann" in available else "twin"
    emit(f"backends: {', '.join(available) or 'none'} (auto selects {auto}; "
         f"GEASYNC_BACKEND={requested if requested else '<unset>'})")
    for name in ("twin", "cann"):
        if name in available:
            _module_report(name, emit)
        else:
            emit(f"  {name}: not built" + (f"; {_CANN_HINT}" if name == "cann" else ""))

    named = _toolkit.toolkit_home()
    if named is None:
        disabled = os.environ.get("GEASYNC_CANN_HOME", "").strip()
        emit("CANN toolkit: " + ("disabled (GEASYNC_CANN_HOME=" + disabled + ")" if disabled else
                                 "none named (GEASYNC_CANN_HOME, ASCEND_HOME_PATH and ASCEND_TOOLKIT_HOME are unset)"))
        return 0
    try:
        tk = _toolkit.probe(named[0], named[1])
    except _toolkit.ToolkitError as exc:
        emit(f"CANN toolkit: {named[0]} (from ${named[1]}): unusable: {exc}")
        return 0
    emit(f"CANN toolkit: {tk.home} (from ${tk.variable})")
    for rel, summary in tk.versions or [("version", "no version file found")]:
        emit(f"  {rel}: {summary}")
    emit("  include dirs: " + ", ".join(str(d) for d in tk.include_dirs))
    for name, path in tk.libraries.items():
        emit(f"  lib{name}.so: {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else list(argv)
    if args_list[:1] == ["check"]:  # its own parser: geasync._check
        from . import _check

        return _check.main(args_list[1:])
    parser = argparse.ArgumentParser(prog="python -m geasync", description="geasync command line")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="version, backends, CANN toolkit path and versions")
    sub.add_parser("check", help="can this ONNX model run on the twin? (python -m geasync check --help)")
    args = parser.parse_args(args_list)
    if args.command == "info":
        return info()
    return 2  # pragma: no cover - argparse rejects other commands


if __name__ == "__main__":
    sys.exit(main())
