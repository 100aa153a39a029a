"""How a run's outputs reach the caller: host outputs up to the copy threshold are copied into numpy memory when
their data is final (synchronous runs, RunGraphAsync completions) and their native tensors freed at once; larger
ones, and stream-mode outputs (not final until the stream passes the run), stay in runtime memory. Either way the
values, dtypes and shapes are the runtime's, the arrays are writable and nothing leaks."""

from __future__ import annotations

import anyio
import numpy as np
import pytest

import geasync as ga
from geasync import _lib
from conftest import TensorProto, gc_collect_harder, helper, live, make_model

pytestmark = pytest.mark.timeout(120)

COPY_MAX = _lib.OUTPUT_COPY_MAX

DTYPES = [
    (np.float32, TensorProto.FLOAT), (np.float16, TensorProto.FLOAT16), (np.float64, TensorProto.DOUBLE),
    (np.int8, TensorProto.INT8), (np.uint8, TensorProto.UINT8), (np.int16, TensorProto.INT16),
    (np.int32, TensorProto.INT32), (np.int64, TensorProto.INT64), (np.bool_, TensorProto.BOOL),
]


def identity_model(shape, elem_type):
    """y = Identity(x) and z = Identity(x): two outputs of one input."""
    return make_model([helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Identity", ["x"], ["z"])],
                      [("x", elem_type, list(shape))], [("y", elem_type, list(shape)), ("z", elem_type, list(shape))])


def sample(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return np.asarray(rng.random(shape) < 0.5)
    return np.asarray(rng.standard_normal(shape) * 50).astype(dtype)


@pytest.mark.parametrize("dtype,elem", DTYPES, ids=[np.dtype(d).name for d, _ in DTYPES])
@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (1,), (4, 4), (2, 3, 1, 2, 5)], ids=str)
def test_small_outputs_are_exact_writable_and_own_their_memory(dtype, elem, shape):
    x = sample(shape, dtype)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(identity_model(shape, elem)))
        before = live()["tensors"]
        y, z = s.run_graph(1, [x])
        assert live()["tensors"] == before  # copied: no native tensor is held for them
        for t in (y, z):
            a = t.numpy()
            assert a.dtype == np.dtype(dtype) and a.shape == shape == t.shape and t.dtype == np.dtype(dtype)
            np.testing.assert_array_equal(a, x)
            assert a.flags.writeable and a.flags.c_contiguous
        assert not np.shares_memory(y.numpy(), x) and not np.shares_memory(y.numpy(), z.numpy())
        if x.size:
            y.numpy().flat[0] = z.numpy().flat[0]  # writable, and each output its own memory
            np.testing.assert_array_equal(z.numpy(), x)


@pytest.mark.parametrize("nbytes,copied", [(COPY_MAX, True), (COPY_MAX + 4, False)], ids=["at-threshold", "above"])
def test_threshold_decides_copy_or_runtime_memory(nbytes, copied):
    shape = (nbytes // 4,)
    x = sample(shape, np.float32)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(identity_model(shape, TensorProto.FLOAT)))
        before = live()["tensors"]
        y, z = s.run_graph(1, [x])
        assert live()["tensors"] == before + (0 if copied else 2)
        np.testing.assert_array_equal(y.numpy(), x)
        np.testing.assert_array_equal(z.numpy(), x)
        del y, z
        assert live()["tensors"] == before


def test_mixed_small_and_large_outputs_of_one_run():
    """One run with outputs on both sides of the threshold: each handed over its own way, in order."""
    big, small = (COPY_MAX // 4 + 64,), (5,)
    model = make_model([helper.make_node("Identity", ["a"], ["p"]), helper.make_node("Identity", ["b"], ["q"]),
                        helper.make_node("Neg", ["a"], ["r"])],
                       [("a", TensorProto.FLOAT, list(big)), ("b", TensorProto.FLOAT, list(small))],
                       [("p", TensorProto.FLOAT, list(big)), ("q", TensorProto.FLOAT, list(small)),
                        ("r", TensorProto.FLOAT, list(big))])
    a, b = sample(big, np.float32, 1), sample(small, np.float32, 2)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        before = live()["tensors"]
        for _ in range(3):
            p, q, r = s.run_graph(1, [a, b])
            assert live()["tensors"] == before + 2
            np.testing.assert_array_equal(p.numpy(), a)
            np.testing.assert_array_equal(q.numpy(), b)
            np.testing.assert_array_equal(r.numpy(), -a)
            del p, q, r
        assert live()["tensors"] == before


def test_output_fed_back_as_input_either_way():
    """Outputs of both kinds are ordinary Tensors for a later run."""
    for n in (16, COPY_MAX // 4 + 16):
        x = sample((n,), np.float32)
        with ga.Session() as s:
            s.add_graph(1, ga.Graph.from_onnx(identity_model((n,), TensorProto.FLOAT)))
            y, _ = s.run_graph(1, [x])
            y2, _ = s.run_graph(1, [y])
            np.testing.assert_array_equal(y2.numpy(), x)
            assert y.address and y.nbytes == x.nbytes


@pytest.mark.anyio
@pytest.mark.parametrize("n", [16, COPY_MAX // 4 + 16], ids=["copied", "runtime-memory"])
async def test_async_outputs_either_way(n):
    x = sample((n,), np.float32, 3)
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(identity_model((n,), TensorProto.FLOAT)))
        before = live()["tensors"]
        for _ in range(3):
            y, z = await s.run_graph_async(1, [x])
            np.testing.assert_array_equal(y.numpy(), x)
            np.testing.assert_array_equal(z.numpy(), x)
            if n == 16:
                assert live()["tensors"] == before  # copied as the completion was drained
            else:
                assert live()["tensors"] >= before + 2
            del y, z
        await anyio.sleep(0.01)  # the loop may hold the last completed future until its next turn
        gc_collect_harder()
        assert live()["tensors"] == before


@pytest.mark.parametrize("fail_in", ["view", "copy"])
def test_a_failure_while_handing_outputs_over_leaks_nothing(monkeypatch, fail_in):
    """Should wrapping one output fail, the run raises that error and every output's native tensor is freed: the
    ones wrapped before it with their objects, the copied ones and the ones not reached at once."""
    import geasync.tensor

    factory = geasync.tensor.TENSORS
    original = getattr(factory, fail_in)

    def failing(*args):
        raise RuntimeError(f"injected failure in {fail_in}")

    big, small = (COPY_MAX // 4 + 64,), (5,)
    model = make_model([helper.make_node("Identity", ["a"], ["p"]), helper.make_node("Identity", ["b"], ["q"]),
                        helper.make_node("Neg", ["a"], ["r"]), helper.make_node("Neg", ["b"], ["t"])],
                       [("a", TensorProto.FLOAT, list(big)), ("b", TensorProto.FLOAT, list(small))],
                       [("p", TensorProto.FLOAT, list(big)), ("q", TensorProto.FLOAT, list(small)),
                        ("r", TensorProto.FLOAT, list(big)), ("t", TensorProto.FLOAT, list(small))])
    a, b = sample(big, np.float32, 1), sample(small, np.float32, 2)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        before = live()["tensors"]
        monkeypatch.setattr(factory, fail_in, failing)
        with pytest.raises(RuntimeError, match=f"injected failure in {fail_in}"):
            s.run_graph(1, [a, b])
        gc_collect_harder()
        assert live()["tensors"] == before
        monkeypatch.setattr(factory, fail_in, original)
        p, q, r, t = s.run_graph(1, [a, b])  # the session is unharmed
        np.testing.assert_array_equal(r.numpy(), -a)
        np.testing.assert_array_equal(t.numpy(), -b)


def layouts_model():
    """Outputs of one symbolic-shape input x[n, m]: itself (float32), as int32 and as uint8 viewed as bytes of the
    same count, and flattened: pairs with the same byte count and different dtypes or shapes."""
    return make_model([helper.make_node("Identity", ["x"], ["f"]),
                       helper.make_node("Cast", ["x"], ["i"], to=TensorProto.INT32),
                       helper.make_node("Cast", ["x"], ["u"], to=TensorProto.UINT8),
                       helper.make_node("Flatten", ["x"], ["flat"], axis=0)],
                      [("x", TensorProto.FLOAT, ["n", "m"])],
                      [("f", TensorProto.FLOAT, ["n", "m"]), ("i", TensorProto.INT32, ["n", "m"]),
                       ("u", TensorProto.UINT8, ["n", "m"]), ("flat", TensorProto.FLOAT, [1, "nm"])])


def check_layouts_run(s, shape, seed):
    x = np.asarray(np.random.default_rng(seed).integers(0, 100, shape), np.float32)
    f, i, u, flat = s.run_graph(1, [x])
    for t, want in ((f, x), (i, x.astype(np.int32)), (u, x.astype(np.uint8)), (flat, x.reshape(1, -1))):
        a = t.numpy()
        assert a.dtype == want.dtype and a.shape == want.shape == t.shape and t.nbytes == want.nbytes
        np.testing.assert_array_equal(a, want)


@pytest.mark.anyio
async def test_outputs_of_changing_shapes_keep_their_own_dtype_and_shape():
    """The binding keeps what it derived from each output layout (dtype, shape, size) the runtime names: outputs
    whose shapes change from run to run, and outputs of equal byte counts but other dtypes or shapes, must never
    come back described as another one (synchronous and RunGraphAsync runs, either side of the copy threshold)."""
    shapes = [(2, 6), (3, 4), (12, 1), (1, 12), (2, 6), (4, 3), (0, 5), (5, 0), (1, 1),
              (64, COPY_MAX // 256 + 8), (2, 6), (64, COPY_MAX // 256)]
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(layouts_model()))
        s.add_graph(2, ga.Graph.from_onnx(layouts_model()))  # (a graph's first run fixes its mode)
        before = live()["tensors"]
        for k, shape in enumerate(shapes * 2):
            check_layouts_run(s, shape, k)
            x = np.full(shape, 7, np.float32)
            f, i, u, flat = await s.run_graph_async(2, [x])
            assert (f.shape, i.dtype, u.dtype, flat.shape) == (shape, np.int32, np.uint8, (1, x.size))
            np.testing.assert_array_equal(i.numpy(), x.astype(np.int32))
            del f, i, u, flat
        # asyncio's handle that last resumed this task holds the future it waited for (and that run's outputs) until
        # the task yields again; runs that complete during their submit's poll never yield: let the loop turn once
        await anyio.sleep(0)
        gc_collect_harder()
        assert live()["tensors"] == before


def test_outputs_stay_right_once_the_runtime_stops_naming_new_layouts():
    """The shim names at most GA_MAX_OUTPUT_LAYOUTS layouts per process; past that, outputs of new layouts come
    without a name and the binding reads their fields every time. Run in a fresh interpreter: it uses up the table."""
    code = """
        import numpy as np
        import geasync as ga
        from geasync import _lib
        from test_output_handover import check_layouts_run, layouts_model

        with ga.Session() as s:
            s.add_graph(1, ga.Graph.from_onnx(layouts_model()))
            check_layouts_run(s, (2, 3), 0)
            limit = int(_lib.lib.GA_MAX_OUTPUT_LAYOUTS)
            n = 1
            while len(_lib._layouts) < limit:  # four new layouts a run (two of them equal at n = 1)
                x = np.full((1, n), n % 97, np.float32)
                f, i, u, flat = s.run_graph(1, [x])
                assert f.shape == (1, n) and int(i.numpy()[0, -1]) == n % 97
                n += 1
            assert len(_lib._layouts) == limit
            for k, shape in enumerate([(2, 3), (n + 1, 1), (1, n + 2), (3, 2), (n + 1, 1)]):  # seen and new ones
                check_layouts_run(s, shape, k)
            assert len(_lib._layouts) == limit
        print("ok", n)
    """
    from test_adversarial import run_isolated
    assert run_isolated(code, timeout=110).stdout.startswith("ok")


def test_large_output_memory_is_reused_only_once_released():
    """Host outputs of 16 MiB and more are kept for reuse when released (fresh pages from the system made such a
    run several times slower): a reused block is never one a live output still holds, whatever the sizes."""
    big = 9 << 20  # 36 MiB of float32
    with ga.Session() as s:
        for graph_id, n in ((1, big), (2, big // 2 + 3), (3, big + big // 2)):
            s.add_graph(graph_id, ga.Graph.from_onnx(make_model([helper.make_node("Neg", ["x"], ["y"])],
                                                                [("x", TensorProto.FLOAT, [n])],
                                                                [("y", TensorProto.FLOAT, [n])])))
        rng = np.random.default_rng(5)
        held = []
        for step, graph_id in enumerate([1, 1, 2, 3, 1, 2, 1, 3, 3, 1]):
            n = {1: big, 2: big // 2 + 3, 3: big + big // 2}[graph_id]
            x = rng.standard_normal(n, dtype=np.float32)
            (y,) = s.run_graph(graph_id, [x])
            held.append((y.numpy(), -x))
            if step % 3 == 2:  # release the oldest: its block may serve a later run
                del held[0]
            for got, want in held:  # a reused block never overwrote an output still held
                np.testing.assert_array_equal(got, want)
        del y, got, want  # the last views
        held.clear()
    counts = live()
    assert counts["tensors"] == 0 and counts.get("twin_host_output_blocks", 0) == 0, counts
