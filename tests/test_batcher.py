"""ga.Batcher under asyncio, uvloop and trio: each request gets its own rows of the batch; requests coalesce while
the graph is busy and run at once when it is idle; cancellation, timeouts, failing batches, shutdown, padding,
refusals, graph pools, and statistics that add up."""

from __future__ import annotations

import asyncio
import collections
import time
import warnings

import anyio
import numpy as np
import pytest

import geasync as ga
from conftest import TensorProto, add_model, gc_collect_harder, helper, make_mlp, make_model, numpy_helper
from asynctools import wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120, method="thread")]

MLP_W = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in make_mlp().graph.initializer}


def mlp_reference(x: np.ndarray) -> np.ndarray:
    h = np.maximum(x.astype(np.float64) @ MLP_W["w1"] + MLP_W["b1"], 0.0)
    z = h @ MLP_W["w2"] + MLP_W["b2"]
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def rows(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random((n, 784), dtype=np.float32)


def assert_adds_up(st: ga.BatcherStatistics) -> None:
    assert st.submitted == st.completed + st.failed + st.cancelled + st.queued + st.running, st


async def gather(*fns):
    results: list = [None] * len(fns)

    async def one(i, fn):
        try:
            results[i] = await fn()
        except Exception as exc:
            results[i] = exc

    async with anyio.create_task_group() as tg:
        for i, fn in enumerate(fns):
            tg.start_soon(one, i, fn)
    return results


async def test_each_request_gets_its_own_rows(anyio_backend):
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(make_mlp()))
        b = ga.Batcher(s, 1, max_batch_size=32)
        inputs = [rows(1 + i % 3, seed=i) for i in range(60)]
        outs = await gather(*(lambda x=x: b.run([x]) for x in inputs))
        for x, out in zip(inputs, outs, strict=True):
            assert not isinstance(out, Exception), out
            (probs,) = out
            assert probs.shape == (x.shape[0], 10)
            np.testing.assert_allclose(probs.numpy(), mlp_reference(x), rtol=1e-4, atol=1e-6)
        st = b.statistics()
        assert st.completed == 60 and st.failed == 0
        assert st.batches < 60  # they coalesced
        assert st.batch_size.count == st.batches
        sizes = st.batch_size
        assert max(b for b, n in zip(sizes.bounds, sizes.counts, strict=False) if n) > 1  # (the overflow has no bound)
        assert_adds_up(st)
        await b.aclose()


async def test_requests_of_other_dims_form_their_own_batches(anyio_backend):
    """Requests whose non-batch dims differ (a symbolic "M") alternate: each gets back its own rows, computed in a
    batch of requests of its own shape only."""
    relu = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", 1, ["N", "M"])], [("y", 1, ["N", "M"])])
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(relu))
        b = ga.Batcher(s, 1, max_batch_size=16, batch_sizes=None)
        inputs = [np.random.default_rng(i).standard_normal((1 + i % 2, 3 + 2 * (i % 3)), dtype=np.float32)
                  for i in range(90)]
        outs = await gather(*(lambda x=x: b.run([x]) for x in inputs))
        for x, out in zip(inputs, outs, strict=True):
            assert not isinstance(out, Exception), out
            assert out[0].shape == x.shape
            np.testing.assert_array_equal(out[0].numpy(), np.maximum(x, 0))
        st = b.statistics()
        assert st.completed == 90 and st.batches < 90 and st.retries == 0, st  # coalesced, never across shapes
        assert_adds_up(st)


async def test_strided_requests_and_several_outputs(anyio_backend):
    """Requests given as C-contiguous, Fortran-ordered, strided or other-byte-order arrays (">f4" read from a
    file), to a graph with two batched outputs and two inputs: each request gets its own rows of both outputs,
    whatever its inputs' memory layout."""
    model = make_model([helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Neg", ["a"], ["n"])],
                       [("a", 1, ["N", 6]), ("b", 1, ["N", 6])], [("s", 1, ["N", 6]), ("n", 1, ["N", 6])])
    rng = np.random.default_rng(7)
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        b = ga.Batcher(s, 1, max_batch_size=16)
        requests = []
        for i in range(48):
            n = 1 + i % 3
            a = rng.standard_normal((n, 12), dtype=np.float32)[:, ::2]  # strided view
            bb = rng.standard_normal((n, 6), dtype=np.float32)
            if i % 2:
                bb = np.asfortranarray(bb)
            if i % 5 == 1:
                bb = bb.astype(bb.dtype.newbyteorder(">" if np.little_endian else "<"))
            requests.append((a if i % 4 else np.ascontiguousarray(a), bb))
        outs = await gather(*(lambda a=a, bb=bb: b.run([a, bb]) for a, bb in requests))
        for (a, bb), out in zip(requests, outs, strict=True):
            assert not isinstance(out, Exception), out
            total, neg = out
            np.testing.assert_array_equal(total.numpy(), a + bb)
            np.testing.assert_array_equal(neg.numpy(), -a)
        st = b.statistics()
        assert st.completed == 48 and st.batches < 48 and st.retries == 0, st
        assert_adds_up(st)
        await b.aclose()


async def test_arguments_are_checked_when_run_is_called(anyio_backend):
    """As run_graph_async: a bad request raises from the call itself, before anything is awaited."""
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(make_mlp()))
        b = ga.Batcher(s, 1, max_batch_size=4)
        with pytest.raises(ValueError, match="max_batch_size"):
            b.run([rows(5, 0)])
        with pytest.raises(ga.InputTypeError, match="float64"):
            b.run([np.zeros((1, 784))])
        for bad, error in (("1", TypeError), (True, TypeError), (float("nan"), ValueError)):
            with pytest.raises(error, match="Batcher.run: timeout must be a number of seconds"):
                b.run([rows(1, 0)], timeout=bad)
            with pytest.raises(error, match="Batcher: timeout must be a number of seconds"):
                ga.Batcher(s, 1, timeout=bad)
            with pytest.raises(error, match="Batcher.timeout: timeout must be a number of seconds"):
                b.timeout = bad
        b.timeout = np.float32(30)  # numpy scalars become floats (trio's deadlines fail on them)
        assert type(b.timeout) is float and b.timeout == 30.0
        (probs,) = await b.run([rows(1, 0)])
        assert probs.shape == (1, 10)
        assert b.statistics().submitted == 1
        # the limits are fixed at creation (batch sizes and checks derive from them): a request of the shape just
        # run may not slip past a lowered limit
        with pytest.raises(AttributeError):
            b.max_batch_size = 0
        with pytest.raises(AttributeError):
            b.batch_axis = 1
        with pytest.raises(ValueError, match="max_batch_size=4"):
            b.run([rows(5, 0)])


async def test_idle_graph_runs_a_request_at_once(anyio_backend):
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(make_mlp()))
        b = ga.Batcher(s, 1, max_batch_size=64, max_delay=5.0)  # a long delay would show if it waited
        with anyio.fail_after(2.0):
            for i in range(5):
                (probs,) = await b.run([rows(1, i)])
                np.testing.assert_allclose(probs.numpy(), mlp_reference(rows(1, i)), rtol=1e-4, atol=1e-6)
        st = b.statistics()
        assert st.batches == 5 and st.queue_delay.counts[0] == 5  # each ran alone, with no queueing delay


async def test_requests_run_alone_are_counted_however_they_end(anyio_backend):
    """Requests that find the graph idle run alone on a path of their own: completed, failed and cancelled ones,
    of one row and of several, show in every statistic, and the graph is idle again after each."""
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(make_mlp()))
        b = ga.Batcher(s, 1, max_batch_size=8, max_delay=5.0)
        ga.twin.inject_fault(s, 1, "fail_run", nth=2)
        ga.twin.inject_fault(s, 1, "delay_run", nth=3, delay=5.0)
        (probs,) = await b.run([rows(1, 0)])
        np.testing.assert_allclose(probs.numpy(), mlp_reference(rows(1, 0)), rtol=1e-4, atol=1e-6)
        with pytest.raises(ga.GeError):
            await b.run([rows(3, 1)])
        st = b.statistics()
        assert (st.submitted, st.completed, st.failed, st.running, st.batches_in_flight) == (2, 1, 1, 0, 0), st
        with anyio.move_on_after(0.2):
            await b.run([rows(2, 2)])  # runs alone, for 5 s: cancelled in its run
        st = b.statistics()
        assert (st.submitted, st.cancelled, st.running, st.batches_in_flight) == (3, 1, 0, 0), st
        (probs,) = await b.run([rows(4, 3)])  # the cancelled run left no batch in flight: this one runs alone too
        np.testing.assert_allclose(probs.numpy(), mlp_reference(rows(4, 3)), rtol=1e-4, atol=1e-6)
        st = b.statistics()
        assert (st.submitted, st.completed, st.batches, st.queued) == (4, 2, 4, 0), st
        assert st.queue_delay.count == st.queue_delay.counts[0] == 4 and st.queue_delay.sum == 0.0
        sizes = dict(zip(st.batch_size.bounds, st.batch_size.counts, strict=False))
        assert (sizes[1], sizes[2], sizes[4]) == (1, 1, 2) and st.batch_size.count == 4, st.batch_size  # 3, 4: <= 4
        assert st.batch_size.sum == 1 + 3 + 2 + 4
        assert_adds_up(st)
        await b.aclose()


async def test_queueing_delays_are_counted_per_request(anyio_backend):
    """A request that runs at once counts no delay; requests queued behind a slow run count the time they waited."""
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(make_mlp()))
        b = ga.Batcher(s, 1, max_batch_size=64, max_delay=5.0)
        ga.twin.inject_fault(s, 1, "delay_run", nth=1, delay=0.2)  # the first run holds the graph: 8 others queue
        outs = await gather(*(lambda i=i: b.run([rows(1, seed=i)]) for i in range(9)))
        assert not any(isinstance(o, Exception) for o in outs), outs
        delays = b.statistics().queue_delay
        assert delays.count == sum(delays.counts) == 9
        assert delays.counts[0] == 1  # the first ran alone, at once
        slow = sum(n for bound, n in zip(delays.bounds + (float("inf"),), delays.counts, strict=True) if bound > 0.1)
        assert slow == 8, delays  # the queued ones waited out most of the 0.2 s run
        assert 8 * 0.1 < delays.sum < 8 * 5.0, delays


async def test_cancelled_requests_never_cancel_their_batch(anyio_backend):
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(make_mlp()))
        b = ga.Batcher(s, 1, max_batch_size=64, max_delay=1.0)
        ga.twin.inject_fault(s, 1, "delay_run", nth=1, delay=0.2)  # the first run holds the graph: others queue
        inputs = [rows(1, seed=i) for i in range(12)]
        results: dict = {}

        async def one(i, scope_box):
            with anyio.CancelScope() as scope:
                scope_box[i] = scope
                results[i] = await b.run([inputs[i]])

        scopes: dict = {}
        async with anyio.create_task_group() as tg:
            for i in range(12):
                tg.start_soon(one, i, scopes)
            await wait_until(lambda: b.statistics().queued == 11, "11 requests queued", interval=0.001)
            for i in (3, 5, 7):
                scopes[i].cancel()  # queued: they never run
        for i in range(12):
            if i in (3, 5, 7):
                assert i not in results
            else:
                np.testing.assert_allclose(results[i][0].numpy(), mlp_reference(inputs[i]), rtol=1e-4, atol=1e-6)
        st = b.statistics()
        assert st.cancelled == 3 and st.completed == 9
        assert_adds_up(st)
        assert st.queued == 0 and st.running == 0


async def test_a_request_cancelled_mid_batch_leaves_the_others_their_rows(anyio_backend):
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(make_mlp()))
        b = ga.Batcher(s, 1, max_batch_size=64, max_delay=0.0)
        ga.twin.inject_fault(s, 1, "delay_run", nth=0, delay=0.1)  # every run lasts long enough to cancel in it
        inputs = [rows(1, seed=i) for i in range(6)]
        results: dict = {}
        scopes: dict = {}

        async def one(i):
            with anyio.CancelScope() as scope:
                scopes[i] = scope
                results[i] = await b.run([inputs[i]])

        async with anyio.create_task_group() as tg:
            for i in range(6):
                tg.start_soon(one, i)
            await wait_until(lambda: b.statistics().running >= 5, "a batch running", interval=0.001)
            scopes[4].cancel()
        assert 4 not in results
        for i in (0, 1, 2, 3, 5):
            np.testing.assert_allclose(results[i][0].numpy(), mlp_reference(inputs[i]), rtol=1e-4, atol=1e-6)
        st = b.statistics()
        assert st.cancelled == 1 and st.completed == 5
        assert_adds_up(st)


async def test_timeout_raises_and_is_counted(anyio_backend):
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(make_mlp()))
        b = ga.Batcher(s, 1)
        ga.twin.inject_fault(s, 1, "stall_callback", nth=1)
        with pytest.raises(TimeoutError, match=r"Batcher.run\(graph_id=1\): no result within 0.1 s"):
            await b.run([rows(1, 0)], timeout=0.1)  # the graph is idle: it runs at once, alone
        st = b.statistics()
        assert st.cancelled == 1 and st.completed == 0
        assert_adds_up(st)
        ga.twin.clear_faults(s, 1)
        (probs,) = await b.run([rows(1, 1)])
        assert probs.shape == (1, 10)


async def test_queued_and_running_requests_time_out_alone(anyio_backend):
    """Requests that wait behind a busy graph time out on their own deadlines (a later, shorter timeout first),
    in the queue or in a running batch; the others, in the same batches, get their rows; nothing is kept alive
    once they are done."""
    import weakref

    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(make_mlp()))
        b = ga.Batcher(s, 1, max_batch_size=64, max_delay=1.0)
        ga.twin.inject_fault(s, 1, "delay_run", nth=1, delay=0.4)  # the first run holds the graph: others queue
        ga.twin.inject_fault(s, 1, "delay_run", nth=2, delay=0.4)  # and the batch after it runs long
        inputs = [rows(1, seed=i) for i in range(6)]
        timeouts = [None, 30.0, 0.6, 0.1, None, 0.2]  # 3 and 5 expire queued (3 first), 2 in the running batch
        results: dict = {}
        ended: dict = {}
        start = anyio.current_time()

        async def one(i):
            try:
                results[i] = await b.run([inputs[i]], timeout=timeouts[i])
            except TimeoutError as exc:
                results[i] = exc
            ended[i] = anyio.current_time() - start

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, 0)  # runs alone (the graph is idle) and holds it for 0.4 s
            await wait_until(lambda: b.statistics().running == 1, "the first request running", interval=0.001)
            for i in range(1, 6):
                tg.start_soon(one, i)
        for i in (0, 1, 4):
            np.testing.assert_allclose(results[i][0].numpy(), mlp_reference(inputs[i]), rtol=1e-4, atol=1e-6)
        for i in (2, 3, 5):
            assert isinstance(results[i], TimeoutError), (i, results[i])
            assert f"no result within {timeouts[i]} s" in str(results[i])
        # 3 and 5 expired queued, before the first run ended; 2 in the running batch, before that batch ended. Told
        # apart by when the runs ended (0: the first run, 1 and 4: the second batch), not by windows of wall time,
        # which a loaded machine stretches
        assert ended[3] < ended[5] < ended[0] < ended[2] < min(ended[1], ended[4]), ended
        assert ended[0] >= 0.4 and ended[1] >= 0.8, ended  # the delays did hold the graph
        st = b.statistics()
        assert st.cancelled == 3 and st.completed == 3, st
        assert st.batches == 2 and st.queued == 0 and st.running == 0, st
        assert_adds_up(st)
        # timed requests that completed, queued ones included, are not held by the batcher
        alive = []

        async def timed(seed):
            x = rows(1, seed=seed)
            alive.append(weakref.ref(x))
            await b.run([x], timeout=30.0)

        ga.twin.inject_fault(s, 1, "delay_run", nth=1, delay=0.1)  # the first holds the graph: the others queue
        async with anyio.create_task_group() as tg:
            for i in range(6):
                tg.start_soon(timed, 10 + i)
        assert b.statistics().batches == 4  # one alone, then 1 + 4 rows in batches of 1 and 4 (padded sizes)
        assert len(alive) == 6
        # (the last batch's task lets its woken callers run before it ends, so give it that turn)
        await wait_until(lambda: all(r() is None for r in alive), "the requests' inputs to be released", timeout=5.0)


async def test_a_failing_batch_is_retried_in_halves(anyio_backend):
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(make_mlp()))
        b = ga.Batcher(s, 1, max_batch_size=64, max_delay=1.0)
        ga.twin.inject_fault(s, 1, "delay_run", nth=1, delay=0.2)
        ga.twin.inject_fault(s, 1, "fail_run", nth=2)  # the batch after the first run fails
        inputs = [rows(1, seed=i) for i in range(9)]
        outs = await gather(*(lambda x=x: b.run([x]) for x in inputs))
        for x, out in zip(inputs, outs, strict=True):
            assert not isinstance(out, Exception), out
            np.testing.assert_allclose(out[0].numpy(), mlp_reference(x), rtol=1e-4, atol=1e-6)
        st = b.statistics()
        assert st.retries >= 2 and st.failed == 0 and st.completed == 9
        assert_adds_up(st)


async def test_a_bad_request_fails_alone(anyio_backend):
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(make_mlp()))
        b = ga.Batcher(s, 1, max_batch_size=64, max_delay=0.05)
        ga.twin.inject_fault(s, 1, "delay_run", nth=1, delay=0.1)
        good = [rows(1, seed=i) for i in range(6)]
        bad = np.zeros((1, 783), np.float32)  # wrong feature count: the runtime refuses it
        fns = [lambda x=x: b.run([x]) for x in good]
        fns.insert(3, lambda: b.run([bad]))
        outs = await gather(*fns)
        assert isinstance(outs[3], ga.InputError) and "783" in str(outs[3])
        for x, out in zip(good, outs[:3] + outs[4:], strict=True):
            np.testing.assert_allclose(out[0].numpy(), mlp_reference(x), rtol=1e-4, atol=1e-6)
        st = b.statistics()
        assert st.failed == 0 and st.completed == 6 and st.submitted == 6  # refused before it joined a batch
        assert_adds_up(st)
        (probs,) = await b.run([good[0]])  # the session still works
        assert probs.shape == (1, 10)


async def test_refusals(anyio_backend):
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(make_mlp()))
        b = ga.Batcher(s, 1, max_batch_size=4)
        with pytest.raises(ValueError, match="5 rows exceed max_batch_size=4; split the request or raise max_batch_"):
            await b.run([rows(5, 0)])
        # the largest of batch_sizes bounds a batch below max_batch_size: the refusal says so (it told the caller to
        # raise max_batch_size, which was 8 already)
        with pytest.raises(ValueError, match=r"6 rows exceed the largest of batch_sizes \(4\).*raise the sizes of"):
            await ga.Batcher(s, 1, max_batch_size=8, batch_sizes=[2, 4]).run([rows(6, 0)])
        with pytest.raises(ValueError, match="batch axis"):
            await b.run([np.zeros((), np.float32)])
        with pytest.raises(TypeError, match="inputs"):
            await b.run("x")
        with pytest.raises(TypeError, match=r"inputs\[0\]"):
            await b.run([[1.0, 2.0]])
        s.add_graph(2, ga.Graph.from_onnx(add_model((4, 16))))
        with pytest.raises(ValueError, match=r"fixed batch dim of 4 .* pass batch_sizes=\[4\]"):
            ga.Batcher(s, 2)
        with pytest.raises(ValueError, match=r"batch_sizes must be \[4\], got \[2, 4\]"):
            ga.Batcher(s, 2, batch_sizes=[2, 4])  # a static graph runs one batch size only
        for axis in (-1, 2, 1.0):
            with pytest.raises(ValueError, match="batch_axis"):
                ga.Batcher(s, 1, batch_axis=axis)
        with pytest.raises(ValueError, match=r"batch axis 0"):
            b.run([np.zeros((), np.float32)])  # after a request of the usual shape, too (its fast path)
        with pytest.raises(ga.InputError, match=r"Batcher.run.*'y'"):
            b.run({"x": rows(1, 0), "y": rows(1, 0)})  # the feed's problem, named for the call that was made
        with pytest.raises(ValueError, match="max_delay"):
            ga.Batcher(s, 1, max_delay=-1)
        with pytest.raises(TypeError, match="graph"):
            ga.Batcher(s, "1")
        with pytest.raises(ga.InputTypeError, match="float64"):
            await b.run([np.zeros((1, 784))])
        with pytest.raises(ga.InputError, match="takes 1 input"):
            await b.run([rows(1, 0), rows(1, 1)])
        (probs,) = await b.run({"x": rows(2, 0)})  # a {name: array} feed
        assert probs.shape == (2, 10)
        x = rows(3, 1)
        (probs,) = await b.run(collections.UserList([x]))  # any sequence, as the type hints say
        np.testing.assert_allclose(probs.numpy(), mlp_reference(x), rtol=1e-4, atol=1e-6)
        assert b.statistics().submitted == 2  # refused requests never joined a batch


def reduce_over_batch(declared_output_shape):
    """s = ReduceSum(x, axis 0): every request's answer would depend on every other request's rows."""
    axes = ("axes", np.array([0], np.int64))
    return make_model([helper.make_node("ReduceSum", ["x", "axes"], ["s"], keepdims=0)],
                      [("x", TensorProto.FLOAT, ["N", 3])], [("s", TensorProto.FLOAT, declared_output_shape)],
                      initializers=[axes])


async def test_graphs_that_mix_the_rows_of_a_batch_are_refused(anyio_backend):
    """A Batcher needs every input and output to carry the batch dim: otherwise joining requests would hand each
    one results computed from the others' rows. Such graphs are refused when the Batcher is made, naming the input
    or output and what to do."""
    relu_bias = make_model([helper.make_node("Add", ["x", "bias"], ["y"])],
                           [("x", TensorProto.FLOAT, ["N", 4]), ("bias", TensorProto.FLOAT, [4])],
                           [("y", TensorProto.FLOAT, ["N", 4])])
    const = make_model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Identity", ["t"], ["table"])],
                       [("x", TensorProto.FLOAT, ["N", 4])],
                       [("y", TensorProto.FLOAT, ["N", 4]), ("table", TensorProto.FLOAT, [8, 4])],
                       initializers=[("t", np.ones((8, 4), np.float32))])
    square = make_model([helper.make_node("MatMul", ["x", "xt"], ["g"]),
                         helper.make_node("Transpose", ["x"], ["xt"])],
                        [("x", TensorProto.FLOAT, ["N", 4])], [("g", TensorProto.FLOAT, ["N", "N"])])
    middle = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", TensorProto.FLOAT, [2, "N", 3])],
                        [("y", TensorProto.FLOAT, [2, "N", 3])])
    async with ga.Session() as s:
        for gid, model in enumerate((relu_bias, const, square, reduce_over_batch([3]), middle), start=1):
            s.add_graph(gid, ga.Graph.from_onnx(model))
        with pytest.raises(ValueError, match=r"input 'bias' is declared \[4\]: its axis 0 is not a batch dim"):
            ga.Batcher(s, 1)
        with pytest.raises(ValueError, match=r"output 'table' is declared \[8, 4\], with no batch dim"):
            ga.Batcher(s, 2)
        with pytest.raises(ValueError, match=r"output 'g' is declared \['N', 'N'\], with the batch dim on several"):
            ga.Batcher(s, 3)
        with pytest.raises(ValueError, match=r"output 's' is declared \[3\].*session.run_graph_async"):
            ga.Batcher(s, 4)
        with pytest.raises(ValueError, match=r"fixed batch dim of 2 .* pass batch_axis=1"):
            ga.Batcher(s, 5)  # the symbolic dim is elsewhere: the message says where
        b = ga.Batcher(s, 5, batch_axis=1)
        x = np.arange(2 * 3 * 3, dtype=np.float32).reshape(2, 3, 3) - 8
        (y,) = await b.run([x])
        np.testing.assert_array_equal(y.numpy(), np.maximum(x, 0))
        await b.aclose()
        await s.run_graph_async(4, [np.ones((2, 3), np.float32)])  # the refused graphs still run unbatched


async def test_an_output_whose_shape_is_not_declared_is_checked_when_it_is_split(anyio_backend):
    """An output declared without a shape is split along the batch axis if it has the batch's rows there; if not
    (here a sum over the batch), every request of the batch fails with an error that says why, never with another
    request's values. A request that runs alone, unpadded, gets its own run's outputs."""
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(reduce_over_batch(None)))
        b = ga.Batcher(s, 1, max_batch_size=8, max_delay=5.0)
        (alone,) = await b.run([np.full((2, 3), 5.0, np.float32)])  # the graph is idle: runs at once, as it is
        np.testing.assert_array_equal(alone.numpy(), np.full(3, 10.0, np.float32))
        ga.twin.inject_fault(s, 1, "delay_run", nth=1, delay=0.2)  # holds the graph: the next ones form a batch
        outs = await gather(*(lambda i=i: b.run([np.full((1, 3), i, np.float32)]) for i in range(5)))
        failed = [out for out in outs if isinstance(out, Exception)]
        assert len(failed) == 4, outs  # the first to start ran alone (which one is the loop's choice on trio)
        for out in failed:
            assert isinstance(out, ga.GeError) and "cannot be split per request" in str(out), out
        assert_adds_up(b.statistics())


async def test_outputs_batched_on_another_axis_are_split_along_it(anyio_backend):
    """An output that carries the batch dim on another axis than the inputs (a Transpose) is split along that
    axis: each request gets its own columns, also when its batch was padded."""
    model = make_model([helper.make_node("Transpose", ["x"], ["xt"]), helper.make_node("Neg", ["x"], ["n"])],
                       [("x", TensorProto.FLOAT, ["rows", 4])],
                       [("xt", TensorProto.FLOAT, [4, "rows"]), ("n", TensorProto.FLOAT, ["rows", 4])])
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        b = ga.Batcher(s, 1, max_batch_size=8, max_delay=5.0)
        ga.twin.inject_fault(s, 1, "delay_run", nth=1, delay=0.1)
        inputs = [np.random.default_rng(i).standard_normal((1 + i % 3, 4), dtype=np.float32) for i in range(9)]
        outs = await gather(*(lambda x=x: b.run([x]) for x in inputs))
        for x, out in zip(inputs, outs, strict=True):
            assert not isinstance(out, Exception), out
            xt, n = out
            np.testing.assert_array_equal(xt.numpy(), x.T)
            np.testing.assert_array_equal(n.numpy(), -x)
        st = b.statistics()
        assert st.batches < 9 and st.completed == 9, st
        (xt, _n) = await b.run([inputs[0][:1].repeat(3, axis=0)])  # alone, padded from 3 rows to 4
        assert xt.shape == (4, 3)
        await b.aclose()


async def test_a_graph_in_another_run_mode_is_refused(anyio_backend):
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(make_mlp()))
        s.run_graph(1, [rows(1, 0)])  # RunGraph mode, fixed by its first run
        with pytest.raises(ga.ExecutionModeError, match=r"Batcher\(graph_id=1\).*RunGraph was already called"):
            ga.Batcher(s, 1)


def test_aclose_returns_when_the_batchers_loop_was_closed_with_requests_in_it():
    """Its requests' tasks are gone with their loop: aclose() on another loop returns instead of waiting for them."""

    def close_the_loop_then_the_batcher(s):
        b = ga.Batcher(s, 1)
        loop = asyncio.new_event_loop()

        async def start():
            for i in range(3):
                loop.create_task(b.run([rows(1, i)]))
            await asyncio.sleep(0.02)

        loop.run_until_complete(start())
        assert b.statistics().batches_in_flight >= 1
        loop.close()

        async def close():
            with anyio.fail_after(5):
                await b.aclose()

        asyncio.run(close())

    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(make_mlp()))
        # every run's completion is held until the loop is closed: its batches are in flight then, however slowly the
        # loop ran (a delay used to let a loaded machine finish them first)
        ga.twin.inject_fault(s, 1, "stall_callback", nth=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Task was destroyed but it is pending": what this test does
            close_the_loop_then_the_batcher(s)
            ga.twin.release_stalled(s, 1)
            deadline = time.monotonic() + 5
            while s.statistics().in_flight and time.monotonic() < deadline:  # the runs its tasks were waiting for
                time.sleep(0.01)
            gc_collect_harder()  # its tasks (and their reports) go now, not at exit


async def test_static_graph_batches_are_padded(anyio_backend):
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(add_model((4, 16))))
        b = ga.Batcher(s, 1, batch_sizes=[4])
        inputs = [(np.full((1, 16), i, np.float32), np.full((1, 16), 10 * i, np.float32)) for i in range(7)]
        outs = await gather(*(lambda a=a, c=c: b.run([a, c]) for a, c in inputs))
        for (a, c), out in zip(inputs, outs, strict=True):
            assert not isinstance(out, Exception), out
            assert out[0].shape == (1, 16)
            np.testing.assert_array_equal(out[0].numpy(), a + c)


async def test_aclose_runs_what_is_queued_and_refuses_more(anyio_backend):
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(make_mlp()))
        b = ga.Batcher(s, 1, max_batch_size=64, max_delay=10.0)
        ga.twin.inject_fault(s, 1, "delay_run", nth=1, delay=0.1)
        results = []

        async def one(i):
            results.append(await b.run([rows(1, i)]))

        async with anyio.create_task_group() as tg:
            for i in range(5):
                tg.start_soon(one, i)
            await wait_until(lambda: b.statistics().queued == 4, "4 queued", interval=0.001)
            with anyio.fail_after(5):
                await b.aclose()  # does not wait for max_delay
        assert len(results) == 5
        with pytest.raises(ga.BatcherClosedError):
            await b.run([rows(1, 0)])


async def test_closed_session_fails_every_request(anyio_backend):
    s = ga.Session()
    s.add_graph(1, ga.Graph.from_onnx(make_mlp()))
    b = ga.Batcher(s, 1)
    s.close()
    outs = await gather(*(lambda i=i: b.run([rows(1, i)]) for i in range(4)))
    assert all(isinstance(o, ga.SessionClosedError) for o in outs), outs
    st = b.statistics()
    assert st.failed == 4
    assert_adds_up(st)


async def test_pool_spreads_batches_over_instances(anyio_backend):
    async with ga.Session() as s:
        pool = ga.GraphPool.add(s, ga.Graph.from_onnx(make_mlp()), graph_ids=[1, 2])
        for gid in pool.graph_ids:
            ga.twin.inject_fault(s, gid, "delay_run", nth=0, delay=0.05)
        b = ga.Batcher(s, pool, max_batch_size=8)
        assert b.max_concurrent_batches == 2
        inputs = [rows(1, seed=i) for i in range(24)]
        outs = await gather(*(lambda x=x: b.run([x]) for x in inputs))
        for x, out in zip(inputs, outs, strict=True):
            np.testing.assert_allclose(out[0].numpy(), mlp_reference(x), rtol=1e-4, atol=1e-6)
        assert ga.twin.fault_runs(s, 1) > 0 and ga.twin.fault_runs(s, 2) > 0  # both instances ran batches


async def test_pool_keeps_to_one_instance_at_low_load_and_spreads_under_load(anyio_backend):
    """One request at a time stays on the instance used last (its model thread is the one awake); requests that
    overlap go to the least busy instance."""
    async with ga.Session() as s:
        pool = ga.GraphPool.add(s, ga.Graph.from_onnx(make_mlp()), graph_ids=[4, 5])
        for _ in range(10):
            await pool.run_graph_async([rows(1, 0)])
        graphs = s.statistics().graphs  # (a graph that never ran has no entry)
        per_graph = {g: graphs[g].completed if g in graphs else 0 for g in pool.graph_ids}
        assert sorted(per_graph.values()) == [0, 10], per_graph
        for gid in pool.graph_ids:
            ga.twin.inject_fault(s, gid, "delay_run", nth=0, delay=0.05)
        async with anyio.create_task_group() as tg:
            for i in range(4):
                tg.start_soon(pool.run_graph_async, [rows(1, i)])
        assert [ga.twin.fault_runs(s, g) for g in pool.graph_ids] == [2, 2]


async def test_pool_runs_instances_side_by_side(anyio_backend):
    async with ga.Session() as s:
        pool = ga.GraphPool.add(s, ga.Graph.from_onnx(make_mlp()), graph_ids=[7, 8, 9])
        for gid in pool.graph_ids:
            ga.twin.inject_fault(s, gid, "stall_callback", nth=1)
        results = []

        async def one(i):
            results.append(await pool.run_graph_async([rows(1, i)]))

        async with anyio.create_task_group() as tg:
            for i in range(3):
                tg.start_soon(one, i)
            # one request on each instance: each stalls on its own graph
            await wait_until(lambda: all(ga.twin.fault_runs(s, g) == 1 for g in pool.graph_ids), "3 instances busy")
            for gid in pool.graph_ids:
                ga.twin.release_stalled(s, gid)
        assert len(results) == 3
        with pytest.raises(ValueError, match="distinct"):
            ga.GraphPool(s, [1, 1])


async def test_cancel_storm_never_strands_a_batch(anyio_backend):
    """Requests cancelled at random moments, some as their batch completes: every other request gets its rows."""
    import random

    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(make_mlp()))
        b = ga.Batcher(s, 1, max_batch_size=16, max_delay=0.001)
        rng = random.Random(3)
        inputs = [rows(1, seed=i) for i in range(300)]
        ok = cancelled = 0

        async def one(i):
            nonlocal ok, cancelled
            with anyio.move_on_after(rng.choice([0, 0.0005, 0.001, 0.002, 10.0])) as scope:
                (probs,) = await b.run([inputs[i]])
                np.testing.assert_allclose(probs.numpy(), mlp_reference(inputs[i]), rtol=1e-4, atol=1e-6)
                ok += 1
            if scope.cancelled_caught:
                cancelled += 1

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for i in range(300):
                    tg.start_soon(one, i)
                    if i % 7 == 0:
                        await anyio.sleep(0)
        st = b.statistics()
        assert ok + cancelled == 300 and ok > 0, (ok, cancelled)
        # a request whose rows were delivered as its deadline struck counts cancelled: its caller never got them
        assert st.completed + st.cancelled == 300 and st.failed == 0, (st, ok, cancelled)
        assert (st.completed, st.cancelled) == (ok, cancelled), (st, ok, cancelled)
        assert_adds_up(st)
        assert st.queued == 0 and st.running == 0


@pytest.mark.timeout(300, method="thread")
def test_batcher_benchmark_runs_and_prints_its_targets(tmp_path):
    """The benchmark still runs (tiny sizes; it measures, this only checks that it reports)."""
    import subprocess
    import sys

    from conftest import ROOT

    out = tmp_path / "batcher.md"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_batcher.py"), "--seconds", "0.2",
                           "--rounds", "1", "--out", str(out)], capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    for loop in ("asyncio", "uvloop"):
        assert f"- {loop}: batcher / unbatched at 256 clients:" in text, text
        assert f"- {loop}: heavy MLP" in text and "2 instances" in text, text
    assert "target >= 8x" in text and "p99" in text
