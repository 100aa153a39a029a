"""The async examples run as a user would run them: the pipeline on each event loop, and the example test suite
standalone (its own pytest.ini and conftest, not this folder's)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = pytest.mark.timeout(200, method="thread")

PIPELINE = ROOT / "examples" / "pipeline_stages.py"
SUITE = ROOT / "examples" / "async_test_suite"


def _env() -> dict:
    env = dict(os.environ)
    env.pop("PYTHONWARNINGS", None)
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_PLUGINS", None)
    return env


@pytest.mark.parametrize("backend", ["asyncio", "uvloop", "trio"])
def test_pipeline_stages_example(backend, tmp_path):
    r = subprocess.run([sys.executable, "-W", "error", str(PIPELINE), "--backend", backend, "--items", "300"],
                       capture_output=True, text=True, timeout=120, cwd=str(tmp_path), env=_env())
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    m = re.search(r"processed (\d+) items in ([0-9.]+) s \((\d+) items/s\)", r.stdout)
    assert m, r.stdout
    assert int(m.group(1)) == 300
    assert int(m.group(3)) > 0
    assert f"event loop: {backend}" in r.stdout, r.stdout


@pytest.mark.parametrize("backend", ["asyncio", "uvloop", "trio"])
def test_async_quickstart_example(backend, tmp_path):
    """The README's async example, verbatim in examples/async_quickstart.py, on each event loop."""
    r = subprocess.run([sys.executable, "-W", "error", str(ROOT / "examples" / "async_quickstart.py"), backend],
                       capture_output=True, text=True, timeout=120, cwd=str(tmp_path), env=_env())
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "completed=1000" in r.stdout and "failed=0" in r.stdout, r.stdout
    assert "as expected: ExecutionModeError" in r.stdout and "graph_id=1" in r.stdout, r.stdout


def test_pipeline_stages_main_is_importable_and_callable(capsys):
    """main() takes argv, so the example can be driven from code too."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("pipeline_stages_example", PIPELINE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        assert module.main(["--backend", "asyncio", "--items", "40", "--workers", "2"]) == 0
    finally:
        sys.modules.pop(spec.name, None)
    assert "processed 40 items" in capsys.readouterr().out


def test_example_async_test_suite_runs_standalone():
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "."],
                       capture_output=True, text=True, timeout=150, cwd=str(SUITE), env=_env())
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert re.search(r"\b21 passed\b", r.stdout), out[-4000:]  # 7 tests x asyncio, uvloop, trio
    assert "failed" not in r.stdout and "error" not in r.stdout.lower(), out[-4000:]
    # It used its own configuration, not the repository's.
    assert "tests/conftest.py" not in out
