"""Cancellation: a cancelled request raises in its task at once, but its inputs stay pinned (alive, and numpy inputs
read-only) until the runtime reports completion; then they are released and the writeable flag restored."""

from __future__ import annotations

import asyncio
import gc
import random
import threading
import time
import weakref

import anyio
import numpy as np
import pytest

import geasync as ga
from conftest import add_model, live
from asynctools import slow_chain, wait_for_counters, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120, method="thread")]


def alive(refs) -> int:
    return sum(r() is not None for r in refs)


async def test_cancelled_request_keeps_its_input_alive_and_frozen_until_completion():
    model, n = slow_chain(0.05)
    w = np.eye(n, dtype=np.float32)
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        await s.run_graph_async(1, [np.zeros((n, n), np.float32), w])  # compile
        ahead = np.zeros((n, n), np.float32)
        x = np.ones((n, n), np.float32)
        ref = weakref.ref(x)
        # the first request ahead holds the graph 1 s: the cancelled one is still queued at the checks below however
        # slowly a loaded machine runs this loop (~100 ms of work ahead was not always enough)
        ga.twin.inject_fault(s, 1, "delay_run", nth=1, delay=1.0)
        async with anyio.create_task_group() as tg:
            for _ in range(2):  # work queued in GE ahead of the request
                tg.start_soon(s.run_graph_async, 1, [ahead, w])
            await wait_until(lambda: s.statistics().in_flight == 2, "the requests ahead", interval=0.001)
            t0 = time.perf_counter()
            # 20 ms: well inside the ~100 ms queued ahead, and long enough that the request is submitted (flushed at the
            # loop's next turn) before the deadline even on a slow sanitizer build; uvloop runs due timers first
            with anyio.move_on_after(0.02) as scope:
                await s.run_graph_async(1, [x, w])
            assert scope.cancelled_caught
            assert time.perf_counter() - t0 < 0.5  # raised at once, not at completion
            st = s.statistics()
            # GE runs a model's jobs in order: while anything is in flight, the cancelled request (last) is too.
            assert st.in_flight >= 1, st
            assert st.pinned_bytes >= x.nbytes + w.nbytes, st
            # Still pinned: read-only, and a write raises instead of racing the runtime.
            assert not x.flags.writeable
            with pytest.raises(ValueError):
                x[0, 0] = 5.0
            del x
            gc.collect()
            assert ref() is not None, "the input was released while the runtime still reads it"
        await wait_until(lambda: s.statistics().in_flight == 0, "the cancelled run to complete")
        # (polled: the thread that delivered the completion may still hold the request for a moment)
        await wait_until(lambda: gc.collect() >= 0 and ref() is None, "the input to be released after its completion")
        st = s.statistics()
        assert (st.cancelled, st.pinned_bytes) == (1, 0), st
        # The shared weight array is writable again.
        assert w.flags.writeable


async def test_request_cancelled_while_waiting_for_its_batched_submit_is_released():
    """A request made while another is in flight waits for the loop's batched submit. Cancelled at once, it is
    released either at the flush (it never reaches the runtime) or, if the flush came first, at its completion:
    input writeable, slot free, counted cancelled, and the one in flight unaffected."""
    model, n = slow_chain(0.05)
    w = np.eye(n, dtype=np.float32)
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        await s.run_graph_async(1, [np.zeros((n, n), np.float32), w])  # compile
        results = []

        async def ahead() -> None:
            (y,) = await s.run_graph_async(1, [np.full((n, n), 3.0, np.float32), w])
            results.append(float(y.numpy()[1, 1]))

        x = np.ones((n, n), np.float32)
        async with anyio.create_task_group() as tg:
            tg.start_soon(ahead)  # alone: submitted at once
            await wait_until(lambda: s.statistics().in_flight == 1, "the request ahead", interval=0.001)
            with anyio.move_on_after(0) as scope:  # cancelled at its first await, before or after the flush
                await s.run_graph_async(1, [x, w])
            assert scope.cancelled_caught
        await wait_until(lambda: s.statistics().in_flight == 0, "the run ahead to complete")
        st = s.statistics()
        assert (st.cancelled, st.failed, st.pinned_bytes) == (1, 0, 0), st
        assert results == [3.0]
        assert x.flags.writeable and w.flags.writeable
        # the session goes on: the batch path and the lone path both still work
        outs = []

        async def one(v: float) -> None:
            (y,) = await s.run_graph_async(1, [np.full((n, n), v, np.float32), w])
            outs.append(float(y.numpy()[0, 0]))

        async with anyio.create_task_group() as tg:
            for v in range(4):
                tg.start_soon(one, float(v))
        assert sorted(outs) == [0.0, 1.0, 2.0, 3.0]


async def test_writeable_flag_restored_after_completion_and_after_cancellation():
    model, n = slow_chain(0.05)
    w = np.eye(n, dtype=np.float32)
    x = np.ones((n, n), np.float32)
    frozen_in = np.ones((n, n), np.float32)
    frozen_in.flags.writeable = False  # read-only before the run: stays read-only after
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        seen = {}

        async def watch():
            await wait_until(lambda: s.statistics().in_flight > 0, "the run to be submitted", interval=0.001)
            seen["during"] = x.flags.writeable
            try:
                x[0, 0] = 2.0
                seen["write"] = "succeeded"
            except ValueError:
                seen["write"] = "ValueError"

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            (y,) = await s.run_graph_async(1, [x, w])
        assert seen == {"during": False, "write": "ValueError"}
        assert x.flags.writeable and w.flags.writeable
        np.testing.assert_array_equal(y.numpy(), x)
        x[0, 0] = 3.0  # writable again

        with anyio.move_on_after(0.002):
            await s.run_graph_async(1, [frozen_in, w])
        assert not frozen_in.flags.writeable
        await wait_until(lambda: s.statistics().in_flight == 0, "the cancelled run to complete")
        assert not frozen_in.flags.writeable, "an array that was read-only before must stay read-only"
        assert w.flags.writeable


async def test_array_shared_by_concurrent_requests_stays_frozen_until_the_last_completes():
    model, n = slow_chain(0.03)
    w = np.eye(n, dtype=np.float32)
    x = np.ones((n, n), np.float32)
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        states = []

        async def sample():
            while True:
                st = s.statistics()
                states.append((st.in_flight, x.flags.writeable))
                if st.in_flight == 0 and len(states) > 1:
                    return
                await anyio.sleep(0.002)

        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(s.run_graph_async, 1, [x, w])
            await anyio.sleep(0)
            tg.start_soon(sample)
        assert all(not writeable for in_flight, writeable in states if in_flight > 0), states
        assert x.flags.writeable


async def test_freeze_inputs_false_keeps_arrays_writable():
    model, n = slow_chain(0.05)
    w = np.eye(n, dtype=np.float32)
    x = np.ones((n, n), np.float32)
    async with ga.Session(freeze_inputs=False) as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        async with anyio.create_task_group() as tg:
            tg.start_soon(s.run_graph_async, 1, [x, w])
            await wait_until(lambda: s.statistics().in_flight == 1, "the run to be submitted", interval=0.001)
            assert x.flags.writeable and w.flags.writeable
            st = s.statistics()
            assert st.pinned_bytes == 2 * x.nbytes, st  # still pinned (kept alive), only not frozen
        with anyio.move_on_after(0.002):
            await s.run_graph_async(1, [x, w])
        assert x.flags.writeable
        x[0, 0] = 1.0
        await wait_until(lambda: s.statistics().in_flight == 0, "the runs to complete")
        assert s.statistics().pinned_bytes == 0


class _Interrupt(BaseException):
    """What a signal handler (Ctrl-C's KeyboardInterrupt) may raise at any point of the loop's thread."""


async def test_request_interrupted_right_after_its_submit_stays_pinned_until_completion(monkeypatch):
    """An exception between the submit and the await (here: where the loop polls for a lone run's completion)
    must not release the inputs of a run GE is executing: the request is given up like a cancelled one."""
    from geasync import _hub

    model, n = slow_chain(0.05)
    w = np.eye(n, dtype=np.float32)
    x = np.ones((n, n), np.float32)
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        await s.run_graph_async(1, [x, w])  # compiled and loaded: the next submit goes straight to GE

        def interrupted(hub):
            raise _Interrupt

        for cls in (_hub.Hub, _hub.AsyncioHub, _hub.TrioHub):
            monkeypatch.setattr(cls, "_submitted_alone", interrupted)
        with pytest.raises(_Interrupt):
            await s.run_graph_async(1, [x, w])
        monkeypatch.undo()
        st = s.statistics()
        assert (st.in_flight, st.pinned_bytes) == (1, 2 * x.nbytes), st
        assert not x.flags.writeable and not w.flags.writeable  # guarded: the loop runs other code meanwhile
        await wait_until(lambda: s.statistics().in_flight == 0, "the interrupted run to complete")
        st = s.statistics()
        assert (st.cancelled, st.failed, st.pinned_bytes) == (1, 0, 0), st
        assert x.flags.writeable and w.flags.writeable
        (y,) = await s.run_graph_async(1, [x, w])  # the session goes on
        np.testing.assert_array_equal(y.numpy(), x)


async def test_a_request_cancelled_during_its_graphs_first_compile_raises_at_once(monkeypatch):
    """GE compiles for seconds on an NPU: a request cancelled while its graph's first compile runs (in a worker
    thread) raises at once; the compile goes on, the next request finds the graph compiled, and aclose() waits for
    the compile the cancelled request left behind."""
    from geasync import _lib

    compile_graph, compiles, finished = _lib.compile_graph, [], []
    release = threading.Event()

    def slow_compile(*args):
        compiles.append(time.monotonic())
        release.wait(10)  # a compile that lasts until the test lets it end (a slow one on a loaded machine)
        compile_graph(*args)
        finished.append(time.monotonic())

    async def release_soon() -> None:
        await anyio.sleep(0.05)
        release.set()

    monkeypatch.setattr(_lib, "compile_graph", slow_compile)
    a = np.ones((1, 16), np.float32)
    for n, then in enumerate(("run", "aclose"), 1):
        release.clear()
        async with ga.Session() as s:
            s.add_graph(1, ga.Graph.from_onnx(add_model()))
            with anyio.move_on_after(0.05) as scope:
                await s.run_graph_async(1, [a, a])
            assert scope.cancelled_caught and len(finished) == n - 1  # raised while the compile still ran
            st = s.statistics()
            assert (st.submitted, st.cancelled, st.waiting) == (1, 1, 0), st
            async with anyio.create_task_group() as tg:
                tg.start_soon(release_soon)  # the compile ends while the next request / aclose() waits for it
                if then == "run":
                    (c,) = await s.run_graph_async(1, [a, a])  # waits for the compile under way, not a second one
                    np.testing.assert_array_equal(c.numpy(), a + a)
                await s.aclose()  # waits for the compile, without blocking the loop (release_soon runs)
                assert len(finished) == n
    assert len(compiles) == 2  # one per session


@pytest.mark.parametrize("seed", [1])
async def test_cancellation_storm(anyio_backend_name, seed):
    """Many requests cancelled at random moments by every mechanism; inputs must outlive their native use."""
    model, n = slow_chain(0.002)  # 240 requests: ~0.5 s of work for GE, cancelled at random points
    n_req = 240
    rng = random.Random(seed)
    w = np.eye(n, dtype=np.float32)
    refs: list[weakref.ref] = []
    outcomes = {"ok": 0, "cancelled": 0, "wrong": []}
    baseline = live()
    mechanisms = ["move_on_after", "fail_after", "timeout", "scope_cancel"]
    if anyio_backend_name == "asyncio":
        mechanisms += ["asyncio.wait_for", "task.cancel"]

    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        await s.run_graph_async(1, [np.zeros((n, n), np.float32), w])  # compile

        async def one(i: int, how: str, delay: float) -> None:
            x = np.full((n, n), float(i), np.float32)
            refs.append(weakref.ref(x))
            expected = float(i)
            try:
                if how == "move_on_after":
                    with anyio.move_on_after(delay):
                        (y,) = await s.run_graph_async(1, [x, w])
                        outcomes["ok"] += 1
                        if float(y.numpy()[3, 3]) != expected:
                            outcomes["wrong"].append(i)
                        return
                    outcomes["cancelled"] += 1
                    return
                if how == "fail_after":
                    with anyio.fail_after(delay):
                        (y,) = await s.run_graph_async(1, [x, w])
                elif how == "timeout":
                    (y,) = await s.run_graph_async(1, [x, w], timeout=delay)
                elif how == "scope_cancel":
                    with anyio.CancelScope() as scope:
                        async with anyio.create_task_group() as tg:
                            async def canceller():
                                await anyio.sleep(delay)
                                scope.cancel()
                            tg.start_soon(canceller)
                            (y,) = await s.run_graph_async(1, [x, w])
                            tg.cancel_scope.cancel()
                    if scope.cancelled_caught:
                        outcomes["cancelled"] += 1
                        return
                elif how == "asyncio.wait_for":
                    (y,) = await asyncio.wait_for(s.run_graph_async(1, [x, w]), delay)
                else:  # task.cancel
                    task = asyncio.ensure_future(s.run_graph_async(1, [x, w]))
                    await asyncio.wait({task}, timeout=delay)
                    if not task.done():
                        task.cancel()
                    try:
                        (y,) = await task
                    except asyncio.CancelledError:
                        outcomes["cancelled"] += 1
                        return
            except TimeoutError:
                outcomes["cancelled"] += 1
                return
            outcomes["ok"] += 1
            if float(y.numpy()[3, 3]) != expected:
                outcomes["wrong"].append(i)

        max_pending_seen = 0
        violations = []

        async def checker(stop: anyio.Event) -> None:
            # Every request GE has not reported back yet must still have its input alive.
            nonlocal max_pending_seen
            while not stop.is_set():
                pending = ga.live_counters()["pending_completions"]
                st = s.statistics()
                n_alive = alive(refs)
                max_pending_seen = max(max_pending_seen, pending)
                if n_alive < pending or n_alive < st.pinned_bytes // (2 * w.nbytes):
                    violations.append((pending, st.pinned_bytes, n_alive))
                await anyio.sleep(0.001)

        stop = anyio.Event()
        async with anyio.create_task_group() as outer:
            outer.start_soon(checker, stop)
            async with anyio.create_task_group() as tg:
                for i in range(n_req):
                    # Most deadlines are short (cancelled queued or mid-run), some long enough to complete.
                    delay = rng.uniform(0.0, 0.02) if rng.random() < 0.7 else rng.uniform(0.5, 3.0)
                    tg.start_soon(one, i, rng.choice(mechanisms), delay)
                    if i % 40 == 39:
                        await anyio.sleep(rng.uniform(0, 0.01))
            # All tasks have returned; GE may still hold cancelled requests.
            st = s.statistics()
            pending_after = ga.live_counters()["pending_completions"]
            n_alive = alive(refs)
            assert n_alive >= pending_after, (n_alive, pending_after, st)
            await wait_until(lambda: s.statistics().in_flight == 0, "every cancelled request to complete")
            stop.set()

        assert not violations, f"inputs died while GE still held them: (pending, pinned, alive) {violations[:5]}"
        assert not outcomes["wrong"], outcomes["wrong"]
        assert outcomes["ok"] + outcomes["cancelled"] == n_req, outcomes
        assert outcomes["cancelled"] > 0 and outcomes["ok"] > 0, outcomes  # the storm did both
        st = s.statistics()
        assert st.in_flight == 0 and st.waiting == 0 and st.pinned_bytes == 0, st
        # Every request GE reported back is counted once: awaited (completed) or not wanted any more (cancelled).
        assert st.failed == 0, st
        assert outcomes["ok"] + 1 <= st.completed, (st, outcomes)
        assert st.completed + st.cancelled <= n_req + 1, (st, outcomes)
        assert st.cancelled <= outcomes["cancelled"], (st, outcomes)
        assert st.cancelled > 0, st  # some were cancelled while GE still held them
        assert max_pending_seen > 0
        # The session works normally after the storm.
        (y,) = await s.run_graph_async(1, [np.full((n, n), 2.0, np.float32), w])
        assert float(y.numpy()[0, 0]) == 2.0
        del y
    # (polled: the thread that delivered the last completion may still hold its request for a moment)
    await wait_until(lambda: gc.collect() >= 0 and alive(refs) == 0, "the inputs to be released after the completions")
    assert w.flags.writeable
    await wait_for_counters(baseline)


async def test_cancel_storm_while_waiting_for_slots():
    """Requests cancelled while waiting for a slot never reach GE and never leak a slot."""
    model, n = slow_chain(0.002)
    w = np.eye(n, dtype=np.float32)
    x = np.ones((n, n), np.float32)
    async with ga.Session(max_in_flight=2) as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        rng = random.Random(7)
        ok = 0

        async def one():
            nonlocal ok
            with anyio.move_on_after(rng.uniform(0, 0.01)):
                await s.run_graph_async(1, [x, w])
                ok += 1

        async with anyio.create_task_group() as tg:
            for _ in range(150):
                tg.start_soon(one)
        await wait_until(lambda: s.statistics().in_flight == 0, "the in-flight requests to complete")
        st = s.statistics()
        assert st.pinned_bytes == 0 and st.in_flight == 0, st
        assert st.completed >= ok
        assert x.flags.writeable
        # All slots are free again: max_in_flight concurrent requests go straight through.
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for _ in range(10):
                    tg.start_soon(s.run_graph_async, 1, [x, w])
        assert s.statistics().in_flight == 0


async def test_a_request_timeout_names_the_call_the_graph_and_the_timeout():
    """run_graph_async(timeout=) raises a TimeoutError that says what timed out (it was a bare TimeoutError with no
    message); a deadline of the caller's own around the call stays the caller's."""
    a = np.ones((1, 16), np.float32)
    async with ga.Session() as s:
        s.add_graph(3, ga.Graph.from_onnx(add_model()))
        await s.run_graph_async(3, [a, a])
        # every run 500 ms late: far beyond the 20 ms timeouts even when a loaded machine delays the loop
        ga.twin.inject_fault(s, 3, "delay_run", nth=0, delay=0.5)
        with pytest.raises(TimeoutError, match=r"Session\.run_graph_async\(graph_id=3\): no result within 0\.02 s"):
            await s.run_graph_async(3, [a, a], timeout=0.02)
        with pytest.raises(TimeoutError) as outer:
            with anyio.fail_after(0.02):
                await s.run_graph_async(3, [a, a], timeout=10)
        ga.twin.clear_faults(s, 3)
        assert "run_graph_async" not in str(outer.value)
        await wait_until(lambda: s.statistics().in_flight == 0, "the timed-out runs to complete")
        st = s.statistics()
        assert (st.cancelled, st.failed, st.pinned_bytes) == (2, 0, 0), st


async def test_duplicated_and_tensor_wrapped_inputs_are_frozen_and_restored():
    """The same array twice in one request, and an array wrapped in a Tensor, are frozen while pinned and
    writable again once the completion arrives."""
    model, n = slow_chain(0.05)
    x = np.ones((n, n), np.float32)
    w = np.eye(n, dtype=np.float32)
    xt = ga.Tensor.from_numpy(x)  # zero-copy: the Tensor reads x itself
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        s.add_graph(2, ga.Graph.from_onnx(model))
        seen = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(s.run_graph_async, 1, [x, x])  # x @ x... with x = ones: only checks the flags
            tg.start_soon(s.run_graph_async, 2, [xt, w])
            await wait_until(lambda: s.statistics().in_flight == 2, "both requests to be submitted", interval=0.001)
            seen.append((x.flags.writeable, w.flags.writeable))
        assert seen == [(False, False)]
        await wait_until(lambda: s.statistics().in_flight == 0, "the runs to complete")
        assert x.flags.writeable and w.flags.writeable
        assert s.statistics().pinned_bytes == 0
