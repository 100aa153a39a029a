"""Streams, device tensors, and external allocators for run_graph_with_stream_async."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import geasync as ga
from conftest import ROOT, TensorProto, add_model, helper, live, make_mlp, make_model

A = np.arange(16, dtype=np.float32).reshape(1, 16)


class Recording(ga.Allocator):
    """Counts calls and hands out real device memory."""

    def __init__(self):
        self.inner = ga.DeviceAllocator()
        self.mallocs: list[int] = []
        self.frees: list[int] = []
        self.given: list[int] = []

    def malloc(self, size):
        self.mallocs.append(size)
        address = self.inner.malloc(size)
        self.given.append(address)
        return address

    def free(self, address):
        self.frees.append(address)
        self.inner.free(address)


class Raising(ga.Allocator):
    def __init__(self, exc):
        self.exc = exc
        self.frees = 0

    def malloc(self, size):
        raise self.exc

    def free(self, address):
        self.frees += 1


class ReturnsZero(ga.Allocator):
    def malloc(self, size):
        return 0

    def free(self, address):
        pass


def two_output_model():
    nodes = [helper.make_node("Add", ["a", "b"], ["s"], name="add"),
             helper.make_node("Transpose", ["a"], ["t"], name="tr", perm=[1, 0]),
             helper.make_node("Cast", ["a"], ["i"], name="cast", to=TensorProto.INT64)]
    return make_model(nodes, [("a", TensorProto.FLOAT, [3, 5]), ("b", TensorProto.FLOAT, [3, 5])],
                      [("s", TensorProto.FLOAT, [3, 5]), ("t", TensorProto.FLOAT, [5, 3]),
                       ("i", TensorProto.INT64, [3, 5])])


def run_isolated(code: str, timeout=60) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter (a native crash must fail the test, not kill the test run)."""
    prelude = f"import sys; sys.path.insert(0, {str(ROOT / 'tests')!r})\n"
    # cwd: not the repo root, so the source tree stays off sys.path
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, cwd=str(ROOT / "tests"))


# --- Stream --------------------------------------------------------------------------------------

def test_stream_context_manager_int_and_close():
    with ga.Stream() as st:
        assert not st.closed
        addr = int(st)
        assert isinstance(addr, int) and addr != 0
        assert addr == st.address == st.__index__()
    assert st.closed
    st.close()  # idempotent
    with pytest.raises(ga.SessionClosedError):
        int(st)
    with pytest.raises(ga.SessionClosedError):
        st.query()


def test_stream_synchronize_and_query():
    with ga.Stream() as st:
        st.synchronize()
        assert st.query() is True
        st.synchronize(timeout=5.0)
        assert st.query() is True


def test_streams_are_distinct():
    with ga.Stream() as s1, ga.Stream() as s2:
        assert int(s1) != int(s2)


def test_stream_device_id_type_error():
    with pytest.raises(TypeError, match="device_id"):
        ga.Stream("0")  # type: ignore[arg-type]


def test_stream_counters():
    before = live()
    with ga.Stream():
        assert live()["streams"] == before["streams"] + 1
    assert live()["streams"] == before["streams"]


# --- stream-mode runs ----------------------------------------------------------------------------

def test_stream_run_outputs_are_device_tensors():
    with ga.Session() as s, ga.Stream() as st:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        b = np.full((1, 16), 0.5, np.float32)
        outs = s.run_graph_with_stream_async(1, st, [A, b])
        assert isinstance(outs, list) and len(outs) == 1
        (y,) = outs
        assert isinstance(y, ga.Tensor)
        assert y.placement == "device"
        assert y.shape == (1, 16) and y.dtype == np.float32
        with pytest.raises(ValueError):
            y.numpy()
        st.synchronize()
        assert st.query()
        h = y.to_host()
        assert h.placement == "host"
        np.testing.assert_array_equal(h.numpy(), A + b)
        del outs, y


def test_stream_run_mlp_matches_run_graph():
    x = np.random.default_rng(0).random((8, 784), dtype=np.float32)
    with ga.Session() as s, ga.Stream() as st:
        s.add_graph(1, ga.Graph.from_onnx(make_mlp()))
        s.add_graph(2, ga.Graph.from_onnx(make_mlp()))
        (ref,) = s.run_graph(1, [x])
        (y,) = s.run_graph_with_stream_async(2, st, [x])
        st.synchronize()
        np.testing.assert_allclose(y.to_host().numpy(), ref.numpy(), rtol=1e-6, atol=1e-7)
        del y


def test_stream_run_many_enqueued_then_synchronize():
    with ga.Session() as s, ga.Stream() as st:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        inputs = [np.full((1, 16), float(i), np.float32) for i in range(50)]
        results = [s.run_graph_with_stream_async(1, st, [x, A]) for x in inputs]
        st.synchronize()
        for x, (y,) in zip(inputs, results, strict=True):
            np.testing.assert_array_equal(y.to_host().numpy(), x + A)
        del results, y


def test_stream_run_with_device_inputs():
    with ga.Session() as s, ga.Stream() as st:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        da = ga.Tensor.from_numpy(A).to_device()
        db = ga.Tensor.from_numpy(A * 2).to_device()
        (y,) = s.run_graph_with_stream_async(1, st, [da, db])
        st.synchronize()
        np.testing.assert_array_equal(y.to_host().numpy(), 3 * A)
        # a device output feeds the next run
        (z,) = s.run_graph_with_stream_async(1, st, [y, da])
        st.synchronize()
        np.testing.assert_array_equal(z.to_host().numpy(), 4 * A)
        del y, z


def test_run_graph_accepts_device_inputs():
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        d = ga.Tensor.from_numpy(A).to_device()
        (y,) = s.run_graph(1, [d, A])
        assert y.placement == "host"
        np.testing.assert_array_equal(y.numpy(), 2 * A)


def test_dropping_stream_outputs_before_synchronize_is_safe():
    """Discarding the result of run_graph_with_stream_async (or del before synchronize) must not corrupt memory."""
    r = run_isolated("""
        import numpy as np, geasync as ga
        from conftest import add_model
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        with ga.Stream() as st, ga.Session() as s:
            s.add_graph(1, ga.Graph.from_onnx(add_model()))
            for _ in range(200):
                s.run_graph_with_stream_async(1, st, [a, a])   # result dropped at once
            st.synchronize()
            (y,) = s.run_graph_with_stream_async(1, st, [a, a])
            st.synchronize()
            assert np.array_equal(y.to_host().numpy(), 2 * a)
            del y
        print("done")
    """)
    assert r.returncode == 0 and "done" in r.stdout, (r.returncode, r.stderr[-2000:])


def test_stream_outputs_outlive_session():
    r = run_isolated("""
        import numpy as np, geasync as ga
        from conftest import add_model
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        with ga.Stream() as st:
            with ga.Session() as s:
                s.add_graph(1, ga.Graph.from_onnx(add_model()))
                (y,) = s.run_graph_with_stream_async(1, st, [a, a])
                st.synchronize()
            assert np.array_equal(y.to_host().numpy(), 2 * a)
            del y
        print("done")
    """)
    assert r.returncode == 0 and "done" in r.stdout, (r.returncode, r.stderr[-2000:])


# --- Tensor device round trip --------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.int32, np.uint8, np.bool_, np.float64])
@pytest.mark.parametrize("shape", [(3, 4), (7,), (), (2, 0, 3)])
def test_to_device_to_host_round_trip(dtype, shape):
    x = (np.random.default_rng(0).random(shape) * 100).astype(dtype)
    t = ga.Tensor.from_numpy(x)
    assert t.to_host() is t
    d = t.to_device()
    assert d.placement == "device" and d.shape == x.shape and d.dtype == x.dtype and d.nbytes == x.nbytes
    d2 = d.to_device()  # device -> device copy
    h = d2.to_host()
    assert h.placement == "host"
    np.testing.assert_array_equal(h.numpy(), x)
    x2 = np.array(h.numpy(), copy=True)
    del d, d2
    gc.collect()
    np.testing.assert_array_equal(x2, x)


def test_to_device_is_a_copy():
    x = np.ones((4,), np.float32)
    d = ga.Tensor.from_numpy(x).to_device()
    x[:] = 5
    np.testing.assert_array_equal(d.to_host().numpy(), np.ones(4, np.float32))


# --- external allocators -------------------------------------------------------------------------

def test_custom_allocator_gets_output_sizes_and_frees():
    alloc = Recording()
    with ga.Session() as s, ga.Stream() as st:
        s.add_graph(1, ga.Graph.from_onnx(two_output_model()))
        s.register_external_allocator(int(st), alloc)
        a = np.random.default_rng(0).random((3, 5), dtype=np.float32)
        b = np.random.default_rng(1).random((3, 5), dtype=np.float32)
        outs = s.run_graph_with_stream_async(1, st, [a, b])
        st.synchronize()
        assert sorted(alloc.mallocs) == sorted([15 * 4, 15 * 4, 15 * 8])
        assert alloc.frees == []
        assert {o.address for o in outs} <= set(alloc.given)
        np.testing.assert_array_equal(outs[0].to_host().numpy(), a + b)
        np.testing.assert_array_equal(outs[1].to_host().numpy(), a.T)
        np.testing.assert_array_equal(outs[2].to_host().numpy(), a.astype(np.int64))
        first = outs[0].address
        del outs[0]
        gc.collect()
        assert alloc.frees == [first]
        del outs
        gc.collect()
        assert sorted(alloc.frees) == sorted(alloc.given)
        assert alloc.inner.live_allocations == 0
        s.unregister_external_allocator(int(st))


def test_custom_allocator_accepts_stream_object():
    alloc = Recording()
    with ga.Session() as s, ga.Stream() as st:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        s.register_external_allocator(st, alloc)
        for _ in range(3):
            (y,) = s.run_graph_with_stream_async(1, st, [A, A])
            st.synchronize()
            np.testing.assert_array_equal(y.to_host().numpy(), 2 * A)
            del y
        gc.collect()
        assert alloc.mallocs == [A.nbytes] * 3
        assert len(alloc.frees) == 3
        s.unregister_external_allocator(st)


def test_closing_the_stream_or_session_from_an_allocator_callback_of_its_run_is_refused():
    """The run that called the allocator still needs its stream and session: closing either from inside it raises
    (it would wait for itself) and leaves both usable."""
    with ga.Session() as s, ga.Stream() as st:
        attempts: list[str] = []

        class Closing(Recording):
            def malloc(self, size):
                for close in (st.close, s.close):
                    try:
                        close()
                    except RuntimeError as exc:
                        # the message only: the exception's traceback would keep this run's frames (and its output
                        # tensor) alive through the allocator, which that tensor's memory keeps registered
                        attempts.append(str(exc))
                return super().malloc(size)

        alloc = Closing()
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        s.register_external_allocator(st, alloc)
        (y,) = s.run_graph_with_stream_async(1, st, [A, A])
        st.synchronize()
        assert [e[:40] for e in attempts] == ["Stream.close() was called from inside a ",
                                                   "Session.close() was called from inside a"], attempts
        assert not st.closed and not s.closed
        np.testing.assert_array_equal(y.to_host().numpy(), 2 * A)
        del y
        gc.collect()
        s.unregister_external_allocator(st)


def test_allocator_is_per_stream():
    alloc = Recording()
    with ga.Session() as s, ga.Stream() as st1, ga.Stream() as st2:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        s.add_graph(2, ga.Graph.from_onnx(add_model()))
        s.register_external_allocator(st1, alloc)
        (y,) = s.run_graph_with_stream_async(2, st2, [A, A])
        st2.synchronize()
        assert alloc.mallocs == []
        (z,) = s.run_graph_with_stream_async(1, st1, [A, A])
        st1.synchronize()
        assert alloc.mallocs == [A.nbytes]
        del y, z
        s.unregister_external_allocator(st1)


def test_allocator_is_process_wide_across_sessions():
    alloc = Recording()
    with ga.Stream() as st:
        with ga.Session() as s1, ga.Session() as s2:
            s1.register_external_allocator(st, alloc)
            s2.add_graph(1, ga.Graph.from_onnx(add_model()))
            (y,) = s2.run_graph_with_stream_async(1, st, [A, A])
            st.synchronize()
            del y
            assert alloc.mallocs == [A.nbytes]
            s1.unregister_external_allocator(st)


@pytest.mark.parametrize("exc", [MemoryError("pool exhausted"), ValueError("bad size"), RuntimeError("device gone")])
def test_raising_allocator_gives_ge_error_chained(exc):
    alloc = Raising(exc)
    with ga.Session() as s, ga.Stream() as st:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        s.register_external_allocator(st, alloc)  # before the snapshot: the bridge itself is one live allocator
        before = live()
        with pytest.raises(ga.GeError) as ei:
            s.run_graph_with_stream_async(1, st, [A, A])
        e = ei.value
        assert e.status == 1343225856  # MEMALLOC_FAILED
        assert "allocator" in e.error_message
        assert e.__cause__ is exc
        st.synchronize()
        assert not {k: (before[k], v) for k, v in live().items() if v != before[k]}
        # the session and stream stay usable with the default allocator
        s.unregister_external_allocator(st)
        (y,) = s.run_graph_with_stream_async(1, st, [A, A])
        st.synchronize()
        np.testing.assert_array_equal(y.to_host().numpy(), 2 * A)
        del y


def test_raising_allocator_no_leak_over_many_calls():
    with ga.Session() as s, ga.Stream() as st:
        s.add_graph(1, ga.Graph.from_onnx(two_output_model()))
        s.register_external_allocator(st, Raising(MemoryError("nope")))
        before = live()
        for _ in range(200):
            with pytest.raises(ga.GeError):
                s.run_graph_with_stream_async(1, st, [np.ones((3, 5), np.float32)] * 2)
        assert not {k: (before[k], v) for k, v in live().items() if v != before[k]}
        s.unregister_external_allocator(st)


def test_partially_failing_allocator_frees_what_it_got():
    """The second output's malloc fails: the first output's block must be freed, not leaked."""

    class FailSecond(Recording):
        def malloc(self, size):
            if len(self.mallocs) >= 1:
                self.mallocs.append(size)
                raise MemoryError("second")
            return super().malloc(size)

    alloc = FailSecond()
    with ga.Session() as s, ga.Stream() as st:
        s.add_graph(1, ga.Graph.from_onnx(two_output_model()))
        s.register_external_allocator(st, alloc)
        with pytest.raises(ga.GeError):
            s.run_graph_with_stream_async(1, st, [np.ones((3, 5), np.float32)] * 2)
        st.synchronize()
        gc.collect()
        assert alloc.given and sorted(alloc.frees) == sorted(alloc.given)
        assert alloc.inner.live_allocations == 0
        s.unregister_external_allocator(st)


def test_allocator_returning_zero_gives_ge_error():
    with ga.Session() as s, ga.Stream() as st:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        s.register_external_allocator(st, ReturnsZero())
        with pytest.raises(ga.GeError) as ei:
            s.run_graph_with_stream_async(1, st, [A, A])
        assert ei.value.status == 1343225856
        s.unregister_external_allocator(st)


def test_allocator_returning_non_int_gives_ge_error_with_type_error_cause():
    class BadReturn(ga.Allocator):
        def malloc(self, size):
            return "0x1000"

        def free(self, address):
            pass

    with ga.Session() as s, ga.Stream() as st:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        s.register_external_allocator(st, BadReturn())
        with pytest.raises(ga.GeError) as ei:
            s.run_graph_with_stream_async(1, st, [A, A])
        assert isinstance(ei.value.__cause__, TypeError)
        s.unregister_external_allocator(st)


def test_unregister_then_default_allocator_used_again():
    alloc = Recording()
    with ga.Session() as s, ga.Stream() as st:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        s.register_external_allocator(st, alloc)
        (y,) = s.run_graph_with_stream_async(1, st, [A, A])
        st.synchronize()
        del y
        gc.collect()
        assert alloc.mallocs == [A.nbytes]
        s.unregister_external_allocator(st)
        for _ in range(3):
            (y,) = s.run_graph_with_stream_async(1, st, [A, A])
            st.synchronize()
            np.testing.assert_array_equal(y.to_host().numpy(), 2 * A)
            del y
        assert alloc.mallocs == [A.nbytes]  # not called any more
        assert len(alloc.frees) == 1


def test_allocator_released_after_unregister():
    """The shim drops its reference to a Python allocator once unregistered and no block uses it."""
    import weakref

    alloc = Recording()
    ref = weakref.ref(alloc)
    with ga.Session() as s, ga.Stream() as st:
        s.register_external_allocator(st, alloc)
        s.unregister_external_allocator(st)
    del alloc
    gc.collect()
    assert ref() is None


def test_device_allocator_counts():
    d = ga.DeviceAllocator()
    addrs = [d.malloc(64) for _ in range(3)]
    assert all(isinstance(a, int) and a != 0 for a in addrs)
    assert d.live_allocations == 3 and d.total_allocations == 3
    for a in addrs:
        d.free(a)
    assert d.live_allocations == 0 and d.total_allocations == 3


def test_allocator_abstract():
    with pytest.raises(TypeError):
        ga.Allocator()  # type: ignore[abstract]


def test_a_refused_stream_run_releases_its_inputs_and_leaves_no_completion_behind():
    """A stream run is one native call (the run and the host function that frees its inputs): a refused run gives
    the inputs back at once, counts as failed, and the next runs are released when the stream passes them."""
    if ga.current_backend() != "twin":
        pytest.skip("fault injection is a twin-only control")
    with ga.Session() as s, ga.Stream() as st:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        x = np.ones((1, 16), np.float32)
        with ga.twin.fault(s, 1, "fail_run", nth=1):
            with pytest.raises(ga.GeError):
                s.run_graph_with_stream_async(1, st, [x, x])
        assert x.flags.writeable
        stats = s.statistics()
        assert (stats.failed, stats.in_flight, stats.pinned_bytes) == (1, 0, 0), stats
        (y,) = s.run_graph_with_stream_async(1, st, [x, A])
        st.synchronize()
        np.testing.assert_array_equal(y.to_host().numpy(), x + A)
        stats = s.statistics()
        assert (stats.completed, stats.in_flight, stats.pinned_bytes) == (1, 0, 0), stats


def test_stream_runs_from_many_threads_are_all_released_while_others_reap():
    """Each run's release is registered before its native call: a completion reaped by another thread (a query,
    statistics) before the submitting thread returns is never lost."""
    import threading

    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        streams = [ga.Stream() for _ in range(4)]
        runs_per_thread = 200
        errors: list[BaseException] = []

        def submit(stream: ga.Stream) -> None:
            try:
                for _ in range(runs_per_thread):
                    s.run_graph_with_stream_async(1, stream, [A, A])
                    stream.query()  # reaps whatever the streams have passed, other threads' runs included
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=submit, args=(stream,)) for stream in streams]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not errors, errors
        for stream in streams:
            stream.synchronize()
            stream.close()
        stats = s.statistics()
        assert (stats.completed, stats.in_flight, stats.pinned_bytes) == (4 * runs_per_thread, 0, 0), stats
        assert A.flags.writeable
