"""Run-mode exclusivity per graph id: the first run fixes the mode (RunGraph, RunGraphAsync or
RunGraphWithStreamAsync); another mode raises ExecutionModeError before the runtime is called, naming the graph id,
both modes and how to reset (remove_graph + add_graph)."""

from __future__ import annotations

import itertools
import re

import anyio
import numpy as np
import pytest

import geasync as ga
from conftest import add_model, live

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120, method="thread")]


GE_MODE = {"sync": "RunGraph", "async": "RunGraphAsync", "stream": "RunGraphWithStreamAsync",
           "thread": "RunGraph"}
A = np.arange(16, dtype=np.float32).reshape(1, 16)
B = np.ones((1, 16), np.float32)


async def run(mode: str, s: ga.Session, graph_id: int, stream: ga.Stream) -> np.ndarray:
    """One run of the Add graph in ``mode``; returns the host result."""
    if mode == "sync":
        (c,) = s.run_graph(graph_id, [A, B])
        return c.numpy().copy()
    if mode == "thread":
        (c,) = await s.run_graph_in_thread(graph_id, [A, B])
        return c.numpy().copy()
    if mode == "async":
        (c,) = await s.run_graph_async(graph_id, [A, B])
        return c.numpy().copy()
    assert mode == "stream"
    (c,) = s.run_graph_with_stream_async(graph_id, stream, [A, B])
    await stream.synchronize_async()
    out = c.to_host().numpy().copy()
    del c
    return out


def has_word(text: str, word: str) -> bool:
    return re.search(rf"\b{re.escape(word)}\b", text) is not None


PAIRS = [pytest.param(a, b, id=f"{a}-then-{b}") for a, b in itertools.permutations(["sync", "async", "stream"], 2)]


@pytest.mark.parametrize("first, second", PAIRS)
async def test_second_mode_is_refused_with_a_clear_error(first, second):
    gid = 7
    async with ga.Session() as s, ga.Stream() as stream:
        s.add_graph(gid, ga.Graph.from_onnx(add_model()))
        np.testing.assert_array_equal(await run(first, s, gid, stream), A + B)
        stats_before = s.statistics()
        counters_before = live()

        with pytest.raises(ga.ExecutionModeError) as info:
            await run(second, s, gid, stream)
        err = info.value
        msg = str(err)
        assert isinstance(err, ga.GeError)
        assert f"graph_id={gid}" in msg or f"graph {gid}" in msg, msg
        assert has_word(msg, GE_MODE[second]), msg  # the attempted mode
        assert has_word(msg, GE_MODE[first]), msg  # the established mode
        assert "remove_graph" in msg and "add_graph" in msg, msg  # how to reset
        assert err.status != 0
        assert GE_MODE[second] in err.api_name, err.api_name

        # Refused before the runtime was called: no request, no pin, no output, no allocator.
        assert s.statistics() == stats_before
        counters_after = live()
        assert {k: v for k, v in counters_after.items() if k != "completion_queues"} == \
               {k: v for k, v in counters_before.items() if k != "completion_queues"}

        # The graph is not harmed: its own mode still works.
        np.testing.assert_array_equal(await run(first, s, gid, stream), A + B)


@pytest.mark.parametrize("first, second", PAIRS)
async def test_remove_graph_and_add_graph_reset_the_mode(first, second):
    gid = 3
    async with ga.Session() as s, ga.Stream() as stream:
        s.add_graph(gid, ga.Graph.from_onnx(add_model()))
        await run(first, s, gid, stream)
        with pytest.raises(ga.ExecutionModeError):
            await run(second, s, gid, stream)
        s.remove_graph(gid)
        s.add_graph(gid, ga.Graph.from_onnx(add_model()))  # a fresh Graph under the same id
        np.testing.assert_array_equal(await run(second, s, gid, stream), A + B)
        # Now the second mode is the established one.
        with pytest.raises(ga.ExecutionModeError) as info:
            await run(first, s, gid, stream)
        assert has_word(str(info.value), GE_MODE[second])


@pytest.mark.parametrize("first, second", PAIRS)
async def test_a_graph_that_is_not_there_is_reported_so_whatever_mode_was_tried_on_it(first, second):
    """GE looks a graph up before its run mode: a call on an id never added (or removed) fails as such, never as a
    mode conflict with an earlier call on the same missing id."""
    async with ga.Session() as s, ga.Stream() as stream:
        s.add_graph(3, ga.Graph.from_onnx(add_model()))
        await run(first, s, 3, stream)
        s.remove_graph(3)
        for gid in (3, 9):  # removed after a run, never added
            for mode in (first, second, first):
                with pytest.raises(ga.GeError) as info:
                    await run(mode, s, gid, stream)
                assert not isinstance(info.value, ga.ExecutionModeError), info.value
                assert "does not exist" in str(info.value), info.value
        s.add_graph(9, ga.Graph.from_onnx(add_model()))
        np.testing.assert_array_equal(await run(second, s, 9, stream), A + B)


async def test_modes_are_per_graph_id():
    async with ga.Session() as s, ga.Stream() as stream:
        for gid in (1, 2, 3):
            s.add_graph(gid, ga.Graph.from_onnx(add_model()))
        results = [await run("sync", s, 1, stream), await run("async", s, 2, stream),
                   await run("stream", s, 3, stream)]
        for r in results:
            np.testing.assert_array_equal(r, A + B)


async def test_run_graph_in_thread_is_run_graph_mode():
    async with ga.Session() as s, ga.Stream() as stream:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        s.add_graph(2, ga.Graph.from_onnx(add_model()))
        await run("thread", s, 1, stream)
        np.testing.assert_array_equal(await run("sync", s, 1, stream), A + B)  # same mode: fine
        with pytest.raises(ga.ExecutionModeError) as info:
            await run("async", s, 1, stream)
        assert has_word(str(info.value), "RunGraph") and has_word(str(info.value), "RunGraphAsync")
        await run("async", s, 2, stream)
        with pytest.raises(ga.ExecutionModeError):
            await run("thread", s, 2, stream)


async def test_mode_conflict_among_concurrent_async_requests():
    """A conflicting call does not disturb requests of the established mode that are in flight."""
    async with ga.Session() as s, ga.Stream() as stream:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        await s.run_graph_async(1, [A, B])  # fixes the mode
        results = []

        async def one():
            (c,) = await s.run_graph_async(1, [A, B])
            results.append(c.numpy().copy())

        async with anyio.create_task_group() as tg:
            for _ in range(50):
                tg.start_soon(one)
            for _ in range(3):
                await anyio.sleep(0)
            with pytest.raises(ga.ExecutionModeError):
                s.run_graph(1, [A, B])
            with pytest.raises(ga.ExecutionModeError):
                s.run_graph_with_stream_async(1, stream, [A, B])
        assert len(results) == 50
        for r in results:
            np.testing.assert_array_equal(r, A + B)
        st = s.statistics()
        assert (st.completed, st.failed, st.in_flight, st.pinned_bytes) == (51, 0, 0, 0), st


async def test_mode_error_arguments_are_checked_first():
    """Argument errors stay TypeErrors (as in GE's Python package) and do not fix a mode."""
    async with ga.Session() as s, ga.Stream() as stream:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        with pytest.raises(TypeError):
            await s.run_graph_async(1, "not a list")
        with pytest.raises(TypeError):
            s.run_graph_with_stream_async(1, stream, (A, B))  # GE's Python package: a list
        np.testing.assert_array_equal(await run("sync", s, 1, stream), A + B)


# --- symbolic dims in every mode ------------------------------------------------------------------------------------

def batch_graph() -> ga.Graph:
    from conftest import TensorProto, helper, make_model

    return ga.Graph.from_onnx(make_model(
        [helper.make_node("Add", ["a", "b"], ["c"])],
        [("a", TensorProto.FLOAT, ["N", 1, 4, 4]), ("b", TensorProto.FLOAT, ["N", 1, 4, 4])],
        [("c", TensorProto.FLOAT, ["N", 1, 4, 4])]))


@pytest.mark.parametrize("mode", ["sync", "async", "stream"])
async def test_symbolic_batch_takes_any_size_without_compile_graph(mode):
    # GE's RunGraphAsync would compile from the first request's shapes and refuse every other batch size; geasync
    # compiles the graph from its declared [N, 1, 4, 4] inputs first, as RunGraph does.
    async with ga.Session() as s, ga.Stream() as stream:
        s.add_graph(1, batch_graph())
        for n in (3, 1, 5, 3):
            x = np.arange(n * 16, dtype=np.float32).reshape(n, 1, 4, 4)
            if mode == "sync":
                (c,) = s.run_graph(1, [x, x])
                out = c.numpy().copy()
            elif mode == "async":
                (c,) = await s.run_graph_async(1, [x, x])
                out = c.numpy().copy()
            else:
                (c,) = s.run_graph_with_stream_async(1, stream, [x, x])
                await stream.synchronize_async()
                out = c.to_host().numpy().copy()
            del c
            np.testing.assert_array_equal(out, x + x)


async def test_concurrent_first_async_requests_of_one_symbolic_graph():
    async with ga.Session() as s:
        s.add_graph(1, batch_graph())
        results = {}

        async def one(n):
            x = np.full((n, 1, 4, 4), n, np.float32)
            (c,) = await s.run_graph_async(1, [x, x])
            results[n] = c.numpy().copy()

        async with anyio.create_task_group() as tg:
            for n in (1, 2, 3, 4, 5, 6):
                tg.start_soon(one, n)
        for n, out in results.items():
            np.testing.assert_array_equal(out, np.full((n, 1, 4, 4), 2 * n, np.float32))
        assert sorted(results) == [1, 2, 3, 4, 5, 6]
        assert not s.get_compiled_graph_summary(1).is_static  # one dynamic-shape model serves every size
