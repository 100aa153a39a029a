"""A fake CANN toolkit laid out from the twin, to build and test ``geasync._cann`` without an NPU.

The twin's GE/ACL/parser headers go into ``<home>/include`` in CANN's layout (without the twin-only
``twin/twin_control.h``), and the twin is built as shared libraries under CANN's names in ``<home>/lib64``:

  libascendcl.so        the ACL twin
  libge_runner_v2.so    the GE twin and the ONNX engine (links ascendcl)
  libfmk_onnx_parser.so the ONNX parser (links ge_runner_v2)

with default symbol visibility and ``--no-undefined``, like a real install. ``geasync._cann`` is then built against it
by the real build logic (``make_cann_builder`` in geasync/_cffi_build.py, toolkit found through GEASYNC_CANN_HOME),
which keeps its include paths, link names, rpath and symbol visibility honest.

Command line (e.g. to run the whole suite on the CANN backend over the twin):

  python tests/cann_fake_toolkit.py toolkit /tmp/fakecann
  python tests/cann_fake_toolkit.py package /tmp/fakecann /tmp/fakecann-pkg   # geasync copy with _cann in it
  PYTHONPATH=/tmp/fakecann-pkg GEASYNC_BACKEND=cann pytest
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import pathlib
import runpy
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "geasync"
NATIVE = PACKAGE / "_native"
TWIN = NATIVE / "twin"
FAKE_VERSION = "package_name=Ascend-cann-toolkit\nversion=0.0.0-geasync-fake-toolkit\n"


def _twin_build_flags() -> dict:
    """The twin builder's set_source arguments (include dirs, macros, flags, BLAS), from geasync/_cffi_build.py."""
    build = runpy.run_path(str(PACKAGE / "_cffi_build.py"), run_name="_geasync_fake_toolkit_build")
    return dict(build["make_twin_builder"]()._assigned_source[3])


def _run(cmd: list[str]) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")


def build_fake_toolkit(home: pathlib.Path, jobs: int = 2, opt: str = "-O1") -> pathlib.Path:
    home = pathlib.Path(home).absolute()
    include, lib64, obj = home / "include", home / "lib64", home / "obj"
    for d in (include, lib64, obj):
        d.mkdir(parents=True, exist_ok=True)
    for sub in sorted((TWIN / "include").iterdir()):
        if sub.name != "twin":  # twin-only controls: not part of a CANN install
            shutil.copytree(sub, include / sub.name, dirs_exist_ok=True)
    (home / "version.cfg").write_text(FAKE_VERSION)

    kw = _twin_build_flags()
    cxx = os.environ.get("CXX", "g++").split()  # e.g. "ccache g++"
    # The twin's own flags, minus what only fits a Python extension: default visibility (these are the runtime's
    # exported libraries), no -Werror, a cheaper optimisation level.
    cflags = [a for a in kw.get("extra_compile_args", [])
              if a not in ("-fvisibility=hidden", "-Werror") and not a.startswith("-O")]
    cflags += [opt, "-fPIC"]
    cflags += ["-I" + str(ROOT / d) for d in kw.get("include_dirs", [])]
    cflags += [f"-D{k}" if v is None else f"-D{k}={v}" for k, v in kw.get("define_macros", [])]
    link_extra = list(kw.get("extra_link_args", []))
    link_extra += ["-L" + d for d in kw.get("library_dirs", [])] + ["-l" + n for n in kw.get("libraries", [])]
    # Libraries the twin needs from elsewhere (BLAS): DT_RPATH, so the lookup chain from the extension stays intact.
    link_extra += ["-Wl,--disable-new-dtags"] + ["-Wl,-rpath," + a[2:] for a in link_extra if a.startswith("-L")]

    twin_sources = sorted([*(TWIN / "src").glob("*.cc"), *(TWIN / "onnx").glob("*.cc")])
    groups = {
        "ascendcl": [s for s in twin_sources if s.name == "acl_runtime.cc"],
        "fmk_onnx_parser": [s for s in twin_sources if s.name == "onnx_parser.cc"],
    }
    groups["ge_runner_v2"] = [s for s in twin_sources if s not in groups["ascendcl"] + groups["fmk_onnx_parser"]]

    def compile_one(src: pathlib.Path) -> pathlib.Path:
        out = obj / f"{src.parent.name}_{src.stem}.o"
        _run([*cxx, "-c", str(src), "-o", str(out), *cflags])
        return out

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        objects = dict(zip(twin_sources, pool.map(compile_one, twin_sources), strict=True))

    deps = {"ascendcl": [], "ge_runner_v2": ["ascendcl"], "fmk_onnx_parser": ["ge_runner_v2", "ascendcl"]}
    for name in ("ascendcl", "ge_runner_v2", "fmk_onnx_parser"):
        target = lib64 / f"lib{name}.so"
        _run([*cxx, "-shared", "-o", str(target), *(str(objects[s]) for s in groups[name]),
              f"-Wl,-soname,lib{name}.so", "-Wl,--no-undefined", "-L" + str(lib64),
              *("-l" + d for d in deps[name]), *link_extra])
    shutil.rmtree(obj)
    return home


def build_cann_extension(home: pathlib.Path, build_dir: pathlib.Path) -> pathlib.Path:
    """Builds geasync._cann with make_cann_builder(), the toolkit found through GEASYNC_CANN_HOME=home (in a
    subprocess: a clean environment, and cffi changes directories while compiling). Returns the extension's path."""
    env = {k: v for k, v in os.environ.items() if k not in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME",
                                                             "LD_LIBRARY_PATH")}
    env["GEASYNC_CANN_HOME"] = str(home)
    build_dir = pathlib.Path(build_dir).absolute()
    build_dir.mkdir(parents=True, exist_ok=True)
    code = (
        "import runpy, sys\n"
        f"build = runpy.run_path({str(PACKAGE / '_cffi_build.py')!r})\n"
        "ffi = build['make_cann_builder'](absolute_paths=True)\n"
        f"print(ffi.compile(tmpdir={str(build_dir)!r}, verbose=False))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=str(build_dir))
    if r.returncode != 0:
        raise RuntimeError(f"building geasync._cann failed:\n{r.stdout}\n{r.stderr}")
    return pathlib.Path(r.stdout.strip().splitlines()[-1])


def make_package_copy(dest: pathlib.Path, extension: pathlib.Path) -> pathlib.Path:
    """A copy of the installed geasync package (Python modules and the built _twin) plus the given _cann, under dest.

    The installed copy, not the source tree: a regular (non-editable) install keeps the built _twin in
    site-packages only."""
    dest = pathlib.Path(dest).absolute()
    import importlib.util

    installed = pathlib.Path(importlib.util.find_spec("geasync").origin).parent
    shutil.copytree(installed, dest / "geasync", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("_native", "__pycache__", "*.cpp", "*.o", "_cann*.so"))
    shutil.copy2(extension, dest / "geasync" / extension.name)
    return dest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("toolkit", help="lay out a fake toolkit from the twin")
    t.add_argument("home", type=pathlib.Path)
    t.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 2)
    k = sub.add_parser("package", help="build geasync._cann against a toolkit into a copy of the package")
    k.add_argument("home", type=pathlib.Path)
    k.add_argument("dest", type=pathlib.Path)
    a = p.parse_args(argv)
    if a.cmd == "toolkit":
        print(build_fake_toolkit(a.home, jobs=a.jobs))
    else:
        ext = build_cann_extension(a.home, a.dest / "build")
        print(make_package_copy(a.dest, ext))
    return 0


if __name__ == "__main__":
    sys.exit(main())
