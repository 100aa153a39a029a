"""The twin's SmallVec (the inline-storage vector that holds every tensor's dims and each plan step's tables),
differentially tested against std::vector by tests/native/small_vec_test.cc, built with AddressSanitizer and UBSan:
a copy, move or insert that reads or writes out of bounds fails here, whatever the Python-level tests happen to
exercise."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from conftest import ROOT

CXX = os.environ.get("CXX", "g++").split()
SOURCE = ROOT / "tests" / "native" / "small_vec_test.cc"
INCLUDE = ROOT / "geasync" / "_native" / "twin" / "onnx"


@pytest.mark.skipif(shutil.which(CXX[-1]) is None, reason="no C++ compiler")
def test_small_vec_matches_std_vector_under_sanitizers(tmp_path):
    exe = tmp_path / "small_vec_test"
    build = subprocess.run([*CXX, "-std=c++17", "-O1", "-g", "-Wall", "-Wextra", "-Werror",
                            "-fsanitize=address,undefined", "-fno-sanitize-recover=all", f"-I{INCLUDE}",
                            str(SOURCE), "-o", str(exe)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}  # its own runtime, not the suite's
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stdout + run.stderr
