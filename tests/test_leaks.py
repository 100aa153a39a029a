"""Native live counters return to where they started after many runs, session cycles and stream-mode runs."""

from __future__ import annotations

import numpy as np
import pytest

import geasync as ga
from geasync import _lib
from conftest import TensorProto, add_model, helper, live, make_mlp, make_model

pytestmark = pytest.mark.timeout(120)

A = np.ones((1, 16), np.float32)


def diff(before, after, ignore=()):
    return {k: (before[k], after[k]) for k in before if k not in ignore and after.get(k) != before[k]}


def test_counters_are_ints_and_known():
    c = ga.live_counters()
    for key in ("sessions", "graphs", "tensors", "outputs_lists", "streams", "allocators"):
        assert isinstance(c[key], int)
    assert all(v >= 0 for v in c.values())


def test_counters_track_live_objects():
    """The counters must actually move, or the leak tests below would prove nothing. A host output larger than
    the copy threshold stays in runtime memory (a native tensor while its Tensor lives); a small one is copied
    into numpy memory as its run returns, its native tensor freed at once."""
    big = np.ones((1, _lib.OUTPUT_COPY_MAX // 4 + 16), np.float32)
    before = live()
    s = ga.Session()
    s.add_graph(1, ga.Graph.from_onnx(add_model(big.shape)))
    s.add_graph(2, ga.Graph.from_onnx(add_model()))
    outs = s.run_graph(1, [big, big])
    small = s.run_graph(2, [A, A])
    mid = live()
    assert mid["sessions"] == before["sessions"] + 1
    assert mid["tensors"] == before["tensors"] + 1
    np.testing.assert_array_equal(outs[0].numpy(), big + big)
    np.testing.assert_array_equal(small[0].numpy(), A + A)
    del outs
    assert live()["tensors"] == before["tensors"]
    s.close()
    assert not diff(before, live())


def test_10k_run_graph_add_no_leak(no_leaks):
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        b = np.arange(16, dtype=np.float32).reshape(1, 16)
        for i in range(10_000):
            (c,) = s.run_graph(1, [A, b])
            if i % 2500 == 0:
                np.testing.assert_array_equal(c.numpy(), A + b)
        del c


def test_10k_run_graph_counters_flat_while_session_open():
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        s.run_graph(1, [A, A])
        before = live()
        for _ in range(10_000):
            s.run_graph(1, [A, A])
        after = live()
        assert not diff(before, after)


@pytest.mark.parametrize("width", [16, _lib.OUTPUT_COPY_MAX // 4 + 16], ids=["copied", "runtime-memory"])
@pytest.mark.parametrize("count", [1, 8, 9, 20])
def test_run_graph_with_many_outputs_no_leak(no_leaks, count, width):
    """A synchronous run hands its outputs over in the same native call when they fit the thread's buffer (8), and
    through a list the buffer grows to take when they do not: every output right, in order, none leaked, on the
    first run of the thread and on later ones, whether copied into numpy memory (small) or kept where the runtime
    wrote them."""
    x = np.arange(width, dtype=np.float32).reshape(1, width) - 8
    nodes = [helper.make_node("Add", ["x", f"c{i}"], [f"y{i}"]) for i in range(count)]
    inits = [(f"c{i}", np.full((1, width), i, np.float32)) for i in range(count)]
    model = make_model(nodes, [("x", TensorProto.FLOAT, [1, width])],
                       [(f"y{i}", TensorProto.FLOAT, [1, width]) for i in range(count)], initializers=inits)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        for _ in range(3):
            outs = s.run_graph(1, [x])
            assert [o.numpy().tolist() for o in outs] == [(x + i).tolist() for i in range(count)]
        del outs


def test_outputs_kept_alive_by_numpy_views():
    """A numpy view of an output in runtime memory keeps that memory after its Tensor is gone."""
    big = np.ones((1, _lib.OUTPUT_COPY_MAX // 4 + 16), np.float32)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(add_model(big.shape)))
        before = live()
        views = []
        for i in range(100):
            (c,) = s.run_graph(1, [big, np.full_like(big, i)])
            views.append(c.numpy())
            del c
        assert live()["tensors"] == before["tensors"] + 100
        for i, v in enumerate(views):
            np.testing.assert_array_equal(v, big + i)
        del views, v
        assert not diff(before, live())


@pytest.mark.parametrize("batch", [1, 64])
def test_mlp_runs_no_leak(no_leaks, batch):
    x = np.random.default_rng(0).random((batch, 784), dtype=np.float32)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(make_mlp()))
        for _ in range(200):
            (y,) = s.run_graph(1, [x])
        assert y.shape == (batch, 10)
        del y


def test_mlp_varying_batches_no_leak(no_leaks):
    rng = np.random.default_rng(1)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(make_mlp()))
        for i in range(300):
            (y,) = s.run_graph(1, [rng.random((1 + i % 17, 784), dtype=np.float32)])
        del y


def test_failed_runs_no_leak(no_leaks):
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        for _ in range(500):
            with pytest.raises(ga.GeError):
                s.run_graph(1, [A])
            with pytest.raises(ga.GeError):
                s.run_graph(1, [np.zeros((2, 16), np.float32), A])
            with pytest.raises(ga.GeError):
                s.run_graph(99, [A, A])


def test_failed_add_graph_no_leak(no_leaks):
    with ga.Session() as s:
        for i in range(200):
            with pytest.raises(ga.GeError):
                s.add_graph(i, ga.Graph.from_onnx(b"\x01\x02garbage"))


def test_session_cycles_no_leak(no_leaks):
    for i in range(200):
        with ga.Session() as s:
            s.add_graph(1, ga.Graph.from_onnx(add_model()))
            s.add_graph(2, ga.Graph.from_onnx(add_model()))
            if i % 2:
                (c,) = s.run_graph(1, [A, A])
                del c
            s.remove_graph(2)


def test_add_remove_cycles_no_leak(no_leaks):
    g = ga.Graph.from_onnx(add_model())
    with ga.Session() as s:
        for _ in range(300):
            s.add_graph_clone(1, g)
            (c,) = s.run_graph(1, [A, A])
            del c
            s.remove_graph(1)
    del g


def test_session_closed_with_graphs_loaded_no_leak(no_leaks):
    for _ in range(50):
        s = ga.Session()
        for gid in range(3):
            s.add_graph(gid, ga.Graph.from_onnx(make_mlp()))
            s.run_graph(gid, [np.zeros((2, 784), np.float32)])
        s.close()


def test_stream_mode_runs_released_no_leak():
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    with ga.Stream() as st:
        with ga.Session() as s:
            s.add_graph(1, ga.Graph.from_onnx(add_model()))
            # first use of this stream registers geasync's process-wide default allocator for it: do it before measuring
            outs = s.run_graph_with_stream_async(1, st, [a, a])
            st.synchronize()
            del outs
            before = live()
            for i in range(500):
                outs = s.run_graph_with_stream_async(1, st, [a, a])
                st.synchronize()  # GE: outputs stay valid until the stream is synchronized
                if i % 100 == 0:
                    np.testing.assert_array_equal(outs[0].to_host().numpy(), 2 * a)
                del outs
            after = live()
            assert not diff(before, after)


def test_stream_mode_session_cycles_no_leak():
    with ga.Stream() as st:
        with ga.Session() as s:  # registers the default allocator for st
            s.add_graph(1, ga.Graph.from_onnx(add_model()))
            outs = s.run_graph_with_stream_async(1, st, [A, A])
            st.synchronize()
            del outs
        before = live()
        for _ in range(50):
            with ga.Session() as s:
                s.add_graph(1, ga.Graph.from_onnx(add_model()))
                outs = s.run_graph_with_stream_async(1, st, [A, A])
                st.synchronize()
                del outs
        assert not diff(before, live())


def test_closing_a_stream_releases_the_default_allocator_geasync_gave_it():
    """GE keeps allocators in a process-wide map keyed by stream; geasync registers a device allocator for a stream
    that has none. Closing the stream unregisters it: streams used and closed leave nothing behind."""
    n = 5
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        before = live()
        for _ in range(n):
            with ga.Stream() as st:
                outs = s.run_graph_with_stream_async(1, st, [A, A])
                st.synchronize()
                np.testing.assert_array_equal(outs[0].to_host().numpy(), 2 * A)
                del outs
        assert not diff(before, live())


def test_closing_the_session_releases_default_allocators_of_streams_still_open():
    before = live()
    with ga.Stream() as st:
        with ga.Session() as s:
            s.add_graph(1, ga.Graph.from_onnx(add_model()))
            outs = s.run_graph_with_stream_async(1, st, [A, A])
            st.synchronize()
            held = outs[0].to_host().numpy()  # device outputs outlive neither the session's allocator nor us
            del outs
            assert live()["allocators"] == before["allocators"] + 1
        assert live()["allocators"] == before["allocators"]
        # the stream outlives that session: the next session's run on it gets a device allocator again
        with ga.Session() as s2:
            s2.add_graph(1, ga.Graph.from_onnx(add_model()))
            outs = s2.run_graph_with_stream_async(1, st, [A, A])
            st.synchronize()
            np.testing.assert_array_equal(outs[0].to_host().numpy(), held)
            del outs
    assert not diff(before, live())


def test_to_device_to_host_no_leak(no_leaks):
    x = np.random.default_rng(0).random((64, 64), dtype=np.float32)
    for _ in range(300):
        d = ga.Tensor.from_numpy(x).to_device()
        h = d.to_host()
        del d, h


@pytest.mark.parametrize("make", [ga.Session, ga.Stream], ids=["Session", "Stream"])
def test_unclosed_object_warns_naming_itself_and_is_released(make, no_leaks):
    """An unclosed Session or Stream gives a ResourceWarning whose source is the object (so tracemalloc shows where
    it was made) and is still released."""
    import gc
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        obj = make()
        text = repr(obj)
        del obj
        gc.collect()
    unclosed = [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert len(unclosed) == 1, [str(w.message) for w in caught]
    assert str(unclosed[0].message).startswith(f"unclosed {text}")
    assert type(unclosed[0].source) is make
