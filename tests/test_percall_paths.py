"""The per-call paths of runs: a thread's input descriptor slots are refilled whole only when an input's layout
(size, dtype, placement, shape) differs from what the slot last described, else only their data pointer is. Every
way a layout can change between two runs on one thread must still reach the runtime: another shape, another dtype,
another input count, more inputs than ever before, Tensor / copied inputs, other threads, the async submit path.
Results are checked against onnx.reference."""

from __future__ import annotations

import gc
import threading
import weakref

import anyio
import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

import geasync as ga
from conftest import TensorProto, helper, make_model

pytestmark = pytest.mark.timeout(120, method="thread")

F, D, I32 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT32


def neg_model(elem=F, shape=("n", 4)):
    return make_model([helper.make_node("Neg", ["x"], ["y"])], [("x", elem, list(shape))],
                      [("y", elem, list(shape))])


def sum_model(k, shape=("n", 4)):
    names = [f"x{i}" for i in range(k)]
    return make_model([helper.make_node("Sum", names, ["y"])], [(n, F, list(shape)) for n in names],
                      [("y", F, list(shape))])


def concat_model():
    """Inputs of different shapes at each slot (their row counts differ): y = concat(a, b) on axis 0."""
    return make_model([helper.make_node("Concat", ["a", "b"], ["y"], axis=0)],
                      [("a", F, ["n", 4]), ("b", F, ["m", 4])], [("y", F, ["k", 4])])


class Graphs:
    """Graph ids of a session with their models, each run checked against onnx.reference."""

    def __init__(self, session):
        self.session = session
        self.refs = {}

    def add(self, graph_id, model):
        self.session.add_graph(graph_id, ga.Graph.from_onnx(model.SerializeToString()))
        self.refs[graph_id] = (ReferenceEvaluator(model), [i.name for i in model.graph.input])

    def expect(self, graph_id, inputs):
        ref, names = self.refs[graph_id]
        return ref.run(None, {n: np.asarray(x) for n, x in zip(names, inputs, strict=True)})[0]

    def check(self, graph_id, inputs):
        (out,) = self.session.run_graph(graph_id, inputs)
        np.testing.assert_array_equal(out.numpy(), self.expect(graph_id, inputs))


def data(shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 10).astype(dtype)


def test_new_data_same_layout_reaches_the_runtime(session):
    g = Graphs(session)
    g.add(1, neg_model())
    x = data((2, 4))
    for k in range(5):  # fresh arrays, and the same array written in place
        g.check(1, [data((2, 4), seed=k)])
        x += 1
        g.check(1, [x])


def test_shape_changes_at_a_slot(session):
    g = Graphs(session)
    g.add(1, neg_model())
    for rows in (2, 3, 2, 1, 7, 7, 2, 0, 2):
        g.check(1, [data((rows, 4), seed=rows)])


def test_dtype_changes_at_a_slot_with_the_same_shape(session):
    g = Graphs(session)
    for gid, elem in enumerate((F, D, I32), start=1):
        g.add(gid, neg_model(elem, (2, 4)))
    for _ in range(2):
        for gid, dt in ((1, np.float32), (2, np.float64), (3, np.int32), (1, np.float32), (3, np.int32)):
            g.check(gid, [data((2, 4), dt, seed=gid)])


def test_input_count_changes_and_grows_past_the_first_slots(session):
    g = Graphs(session)
    g.add(1, neg_model())
    for k in (2, 5, 9):
        g.add(k, sum_model(k))
    order = [1, 2, 9, 1, 5, 2, 9, 9, 1]
    for step, gid in enumerate(order):
        rows = 1 + step % 3
        k = 1 if gid == 1 else gid
        g.check(gid, [data((rows, 4), seed=10 * step + i) for i in range(k)])


def test_each_slot_keeps_its_own_layout(session):
    g = Graphs(session)
    g.add(1, concat_model())
    for n, m in ((1, 2), (2, 1), (2, 1), (1, 2), (3, 3), (1, 2)):
        g.check(1, [data((n, 4), seed=n), data((m, 4), seed=10 + m)])


def test_tensor_and_copied_inputs_between_array_ones(session):
    g = Graphs(session)
    g.add(1, neg_model())
    wide = data((3, 8))
    for x in (data((3, 4)), ga.Tensor.from_numpy(data((3, 4), seed=1)), wide[:, ::2], data((3, 4), seed=2),
              wide[:, 1::2], ga.Tensor.from_numpy(wide[:, ::2])):
        (out,) = session.run_graph(1, [x])
        np.testing.assert_array_equal(out.numpy(), g.expect(1, [np.asarray(x)]))


def test_a_refused_input_does_not_spoil_the_next_run(session):
    g = Graphs(session)
    g.add(1, neg_model(F, (2, 4)))
    g.check(1, [data((2, 4))])
    with pytest.raises(ga.InputError):
        session.run_graph(1, [data((3, 4))])
    with pytest.raises(ga.InputTypeError):
        session.run_graph(1, [data((2, 4), np.float64)])
    g.check(1, [data((2, 4), seed=3)])


def test_slots_do_not_keep_the_last_input_alive(session):
    g = Graphs(session)
    g.add(1, neg_model())
    x = data((2, 4))
    g.check(1, [x])
    g.check(1, [x])  # the second run refills only the pointer
    ref = weakref.ref(x)
    del x
    gc.collect()
    assert ref() is None


def test_threads_with_their_own_layouts(session):
    g = Graphs(session)
    g.add(1, neg_model())
    g.add(2, sum_model(2))
    errors = []

    def worker(t):
        try:
            for step in range(60):
                rows = 1 + (t + step) % 4
                if (t + step) % 3:
                    g.check(1, [data((rows, 4), seed=t * 1000 + step)])
                else:
                    g.check(2, [data((rows, 4), seed=t), data((rows, 4), seed=step)])
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


@pytest.mark.anyio
async def test_async_submit_layout_changes(anyio_backend):
    async with ga.Session() as s:
        g = Graphs(s)
        g.add(1, neg_model())
        g.add(2, sum_model(5))
        for step in range(8):
            rows = 1 + step % 3
            x = [data((rows, 4), seed=step + i) for i in range(5)]
            (a,) = await s.run_graph_async(2, x)
            np.testing.assert_array_equal(a.numpy(), g.expect(2, x))
            (b,) = await s.run_graph_async(1, x[:1])
            np.testing.assert_array_equal(b.numpy(), g.expect(1, x[:1]))
        results = []

        async def one(k):
            x = [data((1 + k % 2, 4), seed=k)]
            (out,) = await s.run_graph_async(1, x)
            results.append((out.numpy(), g.expect(1, x)))

        async with anyio.create_task_group() as tg:
            for k in range(16):
                tg.start_soon(one, k)
        for got, want in results:
            np.testing.assert_array_equal(got, want)


def test_same_size_other_shape_at_a_slot(session):
    g = Graphs(session)
    g.add(1, neg_model(F, ("n", "m")))
    for shape in ((2, 4), (4, 2), (8, 1), (1, 8), (2, 4)):
        g.check(1, [data(shape, seed=shape[0])])


def test_host_and_device_inputs_of_one_layout(session):
    g = Graphs(session)
    g.add(1, neg_model(F, (2, 4)))
    for k in range(3):
        host = data((2, 4), seed=k)
        g.check(1, [host])
        (out,) = session.run_graph(1, [ga.Tensor.from_numpy(host).to_device()])
        got = out.numpy() if out.placement == "host" else out.to_host().numpy()
        np.testing.assert_array_equal(got, g.expect(1, [host]))
