"""The CANN build path without an NPU.

Fast tests check toolkit discovery (no toolkit: skipped quietly; a broken one: an error naming what is missing), what
setup.py lists, and that geasync._cann's cdef and the shim carry nothing twin-only. The slow test lays out a fake CANN
toolkit from the twin (tests/cann_fake_toolkit.py: the twin's headers in CANN's include tree, the twin built as
libge_runner_v2.so / libascendcl.so / libfmk_onnx_parser.so), builds geasync._cann against it with the real build
logic, and runs a representative part of the suite on backend "cann" in a subprocess with no LD_LIBRARY_PATH.
"""

from __future__ import annotations

import os
import pathlib
import re
import runpy
import shutil
import subprocess
import sys
import textwrap

import pytest

import geasync as ga
from geasync import _toolkit

# The first build test compiles a fake CANN toolkit and the extension (minutes on a loaded 2-core machine).
pytestmark = pytest.mark.timeout(900)

TESTS = pathlib.Path(__file__).resolve().parent
ROOT = TESTS.parent
NATIVE = ROOT / "geasync" / "_native"
TWIN_INCLUDE = NATIVE / "twin" / "include"

sys.path.insert(0, str(TESTS))
import cann_fake_toolkit  # noqa: E402

# The suite files run on the CANN backend (sync runs, stream runs, allocators, run-mode rules, errors); the async
# layer is covered by the scenario script below.
SUITE_ON_CANN = ["test_session_contract.py", "test_runtime_level.py", "test_streams_allocators.py",
                 "test_bad_inputs.py"]


def _clean_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("GEASYNC_CANN_HOME", "ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "GEASYNC_BACKEND",
                        "LD_LIBRARY_PATH", "GEASYNC_CANN_INCLUDE_DIRS", "GEASYNC_CANN_LIBRARY_DIRS")}
    env.update(extra)
    return env


def _layout(home: pathlib.Path, headers: dict[str, str] | None = None, libs: dict[str, str] | None = None,
            skip: tuple[str, ...] = ()) -> pathlib.Path:
    """A header-and-library skeleton: headers[h] / libs[l] give the directory (relative to home) of each."""
    headers = headers or {}
    libs = libs or {}
    for h in _toolkit.HEADERS:
        if h in skip:
            continue
        dest = home / headers.get(h, "include") / h
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(TWIN_INCLUDE / h, dest)
    for name in _toolkit.LIBRARIES:
        so = f"lib{name}.so"
        if so in skip:
            continue
        dest = home / libs.get(so, "lib64") / so
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(b"")
    return home


def _build_script() -> dict:
    return runpy.run_path(str(ROOT / "geasync" / "_cffi_build.py"), run_name="_geasync_build_under_test")


# --- discovery ------------------------------------------------------------------------------------------------

def test_no_toolkit_named_means_no_cann_build():
    assert _toolkit.find_toolkit({}) is None
    assert _toolkit.find_toolkit({"GEASYNC_CANN_HOME": ""}) is None
    # GEASYNC_CANN_HOME=none opts out even where set_env.sh named a toolkit
    assert _toolkit.find_toolkit({"GEASYNC_CANN_HOME": "none", "ASCEND_HOME_PATH": "/usr/local/Ascend"}) is None


def test_toolkit_variables_in_order(tmp_path):
    a, b, c = (_layout(tmp_path / n) for n in "abc")
    env = {"GEASYNC_CANN_HOME": str(a), "ASCEND_HOME_PATH": str(b), "ASCEND_TOOLKIT_HOME": str(c)}
    assert _toolkit.find_toolkit(env).home == a
    del env["GEASYNC_CANN_HOME"]
    tk = _toolkit.find_toolkit(env)
    assert (tk.home, tk.variable) == (b, "ASCEND_HOME_PATH")
    del env["ASCEND_HOME_PATH"]
    assert _toolkit.find_toolkit(env).home == c


def test_named_toolkit_that_does_not_exist_is_an_error(tmp_path):
    with pytest.raises(_toolkit.ToolkitError, match=r"ASCEND_HOME_PATH=.*nowhere is not a directory"):
        _toolkit.find_toolkit({"ASCEND_HOME_PATH": str(tmp_path / "nowhere")})


def test_broken_toolkit_error_names_each_missing_header_and_library(tmp_path):
    home = _layout(tmp_path / "cann", skip=("parser/onnx_parser.h", "acl/acl_rt.h", "libfmk_onnx_parser.so"))
    with pytest.raises(_toolkit.ToolkitError) as info:
        _toolkit.find_toolkit({"GEASYNC_CANN_HOME": str(home)})
    text = str(info.value)
    assert "parser/onnx_parser.h" in text and "acl/acl_rt.h" in text and "libfmk_onnx_parser.so" in text
    assert "libascendcl.so" not in text and "ge/ge_api_v2.h" not in text
    assert str(home) in text and "GEASYNC_CANN_HOME" in text


def test_discovery_tolerates_cann_layouts(tmp_path):
    home = _layout(tmp_path / "latest",
                   headers={"acl/acl_rt.h": "runtime/include", "acl/acl_base.h": "runtime/include",
                            "exe_graph/runtime/tensor.h": "pkg_inc", "parser/onnx_parser.h": "compiler/include"},
                   libs={"libascendcl.so": "runtime/lib64"})
    (home / "compiler").mkdir(exist_ok=True)
    (home / "compiler" / "version.info").write_text("Version=7.5.0.1.129:8.0.0\n")
    (home / "ascend_toolkit_install.info").write_text("package_name=Ascend-cann-toolkit\nversion=8.0.0\n")
    tk = _toolkit.find_toolkit({"ASCEND_HOME_PATH": str(home)})
    assert set(tk.include_dirs) == {home / "include", home / "runtime/include", home / "pkg_inc",
                                    home / "compiler/include"}
    assert tk.include_dirs[0] == home / "include"
    assert tk.library_dirs == (home / "lib64", home / "runtime/lib64")
    assert dict(tk.versions) == {"ascend_toolkit_install.info": "version=8.0.0",
                                 "compiler/version.info": "Version=7.5.0.1.129:8.0.0"}


def test_build_fails_on_broken_toolkit_naming_what_is_missing(tmp_path, monkeypatch):
    home = _layout(tmp_path / "cann", skip=("libge_runner_v2.so", "ge/ge_api_v2.h"))
    monkeypatch.setenv("GEASYNC_CANN_HOME", str(home))
    build = _build_script()
    with pytest.raises(RuntimeError, match=r"incomplete.*ge/ge_api_v2\.h.*libge_runner_v2\.so"):
        build["make_cann_builder"]()


# --- setup.py and the build description ------------------------------------------------------------------

def _setup_cffi_modules(env: dict) -> list[str]:
    code = ("import setuptools, sys\n"
            "setuptools.setup = lambda **kw: print(repr(kw['cffi_modules']))\n"
            "sys.argv = ['setup.py']\n"
            "exec(compile(open('setup.py').read(), 'setup.py', 'exec'), {'__name__': '__main__', "
            "'__file__': 'setup.py'})\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=str(ROOT), env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return eval(r.stdout.strip().splitlines()[-1])


def test_setup_lists_the_cann_builder_only_when_a_toolkit_is_named(tmp_path):
    twin_only = ["geasync/_cffi_build.py:ffibuilder"]
    assert _setup_cffi_modules(_clean_env()) == twin_only
    assert _setup_cffi_modules(_clean_env(ASCEND_HOME_PATH="/x", GEASYNC_CANN_HOME="none")) == twin_only
    with_cann = _setup_cffi_modules(_clean_env(ASCEND_HOME_PATH=str(tmp_path)))
    assert with_cann == twin_only + ["geasync/_cffi_build.py:make_cann_builder"]


def test_cann_builder_has_no_twin_only_declarations_and_links_the_toolkit(tmp_path):
    home = _layout(tmp_path / "cann", libs={"libascendcl.so": "runtime/lib64"})
    build = _build_script()
    tk = _toolkit.find_toolkit({"GEASYNC_CANN_HOME": str(home)})
    cann = build["make_cann_builder"](tk)
    twin = build["make_twin_builder"]()
    cann_decls, twin_decls = set(cann._parser._declarations), set(twin._parser._declarations)
    twin_only = twin_decls - cann_decls
    # twin_control.h's fault kinds are an anonymous enum: its constants carry the twin's name instead
    enums = {d for d in twin_only if d.startswith("anonymous ")}
    assert all("twin" in d for d in twin_only - enums), twin_only
    for d in enums:
        assert all(c.startswith("GEASYNC_TWIN_") for c in twin._parser._declarations[d][0].enumerators), d
    assert cann_decls - twin_decls == {"function geasync_cann_build_info"}
    assert not any("twin" in d for d in cann_decls)

    module, preamble, _, kw = cann._assigned_source
    assert module == "geasync._cann" and "twin/" not in preamble and "twin_control" not in preamble
    assert kw["sources"] and all(pathlib.PurePath(s).parent.name == "shim" for s in kw["sources"])
    assert not any(pathlib.Path(ROOT, d).resolve().is_relative_to(NATIVE / "twin") for d in kw["include_dirs"])
    assert str(home / "include") in kw["include_dirs"]
    assert kw["libraries"] == ["ge_runner_v2", "ascendcl", "fmk_onnx_parser"]
    assert kw["library_dirs"] == [str(home / "lib64"), str(home / "runtime/lib64")]
    for d in kw["library_dirs"]:
        assert f"-Wl,-rpath,{d}" in kw["extra_link_args"]
    assert ("GEASYNC_BACKEND_NAME", '"cann"') in kw["define_macros"]
    # same warnings and visibility as the twin build (-Werror with GEASYNC_WERROR=1, as in CI and development)
    for flag in ("-Wall", "-Wextra", "-fvisibility=hidden"):
        assert flag in kw["extra_compile_args"]
    assert ("-Werror" in kw["extra_compile_args"]) == (os.environ.get("GEASYNC_WERROR") == "1")


def test_shim_includes_only_ge_acl_and_parser_headers():
    allowed = set(_toolkit.HEADERS) | {"geasync.h"} | {p.name for p in (NATIVE / "shim").glob("*.h")}
    allowed.add("exe_graph/runtime/runtime_tensor.h")  # preferred to tensor.h where the toolkit has it
    for src in sorted((NATIVE / "shim").iterdir()):
        text = src.read_text()
        for inc in re.findall(r'#include\s+"([^"]+)"', text):
            assert inc in allowed, f"{src.name} includes {inc!r}, which a CANN install does not have"
        code = re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)
        assert "twin" not in code.lower(), f"{src.name} refers to the twin"


# --- the user-facing side ---------------------------------------------------------------------------------

def test_info_command_prints_version_backends_and_toolkit(tmp_path):
    home = _layout(tmp_path / "cann")
    (home / "version.cfg").write_text("version=8.0.RC3\n")
    r = subprocess.run([sys.executable, "-m", "geasync", "info"], capture_output=True, text=True, timeout=60,
                       cwd=str(TESTS), env=_clean_env(ASCEND_HOME_PATH=str(home)))
    assert r.returncode == 0, r.stderr
    assert f"geasync {ga.__version__}" in r.stdout
    assert re.search(r"^backends: .*twin", r.stdout, re.M)
    assert f"CANN toolkit: {home} (from $ASCEND_HOME_PATH)" in r.stdout
    assert "version.cfg: version=8.0.RC3" in r.stdout
    r = subprocess.run([sys.executable, "-m", "geasync", "info"], capture_output=True, text=True, timeout=60,
                       cwd=str(TESTS), env=_clean_env())
    assert r.returncode == 0 and "CANN toolkit: none named" in r.stdout, r.stdout + r.stderr


@pytest.mark.skipif("cann" in ga.backends(), reason="this install has the CANN backend")
def test_asking_for_cann_where_it_was_not_built_says_how_to_build_it():
    code = ("import geasync as ga\n"
            "try:\n    ga.Session(backend='cann')\nexcept RuntimeError as e:\n    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=str(TESTS),
                       env=_clean_env())
    assert "without the 'cann' backend" in r.stdout, r.stdout + r.stderr
    assert "set_env.sh" in r.stdout and "GEASYNC_CANN_HOME" in r.stdout


# --- the real build against a fake toolkit ------------------------------------------------------------------

@pytest.fixture(scope="module")
def cann_package(tmp_path_factory):
    """(toolkit home, package dir holding geasync with _twin and a freshly built _cann, the _cann extension)."""
    base = tmp_path_factory.mktemp("cann")
    home = cann_fake_toolkit.build_fake_toolkit(base / "Ascend" / "latest", jobs=2)
    ext = cann_fake_toolkit.build_cann_extension(home, base / "build")
    pkg = cann_fake_toolkit.make_package_copy(base / "pkg", ext)
    return home, pkg, pkg / "geasync" / ext.name


@pytest.mark.slow
def test_cann_extension_links_the_toolkit_libraries_by_rpath(cann_package):
    home, _, ext = cann_package
    if shutil.which("readelf") is None or shutil.which("nm") is None:
        pytest.skip("binutils (readelf, nm) not installed")
    dyn = subprocess.run(["readelf", "-d", str(ext)], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\).*\[(.+)\]", dyn)
    for lib in ("libge_runner_v2.so", "libascendcl.so", "libfmk_onnx_parser.so"):
        assert lib in needed
    rpath = re.search(r"\((?:RPATH|RUNPATH)\).*\[(.+)\]", dyn).group(1).split(":")
    assert str(home / "lib64") in rpath
    # The runtime comes from the toolkit's libraries, not from a copy inside the extension.
    defined = subprocess.run(["nm", "-D", "-C", "--defined-only", str(ext)], capture_output=True, text=True,
                             check=True).stdout
    undefined = subprocess.run(["nm", "-D", "-C", "--undefined-only", str(ext)], capture_output=True, text=True,
                               check=True).stdout
    for symbol in ("GEInitializeV2", "ge::GeSession::RunGraphAsync", "aclrtLaunchHostFunc", "aclgrphParseONNXFromMem"):
        assert symbol in undefined and symbol not in defined
    assert "twin" not in undefined


_SCENARIO = r"""
import asyncio, os, sys
import numpy as np
import geasync as ga
from onnx import TensorProto, helper

assert ga.__file__.startswith(os.environ["CANN_PKG"]), ga.__file__
assert ga.backends() == ["twin", "cann"], ga.backends()
assert "LD_LIBRARY_PATH" not in os.environ

def model(nodes, inputs, outputs):
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return ga.Graph.from_onnx(m)

add = lambda: model([helper.make_node("Add", ["a", "b"], ["c"])], [("a", [2, 8]), ("b", [2, 8])], [("c", [2, 8])])
mlp = lambda: model([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
                    [("x", [4, 16]), ("w", [16, 8])], [("y", [4, 8])])
rng = np.random.default_rng(0)
a, b = (rng.standard_normal((2, 8)).astype(np.float32) for _ in range(2))
x, w = rng.standard_normal((4, 16)).astype(np.float32), rng.standard_normal((16, 8)).astype(np.float32)

with ga.Session({"ge.exec.deviceId": "0"}) as s:   # Session() picks "cann" here: auto prefers CANN
    assert ga.current_backend() == "cann"
    counters = ga.live_counters()
    assert counters and not any(k.startswith("twin_") for k in counters), counters
    # sync
    s.add_graph(1, add())
    (c,) = s.run_graph(1, [a, b])
    np.testing.assert_array_equal(c.numpy(), a + b)
    s.add_graph(2, mlp())
    (y,) = s.run_graph(2, [x, w])
    np.testing.assert_allclose(y.numpy(), np.maximum(x @ w, 0), rtol=1e-5, atol=1e-6)
    # errors
    try:
        s.run_graph(99, [a, b])
        raise AssertionError("unknown graph id ran")
    except ga.GeError as e:
        assert e.api_name and e.error_message, e
    try:
        s.run_graph(1, [a.astype(np.float64), b])
        raise AssertionError("wrong dtype ran")
    except ga.GeError as e:
        assert e.error_message
    try:
        with ga.Stream() as st:
            s.run_graph_with_stream_async(1, st, [a, b])
        raise AssertionError("mode conflict not reported")
    except ga.ExecutionModeError:
        pass
    # stream
    s.add_graph(3, add())
    with ga.Stream() as st:
        results = [s.run_graph_with_stream_async(3, st, [np.full((2, 8), float(i), np.float32), b]) for i in range(8)]
        st.synchronize()
        for i, (o,) in enumerate(results):
            np.testing.assert_array_equal(o.to_host().numpy(), i + b)
        del results, o

    async def main():
        # async: many concurrent RunGraphAsync, each result matching its input; a stream completed by a host function
        s.add_graph(4, add())
        xs = [np.full((2, 8), float(i), np.float32) for i in range(64)]
        outs = await asyncio.gather(*(s.run_graph_async(4, [xi, b]) for xi in xs))
        for xi, (o,) in zip(xs, outs):
            np.testing.assert_array_equal(o.numpy(), xi + b)
        s.add_graph(5, add())
        async with ga.Stream() as st:
            (o,) = s.run_graph_with_stream_async(5, st, [a, b])
            await st.synchronize_async()
            np.testing.assert_array_equal(o.to_host().numpy(), a + b)
            del o
        try:
            await s.run_graph_async(4, [a, np.ones((3, 8), np.float32)])
            raise AssertionError("bad shape ran")
        except ga.GeError as e:
            assert e.error_message
        try:
            await s.run_graph_async(1, [a, b])   # graph 1 runs in sync mode
            raise AssertionError("mode conflict not reported")
        except ga.ExecutionModeError:
            pass
    asyncio.run(main())
    del c, y

try:
    import geasync.twin as twin
except ImportError:
    twin = None
if twin is not None:  # twin-only controls are reported unavailable on CANN
    with ga.Session() as s:
        s.add_graph(1, add())
        try:
            twin.inject_fault(s, 1, "fail_run")
            raise AssertionError("fault injection on CANN")
        except ga.GeError as e:
            assert "twin-only" in e.error_message, e

import gc; gc.collect()
counters = ga.live_counters()
left = {k: counters[k] for k in ("sessions", "graphs", "tensors", "outputs_lists", "streams", "pending_completions")
        if counters[k]}
assert not left, left
print("CANN-SCENARIO-OK", ga.current_backend())
"""

_SUITE_PLUGIN = '''
import os
import geasync

def pytest_configure(config):
    backend = geasync.current_backend()
    with open(os.environ["CANN_SUITE_MARK"], "w") as f:
        f.write(f"{geasync.__file__} {backend}")
    assert backend == "cann", backend
'''


def _cann_env(pkg: pathlib.Path) -> dict:
    return _clean_env(PYTHONPATH=str(pkg), GEASYNC_BACKEND="cann", CANN_PKG=str(pkg))


@pytest.mark.slow
def test_scenario_on_cann_backend(cann_package):
    _, pkg, _ = cann_package
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(_SCENARIO)], capture_output=True, text=True,
                       timeout=180, cwd=str(pkg.parent), env=_cann_env(pkg))
    assert r.returncode == 0 and "CANN-SCENARIO-OK cann" in r.stdout, r.stdout + r.stderr


@pytest.mark.slow
def test_suite_subset_on_cann_backend(cann_package):
    _, pkg, _ = cann_package
    (pkg / "geasync_cann_suite_check.py").write_text(_SUITE_PLUGIN)
    pytest_script = pathlib.Path(sys.executable).with_name("pytest")
    cmd = [str(pytest_script) if pytest_script.exists() else sys.executable, *([] if pytest_script.exists() else
           ["-m", "pytest"]), "-p", "no:cacheprovider", "-p", "geasync_cann_suite_check", "-q",
           *(str(TESTS / f) for f in SUITE_ON_CANN)]
    mark = pkg / "suite-backend.txt"
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=str(ROOT),
                       env=dict(_cann_env(pkg), CANN_SUITE_MARK=str(mark)))
    tail = r.stdout[-4000:] + r.stderr[-2000:]
    assert r.returncode == 0, tail
    assert mark.read_text() == f"{pkg / 'geasync' / '__init__.py'} cann", tail
    assert re.search(r"\d+ passed", r.stdout) and "failed" not in r.stdout.splitlines()[-1], tail
