"""Session.statistics() on asyncio, uvloop and trio: it adds up (submitted = completed + failed + cancelled + in
flight + waiting) over every run mode and every way a run ends; requests parked on a dynamic graph's bound are
waiting; lost callbacks are counted abandoned (and logged); per-graph counts, latency histogram, as_dict; the
Prometheus collector."""

from __future__ import annotations

import json
import logging

import anyio
import numpy as np
import pytest

import geasync as ga
from conftest import TensorProto, add_model, helper, make_mlp, make_model
from asynctools import slow_chain, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120, method="thread")]

A = np.arange(16, dtype=np.float32).reshape(1, 16)


def assert_adds_up(st) -> None:
    assert st.submitted == st.completed + st.failed + st.cancelled + st.in_flight + st.waiting, st


def dyn_add():
    return make_model([helper.make_node("Add", ["a", "b"], ["c"])],
                      [("a", TensorProto.FLOAT, ["N", 16]), ("b", TensorProto.FLOAT, ["N", 16])],
                      [("c", TensorProto.FLOAT, ["N", 16])])


async def test_every_mode_and_outcome_adds_up(anyio_backend):
    async with ga.Session(max_in_flight=2) as s, ga.Stream() as stream:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))  # async
        s.add_graph(2, ga.Graph.from_onnx(add_model()))  # sync
        s.add_graph(3, ga.Graph.from_onnx(add_model()))  # in a thread
        s.add_graph(4, ga.Graph.from_onnx(add_model()))  # stream mode
        for _ in range(3):
            await s.run_graph_async(1, [A, A])
        with pytest.raises(ga.InputError):  # refused at the call (the graph is [1, 16]): never submitted
            await s.run_graph_async(1, [np.zeros((2, 16), np.float32), A])
        with ga.twin.fault(s, 1, "fail_run", nth=1):
            with pytest.raises(ga.GeError):
                await s.run_graph_async(1, [A, A])
        with ga.twin.fault(s, 1, "delay_run", nth=1, delay=0.3):
            with pytest.raises(TimeoutError):  # gave up mid-flight
                await s.run_graph_async(1, [A, A], timeout=0.05)
            await wait_until(lambda: s.statistics().in_flight == 0, "the abandoned run to complete")
        s.run_graph(2, [A, A])
        await s.run_graph_in_thread(3, [A, A])
        s.run_graph_with_stream_async(4, stream, [A, A])
        stream.synchronize()
        st = s.statistics()
        assert_adds_up(st)
        g = st.graphs
        assert (g[1].submitted, g[1].completed, g[1].failed, g[1].cancelled) == (5, 3, 1, 1), g[1]
        assert (g[2].completed, g[2].failed) == (1, 0), g[2]
        assert (g[3].completed, g[4].completed) == (1, 1), (g[3], g[4])
        assert (st.in_flight, st.waiting, st.submitted) == (0, 0, 8), st
        assert g[1].latency.count == 3 and st.latency.count == 6
        assert st.oldest_age is None


async def test_runs_the_runtime_refuses_at_submit_are_failed(anyio_backend):
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(dyn_add()))
        s.add_graph(2, ga.Graph.from_onnx(add_model()))
        ga.twin.inject_fault(s, 1, "fail_prerun")  # GE's pre-run stage fails graph 1's job and stops the queue
        with pytest.raises(ga.GeError):
            await s.run_graph_async(1, [np.ones((2, 16), np.float32), np.ones((2, 16), np.float32)])
        with pytest.raises(ga.SessionBrokenError):  # GE now refuses every RunGraphAsync submit of the session
            await s.run_graph_async(2, [A, A])
        st = s.statistics()
        assert (st.graphs[1].failed, st.graphs[2].failed, st.graphs[2].submitted) == (1, 1, 1), st
        assert_adds_up(st)


async def test_waiting_for_a_slot_and_giving_up_there_add_up(anyio_backend):
    model, n = slow_chain(0.2)
    x = np.ones((n, n), np.float32)
    w = np.eye(n, dtype=np.float32)
    async with ga.Session(max_in_flight=1) as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        async with anyio.create_task_group() as tg:
            tg.start_soon(s.run_graph_async, 1, [x, w])
            await wait_until(lambda: s.statistics().in_flight == 1, "the first run in flight")
            for _ in range(3):
                tg.start_soon(s.run_graph_async, 1, [x, w])
            await wait_until(lambda: s.statistics().waiting == 3, "three waiting")
            st = s.statistics()
            assert_adds_up(st)
            assert st.oldest_age is not None and st.oldest_age > 0
            with anyio.move_on_after(0.01):
                await s.run_graph_async(1, [x, w])  # gives up while waiting for a slot
            st = s.statistics()
            assert st.cancelled == 1 and st.waiting == 3, st
            assert_adds_up(st)
        st = s.statistics()
        assert (st.completed, st.cancelled, st.submitted) == (4, 1, 5), st


async def test_requests_parked_on_the_dynamic_graph_bound_are_waiting(anyio_backend):
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(dyn_add()))
        s.compile_graph(1)
        ga.twin.inject_fault(s, 1, "stall_callback", nth=0)
        async with anyio.create_task_group() as tg:
            for _ in range(40):
                tg.start_soon(s.run_graph_async, 1, [A, A])
            await wait_until(lambda: s.statistics().in_flight == 32, "32 in flight")
            await wait_until(lambda: s.statistics().waiting == 8, "8 waiting")
            st = s.statistics()
            assert st.submitted == 40
            assert_adds_up(st)
            ga.twin.clear_faults(s, 1)
        st = s.statistics()
        assert (st.completed, st.in_flight, st.waiting) == (40, 0, 0), st


async def test_timed_out_requests_are_cancelled_not_completed(anyio_backend):
    model, n = slow_chain(0.01)
    x = np.ones((n, n), np.float32)
    w = np.eye(n, dtype=np.float32)
    delivered = 0
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))

        async def one(timeout):
            nonlocal delivered
            try:
                await s.run_graph_async(1, [x, w], timeout=timeout)
                delivered += 1
            except TimeoutError:
                pass

        async with anyio.create_task_group() as tg:
            for i in range(30):  # GE runs a graph's jobs in order: the last 15 time out queued behind the first
                tg.start_soon(one, 60.0 if i < 15 else 0.02)
                await anyio.sleep(0)
        await wait_until(lambda: s.statistics().in_flight == 0, "every run to complete")
        st = s.statistics()
        assert delivered == 15
        assert st.completed == delivered, (st, delivered)
        assert st.cancelled == 30 - delivered, st
        assert_adds_up(st)


async def test_lost_callbacks_are_counted_abandoned_and_logged(anyio_backend, caplog):
    async with ga.Session(abandon_after=0.05) as s:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        ga.twin.inject_fault(s, 1, "drop_callback", nth=1)
        with pytest.raises(TimeoutError):
            await s.run_graph_async(1, [A, A], timeout=0.1)
        with caplog.at_level(logging.WARNING, logger="geasync"):
            st = s.statistics()
        assert st.abandoned == 1 and st.graphs[1].abandoned == 1 and st.in_flight == 1, st
        assert st.oldest_age >= 0.05
        assert any("abandoned" in r.getMessage() for r in caplog.records), caplog.records
        assert_adds_up(st)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="geasync"):
            s.statistics()
        assert not caplog.records  # reported once
        (y,) = await s.run_graph_async(1, [A, A])
        assert s.statistics().abandoned == 1


async def test_as_dict_is_plain_data(anyio_backend):
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(make_mlp()))
        await s.run_graph_async(1, [np.zeros((1, 784), np.float32)])
        d = s.statistics().as_dict()
        text = json.dumps(d)
        assert d["completed"] == 1 and d["graphs"][1]["latency"]["count"] == 1, text
        assert sum(d["latency"]["counts"]) == 1


def test_prometheus_collector_exposes_the_statistics():
    prometheus_client = pytest.importorskip("prometheus_client")
    from geasync.prometheus import GeasyncCollector

    with ga.Session() as s:
        s.add_graph(5, ga.Graph.from_onnx(add_model()))
        for _ in range(3):
            s.run_graph(5, [A, A])
        registry = prometheus_client.CollectorRegistry()
        registry.register(GeasyncCollector(s, labels={"model": "add"}))
        text = prometheus_client.generate_latest(registry).decode()
        assert 'geasync_runs_completed_total{graph="5",model="add"} 3.0' in text, text
        assert 'geasync_run_latency_seconds_count{graph="5",model="add"} 3.0' in text, text
        assert "geasync_runs_in_flight" in text and "geasync_runs_abandoned" in text
        assert registry.get_sample_value("geasync_runs_submitted_total", {"graph": "5", "model": "add"}) == 3
