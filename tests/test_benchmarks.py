"""The benchmarks still run (with tiny sizes): they measure, these tests only check that they work and report."""

import re
import subprocess

import pytest
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

def test_completions_benchmark_runs_and_prints_its_ratios(tmp_path):
    out = tmp_path / "completions.md"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_completions.py"), "--runs", "600",
                           "--repeat", "1", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    table = out.read_text()
    for loop in ("asyncio", "uvloop"):
        for in_flight in (1, 16, 256):
            assert f"| {loop} | {in_flight} |" in table
        assert f"target at 256 in flight ({loop}): >= 3x to_thread:" in table
    assert "p50" in table and "p99" in table


def test_input_check_benchmark_runs_and_prints_its_table():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_input_check.py"), "--number", "200",
                           "--repeat", "2"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for row in ("| 2 static inputs [1,16] |", "| 1 input [N,784], N=8 |", "| 4 inputs [N,16], N=4 |"):
        assert row in proc.stdout


def test_ops_benchmark_runs_and_prints_its_rows(tmp_path):
    pytest.importorskip("onnxruntime", reason="bench_ops compares with onnxruntime (the bench extra)")
    out = tmp_path / "ops.md"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_ops.py"), "--sizes", "small",
                           "--seconds", "0.01", "--rounds", "1", "--only", "Tanh,Softmax,LayerNorm,MatMul",
                           "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    table = out.read_text()
    for case in ("Tanh x8", "Softmax x8 (axis -1)", "LayerNormalization (axis -1)", "MatMul 4x4x4"):
        assert f"| {case} | small |" in table, case
    assert "OPENBLAS_CORETYPE" in table and "Worst ratio:" in table
    assert "| NO |" not in table  # the twin's outputs agree with onnxruntime's


def test_every_ops_benchmark_case_builds_at_every_size():
    """Each family's cases build their models and feeds at every size (a case written for one size only once made
    the default run stop half-way); only their construction, no timing."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_ops
    finally:
        sys.path.pop(0)
    for size in ("small", "64k", "1M"):
        for family, cases in bench_ops.FAMILIES.items():
            names = [name for name, _model, _feeds in cases(size)]
            assert len(names) == len(set(names)), (family, size)


def test_decode_benchmark_runs_and_prints_its_rows(tmp_path):
    pytest.importorskip("onnxruntime", reason="bench_decode compares with onnxruntime (the bench extra)")
    out = tmp_path / "decode.md"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_decode.py"), "--layers", "1",
                           "--d-model", "32", "--heads", "2", "--tokens", "4", "--sequences", "2", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    table = out.read_text()
    for row in ("| first (every length new) |", "| 2: the same lengths again |", "| one length, repeated |"):
        assert row in table, row
    err = re.search(r"on one step: (\d\.\de[+-]\d+)", table)
    assert err and float(err.group(1)) < 1e-4, table  # the twin's steps agree with onnxruntime's
