"""Session.statistics() on asyncio, uvloop and trio: it adds up (submitted = completed + failed + cancelled + in
flight + waiting) over every run mode and every way a run ends; requests parked on a dynamic graph's bound are
waiting, with the longest wait; lost callbacks are counted abandoned and logged by the loop's own check, once each;
slow runs and a stopped async queue are logged; per-graph counts, latency histogram, as_dict; the Prometheus
collector."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import re
import threading
import time
import weakref

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
        p50, p99 = st.latency.quantile(0.5), st.latency.quantile(0.99)
        assert p50 is not None and p99 is not None and 0 < p50 <= p99
        for q in (1.5, -0.1, 99, "0.5", True):
            with pytest.raises(ValueError, match=r"quantile: q must be a number in \[0, 1\]"):
                st.latency.quantile(q)


async def test_statistics_read_from_another_thread_add_up(anyio_backend):
    """A metrics thread (a Prometheus scrape, a health check) reads statistics() while the loop runs requests: every
    reading adds up. The loop counts its runs without a lock, one step changing two counters (submitted, then in
    flight; completed, then no longer in flight): a reading taken between the two did not add up."""
    async with ga.Session(max_in_flight=4) as s:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        await s.run_graph_async(1, [A, A])
        with scraping(s) as (readings, bad):
            for _ in range(60):
                async with anyio.create_task_group() as tg:
                    for _ in range(50):
                        tg.start_soon(s.run_graph_async, 1, [A, A])
        assert readings[0] > 100
        assert not bad, f"{len(bad)} of {readings[0]} readings did not add up, e.g. {bad[0]}"


@contextlib.contextmanager
def scraping(session, pause=0.0):
    """A metrics thread reading session.statistics() meanwhile: (readings, the ones that did not add up)."""
    readings, bad = [0], []
    stop = threading.Event()

    def scrape() -> None:
        while not stop.is_set():
            st = session.statistics()
            readings[0] += 1
            if st.submitted != st.completed + st.failed + st.cancelled + st.in_flight + st.waiting:
                bad.append(st)
            time.sleep(pause)

    thread = threading.Thread(target=scrape)
    thread.start()
    try:
        yield readings, bad
    finally:
        stop.set()
        thread.join()


async def test_statistics_read_from_another_thread_add_up_during_a_first_run(anyio_backend, monkeypatch):
    """The first run_graph_async of a compiled graph asks the runtime whether the graph is still compiled (a native
    call, the GIL released) after it counted itself submitted and before it counted itself in flight: a reading
    taken meanwhile gave up after its quick retries and did not add up (seen under load; the call made slow here,
    as a busy runtime or machine makes it)."""
    from geasync import _lib

    needs_rebuild = _lib.is_graph_need_rebuild

    def slow_check(*args):
        time.sleep(0.005)  # without the GIL, as the native call
        return needs_rebuild(*args)

    monkeypatch.setattr(_lib, "is_graph_need_rebuild", slow_check)
    async with ga.Session() as s:
        with scraping(s, pause=0.0002) as (readings, bad):
            for graph_id in range(1, 6):
                s.add_graph(graph_id, ga.Graph.from_onnx(add_model()))
                s.compile_graph(graph_id)
                await s.run_graph_async(graph_id, [A, A])
        assert readings[0]
        assert not bad, f"{len(bad)} of {readings[0]} readings did not add up, e.g. {bad[0]}"


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


async def test_requests_whose_first_compile_fails_are_failed(anyio_backend):
    """Before its first run_graph_async a graph is compiled from its declaration; requests that wait for that
    compile are counted waiting, and failed when it fails (here: the MatMul's declared dims do not match)."""
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", TensorProto.FLOAT, ["N", 4])],
                       [("y", TensorProto.FLOAT, ["N", 3])], initializers=[("w", np.ones((5, 3), np.float32))])
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        for _ in range(2):
            with pytest.raises(ga.GeError, match="CompileGraph"):
                await s.run_graph_async(1, [np.ones((1, 4), np.float32)])
        st = s.statistics()
        assert (st.submitted, st.failed, st.waiting, st.in_flight) == (2, 2, 0, 0), st
        assert st.oldest_waiting_age is None
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
        s.compile_graph(1)  # else a slow first compile can outlast the timeout: the run never reaches the runtime
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


async def test_compiles_are_logged_once_with_their_duration(anyio_backend, caplog):
    with caplog.at_level(logging.INFO, logger="geasync"):
        async with ga.Session() as s:
            s.add_graph(1, ga.Graph.from_onnx(add_model()))
            s.add_graph(2, ga.Graph.from_onnx(add_model()))
            for _ in range(2):  # the second run finds the graph compiled
                await s.run_graph_async(1, [A, A])
                s.compile_graph(2)
    lines = [r.getMessage() for r in caplog.records if "compil" in r.getMessage()]
    assert sum(re.search(r"graph 1 compiled in \d+\.\d+ s \(first run_graph_async\)", m) is not None
               for m in lines) == 1, lines
    assert sum("graph 1: compiling for its first run_graph_async" in m for m in lines) == 1, lines
    assert sum(re.search(r"graph 2 compiled in \d+\.\d+ s \(compile_graph\)", m) is not None
               for m in lines) == 1, lines
    assert len(lines) == 3, lines


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
        assert registry.get_sample_value("geasync_oldest_waiting_age_seconds", {"graph": "5", "model": "add"}) == 0
        assert registry.get_sample_value("geasync_runs_submitted_total", {"graph": "5", "model": "add"}) == 3


def test_prometheus_collector_refuses_the_labels_it_sets_itself():
    """A label named "graph" replaced every series' graph id: two graphs' series then shared one label set, which
    Prometheus refuses in a scrape; it is refused when the collector is made."""
    prometheus_client = pytest.importorskip("prometheus_client")
    from geasync.prometheus import GeasyncCollector

    with ga.Session() as s:
        for gid in (1, 2):
            s.add_graph(gid, ga.Graph.from_onnx(add_model()))
            s.run_graph(gid, [A, A])
        for label in ("graph", "batcher", "le"):
            with pytest.raises(ValueError, match=f"'{label}'.*give yours another name"):
                GeasyncCollector(s, labels={label: "mlp", "model": "add"})
        registry = prometheus_client.CollectorRegistry()
        registry.register(GeasyncCollector(s, labels={"model": "add"}))
        for gid in ("1", "2"):
            assert registry.get_sample_value("geasync_runs_completed_total", {"graph": gid, "model": "add"}) == 1


def geasync_records(caplog, level=logging.WARNING, text=""):
    return [r for r in caplog.records if r.name == "geasync" and r.levelno == level and text in r.getMessage()]


def geasync_timers():
    """The geasync timers pending on the running loop: asyncio's scheduled handles (uvloop does not expose its
    own: None), or trio's system tasks."""
    try:
        import trio

        root = trio.lowlevel.current_root_task()
    except (ImportError, RuntimeError):
        loop = asyncio.get_running_loop()
        scheduled = getattr(loop, "_scheduled", None)
        if scheduled is None:
            return None
        return [h for h in scheduled if not h.cancelled() and "Timer._fire" in repr(h)]
    return [t for n in root.child_nurseries for t in n.child_tasks if t.name == "geasync-timer"]


async def test_abandoned_runs_are_logged_once_without_anyone_reading_statistics(anyio_backend, caplog):
    caplog.set_level(logging.WARNING, logger="geasync")
    async with ga.Session(abandon_after=0.1) as s:
        s.add_graph(7, ga.Graph.from_onnx(add_model()))
        s.compile_graph(7)  # else a slow first compile can outlast the timeout: the run never reaches the runtime
        ga.twin.inject_fault(s, 7, "drop_callback", nth=1)
        with pytest.raises(TimeoutError):
            await s.run_graph_async(7, [A, A], timeout=0.01)
        await wait_until(lambda: geasync_records(caplog, text="abandoned"), "the loop's check to log the run")
        (record,) = geasync_records(caplog, text="abandoned")
        message = record.getMessage()
        assert f"session {s.session_id}, graph 7: 1 run(s) abandoned" in message, message
        assert "callback was probably lost" in message, message
        age = float(message.split("no completion for ")[1].split(" s")[0])
        assert age >= 0.1, message
        await anyio.sleep(0.4)  # several more checks, the run still in flight: not logged again
        assert len(geasync_records(caplog, text="abandoned")) == 1, caplog.records
        (y,) = await s.run_graph_async(7, [A, A])  # the graph still runs; the lost run stays abandoned
        np.testing.assert_array_equal(y.numpy(), A + A)
        ga.twin.inject_fault(s, 7, "drop_callback", nth=1)
        with pytest.raises(TimeoutError):
            await s.run_graph_async(7, [A, A], timeout=0.01)
        await wait_until(lambda: len(geasync_records(caplog, text="abandoned")) == 2, "the second lost run logged")
        assert ": 1 run(s) abandoned" in geasync_records(caplog, text="abandoned")[1].getMessage()
        st = s.statistics()  # counts them, logs nothing new
        assert (st.abandoned, st.in_flight, st.graphs[7].abandoned) == (2, 2, 2), st
        assert len(geasync_records(caplog, text="abandoned")) == 2, caplog.records
        timers = geasync_timers()
        assert timers is None or len(timers) == 1, timers  # the check, armed while runs are in flight
    for _ in range(3):  # a cancelled trio task ends when next scheduled (its check would be due in 100 ms)
        await anyio.sleep(0)
    timers = geasync_timers()
    assert not timers, timers  # closing the session cancelled it


async def test_the_abandoned_check_runs_only_while_runs_are_in_flight(anyio_backend, caplog):
    caplog.set_level(logging.WARNING, logger="geasync")
    async with ga.Session(abandon_after=0.05) as s:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        with ga.twin.fault(s, 1, "delay_run", nth=1, delay=0.2):
            await s.run_graph_async(1, [A, A])  # in flight for 0.2 s: abandoned meanwhile, then completes
        await wait_until(lambda: geasync_timers() in (None, []), "the check to stop once nothing is in flight")
        assert len(geasync_records(caplog, text="abandoned")) == 1, caplog.records
        for _ in range(3):  # it is armed again by the next run
            await s.run_graph_async(1, [A, A])
        await wait_until(lambda: geasync_timers() in (None, []), "the check to stop again")
        assert s.statistics().abandoned == 0


def test_the_abandoned_check_follows_the_session_to_a_new_loop(caplog):
    caplog.set_level(logging.WARNING, logger="geasync")
    with ga.Session(abandon_after=0.03) as s:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        s.compile_graph(1)  # else a slow first compile can outlast the 5 ms timeout: the run never reaches GE

        async def lose_one(expected: int) -> None:
            ga.twin.inject_fault(s, 1, "drop_callback", nth=1)
            with pytest.raises(TimeoutError):
                await s.run_graph_async(1, [A, A], timeout=0.005)
            await wait_until(lambda: len(geasync_records(caplog, text="abandoned")) == expected, "the lost run")

        # each loop ends with the check armed (a lost run stays in flight); the next loop's run arms its own
        anyio.run(lose_one, 1, backend="asyncio")
        anyio.run(lose_one, 2, backend="trio")
        anyio.run(lose_one, 3, backend="asyncio")
        assert s.statistics().abandoned == 3


def test_the_abandoned_check_does_not_keep_the_session_alive():
    async def main() -> None:
        s = ga.Session(abandon_after=30)
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        await s.run_graph_async(1, [A, A])  # arms the check (due in 30 s)
        ref = weakref.ref(s)
        with pytest.warns(ResourceWarning, match="unclosed"):
            del s
            gc.collect()
        assert ref() is None
        assert not geasync_timers()  # the session's close cancelled it

    anyio.run(main, backend="asyncio")


async def test_slow_runs_are_logged(anyio_backend, caplog):
    caplog.set_level(logging.WARNING, logger="geasync")
    async with ga.Session(slow_after=0.1) as s:
        s.add_graph(3, ga.Graph.from_onnx(add_model()))
        s.add_graph(4, ga.Graph.from_onnx(add_model()))
        await s.run_graph_async(3, [A, A])
        assert not geasync_records(caplog), caplog.records  # a fast run
        with ga.twin.fault(s, 3, "delay_run", nth=1, delay=0.2):
            await s.run_graph_async(3, [A, A])
        (record,) = geasync_records(caplog, text="slow_after")
        message = record.getMessage()
        assert message.startswith(f"session {s.session_id}, graph 3: a run took "), message
        assert float(message.split("took ")[1].split(" s")[0]) >= 0.2, message
        with ga.twin.fault(s, 4, "delay_run", nth=1, delay=0.2):  # every mode, each graph its own line
            await s.run_graph_in_thread(4, [A, A])
        assert "graph 4: a run took" in geasync_records(caplog, text="slow_after")[-1].getMessage(), caplog.records
        assert s.statistics().graphs[3].latency.count == 2


async def test_lifecycle_records_name_their_session(anyio_backend, caplog):
    """With two sessions in a process, "graph 1 added" did not say to which: every lifecycle line names its
    session, as the warnings do ("session 3, graph 1: ...")."""
    caplog.set_level(logging.DEBUG, logger="geasync")
    async with ga.Session() as s1, ga.Session() as s2:
        for s in (s1, s2):
            pool = ga.GraphPool.add(s, ga.Graph.from_onnx(add_model()), graph_ids=[1, 2])
            async with ga.Batcher(s, 1, max_batch_size=1, batch_sizes=[1]) as batcher:
                await batcher.run([A, A])
            pool.remove()
        ids = (s1.session_id, s2.session_id)
    for sid in ids:
        lines = [r.getMessage() for r in geasync_records(caplog, logging.DEBUG, f"session {sid}")]
        for what in (f"session {sid} created", f"session {sid}, graph 1 added", f"session {sid}, graph 2 removed",
                     f"session {sid}: graph pool of 2", f"session {sid}: batcher of graph 1 closing",
                     f"session {sid} closing with 0 runs"):
            assert any(line.startswith(what) for line in lines), (what, lines)


async def test_slow_runs_are_not_logged_by_default(anyio_backend, caplog):
    caplog.set_level(logging.DEBUG, logger="geasync")
    async with ga.Session() as s:
        s.add_graph(3, ga.Graph.from_onnx(add_model()))
        with ga.twin.fault(s, 3, "delay_run", nth=1, delay=0.05):
            await s.run_graph_async(3, [A, A])
        assert not geasync_records(caplog, text="slow"), caplog.records


def test_slow_runs_are_logged_at_most_once_a_second_per_graph(caplog):
    caplog.set_level(logging.WARNING, logger="geasync")
    with ga.Session(slow_after=0.01) as s:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        ga.twin.inject_fault(s, 1, "delay_run", nth=0, delay=0.02)  # every run
        for _ in range(3):
            s.run_graph(1, [A, A])
        assert len(geasync_records(caplog, text="slow_after")) == 1, caplog.records
        time.sleep(1.0)
        s.run_graph(1, [A, A])
        records = geasync_records(caplog, text="slow_after")
        assert len(records) == 2 and "; 2 more slow runs" in records[1].getMessage(), records


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), float("inf"), "1", True])
def test_slow_after_must_be_a_positive_number(value):
    with pytest.raises(ValueError, match="slow_after must be a positive number of seconds or None"):
        ga.Session(slow_after=value)


async def test_a_stopped_async_queue_is_logged_once(anyio_backend, caplog):
    caplog.set_level(logging.WARNING, logger="geasync")
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(dyn_add()))
        s.add_graph(2, ga.Graph.from_onnx(add_model()))
        ga.twin.inject_fault(s, 1, "fail_prerun")  # stops the session's async queue
        with pytest.raises(ga.GeError):
            await s.run_graph_async(1, [np.ones((2, 16), np.float32), np.ones((2, 16), np.float32)])
        assert not geasync_records(caplog, logging.ERROR), caplog.records  # a failed run is the caller's to see
        for _ in range(3):
            with pytest.raises(ga.SessionBrokenError):
                await s.run_graph_async(2, [A, A])
        (record,) = geasync_records(caplog, logging.ERROR)
        message = record.getMessage()
        assert f"session {s.session_id}: the RunGraphAsync queue is stopped" in message, message
        assert "The first failed request: Session.run_graph_async(graph_id=1)" in message, message


async def test_the_oldest_waiting_age_covers_requests_waiting_for_a_slot(anyio_backend):
    model, n = slow_chain(0.3)
    x = np.ones((n, n), np.float32)
    w = np.eye(n, dtype=np.float32)
    async with ga.Session(max_in_flight=1) as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        s.add_graph(2, ga.Graph.from_onnx(add_model()))
        await s.run_graph_async(2, [A, A])
        assert s.statistics().oldest_waiting_age is None
        # the first run's completion is held until the checks are done: a loaded machine cannot end it before them
        ga.twin.inject_fault(s, 1, "stall_callback", nth=1)
        async with anyio.create_task_group() as tg:
            tg.start_soon(s.run_graph_async, 1, [x, w])
            await wait_until(lambda: s.statistics().in_flight == 1, "the first run in flight")
            tg.start_soon(s.run_graph_async, 1, [x, w])
            await wait_until(lambda: s.statistics().waiting == 1, "one waiting")
            await anyio.sleep(0.05)
            st = s.statistics()
            assert st.waiting == 1 and st.oldest_waiting_age >= 0.05, st
            assert st.graphs[1].oldest_waiting_age == st.oldest_waiting_age, st
            assert st.graphs[2].oldest_waiting_age is None and st.graphs[2].waiting == 0, st
            assert st.as_dict()["oldest_waiting_age"] == st.oldest_waiting_age
            assert st.as_dict()["graphs"][1]["oldest_waiting_age"] == st.oldest_waiting_age
            later = s.statistics().oldest_waiting_age
            assert later >= st.oldest_waiting_age  # the same request, still waiting
            ga.twin.release_stalled(s, 1)
        st = s.statistics()
        assert (st.waiting, st.oldest_waiting_age, st.graphs[1].oldest_waiting_age) == (0, None, None), st


async def test_the_oldest_waiting_age_covers_the_dynamic_graph_bound(anyio_backend):
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(dyn_add()))
        s.compile_graph(1)
        ga.twin.inject_fault(s, 1, "stall_callback", nth=0)
        async with anyio.create_task_group() as tg:
            for _ in range(33):
                tg.start_soon(s.run_graph_async, 1, [A, A])
            await wait_until(lambda: s.statistics().waiting == 1, "1 waiting")
            await anyio.sleep(0.05)
            st = s.statistics()
            assert st.graphs[1].oldest_waiting_age >= 0.05, st
            assert st.oldest_age >= st.oldest_waiting_age, st  # the in-flight ones were there first
            ga.twin.clear_faults(s, 1)
        assert s.statistics().oldest_waiting_age is None


async def test_removed_graphs_leave_graphs_and_stay_in_the_totals(anyio_backend):
    async with ga.Session() as s:
        for gid in (1, 2, 3, 4):
            s.add_graph(gid, ga.Graph.from_onnx(add_model()))
        await s.run_graph_async(1, [A, A])
        await s.run_graph_async(2, [A, A])
        with ga.twin.fault(s, 2, "fail_run", nth=1):
            with pytest.raises(ga.GeError):
                await s.run_graph_async(2, [A, A])
        s.run_graph(4, [A, A])
        s.remove_graph(2)
        s.remove_graph(4)
        st = s.statistics()
        assert_adds_up(st)
        assert sorted(st.graphs) == [1]  # graph 3 has not run yet
        assert (st.submitted, st.completed, st.failed, st.latency.count) == (4, 3, 1, 3), st
        # a run still in flight when its graph is removed (GE removes the graph once it ends) counts in flight,
        # then completed, in the totals only
        ga.twin.inject_fault(s, 3, "delay_run", nth=1, delay=0.3)
        async with anyio.create_task_group() as tg:
            tg.start_soon(s.run_graph_async, 3, [A, A])
            await wait_until(lambda: s.statistics().in_flight == 1, "graph 3's run to start")
            s.remove_graph(3)
            st = s.statistics()
            assert_adds_up(st)
            assert sorted(st.graphs) == [1] and (st.in_flight, st.submitted) == (1, 5), st
        st = s.statistics()
        assert_adds_up(st)
        assert (st.in_flight, st.submitted, st.completed, st.latency.count) == (0, 5, 4, 4), st


def test_adding_and_removing_graphs_for_ever_keeps_the_statistics_bounded():
    """A service that loads a new version of a model under a new graph id and removes the old one, for ever: the
    statistics of removed graphs are folded into the totals instead of kept per graph id."""
    import tracemalloc

    model = add_model().SerializeToString()
    with ga.Session() as s:
        def cycle(first: int, count: int) -> None:
            for gid in range(first, first + count):
                s.add_graph(gid, ga.Graph.from_onnx(model))
                s.run_graph(gid, [A, A])
                s.remove_graph(gid)

        cycle(1, 200)
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            cycle(1000, 2000)  # kept per graph id, their counters took ~600 bytes each (1.2 MB)
            gc.collect()
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        st = s.statistics()
        assert st.graphs == {} and (st.submitted, st.completed) == (2200, 2200), st
        assert grown < 200_000, f"{grown} bytes kept after 2000 graphs added, run and removed"


async def test_runs_on_graph_ids_never_added_count_in_the_totals_only(anyio_backend):
    """Each id tried would otherwise keep a per-graph entry: a client probing ids must not grow the session."""
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        for gid in range(100, 150):
            with pytest.raises(ga.GeError, match=f"graph_id={gid}"):
                await s.run_graph_async(gid, [A, A])
            with pytest.raises(ga.GeError, match=f"graph_id={gid + 1000}"):
                s.run_graph(gid + 1000, [A, A])
        await s.run_graph_async(1, [A, A])
        st = s.statistics()
        assert_adds_up(st)
        assert sorted(st.graphs) == [1] and (st.submitted, st.failed, st.completed) == (101, 100, 1), st
        import tracemalloc

        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for gid in range(5000, 7000):
                with pytest.raises(ga.GeError):
                    s.run_graph(gid, [A, A])
            gc.collect()
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert grown < 200_000, f"{grown} bytes kept after runs on 2000 unknown graph ids"
        assert s.statistics().failed == 2100
