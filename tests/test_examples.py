"""The shipped example runs as a user would run it."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import ROOT


def test_run_mlp_example():
    env = dict(os.environ)
    env.pop("PYTHONWARNINGS", None)
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "run_mlp.py")], capture_output=True, text=True,
                       timeout=120, cwd=str(ROOT), env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "(4, 10)" in r.stdout, r.stdout
    assert re.search(r"output shape \(4, 10\)", r.stdout), r.stdout
    assert len(re.findall(r"sample \d+: class \d", r.stdout)) == 4, r.stdout
    assert "Traceback" not in r.stderr


def test_run_mlp_example_from_other_cwd(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "run_mlp.py")], capture_output=True, text=True,
                       timeout=120, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "output shape (4, 10)" in r.stdout
