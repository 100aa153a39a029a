"""Discovery of an installed CANN toolkit: shared by setup.py, the build script and ``python -m geasync info``.

Standard library only, and importable by file path (the build loads it before geasync itself is importable).

The toolkit home comes from the first of these environment variables that is set (``source <toolkit>/set_env.sh``
sets the ASCEND_* ones):

  GEASYNC_CANN_HOME    explicit choice for geasync; "none" (or "0", "off") builds without the CANN backend
  ASCEND_HOME_PATH     e.g. /usr/local/Ascend/ascend-toolkit/latest
  ASCEND_TOOLKIT_HOME

Headers and libraries are looked up in the directories where CANN releases put them (``include``, ``pkg_inc``,
``runtime/include``, ``lib64``, ``runtime/lib64`` ...). Odd layouts can add directories with
GEASYNC_CANN_INCLUDE_DIRS / GEASYNC_CANN_LIBRARY_DIRS (``os.pathsep``-separated, searched first).

No variable set: no toolkit (``find_toolkit`` returns None) and the CANN backend is not built. A variable set to a
toolkit that lacks something the binding needs: ``ToolkitError`` naming every missing header and library.
"""

from __future__ import annotations

import os
import pathlib
import platform
from typing import Iterable, Mapping, NamedTuple

HOME_VARIABLES = ("GEASYNC_CANN_HOME", "ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")
_DISABLED = ("none", "0", "off", "no", "false")

# The GE / metadef / parser / ACL headers the shim compiles against (their paths as the shim includes them).
HEADERS = (
    "ge/ge_api_v2.h",
    "ge/ge_allocator.h",
    "ge/ge_api_error_codes.h",
    "ge/ge_graph_compile_summary.h",
    "graph/graph.h",
    "graph/tensor.h",
    "graph/types.h",
    "graph/ascend_string.h",
    "exe_graph/runtime/tensor.h",
    "acl/acl_base.h",
    "acl/acl_rt.h",
    "parser/onnx_parser.h",
)

# The libraries the CANN backend links: GE v2 runtime, ACL, ONNX parser (names as given to the linker, -l<name>).
LIBRARIES = ("ge_runner_v2", "ascendcl", "fmk_onnx_parser")

_ARCH = f"{platform.machine()}-linux"
# Where CANN releases put headers and libraries, relative to the toolkit home (first match wins per header).
INCLUDE_CANDIDATES = (
    "include",
    "include/external",
    "pkg_inc",
    "pkg_inc/base",
    "pkg_inc/external",
    "pkg_inc/runtime",
    "runtime/include",
    "runtime/include/external",
    "compiler/include",
    "compiler/include/external",
    f"{_ARCH}/include",
    f"{_ARCH}/pkg_inc",
    "fwkacllib/include",
    "acllib/include",
    "atc/include",
)
LIBRARY_CANDIDATES = (
    "lib64",
    "lib",
    "runtime/lib64",
    "compiler/lib64",
    f"{_ARCH}/lib64",
    "fwkacllib/lib64",
    "acllib/lib64",
    "atc/lib64",
)
# Top-level header directories of CANN: a candidate include directory holding one of them is added too (after the
# directories of the required headers), since CANN headers include each other across these trees.
_HEADER_ROOTS = ("ge", "graph", "exe_graph", "acl", "parser", "register", "external", "base", "runtime")

VERSION_FILES = (
    "version.cfg",
    "ascend_toolkit_install.info",
    "version.info",
    "compiler/version.info",
    "runtime/version.info",
    f"{_ARCH}/ascend_toolkit_install.info",
)


class ToolkitError(RuntimeError):
    """A CANN toolkit was named (environment) but cannot be built against."""


class Toolkit(NamedTuple):
    home: pathlib.Path
    variable: str  # the environment variable that named it
    include_dirs: tuple[pathlib.Path, ...]
    library_dirs: tuple[pathlib.Path, ...]
    headers: dict[str, pathlib.Path]  # header (as included) -> file
    libraries: dict[str, pathlib.Path]  # link name -> file (lib<name>.so)
    versions: tuple[tuple[str, str], ...]  # (version file relative to home, summary)


def toolkit_home(environ: Mapping[str, str] | None = None) -> tuple[pathlib.Path, str] | None:
    """(home, variable) from the environment, or None when no toolkit is named (or GEASYNC_CANN_HOME=none)."""
    env = os.environ if environ is None else environ
    for var in HOME_VARIABLES:
        value = env.get(var, "").strip()
        if not value:
            continue
        if var == "GEASYNC_CANN_HOME" and value.lower() in _DISABLED:
            return None
        return pathlib.Path(value).expanduser(), var
    return None


def _extra_dirs(env: Mapping[str, str], var: str) -> list[pathlib.Path]:
    return [pathlib.Path(p).expanduser() for p in env.get(var, "").split(os.pathsep) if p.strip()]


def _unique(paths: Iterable[pathlib.Path]) -> tuple[pathlib.Path, ...]:
    seen: dict[str, pathlib.Path] = {}
    for p in paths:
        seen.setdefault(os.path.normpath(str(p)), p)
    return tuple(pathlib.Path(k) for k in seen)


def probe(home: pathlib.Path, variable: str = "GEASYNC_CANN_HOME",
          environ: Mapping[str, str] | None = None) -> Toolkit:
    """Checks the toolkit at ``home``; raises ToolkitError naming everything the binding needs and did not find."""
    env = os.environ if environ is None else environ
    home = pathlib.Path(home).absolute()
    hint = ("Point GEASYNC_CANN_HOME (or ASCEND_HOME_PATH via `source <toolkit>/set_env.sh`) at a complete CANN "
            "toolkit (the directory holding include/ and lib64/, e.g. /usr/local/Ascend/ascend-toolkit/latest), "
            "or set GEASYNC_CANN_HOME=none to build geasync without the CANN backend.")
    if not home.is_dir():
        raise ToolkitError(f"CANN toolkit not found: {variable}={home} is not a directory. {hint}")

    include_search = [*_extra_dirs(env, "GEASYNC_CANN_INCLUDE_DIRS"),
                      *(home / c for c in INCLUDE_CANDIDATES)]
    include_search = [d for d in _unique(include_search) if d.is_dir()]
    headers: dict[str, pathlib.Path] = {}
    include_dirs: list[pathlib.Path] = []
    for header in HEADERS:
        for d in include_search:
            if (d / header).is_file():
                headers[header] = d / header
                include_dirs.append(d)
                break
    include_dirs += [d for d in include_search if any((d / r).is_dir() for r in _HEADER_ROOTS)]

    library_search = [*_extra_dirs(env, "GEASYNC_CANN_LIBRARY_DIRS"), *(home / c for c in LIBRARY_CANDIDATES)]
    library_search = [d for d in _unique(library_search) if d.is_dir()]
    libraries: dict[str, pathlib.Path] = {}
    library_dirs: list[pathlib.Path] = []
    for name in LIBRARIES:
        for d in library_search:
            if (d / f"lib{name}.so").exists():
                libraries[name] = d / f"lib{name}.so"
                library_dirs.append(d)
                break

    missing_headers = [h for h in HEADERS if h not in headers]
    missing_libs = [f"lib{n}.so" for n in LIBRARIES if n not in libraries]
    if missing_headers or missing_libs:
        parts = []
        if missing_headers:
            searched = ", ".join(os.path.relpath(d, home) for d in include_search) or "no include directory exists"
            parts.append(f"missing headers: {', '.join(missing_headers)} (searched: {searched})")
        if missing_libs:
            searched = ", ".join(os.path.relpath(d, home) for d in library_search) or "no library directory exists"
            parts.append(f"missing libraries: {', '.join(missing_libs)} (searched: {searched})")
        raise ToolkitError(f"the CANN toolkit at {home} (from ${variable}) is incomplete; "
                           + "; ".join(parts) + f". {hint}")
    return Toolkit(home, variable, _unique(include_dirs), _unique(library_dirs), headers, libraries,
                   tuple(versions(home)))


def find_toolkit(environ: Mapping[str, str] | None = None) -> Toolkit | None:
    """The toolkit named by the environment, checked; None when none is named. Raises ToolkitError if broken."""
    found = toolkit_home(environ)
    if found is None:
        return None
    return probe(found[0], found[1], environ)


def versions(home: pathlib.Path) -> list[tuple[str, str]]:
    """(file, summary) for each version file of the toolkit: its version-like ``key=value`` lines."""
    out = []
    for rel in VERSION_FILES:
        path = pathlib.Path(home) / rel
        if not path.is_file():
            continue
        try:
            lines = path.read_text(errors="replace").splitlines()[:50]
        except OSError:
            continue
        picked = [ln.strip() for ln in lines if "version" in ln.lower() and len(ln.strip()) < 120]
        if not picked:
            picked = [ln.strip() for ln in lines if ln.strip()][:1]
        if picked:
            out.append((rel, "; ".join(picked[:4])))
    return out
