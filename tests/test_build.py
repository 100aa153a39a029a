"""The build as a new user meets it: compiler flags, parallel compilation, the message for a missing build, the
sample model shipped in the package, and no text pointing at documents users do not have."""

from __future__ import annotations

import importlib.util
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig

import numpy as np
import pytest

import geasync as ga

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _load(path: pathlib.Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def cffi_build():
    return _load(ROOT / "geasync" / "_cffi_build.py", "_geasync_test_cffi_build")


def test_warnings_are_errors_only_when_asked(cffi_build, monkeypatch):
    monkeypatch.delenv("GEASYNC_WERROR", raising=False)
    monkeypatch.delenv("CXXFLAGS", raising=False)
    flags, _ = cffi_build._compile_args()
    assert "-Wall" in flags and "-Wextra" in flags and "-Werror" not in flags
    monkeypatch.setenv("GEASYNC_WERROR", "1")
    flags, _ = cffi_build._compile_args()
    assert "-Werror" in flags


def test_user_cxxflags_come_after_geasyncs_own(cffi_build, monkeypatch):
    monkeypatch.setenv("GEASYNC_WERROR", "1")
    monkeypatch.setenv("CXXFLAGS", "-Wno-error -O1 -DUSER_FLAG='a b'")
    flags, _ = cffi_build._compile_args()
    assert flags[-3:] == ["-Wno-error", "-O1", "-DUSER_FLAG=a b"]
    assert flags.index("-Werror") < flags.index("-Wno-error")  # the user's flag wins


def _compiler():
    from setuptools._distutils.ccompiler import new_compiler
    from setuptools._distutils.sysconfig import customize_compiler

    compiler = new_compiler()
    customize_compiler(compiler)
    return compiler


@pytest.fixture
def setup_module():
    return _load(ROOT / "setup.py", "_geasync_test_setup")  # setup() itself runs only as __main__


def test_sources_of_one_extension_compile_in_parallel(setup_module, tmp_path, capsys, monkeypatch):
    if shutil.which(sysconfig.get_config_var("CC").split()[0] if sysconfig.get_config_var("CC") else "cc") is None:
        pytest.skip("no C compiler")
    monkeypatch.setenv("GEASYNC_BUILD_JOBS", "3")
    sources = []
    for i in range(5):
        src = tmp_path / f"unit{i}.cc"
        src.write_text(f"int unit{i}(int x) {{ return x + {i}; }}\n")
        sources.append(str(src))
    compiler = _compiler()
    objects = setup_module._parallel_compile(compiler, sources, output_dir=str(tmp_path / "obj"),
                                             extra_postargs=["-std=c++17"])
    assert len(objects) == 5 and all(pathlib.Path(o).stat().st_size > 0 for o in objects)
    err = capsys.readouterr().err
    assert "compiling 5 native sources, 3 at a time" in err
    assert sorted(re.findall(r"\[(\d)/5\] compiling", err)) == ["1", "2", "3", "4", "5"]


def test_a_compile_error_stops_the_parallel_build(setup_module, tmp_path):
    good, bad = tmp_path / "good.cc", tmp_path / "bad.cc"
    good.write_text("int good() { return 1; }\n")
    bad.write_text("int bad() { return undeclared_name; }\n")
    with pytest.raises(Exception, match="failed with exit code") as failed:
        setup_module._parallel_compile(_compiler(), [str(good), str(bad)], output_dir=str(tmp_path / "obj"))
    assert type(failed.value).__name__ == "CompileError"  # distutils' own, whichever copy of it is loaded


def _copy_source_tree(dest: pathlib.Path, with_project_file: bool) -> pathlib.Path:
    package = dest / "geasync"
    package.mkdir(parents=True)
    for path in (ROOT / "geasync").glob("*.py"):
        shutil.copy(path, package / path.name)
    if with_project_file:
        shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return package


def _import_in(cwd: pathlib.Path) -> subprocess.CompletedProcess:
    # -S: no site-packages, so `geasync` can only come from the current directory, as it does for a user who
    # runs python in a fresh clone's root
    return subprocess.run([sys.executable, "-S", "-c", "import geasync"], cwd=cwd, capture_output=True, text=True,
                          timeout=60)


def test_importing_the_unbuilt_source_tree_says_what_to_do(tmp_path):
    package = _copy_source_tree(tmp_path, with_project_file=True)
    r = _import_in(tmp_path)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: geasync: you are importing the source tree at " + str(package)), r.stderr
    assert "Run from another directory" in last and "pip install -e ." in last
    assert "CANN" not in last  # the old message pointed at the CANN toolkit instead


def test_an_install_without_its_extension_says_what_to_do(tmp_path):
    _copy_source_tree(tmp_path, with_project_file=False)
    r = _import_in(tmp_path)
    last = r.stderr.strip().splitlines()[-1]
    assert "native extension (geasync._twin) is missing" in last and "pip install --force-reinstall" in last, r.stderr


def test_an_extension_built_for_another_version_is_refused_with_what_to_do(tmp_path):
    """The extension carries the version it was built for (ga_version): a stale one is refused when it loads."""
    script = ("import geasync, geasync._version\n"
              "geasync._version.__version__ = '0.0.0-stale'\n"
              "geasync.Session()\n")
    r = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: geasync 0.0.0-stale found its native extension geasync._twin built for "
                           f"geasync {ga.__version__}"), r.stderr
    assert "rebuild or reinstall geasync" in last


def test_the_extension_matches_the_package_version():
    from geasync import _lib

    ga.current_backend()
    assert _lib.ffi.string(_lib.lib.ga_version()).decode() == ga.__version__


def test_sample_mlp_is_the_example_model_byte_for_byte():
    assert ga.samples.mlp_bytes() == (ROOT / "examples" / "models" / "mlp.onnx").read_bytes()


def test_sample_mlp_runs_without_the_source_tree():
    x = np.random.default_rng(1).random((3, 784), dtype=np.float32)
    with ga.Session() as s:
        s.add_graph(1, ga.samples.mlp())
        s.add_graph(2, ga.samples.mlp(seed=1, d_in=8, d_hidden=4, d_out=3))
        (y,) = s.run_graph(1, [x])
        (z,) = s.run_graph(2, [x[:, :8]])
    probs = y.numpy()
    assert probs.shape == (3, 10) and np.allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    assert z.numpy().shape == (3, 3)
    with pytest.raises(ValueError, match="d_hidden"):
        ga.samples.mlp(d_hidden=0)


def test_sample_mlp_matches_the_onnx_reference():
    from onnx import load_from_string
    from onnx.reference import ReferenceEvaluator

    x = np.random.default_rng(2).random((5, 784), dtype=np.float32)
    (expected,) = ReferenceEvaluator(load_from_string(ga.samples.mlp_bytes())).run(None, {"x": x})
    with ga.Session() as s:
        s.add_graph(1, ga.samples.mlp())
        (y,) = s.run_graph(1, [x])
        np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5, atol=1e-6)


# Text users read must not send them to documents that only the project's authors have.
_PRIVATE_REFERENCES = re.compile(r"shared/reference|shared/ARCHITECTURE|ARCHITECTURE(\.md|'s)|seed document|seed 0\d\d")
_TEXT_SUFFIXES = {".py", ".md", ".cc", ".h", ".toml", ".cfg", ".yml", ".yaml", ".sh", ".ini", ".txt"}


def test_no_text_refers_to_documents_users_do_not_have():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    offenders = []
    for name in tracked.stdout.splitlines():
        path = ROOT / name
        if path.suffix not in _TEXT_SUFFIXES or not path.is_file() or name == "tests/test_build.py":
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if _PRIVATE_REFERENCES.search(line):
                offenders.append(f"{name}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)
