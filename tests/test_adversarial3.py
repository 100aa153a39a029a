"""A third adversary's findings, kept as regression tests: a session left behind by an event loop closed during its
graph's first compile, models importing operator sets newer than the runtime knows, zero and negative timeouts that
behaved differently on asyncio and trio. Anything that could hang runs under a timeout, so a regression fails its
test, not the suite."""

from __future__ import annotations

import subprocess
import sys

import anyio
import numpy as np
import pytest

import geasync as ga
from conftest import ROOT, add_model, make_model

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

pytestmark = pytest.mark.timeout(60)

A = np.ones((1, 16), np.float32)


def _dynamic_add() -> "onnx.ModelProto":
    """c = a + a over a symbolic batch: a graph a Batcher takes."""
    return make_model([helper.make_node("Add", ["a", "a"], ["c"])], [("a", TensorProto.FLOAT, ["n", 4])],
                      [("c", TensorProto.FLOAT, ["n", 4])])


# --- 1. an event loop closed while a session's first compile runs in a worker thread ------------------------------

# In a subprocess: the interpreter's exit must not wait for a worker thread, and whatever the loop left behind must
# not leak into the test process. The compile is held (a slow CANN compile) until the loop is closed.
_LOOP_CLOSED_DURING_COMPILE = """
import asyncio, gc, sys, threading, time, warnings, weakref
sys.path.insert(0, {tests!r})
import numpy as np
import geasync as ga
from geasync import _lib
from conftest import add_model

flavour = sys.argv[1]
release, entered = threading.Event(), threading.Event()
compile_graph = _lib.compile_graph

def held_compile(*args):
    entered.set()
    release.wait(10)
    compile_graph(*args)

_lib.compile_graph = held_compile
threads_before = set(threading.enumerate())
s = ga.Session()
s.add_graph(1, ga.Graph.from_onnx(add_model()))
a = np.ones((1, 16), np.float32)
loop = asyncio.new_event_loop() if flavour == "asyncio" else __import__("uvloop").new_event_loop()
task = loop.create_task(s.run_graph_async(1, [a, a]))
loop.run_until_complete(asyncio.sleep(0))
assert entered.wait(10), "the first compile never started"
loop.close()  # with the request still waiting for its compile
release.set()
ref = weakref.ref(s)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    task._log_destroy_pending = False  # asyncio's own complaint about the abandoned task is not the point here
    del s, task, loop
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        gc.collect()
        left = [t for t in threading.enumerate() if t not in threads_before and t.is_alive()]
        if ref() is None and not left:
            break
        time.sleep(0.01)
assert ref() is None, "the session is still referenced: " + repr(gc.get_referrers(ref()))
assert not left, left
kinds = [(w.category.__name__, str(w.message)) for w in caught]
assert [k for k, _ in kinds] == ["ResourceWarning"] and "unclosed" in kinds[0][1], kinds
print("ok")
"""


@pytest.mark.parametrize("flavour", ["asyncio", "uvloop"])
def test_a_loop_closed_during_a_first_compile_leaves_no_session_and_no_thread(flavour, tmp_path):
    if flavour == "uvloop":
        pytest.importorskip("uvloop")
    script = _LOOP_CLOSED_DURING_COMPILE.format(tests=str(ROOT / "tests"))
    # run outside the source tree: from its root, `python -c` imports the unbuilt sources instead of the install
    done = subprocess.run([sys.executable, "-c", script, flavour], capture_output=True, text=True, timeout=50,
                          cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr


# --- 2. operator sets newer than the runtime knows ----------------------------------------------------------------

def _add_importing(opsets: list[tuple[str, int]]) -> "onnx.ModelProto":
    model = add_model()
    del model.opset_import[:]
    model.opset_import.extend(helper.make_opsetid(domain, version) for domain, version in opsets)
    return model


@pytest.mark.parametrize("opsets, domain, version, newest", [
    ([("", 99)], "'ai.onnx' (the default domain)", 99, 28),
    ([("ai.onnx", 29)], "'ai.onnx'", 29, 28),
    ([("", 17), ("ai.onnx.ml", 99)], "'ai.onnx.ml'", 99, 5),
    ([("", 17), ("ai.onnx.preview.training", 2)], "'ai.onnx.preview.training'", 2, 1),
])
def test_an_opset_newer_than_supported_is_refused_naming_domain_and_versions(tmp_path, opsets, domain, version,
                                                                              newest):
    model = _add_importing(opsets)
    path = tmp_path / "future.onnx"
    onnx.save(model, path)
    for source in (model, model.SerializeToString(), path):
        with pytest.raises(ValueError) as caught:
            ga.Graph.from_onnx(source)
        message = str(caught.value)
        assert f"opset {version} of domain {domain}" in message and f"highest supported, {newest}" in message, message
        assert type(caught.value).__name__ == "UnsupportedOpsetError"
    assert "future.onnx" in str(pytest.raises(ValueError, ga.Graph.from_onnx, path).value)  # the file is named


@pytest.mark.parametrize("opsets", [[("", 28)], [("", 17), ("ai.onnx.ml", 5)], [("", 17), ("com.example", 99)]])
def test_supported_and_custom_domain_opsets_still_load_and_run(opsets):
    # a custom domain has no known newest version: its import alone is no reason to refuse the model
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(_add_importing(opsets)))
        (c,) = s.run_graph(1, [A, A])
        np.testing.assert_array_equal(c.numpy(), A + A)


def test_corrupt_bytes_are_still_left_to_add_graph():
    graph = ga.Graph(b"\x42\x00garbage")  # the opset check reads what it can and leaves the rest to the parser
    with ga.Session() as s, pytest.raises(ga.GeError):
        s.add_graph(1, graph)


# --- 3. a zero or negative timeout: an expired deadline on every loop ---------------------------------------------

@pytest.mark.anyio
@pytest.mark.parametrize("timeout", [0, 0.0, -1.0])
async def test_an_expired_run_graph_async_timeout_submits_nothing_on_every_loop(anyio_backend, timeout):
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        await s.run_graph_async(1, [A, A])  # compiled: what follows is only about the timeout
        with pytest.raises(TimeoutError, match="already expired: nothing was submitted"):
            await s.run_graph_async(1, [A, A], timeout=timeout)
        await anyio.sleep(0.02)  # a run submitted anyway would complete meanwhile
        st = s.statistics()
        assert (st.submitted, st.completed, st.cancelled, st.in_flight) == (2, 1, 1, 0), st
        with pytest.raises(ga.InputError):  # the inputs are still checked when it is called
            s.run_graph_async(1, [A], timeout=timeout)


@pytest.mark.anyio
@pytest.mark.parametrize("where", ["run", "batcher"])
async def test_an_expired_batcher_timeout_joins_no_batch_on_every_loop(anyio_backend, where):
    x = np.ones((1, 4), np.float32)
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(_dynamic_add()))
        async with ga.Batcher(s, 1, timeout=0 if where == "batcher" else None) as b:
            (y,) = await b.run([x], timeout=5)  # compiled
            np.testing.assert_array_equal(y.numpy(), x + x)
            with pytest.raises(TimeoutError, match=r"Batcher.run\(graph_id=1\): no result within"):
                await (b.run([x]) if where == "batcher" else b.run([x], timeout=-0.5))
            await anyio.sleep(0.02)
            bs, ss = b.statistics(), s.statistics()
            assert (bs.submitted, bs.completed, bs.cancelled) == (2, 1, 1), bs
            assert (ss.submitted, ss.completed) == (1, 1), ss  # the session never saw it
