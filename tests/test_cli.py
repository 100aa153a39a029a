"""The command line as scripts use it: ``python -m geasync info | demo | check | run | bench``, --help, exit codes."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import geasync as ga

pytestmark = pytest.mark.timeout(240, method="thread")


def cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    """``python -m geasync ARGS`` as a user runs it: the installed package (from the tests' directory by default:
    the repository root holds the source tree, which a non-editable install does not build in place)."""
    env = dict(os.environ)
    env.pop("PYTHONWARNINGS", None)
    return subprocess.run([sys.executable, "-m", "geasync", *args], capture_output=True, text=True, timeout=180,
                          cwd=cwd or pathlib.Path(__file__).resolve().parent, env=env)


@pytest.fixture(scope="module")
def mlp_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "mlp.onnx"
    path.write_bytes(ga.samples.mlp_bytes())
    return path


@pytest.mark.parametrize("command", ["info", "demo", "run", "bench"])
def test_each_command_has_help(command):
    r = cli(command, "--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"usage: python -m geasync {command}")


def test_top_level_help_lists_commands_and_exit_codes():
    r = cli("--help")
    assert r.returncode == 0
    for command in ("info", "demo", "check", "run", "bench"):
        assert command in r.stdout
    assert "Exit codes" in r.stdout
    assert cli().returncode == 2  # no command: a usage error
    assert cli("explode").returncode == 2


def test_info_reports_the_twin_backend():
    r = cli("info")
    assert r.returncode == 0, r.stderr
    assert "backends: twin" in r.stdout and "twin: " in r.stdout


def test_demo_runs_the_sample_and_checks_the_async_results(tmp_path):
    r = cli("demo", "--requests", "50", cwd=tmp_path)  # needs no file from the repository
    assert r.returncode == 0, r.stdout + r.stderr
    assert "async: 50 concurrent requests" in r.stdout
    assert "the async result matches the synchronous run" in r.stdout


def test_run_prints_the_outputs(mlp_file, tmp_path):
    x = np.random.default_rng(0).random((2, 784), dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    r = cli("run", str(mlp_file), "--input", f"x={tmp_path / 'x.npy'}")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("probs: float32[2, 10]")
    with ga.Session() as s:
        s.add_graph(1, ga.samples.mlp())
        (expected,) = s.run_graph(1, [x])
        first = np.array2string(expected.numpy()[0], precision=4, suppress_small=True).split()[1]
    assert first in r.stdout  # the printed values are the model's


def test_run_saves_the_outputs_by_name(mlp_file, tmp_path):
    x = np.random.default_rng(1).random((3, 784), dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out.npz"
    r = cli("run", str(mlp_file), "-i", str(tmp_path / "x.npy"), "--save", str(out))  # one input: name optional
    assert r.returncode == 0, r.stderr
    with ga.Session() as s:
        s.add_graph(1, ga.samples.mlp())
        (expected,) = s.run_graph(1, [x])
        np.testing.assert_array_equal(np.load(out)["probs"], expected.numpy())


def test_run_usage_errors_exit_2_and_say_what_is_wrong(mlp_file, tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((1, 784), np.float32))
    r = cli("run", str(mlp_file))
    assert r.returncode == 2 and "needs these inputs too: x: float32[N, 784]" in r.stderr
    r = cli("run", str(mlp_file), "--input", f"y={tmp_path / 'x.npy'}")
    assert r.returncode == 2 and "has no input 'y'" in r.stderr
    r = cli("run", str(tmp_path / "missing.onnx"), "--input", str(tmp_path / "x.npy"))
    assert r.returncode == 2 and "cannot read the model" in r.stderr
    (tmp_path / "junk.onnx").write_bytes(b"\xff\xff\xff")
    r = cli("run", str(tmp_path / "junk.onnx"))
    assert r.returncode == 2 and "junk.onnx" in r.stderr


def test_run_failure_in_the_runtime_exits_1(mlp_file, tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((2, 5), np.float32))  # wrong feature size
    r = cli("run", str(mlp_file), "--input", f"x={tmp_path / 'x.npy'}")
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.startswith("error: ") and "Traceback" not in r.stderr


def test_bench_measures_sync_and_async(mlp_file):
    r = cli("bench", str(mlp_file), "--seconds", "0.3", "--in-flight", "8", "--batch", "2", "--json")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["batch"] == 2 and result["in_flight"] == 8
    assert result["sync_runs_per_s"] > 0 and result["async_runs_per_s"] > 0
    assert 0 < result["sync_p50_us"] <= result["sync_p99_us"]
    assert 0 < result["async_p50_us"] <= result["async_p99_us"]
    assert "sync run_graph" in r.stderr and "async" in r.stderr  # the progress lines


def test_bench_table_and_loop_choice(mlp_file):
    r = cli("bench", str(mlp_file), "--seconds", "0.2", "--in-flight", "4", "--loop", "trio")
    assert r.returncode == 0, r.stderr
    assert "async / sync throughput:" in r.stdout and "on trio" in r.stderr
    assert cli("bench", str(mlp_file), "--seconds", "0").returncode == 2


def test_check_dispatches_or_says_it_is_unavailable():
    r = cli("check", "--help")
    if importlib.util.find_spec("geasync._check") is None:
        assert r.returncode == 1 and "not available" in r.stderr
    else:
        assert r.returncode == 0, r.stderr
