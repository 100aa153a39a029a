"""Stream mode from async code: run_graph_with_stream_async enqueues, Stream.synchronize_async() awaits the stream
without blocking any thread, Stream.query() never blocks, Stream is an async context manager, and a cancelled
synchronize_async leaves the stream intact."""

from __future__ import annotations

import time

import anyio
import numpy as np
import pytest

import geasync as ga
from conftest import add_model, live
from asynctools import Ticker, slow_chain, wait_for_counters

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120, method="thread")]

# completion_queues: one per loop's hub, created lazily. allocators: GE keeps allocators in a process-wide map keyed
# by stream and geasync registers a default one per new stream (tests/test_leaks.py bounds that growth).
IGNORED_KEYS = ("completion_queues", "allocators")


async def until_query_true(stream: ga.Stream, timeout: float = 5.0) -> None:
    """query() right after synchronize_async() can still see geasync's own host function retiring (see
    test_query_true_right_after_synchronize_async); other tests wait that out so they check their own point."""
    deadline = time.monotonic() + timeout
    while not stream.query():
        assert time.monotonic() < deadline, "query() stayed False after synchronize_async()"
        await anyio.sleep(0.0005)


async def test_synchronize_async_then_outputs_are_correct():
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    bs = [np.full((1, 16), i, np.float32) for i in range(20)]
    baseline = live()
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        async with ga.Stream() as stream:
            outs = [s.run_graph_with_stream_async(1, stream, [a, b]) for b in bs]
            assert all(o[0].placement == "device" for o in outs)
            with anyio.fail_after(20):
                await stream.synchronize_async()
            await until_query_true(stream)
            for (c,), b in zip(outs, bs, strict=True):
                np.testing.assert_array_equal(c.to_host().numpy(), a + b)
            st = s.statistics()
            assert st.pinned_bytes == 0, st  # the stream passed every run: inputs released
            assert a.flags.writeable and all(b.flags.writeable for b in bs)
            del outs, c
    await wait_for_counters(baseline, ignore=IGNORED_KEYS)


async def test_inputs_pinned_and_frozen_until_the_stream_passes_the_run():
    model, n = slow_chain(0.05)
    x = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    w = np.eye(n, dtype=np.float32)
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        async with ga.Stream() as stream:
            (y,) = s.run_graph_with_stream_async(1, stream, [x, w])
            assert not x.flags.writeable and not w.flags.writeable
            with pytest.raises(ValueError):
                x[0, 0] = 1.0
            assert s.statistics().pinned_bytes == x.nbytes + w.nbytes
            with anyio.fail_after(20):
                await stream.synchronize_async()
            assert x.flags.writeable and w.flags.writeable
            assert s.statistics().pinned_bytes == 0
            np.testing.assert_array_equal(y.to_host().numpy(), x)
            del y


async def test_query_transitions():
    model, n = slow_chain(0.05)
    x = np.ones((n, n), np.float32)
    w = np.eye(n, dtype=np.float32)
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        async with ga.Stream() as stream:
            assert stream.query() is True  # nothing enqueued yet
            # each enqueue below starts its work 0.5 s late: the query right after it sees the stream busy however
            # long a loaded machine stalls between the two (~50-150 ms of work alone was not always enough)
            ga.twin.inject_fault(s, 1, "delay_run", nth=1, delay=0.5)
            outs = [s.run_graph_with_stream_async(1, stream, [x, w]) for _ in range(3)]  # ~150 ms of work
            busy = stream.query()  # True would mean it waited for the work
            assert busy is False, "the stream reported done right after ~150 ms of work was enqueued"
            with anyio.fail_after(20):
                await stream.synchronize_async()
            await until_query_true(stream)
            assert stream.query() is True  # stays done without new work
            # Polling query() from the loop also sees the transition.
            ga.twin.inject_fault(s, 1, "delay_run", nth=1, delay=0.5)
            outs += [s.run_graph_with_stream_async(1, stream, [x, w])]
            seen = [stream.query()]
            deadline = time.monotonic() + 20
            while not seen[-1]:
                assert time.monotonic() < deadline, "query() never became True"
                await anyio.sleep(0.005)
                seen.append(stream.query())
            assert seen[0] is False and seen[-1] is True
            assert s.statistics().pinned_bytes == 0  # query() True also releases the pins
            for (y,) in outs:
                np.testing.assert_array_equal(y.to_host().numpy(), x)
            del outs, y


async def test_query_true_right_after_synchronize_async():
    """Once ``await synchronize_async()`` returns, every task the caller enqueued has finished, so a query() at that
    point must say the stream is done: the host function geasync enqueued to wake the loop is its own business."""
    model, n = slow_chain(0.03)
    x = np.ones((n, n), np.float32)
    w = np.eye(n, dtype=np.float32)
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        async with ga.Stream() as stream:
            answers = []
            for _ in range(10):
                outs = s.run_graph_with_stream_async(1, stream, [x, w])
                with anyio.fail_after(20):
                    await stream.synchronize_async()
                answers.append(stream.query())
                await until_query_true(stream)
            del outs
    assert answers == [True] * 10, f"query() right after synchronize_async(): {answers}"


async def test_async_with_stream_waits_for_queued_work_and_closes():
    model, n = slow_chain(0.03)
    x = np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)
    w = np.eye(n, dtype=np.float32)
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        async with ga.Stream() as stream:
            outs = [s.run_graph_with_stream_async(1, stream, [x, w]) for _ in range(3)]
        assert stream.closed
        with pytest.raises(ga.SessionClosedError):
            stream.query()
        assert s.statistics().pinned_bytes == 0
        assert x.flags.writeable
        for (y,) in outs:
            np.testing.assert_array_equal(y.to_host().numpy(), x)
        del outs, y


async def test_async_with_stream_does_not_block_the_loop():
    model, n = slow_chain(0.05)
    x = np.ones((n, n), np.float32)
    w = np.eye(n, dtype=np.float32)
    ticker = Ticker(0.002)
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker.run)
            t0 = time.perf_counter()
            async with ga.Stream() as stream:
                outs = [s.run_graph_with_stream_async(1, stream, [x, w]) for _ in range(4)]  # ~200 ms
            elapsed = time.perf_counter() - t0
            ticker.stop()
        del outs
    # Leaving `async with Stream` waited for ~200 ms of work on the loop, not by blocking it.
    assert ticker.max_gap < max(0.1, elapsed / 2), (ticker.max_gap, elapsed)
    assert ticker.ticks >= 5, (ticker.ticks, elapsed)


async def test_cancelled_synchronize_async_does_not_break_the_stream():
    model, n = slow_chain(0.03)
    x = np.random.default_rng(2).standard_normal((n, n)).astype(np.float32)
    w = np.eye(n, dtype=np.float32)
    baseline = live()
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        async with ga.Stream() as stream:
            outs = [s.run_graph_with_stream_async(1, stream, [x, w]) for _ in range(3)]
            cancelled = 0
            for delay in (0.0, 0.001, 0.005):
                with anyio.move_on_after(delay) as scope:
                    await stream.synchronize_async()
                cancelled += scope.cancelled_caught
            assert cancelled >= 1, "no synchronize_async was cancelled: the test proves nothing"
            # The stream keeps working: more runs, a full synchronize, correct outputs.
            outs += [s.run_graph_with_stream_async(1, stream, [x, w]) for _ in range(2)]
            with anyio.fail_after(20):
                await stream.synchronize_async()
            await until_query_true(stream)
            for (y,) in outs:
                np.testing.assert_array_equal(y.to_host().numpy(), x)
            # The cancelled waits' host functions have all fired and were drained.
            deadline = time.monotonic() + 20
            while ga.live_counters()["pending_completions"]:
                assert time.monotonic() < deadline, ga.live_counters()
                await anyio.sleep(0.005)
            del outs, y
    await wait_for_counters(baseline, ignore=IGNORED_KEYS)


async def test_synchronize_async_concurrent_waiters():
    """Several tasks awaiting the same stream all wake when it reaches their point."""
    model, n = slow_chain(0.02)
    x = np.ones((n, n), np.float32)
    w = np.eye(n, dtype=np.float32)
    woke = []
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        async with ga.Stream() as stream:
            outs = [s.run_graph_with_stream_async(1, stream, [x, w]) for _ in range(3)]

            async def waiter(i):
                await stream.synchronize_async()
                woke.append(i)

            with anyio.fail_after(20):
                async with anyio.create_task_group() as tg:
                    for i in range(10):
                        tg.start_soon(waiter, i)
            assert sorted(woke) == list(range(10))
            await until_query_true(stream)
            del outs


async def test_synchronize_async_on_closed_stream_is_a_clear_error():
    stream = ga.Stream()
    stream.close()
    with pytest.raises(ga.SessionClosedError, match="stream is closed"):
        await stream.synchronize_async()


async def test_synchronize_async_returns_when_another_task_closes_the_stream_meanwhile():
    """close() waits for the queued work, so a task awaiting synchronize_async meanwhile has its wait fulfilled: it
    returns normally (it queried the destroyed stream and raised ACL_ERROR_INVALID_PARAM, a use of a destroyed
    handle on ACL)."""
    a = np.ones((1, 16), np.float32)
    outcome = []
    with ga.Session() as s:
        s.add_graph(2, ga.Graph.from_onnx(add_model()))
        stream = ga.Stream()
        ga.twin.inject_fault(s, 2, "delay_run", nth=1, delay=0.05)
        outs = s.run_graph_with_stream_async(2, stream, [a, a])

        async def waiter():
            try:
                await stream.synchronize_async()
                outcome.append("returned")
            except Exception as exc:  # noqa: BLE001
                outcome.append(repr(exc))

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(waiter)
                await anyio.sleep(0.01)
                stream.close()  # blocks the loop until the stream's work is done: fine here
        assert outcome == ["returned"], outcome
        assert float(outs[0].to_host().numpy()[0, 0]) == 2.0


async def test_two_streams_independent():
    model, n = slow_chain(0.03)
    x = np.ones((n, n), np.float32)
    w = np.eye(n, dtype=np.float32)
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        s.add_graph(2, ga.Graph.from_onnx(add_model()))
        async with ga.Stream() as slow, ga.Stream() as fast:
            slow_outs = [s.run_graph_with_stream_async(1, slow, [x, w]) for _ in range(4)]
            (c,) = s.run_graph_with_stream_async(2, fast, [a, a])
            with anyio.fail_after(20):
                await fast.synchronize_async()
            np.testing.assert_array_equal(c.to_host().numpy(), 2 * a)
            with anyio.fail_after(20):
                await slow.synchronize_async()
            await until_query_true(slow)
            await until_query_true(fast)
            del slow_outs, c


async def test_async_with_stream_exited_by_cancellation_does_not_block_the_loop():
    """Leaving `async with Stream` because the task was cancelled must not block the loop while the stream drains
    (the wait for queued work belongs on the loop, shielded, not in a blocking destroy)."""
    model, n = slow_chain(0.1)
    x = np.ones((n, n), np.float32)
    w = np.eye(n, dtype=np.float32)
    ticker = Ticker(0.002)
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker.run)
            with anyio.move_on_after(0.02):
                async with ga.Stream() as stream:
                    outs = [s.run_graph_with_stream_async(1, stream, [x, w]) for _ in range(3)]  # ~300 ms
                    await anyio.sleep(10)
            assert stream.closed
            ticker.stop()
        del outs
    # a blocking destroy would hold the loop for the ~0.28 s of queued runs left (more on a busy machine, where the
    # runs stretch too); 0.2 s leaves room for one scheduling hiccup of a shared core
    assert ticker.max_gap < 0.2, f"the loop was blocked for {ticker.max_gap:.3f} s while the cancelled stream drained"
