"""The public API's type hints say what it takes: ``mypy --strict`` passes on the README's Python examples and on
examples/, as it would on a user's code, and it refuses calls the API refuses at run time (so the hints are not
``Any``). The package itself is checked by CI's lint step (``mypy``, configured in pyproject.toml)."""

from __future__ import annotations

import ast
import builtins
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.timeout(600, method="thread")

README = ROOT / "README.md"
EXAMPLES = ROOT / "examples"

# Every README block runs after these (its earlier blocks' imports, as a reader would have them).
PRELUDE = "from __future__ import annotations\n\nimport numpy as np\nimport numpy.typing as npt\nimport geasync as ga\n"

# The names the README's fragments take from the reader's own code, typed as that code would have them.
FRAGMENT_NAMES = {
    "session": "ga.Session",
    "graph": "ga.Graph",
    "x": "npt.NDArray[np.float32]",
}

# Calls the API refuses at run time: mypy must refuse each (the line's comment names the expected error code).
MISUSE = '''
from __future__ import annotations

import numpy as np
import geasync as ga

s = ga.Session()
x = np.ones((1, 784), np.float32)
s.run_graph(1, x)  # arg-type: an array, not a list of them
s.run_graph(1, [[1.0, 2.0]])  # list-item: nested lists are no inputs
s.run_graph(1, {1: x})  # dict-item: inputs by name are keyed by str
s.run_graph("1", [x])  # arg-type: graph ids are ints
s.run_graph_with_stream_async(1, ga.Stream(), (x,))  # arg-type: GE's contract for the stream mode is a list
s.run_graph_with_stream_async(1, "stream", [x])  # arg-type: a Stream or its address
s.add_graph(1, b"onnx bytes")  # arg-type: a geasync.Graph
s.add_graph(1, ga.samples.mlp(), options={"ge.graphRunMode": 1})  # dict-item: option values are str
ga.Tensor.from_numpy(ga.samples.mlp())  # arg-type: array data, not a Graph
y: list[np.ndarray] = s.run_graph(1, [x])  # assignment: runs return Tensors
ga.Batcher(s, "1")  # arg-type: a graph id or a GraphPool
'''


def _readme_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.S | re.M)


def _defined_and_used(tree: ast.Module) -> tuple[set[str], set[str]]:
    defined: set[str] = set()
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (used if isinstance(node.ctx, ast.Load) else defined).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.ExceptHandler)):
            if node.name:
                defined.add(node.name)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined.update((a.asname or a.name).split(".")[0] for a in node.names)
    return defined, used


def _awaits_at_top(tree: ast.Module) -> bool:
    """Whether the block awaits outside any function (a fragment of async code)."""
    def visit(node: ast.AST) -> bool:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return False
        if isinstance(node, (ast.Await, ast.AsyncWith, ast.AsyncFor)):
            return True
        return any(visit(child) for child in ast.iter_child_nodes(node))
    return visit(tree)


def readme_module(block: str) -> str:
    """A README block as a module mypy can check: the prelude, declarations of the free names it uses, and the
    block itself (inside an async function when it awaits at the top level)."""
    tree = ast.parse(block)
    defined, used = _defined_and_used(tree)
    free = sorted(used - defined - set(dir(builtins)) - {"np", "npt", "ga"})
    unknown = [name for name in free if name not in FRAGMENT_NAMES]
    assert not unknown, f"README block uses {unknown}, which it does not define:\n{block}\n(add them to FRAGMENT_NAMES)"
    declarations = "".join(f"{name}: {FRAGMENT_NAMES[name]}\n" for name in free)
    body = block
    if _awaits_at_top(tree):
        body = "async def _fragment() -> None:\n" + textwrap.indent(block, "    ")
    return f"{PRELUDE}\n{declarations}\n{body}"


# One directory for every run of this test on this machine: mypy's cache (the first run analyses numpy, anyio, ray,
# ...) and the modules made from the README. Their paths stay the same from run to run: mypy replays the errors it
# cached for an unchanged module under the path it had then.
_KEY = hashlib.sha256(f"{sys.executable}\n{ROOT}".encode()).hexdigest()[:16]
WORK = Path(tempfile.gettempdir()) / f"geasync-typing-{_KEY}"


def _mypy(files: list[Path], cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(WORK / "cache"), "--no-error-summary",
               "--show-error-codes", "--no-pretty", *map(str, files)]
    env = {k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "MYPY_CACHE_DIR")}
    # cwd: the repository root, whose pyproject.toml holds the project's mypy settings
    return subprocess.run(command, capture_output=True, text=True, cwd=str(cwd), env=env, timeout=540)


def test_readme_blocks_are_found():
    blocks = _readme_blocks()
    assert len(blocks) >= 6
    assert any("run_graph_async" in b for b in blocks) and any("ga.Batcher" in b for b in blocks)


def test_readme_and_examples_type_check_strictly_and_misuse_does_not():
    sources_dir = WORK / "src"
    shutil.rmtree(sources_dir, ignore_errors=True)
    sources_dir.mkdir(parents=True)
    readme_files = []
    for i, block in enumerate(_readme_blocks(), 1):
        path = sources_dir / f"readme_example_{i}.py"
        path.write_text(readme_module(block))
        readme_files.append(path)
    misuse = sources_dir / "misuse.py"
    misuse.write_text(MISUSE)
    examples = sorted(EXAMPLES.rglob("*.py"))
    assert len(examples) >= 6

    r = _mypy([*readme_files, *examples, misuse], ROOT)
    assert r.returncode in (0, 1), r.stdout[-4000:] + r.stderr[-4000:]  # 2: mypy itself failed
    errors = [line for line in r.stdout.splitlines() if ": error:" in line]

    clean = [line for line in errors if not line.startswith(str(misuse))]
    listing = "\n".join(clean)
    sources = "\n\n".join(f"--- {p.name}\n{p.read_text()}" for p in readme_files if p.name in listing)
    assert not clean, f"mypy --strict errors in the README's examples or examples/:\n{listing}\n{sources}"

    # Each misuse line is refused, with the error code its comment names, and nothing else is.
    expected = {}
    for number, line in enumerate(MISUSE.splitlines(), 1):
        if "  # " in line and not line.lstrip().startswith("#"):
            expected[number] = line.split("  # ", 1)[1].split(":", 1)[0]
    got: dict[int, set[str]] = {}
    for line in errors:
        if line.startswith(str(misuse)):
            m = re.match(r".*?:(\d+): error: .*\[([a-z-]+)\]$", line)
            assert m, line
            got.setdefault(int(m.group(1)), set()).add(m.group(2))
    assert set(got) == set(expected), f"misuse lines mypy refused: {sorted(got)}, expected {sorted(expected)}\n" + \
        "\n".join(errors)
    for number, code in expected.items():
        assert code in got[number], f"misuse line {number}: expected [{code}], got {got[number]}"
