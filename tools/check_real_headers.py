#!/usr/bin/env python3
"""Compiles geasync's shim against CANN's real public headers (syntax only).

Takes local git clones (bare or not) of the three CANN repositories that publish the headers the shim includes:

  hicann/ge        GE, the ONNX parser, inc/external/ge/ge_api_v2.h
  hicann/metadef   graph/ and exe_graph/ headers
  hicann/runtime   ACL headers (include/external/acl)

For each, it reads the repository's own packaging rules (``cmake/package.cmake``: its ``install(FILES|DIRECTORY ...)``
commands whose destination is an include directory), exports exactly those files from the repository's HEAD with
``git archive`` and lays them out as a CANN toolkit installs them (``<home>/x86_64-linux/include``, ``pkg_inc``).
It then builds the include path with geasync's own toolkit discovery (``geasync/_toolkit.py``) and takes the
compiler flags from ``make_cann_builder()`` (``geasync/_cffi_build.py``), and compiles every shim source with
``-fsyntax-only``. Nothing is downloaded; nothing is linked (the toolkit's libraries are empty placeholders, only
there so the discovery accepts the tree as a toolkit).

Exit status: 0 when every shim source compiles, 1 when one does not, 2 when the headers cannot be assembled.

  python3 tools/check_real_headers.py --ge ~/src/ge --metadef ~/src/metadef --runtime ~/src/runtime
  GEASYNC_GE_REPO=... GEASYNC_METADEF_REPO=... GEASYNC_RUNTIME_REPO=... tools/check_real_headers.sh
"""

from __future__ import annotations

import argparse
import io
import os
import pathlib
import platform
import re
import runpy
import shutil
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET

ROOT = pathlib.Path(__file__).resolve().parent.parent
NATIVE = ROOT / "geasync" / "_native"
ARCH = platform.machine() or "x86_64"
REPOS = ("metadef", "runtime", "ge")  # install order: a later package overwrites an earlier one's file
HEADER_SUFFIXES = (".h", ".hpp", ".hh", ".inc")
# CMake variables as a CANN build sets them for the host architecture (the source-dir variables are the repo root).
PINNED = {
    "CMAKE_CURRENT_SOURCE_DIR": "",
    "CMAKE_SOURCE_DIR": "",
    "PROJECT_SOURCE_DIR": "",
    "RUNTIME_DIR": "",
    "CMAKE_SYSTEM_PROCESSOR": ARCH,
    "ARCH": ARCH,
    "TARGET_ARCH": ARCH,
    "ARCH_LINUX_PATH": f"{ARCH}-linux",
    "INSTALL_OPTIONAL": "",
}
INCLUDE_ROOTS = (f"{ARCH}-linux/include", f"{ARCH}-linux/pkg_inc")


class AssemblyError(RuntimeError):
    pass


# --- git ---------------------------------------------------------------------------------------------------------

def git_dir(path: pathlib.Path) -> pathlib.Path:
    path = pathlib.Path(path).expanduser().absolute()
    if (path / ".git").exists():
        return path / ".git"
    if (path / "HEAD").is_file() and (path / "objects").is_dir():
        return path
    raise AssemblyError(f"{path} is not a git repository (bare or not)")


def git(gd: pathlib.Path, *args: str, binary: bool = False):
    r = subprocess.run(["git", f"--git-dir={gd}", *args], capture_output=True)
    if r.returncode != 0:
        raise AssemblyError(f"git {' '.join(args)} in {gd} failed: {r.stderr.decode(errors='replace').strip()}")
    return r.stdout if binary else r.stdout.decode()


# --- cmake install rules -----------------------------------------------------------------------------------------

def _commands(text: str):
    """(name, [raw args]) for every top-level command of a CMake file (nested parentheses kept in the args)."""
    text = re.sub(r"#\[\[.*?\]\]", "", text, flags=re.S)
    text = "\n".join(re.sub(r'#(?=(?:[^"]*"[^"]*")*[^"]*$).*', "", ln) for ln in text.splitlines())
    for m in re.finditer(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\(", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        body = text[m.end():i - 1]
        yield m.group(1).lower(), re.findall(r'"[^"]*"|[^\s()]+', body)


def _expand(arg: str, variables: dict[str, list[str]]) -> list[str] | None:
    """The list a CMake argument expands to; None when it names a variable nobody sets (a third-party path)."""
    unquoted = arg[1:-1] if arg.startswith('"') else arg
    for _ in range(10):
        m = re.search(r"\$\{([A-Za-z0-9_]+)\}", unquoted)
        if m is None:
            break
        if m.group(1) not in variables:
            return None
        value = ";".join(variables[m.group(1)])
        unquoted = unquoted[:m.start()] + value + unquoted[m.end():]
    if arg.startswith('"'):
        return [unquoted]
    return [p for p in unquoted.split(";") if p]


def header_installs(cmake_text: str) -> list[tuple[str, str, str, list[str]]]:
    """(kind FILES|DIRECTORY, source path in the repo, destination, exclude patterns) for each install command
    that puts something into an include directory. if()/else() branches are all taken (every header a build
    variant may install); set() inside them assigns in file order, except the pinned host variables."""
    variables: dict[str, list[str]] = {k: ([v] if v else []) for k, v in PINNED.items()}
    out = []
    for name, args in _commands(cmake_text):
        if name == "set" and args:
            var = args[0]
            if var in PINNED:
                continue
            values = []
            for a in args[1:]:
                if a in ("CACHE", "PARENT_SCOPE"):
                    break
                values += _expand(a, variables) or []
            variables[var] = values
            continue
        if name != "install" or not args or args[0] not in ("FILES", "DIRECTORY"):
            continue
        kind = args[0]
        keywords = {"DESTINATION", "COMPONENT", "PERMISSIONS", "FILE_PERMISSIONS", "DIRECTORY_PERMISSIONS",
                    "RENAME", "PATTERN", "FILES_MATCHING", "OPTIONAL", "EXCLUDE", "REGEX"}
        sources, dest, excludes, i = [], None, [], 1
        while i < len(args) and args[i] not in keywords:
            sources += _expand(args[i], variables) or ["<unresolved>"]
            i += 1
        while i < len(args):
            if args[i] == "DESTINATION" and i + 1 < len(args):
                expanded = _expand(args[i + 1], variables)
                dest = expanded[0] if expanded else None
                i += 2
            elif args[i] == "PATTERN" and i + 2 < len(args) and args[i + 2] == "EXCLUDE":
                excludes.append(args[i + 1].strip('"'))
                i += 3
            else:
                i += 1
        if dest is None or not dest.startswith(INCLUDE_ROOTS):
            continue
        for src in sources:
            if src != "<unresolved>":
                out.append((kind, src.lstrip("/"), dest, excludes))
    return out


# --- assembling the toolkit --------------------------------------------------------------------------------------

def _export(gd: pathlib.Path, paths: list[str], dest: pathlib.Path) -> None:
    """Exports paths (files or directories) of HEAD into dest with git archive."""
    if not paths:
        return
    data = git(gd, "archive", "--format=tar", "HEAD", "--", *paths, binary=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dest, filter="data") if hasattr(tarfile, "data_filter") else tar.extractall(dest)


def assemble(repos: dict[str, pathlib.Path], home: pathlib.Path, log) -> dict[str, str]:
    """Lays the repos' public headers out under home as their packaging installs them. Returns {installed relative
    path: repo} for the report."""
    installed: dict[str, str] = {}
    for repo in REPOS:
        gd = git_dir(repos[repo])
        head = git(gd, "rev-parse", "HEAD").strip()
        log(f"{repo}: {gd} at {head}")
        try:
            rules = header_installs(git(gd, "show", "HEAD:cmake/package.cmake"))
        except AssemblyError as e:
            raise AssemblyError(f"{repo}: no packaging rules (cmake/package.cmake): {e}") from None
        tree = set(git(gd, "ls-tree", "-r", "--name-only", "HEAD").splitlines())
        wanted, missing = [], []
        for kind, src, _dest, _ex in rules:
            src = src.rstrip("/")
            present = src in tree if kind == "FILES" else any(p.startswith(src + "/") for p in tree)
            (wanted if present else missing).append(src)
        for m in sorted(set(missing)):
            log(f"  note: packaging names {m}, which is not in the repository (built or third-party): skipped")
        staging = home.parent / f"src-{repo}"
        _export(gd, sorted(set(wanted)), staging)
        count = 0
        for kind, src, dest, excludes in rules:
            src_path = staging / src.rstrip("/")
            if not src_path.exists():
                continue
            if kind == "FILES":
                files = [(src_path, home / dest / src_path.name)] if src_path.is_file() else []
            else:
                base = home / dest if src.endswith("/") else home / dest / src_path.name
                files = [(f, base / f.relative_to(src_path)) for f in src_path.rglob("*") if f.is_file()
                         and not any(re.fullmatch(p.replace(".", r"\.").replace("*", ".*"), f.name) for p in excludes)]
            for f, target in files:
                if f.suffix not in HEADER_SUFFIXES:
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                rel = str(target.relative_to(home))
                if rel in installed and target.read_bytes() != f.read_bytes():
                    log(f"  note: {rel}: a later install rule of {repo} replaces the file {installed[rel]} put there")
                shutil.copyfile(f, target)
                installed[rel] = repo
                count += 1
        log(f"  {count} header(s) installed from {len(rules)} install rule(s)")
    # Links come last: a package's links may point at another package's headers.
    for repo in REPOS:
        log(f"{repo}: {make_soft_links(git_dir(repos[repo]), home, log)} link(s) from its *Inc.xml packaging rules")
    return installed


def _target_env(path: str) -> str:
    return path.replace("$(TARGET_ENV)", f"{ARCH}-linux").strip("/")


def soft_links(xml_text: str) -> list[tuple[str, str]]:
    """(link, target) pairs, relative to the toolkit home, that a packaging XML's install_softlink attributes
    create: a file's links point at the file in its file_info's install_path, a directory's at the directory."""
    links = []
    root = ET.fromstring(xml_text)
    for path in root.iter("path"):
        for link in filter(None, (path.get("install_softlink") or "").split(";")):
            links.append((_target_env(link), _target_env(path.get("value", ""))))
    for info in root.iter("file_info"):
        base = _target_env(info.get("install_path") or info.get("dst_path") or "")
        for f in info.iter("file"):
            for link in filter(None, (f.get("install_softlink") or "").split(";")):
                links.append((_target_env(link), f"{base}/{f.get('value')}"))
    return links


def make_soft_links(gd: pathlib.Path, home: pathlib.Path, log) -> int:
    """Creates the header links of the repo's scripts/package/module/*/*Inc.xml whose targets were installed."""
    made = 0
    xmls = [p for p in git(gd, "ls-tree", "-r", "--name-only", "HEAD", "scripts/package/module").splitlines()
            if p.endswith("Inc.xml")]
    for xml in xmls:
        for link, target in soft_links(git(gd, "show", f"HEAD:{xml}")):
            src, dst = home / target, home / link
            if not src.exists() or dst.exists() or dst.is_symlink():
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.symlink_to(os.path.relpath(src, dst.parent), target_is_directory=src.is_dir())
            made += 1
    return made


def placeholder_libraries(home: pathlib.Path, toolkit_module) -> None:
    lib64 = home / f"{ARCH}-linux" / "lib64"
    lib64.mkdir(parents=True, exist_ok=True)
    for name in toolkit_module.LIBRARIES:
        (lib64 / f"lib{name}.so").write_bytes(b"")


# --- compiling ---------------------------------------------------------------------------------------------------

def shim_compile_command(build: dict, toolkit) -> list[str]:
    """The compiler and flags make_cann_builder() gives for this toolkit, as -fsyntax-only arguments."""
    ffi = build["make_cann_builder"](toolkit, absolute_paths=True)
    kw = dict(ffi._assigned_source[3])
    cxx = os.environ.get("CXX", "g++").split()
    flags = [a for a in kw.get("extra_compile_args", [])]
    flags += ["-I" + d for d in kw.get("include_dirs", [])]
    flags += [f"-D{k}" if v is None else f"-D{k}={v}" for k, v in kw.get("define_macros", [])]
    return [*cxx, "-fsyntax-only", *flags]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for repo in REPOS:
        p.add_argument(f"--{repo}", type=pathlib.Path, default=os.environ.get(f"GEASYNC_{repo.upper()}_REPO"),
                       help=f"clone of hicann/{repo} (default: $GEASYNC_{repo.upper()}_REPO)")
    p.add_argument("--keep", type=pathlib.Path, help="assemble the toolkit here and keep it (default: a temp dir)")
    p.add_argument("-q", "--quiet", action="store_true", help="print only failures and the verdict")
    a = p.parse_args(argv)
    missing = [r for r in REPOS if getattr(a, r) is None]
    if missing:
        p.error("repository clones needed for: " + ", ".join(missing))

    def log(msg: str) -> None:
        if not a.quiet:
            print(msg, flush=True)

    work = pathlib.Path(tempfile.mkdtemp(prefix="geasync-real-headers-")) if a.keep is None else a.keep.absolute()
    home = work / "toolkit"
    try:
        if home.exists():
            shutil.rmtree(home)
        home.mkdir(parents=True)
        try:
            assemble({r: getattr(a, r) for r in REPOS}, home, log)
        except AssemblyError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        build = runpy.run_path(str(ROOT / "geasync" / "_cffi_build.py"), run_name="_geasync_real_header_check")
        tk_module = build["_load_toolkit_module"]()
        placeholder_libraries(home, tk_module)
        try:
            toolkit = tk_module.probe(home, "GEASYNC_CANN_HOME", environ={})
        except tk_module.ToolkitError as e:
            print(f"error: the assembled headers are not a toolkit geasync can build against: {e}", file=sys.stderr)
            return 2
        for header, path in sorted(toolkit.headers.items()):
            log(f"found {header}: {path.relative_to(home)}")
        command = shim_compile_command(build, toolkit)
        log("flags (make_cann_builder): " + " ".join(command[1:]).replace(str(home), "<toolkit>"))
        failed = 0
        sources = sorted((NATIVE / "shim").glob("*.cc"))
        for src in sources:
            r = subprocess.run([*command, str(src)], capture_output=True, text=True, cwd=str(ROOT))
            errors = len(re.findall(r": (?:fatal )?error:", r.stderr))
            if r.returncode == 0:
                log(f"ok    {src.relative_to(ROOT)}")
            else:
                failed += 1
                print(f"FAIL  {src.relative_to(ROOT)} ({errors} error(s))")
                print(r.stderr.replace(str(home), "<toolkit>"))
        print(f"{len(sources) - failed} of {len(sources)} shim sources compile against the real CANN headers")
        return 0 if failed == 0 else 1
    finally:
        if a.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
