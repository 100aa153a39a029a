"""run_graph_async / run_graph_in_thread under asyncio, uvloop and trio: many concurrent runs, each result matched to
its own input; statistics; errors reaching the right task; timeouts; the in-flight bound; a loop that never blocks."""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import textwrap
import time

import anyio
import numpy as np
import pytest

import geasync as ga
import geasync.tensor
from conftest import TensorProto, add_model, helper, live, make_mlp, make_model, numpy_helper
from asynctools import Ticker, chain_model, slow_chain, wait_for_counters, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120, method="thread")]


def mlp_reference(x: np.ndarray) -> np.ndarray:
    """The example MLP in numpy (float64), from the same fixed-seed weights."""
    w = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in make_mlp().graph.initializer}
    h = np.maximum(x.astype(np.float64) @ w["w1"] + w["b1"], 0.0)
    z = h @ w["w2"] + w["b2"]
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


async def test_backend_is_what_the_id_says(anyio_backend):
    name, options = anyio_backend
    if name == "trio":
        import trio

        trio.lowlevel.current_trio_token()  # raises outside trio
    else:
        loop = asyncio.get_running_loop()
        is_uvloop = type(loop).__module__.startswith("uvloop")
        assert is_uvloop == bool(options.get("use_uvloop")), type(loop)


async def test_1000_concurrent_runs_each_result_matches_its_input():
    n = 1000
    baseline = live()
    rng = np.random.default_rng(1234)
    xs = [rng.standard_normal((1, 784)).astype(np.float32) for _ in range(n)]
    ref = mlp_reference(np.concatenate(xs))
    results: list = [None] * n
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(make_mlp()))
        s.add_graph(2, ga.Graph.from_onnx(make_mlp()))
        # The numpy reference agrees with GE's own synchronous RunGraph (another graph id, so another mode).
        (sync_out,) = s.run_graph(2, [np.concatenate(xs[:64])])
        np.testing.assert_allclose(sync_out.numpy(), ref[:64], rtol=1e-4, atol=1e-6)
        del sync_out

        async def one(i: int) -> None:
            (y,) = await s.run_graph_async(1, [xs[i]])
            results[i] = y.numpy().copy()

        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(one, i)

        out = np.concatenate(results)
        assert out.shape == (n, 10)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-6)
        # The check can tell requests apart: neighbouring references differ by far more than the tolerance.
        assert np.abs(np.diff(ref, axis=0)).max(axis=1).min() > 1e-4
        st = s.statistics()
        g = st.graphs[1]
        assert (g.completed, g.failed, g.cancelled) == (n, 0, 0), st
        assert (st.completed, st.submitted) == (n + 1, n + 1), st  # graph 2's synchronous run counts too
        assert (st.in_flight, st.waiting, st.pinned_bytes) == (0, 0, 0), st
        assert st.max_in_flight == 512
    # Inputs were frozen only while pinned.
    assert all(x.flags.writeable for x in xs)
    results.clear()  # (the list itself stays: the task function above refers to it)
    del out
    await wait_for_counters(baseline)


async def test_outputs_are_owned_by_each_request():
    """Results of different requests do not alias: each output is its own buffer, alive after the others go."""
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        bs = [np.full((1, 16), i, np.float32) for i in range(64)]
        a = np.ones((1, 16), np.float32)
        outs = []

        async def one(i):
            (c,) = await s.run_graph_async(1, [a, bs[i]])
            outs.append((i, c))

        async with anyio.create_task_group() as tg:
            for i in range(64):
                tg.start_soon(one, i)
        assert len({c.address for _, c in outs}) == 64
        keep = outs[::7]
        outs.clear()  # the other requests' outputs go
        for i, c in keep:
            np.testing.assert_array_equal(c.numpy(), a + bs[i])


async def test_loop_never_blocked_while_1000_requests_run():
    ticker = Ticker(0.002)
    x = np.random.default_rng(0).standard_normal((1, 784)).astype(np.float32)
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(make_mlp()))
        await s.run_graph_async(1, [x])  # compile outside the measured window
        done = started = 0
        spawned = 0.0

        async def one():
            nonlocal done, started, spawned
            started += 1
            if started == 1000:
                # Starting 1000 tasks at once runs their first steps (1000 submits) in one scheduling round: one
                # gap as long as 1000 submit times, which a loaded machine stretches to most of the whole run
                # (0.58 s of 0.70 s pinned to a busy core). What is measured is the loop while the runs complete.
                spawned = ticker.reset()
            await s.run_graph_async(1, [x])
            done += 1

        async with anyio.create_task_group() as outer:
            outer.start_soon(ticker.run)
            await anyio.sleep(0.01)
            async with anyio.create_task_group() as tg:
                for _ in range(1000):
                    tg.start_soon(one)
            elapsed = time.perf_counter() - spawned
            ticker.stop()
        assert done == 1000
        # a loop blocked by the runs themselves would see one gap as long as the whole run
        assert ticker.max_gap < max(0.5, 0.8 * elapsed), \
            f"the loop was blocked for {ticker.max_gap:.3f} s (the 1000 runs took {elapsed:.3f} s once started)"
        assert ticker.ticks >= 3


async def test_a_task_running_tiny_graphs_back_to_back_lets_the_loop_run_other_tasks():
    """A lone run that completes while its submit polls for it returns to its task without suspending it; a task
    that keeps doing that (a loop of awaited tiny runs) must still let the loop run its other tasks, about every
    half millisecond, not only when it stops."""
    ticker = Ticker(0.002)
    a = np.ones((1, 16), np.float32)
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(add_model((1, 16))))
        for _ in range(100):
            await s.run_graph_async(1, [a, a])  # compiled, loaded, the model thread awake
        # A full collection of a long test process's heap, or a busy machine descheduling the process, is one gap
        # that is not the loop's: CI saw 0.24 s once while the clang++ and sanitizer suites shared its 2 cores.
        # The collector waits; the bounds below tell "yields every few runs" from "never yields" (one 1 s gap).
        gc.collect()
        gc.disable()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(ticker.run)
                await anyio.sleep(0.01)
                runs, t0 = 0, time.perf_counter()
                while time.perf_counter() - t0 < 1.0:
                    (c,) = await s.run_graph_async(1, [a, a])
                    runs += 1
                ticker.stop()
        finally:
            gc.enable()
        np.testing.assert_array_equal(c.numpy(), a + a)
    assert ticker.max_gap < 0.5, f"the loop ran no other task for {ticker.max_gap:.3f} s of {runs} runs in 1 s"
    # ~500 ticks when every 2 ms tick is on time; a task that let the loop in only now and then gets a handful
    assert ticker.ticks >= 50, (ticker.ticks, ticker.max_gap, runs)


async def test_run_graph_in_thread_is_correct_and_does_not_block_the_loop():
    model, n = slow_chain(0.03)
    x = np.random.default_rng(2).standard_normal((n, n)).astype(np.float32)
    w = np.eye(n, dtype=np.float32)
    ticker = Ticker(0.002)
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        s.run_graph(1, [x, w])  # compile; run_graph_in_thread is RunGraph mode too
        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker.run)
            t0 = time.perf_counter()
            for _ in range(4):  # sequential: RunGraph holds a process-wide try-lock in GE
                (y,) = await s.run_graph_in_thread(1, [x, w])
                np.testing.assert_array_equal(y.numpy(), x)
            elapsed = time.perf_counter() - t0
            ticker.stop()
        # ~4 x 30 ms of native work in a worker thread: the loop kept ticking through it.
        assert ticker.max_gap < 0.5, (ticker.max_gap, elapsed)
        assert ticker.ticks >= min(5, int(elapsed / 0.01)), (ticker.ticks, elapsed)
        # The graph's mode is RunGraph: run_graph_async on it is refused with the mode error.
        with pytest.raises(ga.ExecutionModeError):
            await s.run_graph_async(1, [x, w])


async def test_run_graph_in_thread_error_is_a_geerror():
    async with ga.Session() as s:
        with pytest.raises(ga.GeError) as info:
            await s.run_graph_in_thread(5, [np.ones((1, 16), np.float32)])  # no graph 5
        assert "graph_id=5" in str(info.value)


async def test_runtime_error_reaches_only_the_task_that_caused_it():
    # the bad request's inputs match the declaration (so they pass geasync's input check): the runtime fails it,
    # from the values of the Reshape target
    n, bad = 50, 17
    model = make_model([helper.make_node("Reshape", ["a", "s"], ["c"], name="reshape")],
                       [("a", TensorProto.FLOAT, [1, 16]), ("s", TensorProto.INT64, [2])],
                       [("c", TensorProto.FLOAT, None)])
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        await s.run_graph_async(1, [np.ones((1, 16), np.float32), np.array([4, 4])])  # compile first
        outcome: dict = {}

        async def one(i: int) -> None:
            target = np.array([3, 7] if i == bad else [4, 4])
            try:
                (c,) = await s.run_graph_async(1, [np.full((1, 16), i, np.float32), target])
                outcome[i] = c.numpy().copy()
            except ga.GeError as exc:
                outcome[i] = exc

        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(one, i)

        err = outcome.pop(bad)
        assert isinstance(err, ga.GeError), err
        assert not isinstance(err, (ga.ExecutionModeError, ga.SessionBrokenError, ga.SessionClosedError))
        # GE's message, with the API and the geasync call context.
        assert "[3,7]" in err.error_message and "reshape" in err.error_message, err.error_message
        assert err.api_name == "GeSession::RunGraphAsync"
        assert "run_graph_async(graph_id=1)" in err.context
        assert err.status != 0
        for i, c in outcome.items():
            assert not isinstance(c, BaseException), (i, c)
            np.testing.assert_array_equal(c, np.full((4, 4), i, np.float32))
        st = s.statistics()
        assert (st.completed, st.failed, st.in_flight, st.pinned_bytes) == (n, 1, 0, 0), st
        # The session still works after the failed request.
        (c,) = await s.run_graph_async(1, [np.full((1, 16), 5, np.float32), np.array([4, 4])])
        np.testing.assert_array_equal(c.numpy(), np.full((4, 4), 5, np.float32))


async def test_compile_failure_reaches_the_awaiting_task():
    """The first run compiles: a wrong shape then fails the compile, and GE's text reaches the task."""
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        with pytest.raises(ga.GeError) as info:
            await s.run_graph_async(1, [np.ones((1, 16), np.float32), np.ones((3, 16), np.float32)])
        assert "does not match" in info.value.error_message
        assert s.statistics().in_flight == 0


async def test_requests_arriving_during_a_first_compile_share_one_worker_thread(monkeypatch):
    """A graph's first compile runs on one worker thread however many requests arrive meanwhile (on an NPU it
    takes seconds: a thread per request would hold the thread pool for that long); each request then runs, or
    fails with the compile's error it waited for, and the request after a failed compile tries again."""
    from geasync import _lib, session as session_module

    compile_graph, compiles = _lib.compile_graph, []
    declared, threads = session_module._compile_declared, []
    fail = [False]

    def on_a_worker(*args):
        threads.append(1)
        declared(*args)

    def slow_compile(*args):
        compiles.append(1)
        time.sleep(0.1)
        if fail[0]:
            raise ga.GeError(ga.errors.FAILED, "injected compile failure", "CompileGraph")
        compile_graph(*args)

    monkeypatch.setattr(_lib, "compile_graph", slow_compile)
    monkeypatch.setattr(session_module, "_compile_declared", on_a_worker)
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        s.add_graph(2, ga.Graph.from_onnx(add_model()))
        results: list = []

        async def one(graph_id: int) -> None:
            try:
                (c,) = await s.run_graph_async(graph_id, [a, a])
                results.append(c.numpy())
            except ga.GeError as exc:
                results.append(exc)

        fail[0] = True
        async with anyio.create_task_group() as tg:
            for _ in range(30):
                tg.start_soon(one, 2)
        assert (len(threads), len(compiles)) == (1, 1)
        errors = [r for r in results if isinstance(r, ga.GeError)]
        assert len(errors) == 30 and all("injected compile failure" in str(e) for e in errors)
        assert len({id(e) for e in errors}) == 30  # each task its own exception object
        fail[0] = False
        results.clear()
        async with anyio.create_task_group() as tg:
            for _ in range(50):
                tg.start_soon(one, 1)
        assert (len(threads), len(compiles)) == (2, 2)  # one for the 50 requests
        assert len(results) == 50
        for c in results:
            np.testing.assert_array_equal(c, a + a)
        (c,) = await s.run_graph_async(2, [a, a])  # after a failed compile, the next request compiles again
        np.testing.assert_array_equal(c.numpy(), a + a)
        assert (len(threads), len(compiles)) == (3, 3)
        # the request that starts the compile is cancelled before a worker thread takes it: one waiting starts it
        s.add_graph(3, ga.Graph.from_onnx(add_model()))
        results.clear()

        async def cancelled_at_once() -> None:
            with anyio.move_on_after(0):
                await s.run_graph_async(3, [a, a])

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(cancelled_at_once)
                await anyio.sleep(0)
                for _ in range(5):
                    tg.start_soon(one, 3)
        assert len(results) == 5 and all(isinstance(r, np.ndarray) for r in results), results
        assert len(compiles) == 4
        # cancelled during the compile: it leaves at once, the compile runs on, and the next request in line waits
        # for it on a thread of its own (one, not one each) and finds the graph compiled
        s.add_graph(4, ga.Graph.from_onnx(add_model()))
        results.clear()
        threads.clear()

        async def cancelled_during_compile() -> None:
            with anyio.move_on_after(0.03):
                await s.run_graph_async(4, [a, a])
            results.append("left")

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(cancelled_during_compile)
                await anyio.sleep(0.01)
                for _ in range(5):
                    tg.start_soon(one, 4)
        assert results[0] == "left" and len(results) == 6, results
        assert all(isinstance(r, np.ndarray) for r in results[1:]), results
        assert (len(threads), len(compiles)) == (2, 5)
        st = s.statistics()
        assert (st.graphs[2].failed, st.graphs[2].submitted, st.graphs[1].completed) == (30, 31, 50), st
        assert (st.graphs[4].cancelled, st.graphs[4].completed) == (1, 5), st


async def test_requests_reach_the_runtime_in_arrival_order_across_a_first_compile(monkeypatch):
    """Requests that arrive during a graph's first compile, and while the ones before them leave its queue, are
    submitted in the order they were made (GE runs a graph's runs in that order)."""
    from geasync import _lib, session as session_module

    compile_graph = _lib.compile_graph
    submitted: list = []

    def slow_compile(*args):
        time.sleep(0.05)
        compile_graph(*args)

    class Recorded(session_module._RunRequest):  # made right before the request is handed to the runtime
        __slots__ = ()

        def __init__(self, session, prepared, *args):
            submitted.append(int(np.asarray(prepared[2][0]).flat[0]))
            super().__init__(session, prepared, *args)

    monkeypatch.setattr(_lib, "compile_graph", slow_compile)
    monkeypatch.setattr(session_module, "_RunRequest", Recorded)
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))

        async def one(i: int) -> None:
            x = np.full((1, 16), i, np.float32)
            (y,) = await s.run_graph_async(1, [x, x])
            np.testing.assert_array_equal(y.numpy(), x + x)

        async with anyio.create_task_group() as tg:
            for i in range(40):  # over ~80 ms: before, during and after the compile's queue drains
                tg.start_soon(one, i)
                await anyio.sleep(0.002)
    assert submitted == list(range(40)), submitted


async def test_timeout_raises_timeouterror_and_the_run_still_completes():
    model, n = slow_chain(0.05)
    x = np.random.default_rng(3).standard_normal((n, n)).astype(np.float32)
    w = np.eye(n, dtype=np.float32)
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        (y,) = await s.run_graph_async(1, [x, w], timeout=30.0)  # a generous timeout does not get in the way
        np.testing.assert_array_equal(y.numpy(), x)
        del y
        async with anyio.create_task_group() as tg:
            for _ in range(3):  # ~150 ms of work queued ahead of the timed request
                tg.start_soon(s.run_graph_async, 1, [x, w])
            await anyio.sleep(0)
            t0 = time.perf_counter()
            with pytest.raises(TimeoutError):
                await s.run_graph_async(1, [x, w], timeout=0.01)
            raised_after = time.perf_counter() - t0
            st = s.statistics()
            assert st.in_flight >= 1 and st.pinned_bytes > 0, st  # raised at once; the run is still in GE
        await wait_until(lambda: s.statistics().in_flight == 0, "the timed-out run to complete")
        st = s.statistics()
        assert st.cancelled == 1 and st.pinned_bytes == 0, st
        assert raised_after < 5.0


async def test_a_timeout_tells_its_expiry_from_other_cancellations(anyio_backend):
    """A run's timeout raises TimeoutError only when it expires first: an enclosing cancel scope that expires
    first cancels the run as any cancellation does (the scope catches it), and a timeout that expires inside a
    longer scope raises TimeoutError without cancelling the scope. Either way the run completes in the runtime
    once its callback comes. inf means no timeout; a timeout that is not a number is refused."""
    x = np.random.default_rng(8).standard_normal((1, 784)).astype(np.float32)
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(make_mlp()))
        await s.run_graph_async(1, [x])
        ga.twin.inject_fault(s, 1, "stall_callback", nth=1)
        with anyio.move_on_after(0.05) as outer:
            await s.run_graph_async(1, [x], timeout=30.0)
        assert outer.cancelled_caught
        ga.twin.inject_fault(s, 1, "stall_callback", nth=1)
        with anyio.move_on_after(30.0) as outer:
            with pytest.raises(TimeoutError):
                await s.run_graph_async(1, [x], timeout=0.05)
        assert not outer.cancelled_caught
        ga.twin.clear_faults(s, 1)
        await wait_until(lambda: s.statistics().in_flight == 0, "the stalled runs to complete")
        st = s.statistics()
        assert st.cancelled == 2 and st.completed == 1, st
        (y,) = await s.run_graph_async(1, [x], timeout=float("inf"))
        np.testing.assert_allclose(y.numpy(), mlp_reference(x), rtol=1e-5, atol=1e-6)
        (y,) = await s.run_graph_async(1, [x], timeout=np.float32(30))
        for bad, error in (("1", TypeError), (False, TypeError), (float("nan"), ValueError)):
            with pytest.raises(error, match="run_graph_async: timeout must be a number of seconds"):
                s.run_graph_async(1, [x], timeout=bad)  # refused by the call itself, before anything runs
        assert s.statistics().submitted == 5


async def test_timeout_while_waiting_for_a_slot():
    model, n = slow_chain(0.1)
    x = np.random.default_rng(4).standard_normal((n, n)).astype(np.float32)
    w = np.eye(n, dtype=np.float32)
    async with ga.Session(max_in_flight=1) as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        async with anyio.create_task_group() as tg:
            tg.start_soon(s.run_graph_async, 1, [x, w])
            await wait_until(lambda: s.statistics().in_flight == 1, "the first request to be submitted")
            with pytest.raises(TimeoutError):
                await s.run_graph_async(1, [x, w], timeout=0.005)
            assert s.statistics().in_flight == 1
        # The slot is handed on correctly afterwards.
        (y,) = await s.run_graph_async(1, [x, w], timeout=30.0)
        np.testing.assert_array_equal(y.numpy(), x)
        st = s.statistics()
        assert (st.in_flight, st.waiting, st.completed) == (0, 0, 2), st


async def test_statistics_waiting_drops_when_a_waiter_gives_up():
    """``waiting`` counts requests waiting for a slot: one whose task timed out (or was cancelled) waits no more."""
    model, n = slow_chain(0.2)  # the first request holds the only slot throughout
    x = np.random.default_rng(5).standard_normal((n, n)).astype(np.float32)
    w = np.eye(n, dtype=np.float32)
    async with ga.Session(max_in_flight=1) as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        async with anyio.create_task_group() as tg:
            tg.start_soon(s.run_graph_async, 1, [x, w])
            await wait_until(lambda: s.statistics().in_flight == 1, "the first request to be submitted")
            for _ in range(3):
                with anyio.move_on_after(0.005):
                    await s.run_graph_async(1, [x, w])
            st = s.statistics()
            assert st.waiting == 0, st  # nobody is waiting: the three gave up


async def test_max_in_flight_bounds_concurrency():
    n_req, limit = 100, 4
    n = 256  # a run (~2 ms) outlasts a loop iteration however slow the build (ASan): the slots fill up
    w = (np.eye(n) * 0.5).astype(np.float32)
    xs = [np.full((n, n), i, np.float32) for i in range(n_req)]
    samples = {"max_in_flight": 0, "max_native": 0, "max_waiting": 0, "count": 0}
    results: dict = {}
    async with ga.Session(max_in_flight=limit) as s:
        s.add_graph(1, ga.Graph.from_onnx(chain_model(n, 2)))
        # Compiled first: the requests then take the free slots at once, all in one loop iteration. Without it they
        # pass the first compile's gate one per iteration, and on a slow build each run could end before the next
        # one starts, so the sampler never saw all the slots taken (seen once under ASan: max 3 of 4).
        s.compile_graph(1, [xs[0], w])
        finished = anyio.Event()

        async def sampler():
            while not finished.is_set():
                st = s.statistics()
                native = ga.live_counters()["pending_completions"]
                samples["max_in_flight"] = max(samples["max_in_flight"], st.in_flight)
                samples["max_waiting"] = max(samples["max_waiting"], st.waiting)
                samples["max_native"] = max(samples["max_native"], native)
                samples["count"] += 1
                await anyio.sleep(0)

        async def one(i):
            (y,) = await s.run_graph_async(1, [xs[i], w])
            results[i] = float(y.numpy()[0, 0])

        async with anyio.create_task_group() as outer:
            outer.start_soon(sampler)
            async with anyio.create_task_group() as tg:
                for i in range(n_req):
                    tg.start_soon(one, i)
            finished.set()
        st = s.statistics()
    assert samples["count"] > 10, samples
    assert samples["max_in_flight"] <= limit, samples
    assert samples["max_native"] <= limit, samples  # the bound holds in the runtime too
    assert samples["max_in_flight"] == limit, samples  # and the session does use its slots
    assert samples["max_waiting"] > 0, samples
    assert results == {i: i * 0.25 for i in range(n_req)}
    assert (st.completed, st.in_flight, st.waiting, st.pinned_bytes, st.max_in_flight) == (n_req, 0, 0, 0, limit)


async def test_two_sessions_on_one_loop_share_the_hub():
    a = np.ones((1, 16), np.float32)
    async with ga.Session() as s1, ga.Session(max_in_flight=2) as s2:
        s1.add_graph(1, ga.Graph.from_onnx(add_model()))
        s2.add_graph(1, ga.Graph.from_onnx(add_model()))
        got = []

        async def one(s, k):
            (c,) = await s.run_graph_async(1, [a, np.full((1, 16), k, np.float32)])
            got.append((k, float(c.numpy()[0, 0])))

        async with anyio.create_task_group() as tg:
            for k in range(40):
                tg.start_soon(one, s1 if k % 2 else s2, k)
        assert sorted(got) == [(k, k + 1.0) for k in range(40)]
        assert s1.statistics().completed == 20 and s2.statistics().completed == 20


def test_run_graph_async_outside_a_loop_is_a_clear_error():
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        coro = s.run_graph_async(1, [np.ones((1, 16), np.float32)] * 2)
        with pytest.raises(RuntimeError, match="event loop"):
            coro.send(None)
        coro.close()
        assert s.statistics().in_flight == 0


async def test_failure_while_completing_reaches_its_task_and_spares_the_batch(monkeypatch):
    """An exception while turning one completion into Tensors reaches that request's task; the other completions
    of the same drained batch are still delivered, and nothing stays pinned."""
    factory = geasync.tensor.TENSORS  # the output factory the hubs hand their completion queues
    original = factory.copy  # these outputs are small: copied into numpy arrays as they complete
    calls = {"n": 0}

    def flaky(*fields):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("injected failure while building outputs")
        return original(*fields)

    monkeypatch.setattr(factory, "copy", flaky)
    a = np.ones((1, 16), np.float32)
    ok, failed = [], []
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(add_model((1, 16))))

        async def one():
            try:
                await s.run_graph_async(1, [a, a])
                ok.append(1)
            except RuntimeError as exc:
                failed.append(str(exc))

        async with anyio.create_task_group() as tg:
            for _ in range(10):
                tg.start_soon(one)
        assert len(ok) == 9 and failed == ["injected failure while building outputs"]
        stats = s.statistics()
        assert stats.in_flight == 0 and stats.pinned_bytes == 0


@pytest.mark.parametrize("spin_us", ["0", "100000", "not-a-number", "-5"])
def test_model_thread_watch_setting_any_value_runs_correctly(spin_us, tmp_path):
    """GEASYNC_TWIN_SPIN_US only changes when the twin's model thread sleeps: off, its maximum and nonsense (which
    falls back to the default) all give correct results at 1 and at many requests in flight."""
    code = textwrap.dedent("""
        import asyncio, numpy as np, onnx
        from onnx import TensorProto, helper
        import geasync as ga
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])
        g = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "g", [x], [y])
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        async def main():
            async with ga.Session() as s:
                s.add_graph(1, ga.Graph.from_onnx(model.SerializeToString()))
                for i in range(50):
                    a = np.full((1, 16), i, np.float32)
                    (out,) = await s.run_graph_async(1, [a])
                    assert (out.numpy() == 2 * a).all()
                arrays = [np.full((1, 16), i, np.float32) for i in range(200)]
                outs = await asyncio.gather(*(s.run_graph_async(1, [a]) for a in arrays))
                assert all((o[0].numpy() == 2 * a).all() for o, a in zip(outs, arrays))
        asyncio.run(main())
        print("ok")
    """)
    env = {**os.environ, "GEASYNC_TWIN_SPIN_US": spin_us}
    # from a temporary directory: `python -c` puts the working directory first on sys.path
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
