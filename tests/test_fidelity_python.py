"""How geasync shields users from GE's sharp edges, shown on the twin (issue: GE fidelity).

Each test uses the twin-only fault controls (geasync.twin) to produce, deterministically, a situation a service
meets on Ascend: a callback that never comes, a stopped async queue, GE finalised under load, queues that would
block the event loop, concurrent synchronous runs, unaligned device buffers.
"""

from __future__ import annotations

import threading
import time

import anyio
import numpy as np
import pytest

import geasync as ga
from asynctools import Ticker, wait_for_counters, wait_until
from conftest import TensorProto, add_model, helper, live, make_model

pytestmark = pytest.mark.anyio

A = np.ones((1, 16), np.float32)
DYN_A = np.ones((2, 4), np.float32)


def add_graph() -> ga.Graph:
    return ga.Graph.from_onnx(add_model((1, 16)))


def dyn_graph() -> ga.Graph:
    return ga.Graph.from_onnx(make_model(
        [helper.make_node("Add", ["a", "b"], ["c"])],
        [("a", TensorProto.FLOAT, ["N", 4]), ("b", TensorProto.FLOAT, ["N", 4])],
        [("c", TensorProto.FLOAT, ["N", 4])]))


# --- a callback that never comes -------------------------------------------------------------------------------

async def test_dropped_callback_times_out_and_close_releases_it(anyio_backend):
    async with ga.Session() as warm:  # the loop's completion hub (one native queue per loop) exists from here on
        warm.add_graph(1, add_graph())
        await warm.run_graph_async(1, [A, A])
    before = live()
    async with ga.Session() as s:
        s.add_graph(1, add_graph())
        s.compile_graph(1)  # else a slow first compile can outlast the timeout: the run never reaches the runtime
        ga.twin.inject_fault(s, 1, "drop_callback", nth=1)
        with pytest.raises(TimeoutError):
            await s.run_graph_async(1, [A, A], timeout=0.2)
        stats = s.statistics()
        assert stats.in_flight == 1 and stats.pinned_bytes == 2 * A.nbytes  # still pinned: GE may still read it
        (y,) = await s.run_graph_async(1, [A, A], timeout=5)  # the session keeps working
        np.testing.assert_array_equal(y.numpy(), A + A)
        del y
    # closing the session abandoned the dropped job: its pins are released, nothing leaks
    assert s.statistics().in_flight == 0 and s.statistics().pinned_bytes == 0
    await wait_for_counters(before)  # the last output's Tensor can outlive `del y` by a loop turn (its future)


async def test_close_with_pending_requests_raises_session_broken(anyio_backend):
    s = ga.Session()
    s.add_graph(1, add_graph())
    ga.twin.inject_fault(s, 1, "drop_callback", nth=0)  # no run will ever call back
    errors = []

    async def one():
        try:
            await s.run_graph_async(1, [A, A])
        except ga.SessionBrokenError as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(one)
        # all five reached GE's model thread, which dropped their callbacks
        await wait_until(lambda: ga.twin.fault_runs(s, 1) == 5, "five dropped runs")
        s.close()
    assert len(errors) == 5
    assert "create a new Session" in str(errors[0]) and "closed" in str(errors[0])
    with pytest.raises(ga.SessionClosedError):
        await s.run_graph_async(1, [A, A])


async def test_malformed_request_fails_alone_and_the_session_keeps_working(anyio_backend):
    # GE would compile the graph from this request's shapes, fail, and stop the session's async queue for good;
    # geasync compiled it from its declared [N,4] inputs first, so only this request fails.
    async with ga.Session() as s:
        s.add_graph(1, dyn_graph())
        s.add_graph(2, add_graph())
        with pytest.raises(ga.GeError) as first:  # [2,4] + [3,4] cannot broadcast
            await s.run_graph_async(1, [np.ones((2, 4), np.float32), np.ones((3, 4), np.float32)])
        assert not isinstance(first.value, ga.SessionBrokenError)
        (y,) = await s.run_graph_async(2, [A, A])
        np.testing.assert_array_equal(y.numpy(), A + A)
        (z,) = await s.run_graph_async(1, [DYN_A, DYN_A])
        np.testing.assert_array_equal(z.numpy(), DYN_A + DYN_A)


async def test_pre_run_failure_stops_queue_then_session_broken(anyio_backend):
    async with ga.Session() as s:
        s.add_graph(1, add_graph())
        s.add_graph(2, add_graph())
        ga.twin.inject_fault(s, 1, "fail_prerun")
        with pytest.raises(ga.GeError) as first:
            await s.run_graph_async(1, [A, A])
        assert not isinstance(first.value, ga.SessionBrokenError)
        with pytest.raises(ga.SessionBrokenError) as later:  # GE now refuses every RunGraphAsync of the session
            await s.run_graph_async(2, [A, A])
        assert "create a new Session" in str(later.value)
        assert later.value.status == 0xFFFFFFFF
    async with ga.Session() as fresh:  # what the message says to do works
        fresh.add_graph(2, add_graph())
        await fresh.run_graph_async(2, [A, A])


async def test_a_submit_right_after_a_pre_run_failure_is_refused_not_left_waiting(anyio_backend):
    # GE calls the failing request back and only then stops its queue: a request submitted in between (here, right
    # after the failure reached the caller) is accepted and never run. geasync must refuse it, not wait forever.
    for _ in range(300):  # the window is narrow: before the fix about 1 attempt in 100 hung
        with anyio.fail_after(10):
            async with ga.Session() as s:
                s.add_graph(1, add_graph())
                s.add_graph(2, add_graph())
                ga.twin.inject_fault(s, 1, "fail_prerun")
                with pytest.raises(ga.GeError):
                    await s.run_graph_async(1, [A, A])
                with pytest.raises(ga.SessionBrokenError, match="create a new Session"):
                    await s.run_graph_async(2, [A, A])


async def test_requests_queued_behind_a_pre_run_failure_fail_promptly(anyio_backend):
    # GE stops the async queue at a pre-run failure and never calls back the jobs queued behind it: geasync fails
    # them at once with SessionBrokenError naming the failure, instead of leaving them to wait forever.
    async with ga.Session() as s:
        s.add_graph(1, add_graph())
        s.add_graph(2, add_graph())
        ga.twin.inject_fault(s, 1, "stall_compile")  # the failing request is held in GE's pre-run stage ...
        ga.twin.inject_fault(s, 1, "fail_prerun")
        results: dict[int, BaseException] = {}

        async def one(i, graph_id, inputs):
            try:
                await s.run_graph_async(graph_id, inputs)
            except ga.GeError as exc:
                results[i] = exc

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(one, 0, 1, [A, A])
                await wait_until(lambda: s.statistics().in_flight == 1, "the failing request is with GE")
                for i in (1, 2, 3):  # ... while three good ones queue behind it
                    tg.start_soon(one, i, 2, [A, A])
                await wait_until(lambda: s.statistics().in_flight == 4, "four requests with GE")
                ga.twin.release_stalled(s, 1)
        assert sorted(results) == [0, 1, 2, 3]
        assert not isinstance(results[0], ga.SessionBrokenError)
        for i in (1, 2, 3):
            assert isinstance(results[i], ga.SessionBrokenError), results[i]
            assert "failed before running" in str(results[i]) and "fault injected" in str(results[i])
        assert s.statistics().in_flight == 0
        with pytest.raises(ga.SessionBrokenError):  # and GE refuses the session's later requests
            await s.run_graph_async(2, [A, A])


async def test_finalize_under_load_breaks_pending_and_later_requests(anyio_backend):
    s = ga.Session()
    try:
        s.add_graph(1, add_graph())
        ga.twin.inject_fault(s, 1, "drop_callback", nth=0)
        errors, done = [], []

        async def one():
            try:
                await s.run_graph_async(1, [A, A])
                done.append(1)
            except ga.SessionBrokenError as exc:
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(one)
            # all three reached GE's model thread, which dropped their callbacks
            await wait_until(lambda: ga.twin.fault_runs(s, 1) == 3, "three dropped runs")
            ga.finalize()
        assert len(errors) == 3 and not done  # nothing hangs; the dropped jobs fail clearly
        assert "GEFinalizeV2" in str(errors[0]) or "finalized" in str(errors[0])
        with pytest.raises(ga.SessionBrokenError, match="finalized"):
            await s.run_graph_async(1, [A, A])
        assert "unusable" in repr(s)  # repr never raises (an unclosed session's ResourceWarning uses it)
    finally:
        s.close()
    async with ga.Session() as fresh:  # GE is initialised again for new sessions
        fresh.add_graph(1, add_graph())
        await fresh.run_graph_async(1, [A, A])


# --- queues that would block the event loop -------------------------------------------------------------------------

async def test_in_flight_bound_keeps_loop_out_of_full_compile_queue(anyio_backend):
    async with ga.Session(max_in_flight=64) as s:
        s.add_graph(1, add_graph())
        ga.twin.inject_fault(s, 1, "stall_compile")
        ticker = Ticker()
        done = []

        async def one():
            await s.run_graph_async(1, [A, A])
            done.append(1)

        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker.run)
            for _ in range(100):
                tg.start_soon(one)
            await wait_until(lambda: s.statistics().waiting == 36, "s.statistics().waiting == 36")
            assert s.statistics().in_flight == 64  # 64 with GE (stalled), 36 parked in geasync, none blocking
            await anyio.sleep(0.1)
            ga.twin.release_stalled(s, 1)
            await wait_until(lambda: len(done) == 100, "len(done) == 100")
            ticker.stop()
        assert ticker.max_gap < 0.5


async def test_dynamic_shape_graph_is_bounded_to_32_pending(anyio_backend):
    async with ga.Session() as s:
        s.add_graph(1, dyn_graph())
        s.compile_graph(1)  # Data shape [-1, 4]: GE keeps at most 32 callbacks pending and would block beyond
        assert not s.get_compiled_graph_summary(1).is_static
        ga.twin.inject_fault(s, 1, "stall_callback", nth=0)
        ticker = Ticker()
        done = []

        async def one():
            await s.run_graph_async(1, [DYN_A, DYN_A])
            done.append(1)

        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker.run)
            for _ in range(40):
                tg.start_soon(one)
            await wait_until(lambda: s.statistics().in_flight == 32, "s.statistics().in_flight == 32")
            await anyio.sleep(0.2)
            assert s.statistics().in_flight == 32  # the other 8 wait in geasync, the loop keeps running
            ga.twin.clear_faults(s, 1)
            await wait_until(lambda: len(done) == 40, "len(done) == 40")
            ticker.stop()
        assert ticker.max_gap < 0.5


async def test_other_graphs_keep_running_while_a_dynamic_graph_has_32_pending(anyio_backend):
    # GE waits for a dynamic-shape graph's 33rd pending callback on the session's executor thread, which would stall
    # every other graph of the session; geasync keeps the 33rd in geasync, so the other graphs go on.
    async with ga.Session() as s:
        s.add_graph(1, dyn_graph())
        s.compile_graph(1)
        s.add_graph(2, add_graph())
        ga.twin.inject_fault(s, 1, "stall_callback", nth=0)
        done = []

        async def one():
            await s.run_graph_async(1, [DYN_A, DYN_A])
            done.append(1)

        async with anyio.create_task_group() as tg:
            for _ in range(34):
                tg.start_soon(one)
            await wait_until(lambda: s.statistics().in_flight == 32, "32 requests of graph 1 with GE")
            with anyio.fail_after(5):
                (y,) = await s.run_graph_async(2, [A, A])
            np.testing.assert_array_equal(y.numpy(), A + A)
            assert not done
            ga.twin.clear_faults(s, 1)
            await wait_until(lambda: len(done) == 34, "len(done) == 34")


# --- synchronous runs from many threads -----------------------------------------------------------------------------

def test_concurrent_run_graph_never_sees_ge_sess_already_running():
    with ga.Session() as s1, ga.Session() as s2:
        s1.add_graph(1, add_graph())
        s2.add_graph(1, add_graph())
        for s in (s1, s2):
            ga.twin.inject_fault(s, 1, "delay_run", nth=0, delay=0.01)
        errors = []

        def worker(s):
            try:
                for _ in range(10):
                    (y,) = s.run_graph(1, [A, A])
                    assert y.numpy()[0, 0] == 2.0
            except Exception as exc:  # noqa: BLE001 - collected and asserted below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(s,)) for s in (s1, s2, s1, s2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []


async def test_run_graph_in_thread_alongside_sync_runs(anyio_backend):
    with ga.Session() as s:
        s.add_graph(1, add_graph())
        ga.twin.inject_fault(s, 1, "delay_run", nth=0, delay=0.005)
        results = []

        async def in_thread():
            (y,) = await s.run_graph_in_thread(1, [A, A])
            results.append(float(y.numpy()[0, 0]))

        async with anyio.create_task_group() as tg:
            for _ in range(8):
                tg.start_soon(in_thread)
            tg.start_soon(anyio.to_thread.run_sync,
                          lambda: results.append(float(s.run_graph(1, [A, A])[0].numpy()[0, 0])))
        assert results == [2.0] * 9


# --- device memory ----------------------------------------------------------------------------------------------------

def test_geasync_device_tensors_are_32_byte_aligned():
    for n in (1, 3, 17, 1000):
        t = ga.Tensor.from_numpy(np.ones(n, np.float32)).to_device()
        assert t.address % 32 == 0


def test_unaligned_user_device_buffer_is_refused_before_the_runtime():
    alloc = ga.DeviceAllocator()
    address = alloc.malloc(256)
    try:
        with pytest.raises(ValueError, match="32-byte aligned"):
            ga.Tensor.from_device(address + 16, (1, 16), np.float32)
        aligned = ga.Tensor.from_device(address, (1, 16), np.float32)
        with ga.Session() as s, ga.Stream() as st:
            s.add_graph(1, add_graph())
            (y,) = s.run_graph_with_stream_async(1, st, [aligned, aligned])
            st.synchronize()
            assert y.to_host().numpy().shape == (1, 16)
            del y
    finally:
        alloc.free(address)


def test_a_device_tensor_whose_size_overflows_is_refused():
    """A shape whose byte count passes 2^63 is refused by Tensor.from_device (its nbytes wrapped to 0 in int64:
    a tensor of 2^64 elements that claimed 0 bytes), and a large valid one keeps its exact size."""
    t = ga.Tensor.from_numpy(np.ones(8, np.float32)).to_device()
    with pytest.raises(ValueError, match=r"Tensor\.from_device: shape \(4294967296, 4294967296\) of float32"):
        ga.Tensor.from_device(t.address, (2**32, 2**32), np.float32, owner=t)
    assert ga.Tensor.from_device(t.address, (2**31, 2**30), np.float32, owner=t).nbytes == 2**63


# --- the fault controls themselves ------------------------------------------------------------------------------------

def test_fail_run_hits_exactly_the_nth_run():
    with ga.Session() as s:
        s.add_graph(1, add_graph())
        ga.twin.inject_fault(s, 1, "fail_run", nth=3, status=ga.twin.INTERNAL_ERROR)
        outcomes = []
        for _ in range(5):
            try:
                s.run_graph(1, [A, A])
                outcomes.append("ok")
            except ga.GeError as exc:
                outcomes.append(exc.status)
        assert outcomes == ["ok", "ok", 0xFFFFFFFF, "ok", "ok"]  # RunGraph returns large codes as FAILED
        assert ga.twin.fault_runs(s, 1) == 5


async def test_async_fault_status_reaches_the_task_raw(anyio_backend):
    async with ga.Session() as s:
        s.add_graph(1, add_graph())
        ga.twin.inject_fault(s, 1, "fail_run", nth=2, status=ga.twin.PARAM_INVALID)
        ga.twin.inject_fault(s, 1, "fail_alloc", nth=3)
        await s.run_graph_async(1, [A, A])
        with pytest.raises(ga.GeError) as e2:
            await s.run_graph_async(1, [A, A])
        assert e2.value.status == ga.twin.PARAM_INVALID and "fault injected" in e2.value.error_message
        with pytest.raises(ga.GeError) as e3:
            await s.run_graph_async(1, [A, A])
        assert e3.value.status == 1343225856  # MEMALLOC_FAILED
        await s.run_graph_async(1, [A, A])


async def test_delay_and_stall(anyio_backend):
    async with ga.Session() as s:
        s.add_graph(1, add_graph())
        ga.twin.inject_fault(s, 1, "delay_run", nth=1, delay=0.2)
        t0 = time.perf_counter()
        await s.run_graph_async(1, [A, A])
        assert time.perf_counter() - t0 >= 0.19
        ga.twin.clear_faults(s, 1)
        ga.twin.inject_fault(s, 1, "stall_callback", nth=1)
        results = []

        async def one():
            results.append(await s.run_graph_async(1, [A, A]))

        async with anyio.create_task_group() as tg:
            tg.start_soon(one)
            await anyio.sleep(0.2)
            assert results == [] and s.statistics().in_flight == 1
            ga.twin.release_stalled(s, 1)
        assert len(results) == 1


def test_faults_from_session_option():
    spec = f"graph_id=1,kind=fail_run,nth=2,status={ga.twin.INTERNAL_ERROR}"
    with ga.Session({"geasync.twin.faults": spec}) as s:
        s.add_graph(1, add_graph())
        s.run_graph(1, [A, A])
        with pytest.raises(ga.GeError, match="fault injected"):
            s.run_graph(1, [A, A])
    with pytest.raises(ValueError, match="geasync.twin.faults"):
        ga.Session({"geasync.twin.faults": "graph_id=1,kind=fail_run,bogus=1"})


def test_fault_arguments_are_checked():
    with ga.Session() as s:
        with pytest.raises(ValueError, match="kind"):
            ga.twin.inject_fault(s, 1, "explode")
        with pytest.raises(ValueError, match="nth"):
            ga.twin.inject_fault(s, 1, "fail_run", nth=-1)
        with pytest.raises(TypeError):
            ga.twin.inject_fault("not a session", 1, "fail_run")
