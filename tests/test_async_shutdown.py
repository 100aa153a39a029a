"""Shutdown: `async with Session` / aclose() waits for in-flight work; calls after close raise SessionClosedError;
a sync close() with work in flight fails the awaiting tasks with SessionBrokenError (no hang, no leak); a loop that
goes away with work in flight leaks nothing once the completions arrive; a forked child gets a clear error."""

from __future__ import annotations

import asyncio
import functools
import gc
import os
import signal
import subprocess
import sys
import threading
import time
import weakref

import anyio
import numpy as np
import pytest

import geasync as ga
from conftest import add_model, live
from asynctools import counters_diff, slow_chain, wait_for_counters, wait_until

pytestmark = pytest.mark.timeout(120, method="thread")


def poll_sync(pred, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


# --- async with / aclose ----------------------------------------------------------------------------------------

@pytest.mark.anyio
async def test_async_with_session_waits_for_in_flight_work():
    model, n = slow_chain(0.03)
    w = np.eye(n, dtype=np.float32)
    xs = [np.full((n, n), i, np.float32) for i in range(8)]
    results: dict = {}
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            async with ga.Session() as s:
                s.add_graph(1, ga.Graph.from_onnx(model))

                async def one(i):
                    (y,) = await s.run_graph_async(1, [xs[i], w])
                    results[i] = float(y.numpy()[1, 2])

                for i in range(8):
                    tg.start_soon(one, i)
                await wait_until(lambda: s.statistics().in_flight == 8, "all 8 requests to be submitted")
                t0 = time.perf_counter()
            # __aexit__ returned: the session waited for the ~240 ms of in-flight work, then closed.
            waited = time.perf_counter() - t0
            assert s.closed
            st = s.statistics()
            assert (st.in_flight, st.completed, st.pinned_bytes) == (0, 8, 0), st
    assert results == {i: float(i) for i in range(8)}
    assert waited > 0.0


@pytest.mark.anyio
async def test_aclose_then_every_call_raises_session_closed():
    a = np.ones((1, 16), np.float32)
    s = ga.Session()
    s.add_graph(1, ga.Graph.from_onnx(add_model()))
    await s.run_graph_async(1, [a, a])
    await s.aclose()
    assert s.closed
    await s.aclose()  # idempotent
    s.close()
    with pytest.raises(ga.SessionClosedError, match="closed"):
        await s.run_graph_async(1, [a, a])
    with pytest.raises(ga.SessionClosedError):
        s.run_graph(2, [a, a])
    with pytest.raises(ga.SessionClosedError):
        await s.run_graph_in_thread(3, [a, a])
    with pytest.raises(ga.SessionClosedError):
        s.add_graph(4, ga.Graph.from_onnx(add_model()))
    async with ga.Stream() as st:
        with pytest.raises(ga.SessionClosedError):
            s.run_graph_with_stream_async(5, st, [a, a])
    assert issubclass(ga.SessionClosedError, ga.GeError)
    st = s.statistics()
    assert (st.in_flight, st.waiting, st.pinned_bytes) == (0, 0, 0)


@pytest.mark.anyio
async def test_aclose_with_requests_waiting_for_slots():
    """In-flight requests finish; requests still waiting for a slot get SessionClosedError (or finish)."""
    model, n = slow_chain(0.03)
    w = np.eye(n, dtype=np.float32)
    x = np.ones((n, n), np.float32)
    outcomes: list = []
    s = ga.Session(max_in_flight=2)
    s.add_graph(1, ga.Graph.from_onnx(model))

    async def one():
        try:
            (y,) = await s.run_graph_async(1, [x, w])
            outcomes.append("ok" if float(y.numpy()[0, 0]) == 1.0 else "wrong")
        except ga.SessionClosedError:
            outcomes.append("closed")

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for _ in range(10):
                tg.start_soon(one)
            await wait_until(lambda: s.statistics().waiting > 0, "requests to wait for a slot")
            await s.aclose()
    assert s.closed
    assert len(outcomes) == 10 and "wrong" not in outcomes, outcomes
    assert outcomes.count("ok") >= 2, outcomes
    st = s.statistics()
    assert (st.in_flight, st.pinned_bytes) == (0, 0), st
    assert x.flags.writeable


@pytest.mark.anyio
async def test_sync_close_with_work_in_flight_breaks_awaiting_tasks_without_hang_or_leak():
    model, n = slow_chain(0.03)
    w = np.eye(n, dtype=np.float32)
    baseline = live()
    xs = [np.full((n, n), i, np.float32) for i in range(20)]
    refs = [weakref.ref(x) for x in xs]
    outcomes: dict = {}
    s = ga.Session()
    s.add_graph(1, ga.Graph.from_onnx(model))

    async def one(i, x):
        try:
            (y,) = await s.run_graph_async(1, [x, w])
            outcomes[i] = "ok" if float(y.numpy()[0, 0]) == float(i) else "wrong"
        except ga.SessionBrokenError as exc:
            outcomes[i] = exc.with_traceback(None)  # the traceback's frames would keep x alive

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(one, i, xs[i])
            xs.clear()
            await wait_until(lambda: s.statistics().in_flight == 20, "all requests to be submitted")
            t0 = time.perf_counter()
            s.close()  # ~600 ms of queued work: GE drops what it has not started
            close_took = time.perf_counter() - t0
    assert len(outcomes) == 20, outcomes
    broken = [e for e in outcomes.values() if isinstance(e, BaseException)]
    assert "wrong" not in outcomes.values()
    assert broken, "close() waited for all queued work instead of dropping it"
    for e in broken:
        assert isinstance(e, ga.GeError)
        assert "new Session" in str(e) or "session" in str(e).lower(), e
    assert close_took < 10, close_took
    st = s.statistics()
    assert (st.in_flight, st.pinned_bytes) == (0, 0), st
    assert st.failed >= len(broken)
    # (polled: the thread that delivered the last completion may still hold its request for a moment)
    await wait_until(lambda: gc.collect() >= 0 and sum(r() is not None for r in refs) == 0,
                     "the inputs to be released after the session's completions")
    await wait_for_counters(baseline)


_CLOSE_RACE = """
import sys, threading, time
import anyio, numpy as np, geasync as ga

backend, options = sys.argv[1], ({"use_uvloop": True} if sys.argv[2] == "uvloop" else {})
model = open(sys.argv[3], "rb").read()
x = np.ones((1, 16), np.float32)
errors = set()
for _ in range(20):
    s = ga.Session()
    s.add_graph(1, ga.Graph.from_onnx(model))
    s.compile_graph(1)
    busy = threading.Event()

    def serve():
        async def client():
            while True:
                try:
                    await s.run_graph_async(1, [x, x])
                except ga.GeError as exc:
                    errors.add(type(exc).__name__)
                    return
                busy.set()

        async def main():
            async with anyio.create_task_group() as tg:
                for _ in range(4):
                    tg.start_soon(client)

        anyio.run(main, backend=backend, backend_options=options)

    t = threading.Thread(target=serve)
    t.start()
    busy.wait()
    time.sleep(0.002)
    s.close()  # while the loop's thread submits: the handle must outlive every native call on it
    t.join()
print(sorted(errors))
"""


@pytest.mark.parametrize("kind", ["asyncio", "uvloop", "trio"])
def test_close_from_another_thread_while_its_loop_submits_does_not_crash(kind, tmp_path):
    """Session.close() in one thread while another thread's loop keeps submitting: the submits in progress finish
    before the session is destroyed (it crashed in the native submit), the later ones raise SessionClosedError."""
    path = tmp_path / "add.onnx"
    path.write_bytes(add_model().SerializeToString())
    backend = "trio" if kind == "trio" else "asyncio"
    try:
        r = subprocess.run([sys.executable, "-c", _CLOSE_RACE, backend, kind, str(path)], capture_output=True,
                           text=True, timeout=60, cwd=tmp_path)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"hung; output so far:\n{exc.stdout}\n{exc.stderr}")
    assert r.returncode == 0, f"exit status {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert "SessionClosedError" in r.stdout, r.stdout


def test_close_from_another_thread_waits_for_a_synchronous_run_in_progress():
    """A run_graph in progress in another thread keeps the session's handle in use: close() returns once it has
    returned (GE's session must not be destroyed under a RunGraph), and the run itself completes."""
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        a = np.ones((1, 16), np.float32)
        s.run_graph(1, [a, a])
        ga.twin.inject_fault(s, 1, "delay_run", nth=1, delay=0.3)
        events = []

        def run():
            try:
                (y,) = s.run_graph(1, [a, a])
                events.append(("run returned", float(y.numpy()[0, 0])))
            except BaseException as exc:  # noqa: BLE001
                events.append(("run raised", repr(exc)))

        t = threading.Thread(target=run)
        t.start()
        poll_sync(lambda: s.statistics().in_flight == 1, "the run to start")
        time.sleep(0.02)
        s.close()
        events.append(("closed", None))
        t.join(10)
    assert events == [("run returned", 2.0), ("closed", None)], events
    with pytest.raises(ga.SessionClosedError, match="run_graph"):
        s.run_graph(1, [a, a])


# --- a loop that goes away with work in flight -------------------------------------------------------------------

def _new_loop(kind: str) -> asyncio.AbstractEventLoop:
    if kind == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def _abandon_asyncio(kind: str, s: ga.Session, inputs: list, how: str) -> int:
    """Starts the requests on a fresh loop and lets the loop go away while GE still holds them."""
    if how == "asyncio.run":
        async def main():
            for args in inputs:
                asyncio.ensure_future(s.run_graph_async(1, args))
            await asyncio.sleep(0.01)
            return s.statistics().in_flight  # asyncio.run cancels the tasks that are still pending

        if kind == "uvloop":
            import uvloop

            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                return runner.run(main())
        return asyncio.run(main())
    loop = _new_loop(kind)
    try:
        tasks = [loop.create_task(s.run_graph_async(1, args)) for args in inputs]
        loop.run_until_complete(asyncio.sleep(0.01))
        in_flight = s.statistics().in_flight
        assert not any(t.done() for t in tasks)
        loop.stop()
    finally:
        loop.close()  # with the tasks still pending: nobody will ever await them
    # Keep the tasks until the loop is closed; dropping them logs asyncio's "Task was destroyed but it is pending".
    for t in tasks:
        t._log_destroy_pending = False  # the test abandons them on purpose
    del tasks
    return in_flight


def _abandon_trio(s: ga.Session, inputs: list) -> int:
    import trio

    seen = {}

    async def main():
        async with trio.open_nursery() as nursery:
            for args in inputs:
                nursery.start_soon(functools.partial(s.run_graph_async, 1, args))
            await trio.sleep(0.01)
            seen["in_flight"] = s.statistics().in_flight
            nursery.cancel_scope.cancel()

    trio.run(main)
    return seen["in_flight"]


@pytest.mark.parametrize("kind, how", [
    pytest.param("asyncio", "close", id="asyncio-loop.close"),
    pytest.param("uvloop", "close", id="uvloop-loop.close"),
    pytest.param("asyncio", "asyncio.run", id="asyncio-run-cancels"),
    pytest.param("uvloop", "asyncio.run", id="uvloop-runner-cancels"),
    pytest.param("trio", "nursery", id="trio-nursery-cancel"),
])
def test_loop_gone_with_work_in_flight_leaks_nothing(kind, how):
    model, n = slow_chain(0.02)
    w = np.eye(n, dtype=np.float32)
    gc.collect()
    baseline = live()
    s = ga.Session()
    try:
        s.add_graph(1, ga.Graph.from_onnx(model))
        s.compile_graph(1)  # up front: a first request would wait for the compile on a worker thread first
        # the first run holds the graph (the others queue behind it) for longer than the loop lives, however loaded
        # the machine: the loop goes away with all of them in flight, not with some of them done already
        ga.twin.inject_fault(s, 1, "delay_run", nth=1, delay=1.0)
        xs = [np.full((n, n), i, np.float32) for i in range(12)]
        refs = [weakref.ref(x) for x in xs]
        inputs = [[x, w] for x in xs]
        del xs
        if kind == "trio":
            in_flight = _abandon_trio(s, inputs)
        else:
            in_flight = _abandon_asyncio(kind, s, inputs, how)
        del inputs
        assert in_flight > 0, "nothing was in flight when the loop went away: the test proves nothing"
        gc.collect()
        # No loop any more: the completions are reaped off-loop, releasing pins and outputs.
        poll_sync(lambda: s.statistics().in_flight == 0, "the abandoned requests to complete")
        st = s.statistics()
        assert st.pinned_bytes == 0 and st.waiting == 0, st
        assert st.failed == 0, st
        gc.collect()
        # collect inside the poll: the reaper thread may still hold the last request while it finishes its batch
        poll_sync(lambda: gc.collect() >= 0 and sum(r() is not None for r in refs) == 0, "the inputs to be released")
        assert w.flags.writeable
    finally:
        s.close()
    deadline = time.monotonic() + 20
    while True:
        d = counters_diff(baseline, live(), ignore=())
        if not d:
            break
        assert time.monotonic() < deadline, f"native live counters did not return to baseline (before, after): {d}"
        time.sleep(0.02)


def test_asyncio_loop_closed_then_a_new_loop_works():
    """After a loop went away with work in flight, the same session serves a new loop normally."""
    model, n = slow_chain(0.02)
    w = np.eye(n, dtype=np.float32)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        x = np.ones((n, n), np.float32)
        assert _abandon_asyncio("asyncio", s, [[x, w] for _ in range(4)], "close") > 0

        async def again():
            with anyio.fail_after(30):
                (y,) = await s.run_graph_async(1, [x, w])
            return float(y.numpy()[0, 0])

        assert asyncio.run(again()) == 1.0
        poll_sync(lambda: s.statistics().in_flight == 0, "the abandoned requests to complete")
        assert s.statistics().pinned_bytes == 0


# --- fork ------------------------------------------------------------------------------------------------------------

def _child_checks(s: ga.Session, batcher: ga.Batcher, report_fd: int) -> int:
    """In the forked child: every entry point must raise the fork GeError at once. Returns the exit code."""
    notes = []

    def expect_fork_error(name, fn):
        try:
            fn()
        except ga.GeError as exc:
            if "fork" not in str(exc):
                notes.append(f"{name}: GeError without 'fork': {exc}")
        except BaseException as exc:  # noqa: BLE001
            notes.append(f"{name}: {type(exc).__name__}: {exc}")
        else:
            notes.append(f"{name}: no error")

    a = np.ones((1, 16), np.float32)
    expect_fork_error("Session()", lambda: ga.Session().close())
    expect_fork_error("run_graph", lambda: s.run_graph(2, [a, a]))
    expect_fork_error("Stream()", lambda: ga.Stream().close())

    def in_a_thread(name, fn):
        """fn() in a fresh thread (the parent's loop is not ours to use), noted if it does not return."""
        t = threading.Thread(target=fn, daemon=True)
        t.start()
        t.join(15)
        if t.is_alive():
            notes.append(f"{name}: hung")

    async def go():
        await s.run_graph_async(3, [a, a])

    in_a_thread("run_graph_async", lambda: expect_fork_error("run_graph_async", lambda: asyncio.run(go())))

    # the parent's batcher, on this thread (the thread that forked: its id, and the parent's loop, look the same)
    async def batched():
        await batcher.run([a, a])

    expect_fork_error("Batcher.run", lambda: asyncio.run(batched()))

    # aclose(): the parent's runs in flight complete in the parent only; the child closes at once
    def close():
        try:
            asyncio.run(batcher.aclose())
            asyncio.run(s.aclose())
            if not s.closed:
                notes.append("aclose: the session is still open")
        except BaseException as exc:  # noqa: BLE001
            notes.append(f"aclose: {type(exc).__name__}: {exc}")

    in_a_thread("aclose with the parent's runs in flight", close)
    os.write(report_fd, ("\n".join(notes) or "ok").encode()[:4000])
    return 0 if not notes else 3


@pytest.mark.anyio
async def test_forked_child_gets_a_clear_error_not_a_hang(anyio_backend):
    model, n = slow_chain(0.03)
    w = np.eye(n, dtype=np.float32)
    x = np.ones((n, n), np.float32)
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        s.add_graph(2, ga.Graph.from_onnx(add_model()))
        s.add_graph(3, ga.Graph.from_onnx(add_model()))
        batcher = ga.Batcher(s, 3, batch_sizes=[1])
        await batcher.run([np.ones((1, 16), np.float32)] * 2)  # bound to this loop
        async with anyio.create_task_group() as tg:
            for _ in range(4):  # work in flight in the parent at fork time
                tg.start_soon(s.run_graph_async, 1, [x, w])
            await wait_until(lambda: s.statistics().in_flight > 0, "requests to be in flight")
            r, wfd = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: never return into pytest
                code = 99
                try:
                    os.close(r)
                    code = _child_checks(s, batcher, wfd)
                finally:
                    os._exit(code)
            os.close(wfd)
            deadline = time.monotonic() + 30
            status = None
            while status is None:
                done, st = os.waitpid(pid, os.WNOHANG)
                if done:
                    status = st
                elif time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    os.close(r)
                    pytest.fail("the forked child hung")
                else:
                    await anyio.sleep(0.01)
            report = os.read(r, 8192).decode(errors="replace")
            os.close(r)
            assert os.WIFEXITED(status), status
            assert os.WEXITSTATUS(status) == 0, report
            assert report == "ok", report
        # The parent is unaffected.
        (y,) = await s.run_graph_async(1, [x, w])
        np.testing.assert_array_equal(y.numpy(), x)
        assert s.statistics().in_flight == 0


def _closed_loop_with_a_hub() -> asyncio.AbstractEventLoop:
    """A closed asyncio loop that ran a request (so it has a completion hub): collecting it orphans the hub."""
    loop = asyncio.new_event_loop()
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(add_model((1, 16))))
        a = np.ones((1, 16), np.float32)
        loop.run_until_complete(s.run_graph_async(1, [a, a]))
    loop.close()
    return loop


def test_loop_collected_while_the_reaper_lock_is_held_does_not_deadlock():
    """A loop can be garbage-collected at any allocation, also while the reaper's lock is held (the reaper thread
    iterating its hubs, or statistics() reaping): its hub's finalizer then re-enters that lock in the same thread."""
    from geasync import _hub

    loops = [_closed_loop_with_a_hub()]
    done = threading.Event()

    def collect_under_lock():
        with _hub._reaper._lock:
            loops.clear()
            gc.collect()  # the loop's weakref.finalize -> Hub.orphan -> the reaper's adopt(), in this thread
        done.set()

    t = threading.Thread(target=collect_under_lock, daemon=True)
    t.start()
    assert done.wait(10), "orphaning a hub while the reaper's lock was held deadlocked"


def test_loop_collected_in_another_thread_while_the_reaper_lock_is_held_does_not_deadlock():
    """The GC may run a loop's finalizer in a thread while another thread holds the reaper's lock and waits for
    that thread (it happened inside Thread.start(): the new reaper thread collected a loop before it counted as
    started). Orphaning a hub must not need that lock."""
    from geasync import _hub

    loops = [_closed_loop_with_a_hub()]
    done = threading.Event()

    def collect():
        loops.clear()
        gc.collect()  # the loop's weakref.finalize -> Hub.orphan -> the reaper's adopt(), in this thread
        done.set()

    with _hub._reaper._lock:  # held by this thread while it waits for the collecting one
        t = threading.Thread(target=collect, daemon=True)
        t.start()
        finished = done.wait(10)
    assert finished, "orphaning a hub needed the reaper's lock held by the thread waiting for it"
