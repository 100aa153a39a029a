"""Seed-002 Session contract: TypeError / GeError / RuntimeError clauses, plus geasync's extensions."""

from __future__ import annotations

import collections
import copy

import numpy as np
import onnx
import pytest

import geasync as ga
from conftest import MLP_PATH, add_model, make_mlp

A = np.ones((1, 16), np.float32)


def add_graph():
    return ga.Graph.from_onnx(add_model())


class MyAllocator(ga.Allocator):
    def __init__(self):
        self.inner = ga.DeviceAllocator()
        self.mallocs = []
        self.frees = []

    def malloc(self, size):
        self.mallocs.append(size)
        return self.inner.malloc(size)

    def free(self, address):
        self.frees.append(address)
        self.inner.free(address)


NOT_DICTS = ["a=b", ["a", "b"], ("a", "b"), 1, object()]
NOT_INTS = ["1", 1.0, None, [1], b"1"]


# --- __init__ ------------------------------------------------------------------------------------

@pytest.mark.parametrize("options", NOT_DICTS)
def test_session_options_not_dict_type_error(options):
    with pytest.raises(TypeError, match="options"):
        ga.Session(options)


@pytest.mark.parametrize("options", [None, {}, {"ge.exec.deviceId": "0"}])
def test_session_options_dict_or_none_ok(options):
    with ga.Session(options) as s:
        assert isinstance(s.session_id, int)


# --- add_graph -----------------------------------------------------------------------------------

@pytest.mark.parametrize("graph_id", NOT_INTS)
def test_add_graph_id_not_int(session, graph_id):
    with pytest.raises(TypeError, match="graph_id"):
        session.add_graph(graph_id, add_graph())


@pytest.mark.parametrize("graph", [None, b"bytes", add_model(), "model.onnx", 1])
def test_add_graph_graph_not_graph(session, graph):
    with pytest.raises(TypeError, match="graph"):
        session.add_graph(1, graph)


@pytest.mark.parametrize("options", NOT_DICTS)
def test_add_graph_options_not_dict(session, options):
    with pytest.raises(TypeError, match="options"):
        session.add_graph(1, add_graph(), options)


def test_add_graph_options_none_and_dict_ok(session):
    session.add_graph(1, add_graph(), None)
    session.add_graph(2, add_graph(), {})
    (c,) = session.run_graph(2, [A, A])
    np.testing.assert_array_equal(c.numpy(), A + A)


def test_add_graph_existing_id_ge_error(session):
    session.add_graph(1, add_graph())
    with pytest.raises(ga.GeError) as ei:
        session.add_graph(1, add_graph())
    e = ei.value
    assert isinstance(e, RuntimeError)
    assert e.status != 0
    assert "graph_id=1" in e.error_message and "exist" in e.error_message
    assert "AddGraph" in e.api_name
    assert "add_graph" in e.context
    # the original graph is still there and runs
    (c,) = session.run_graph(1, [A, A])
    np.testing.assert_array_equal(c.numpy(), 2 * A)


# --- remove_graph --------------------------------------------------------------------------------

@pytest.mark.parametrize("graph_id", NOT_INTS)
def test_remove_graph_id_not_int(session, graph_id):
    with pytest.raises(TypeError, match="graph_id"):
        session.remove_graph(graph_id)


def test_remove_graph_unknown_id_ge_error(session):
    with pytest.raises(ga.GeError) as ei:
        session.remove_graph(42)
    e = ei.value
    assert e.status == 1343242242  # GE_GRAPH_GRAPH_NOT_EXIST
    assert "42" in e.error_message
    assert "RemoveGraph" in e.api_name
    assert "remove_graph" in e.context


def test_remove_graph_then_run_fails(session):
    session.add_graph(1, add_graph())
    session.remove_graph(1)
    with pytest.raises(ga.GeError):
        session.run_graph(1, [A, A])
    with pytest.raises(ga.GeError):
        session.remove_graph(1)


# --- run_graph -----------------------------------------------------------------------------------

@pytest.mark.parametrize("graph_id", NOT_INTS)
def test_run_graph_id_not_int(session, graph_id):
    session.add_graph(1, add_graph())
    with pytest.raises(TypeError, match="graph_id"):
        session.run_graph(graph_id, [A, A])


@pytest.mark.parametrize("inputs", [["a", "b"], [1, 2], [A, "b"], [A, [1.0] * 16], [None, A]])
def test_run_graph_non_tensor_elements(session, inputs):
    session.add_graph(1, add_graph())
    with pytest.raises(TypeError, match=r"inputs\[\d\]"):
        session.run_graph(1, inputs)


@pytest.mark.parametrize("inputs", [None, 5, "ab", A])
def test_run_graph_inputs_not_a_sequence(session, inputs):
    session.add_graph(1, add_graph())
    with pytest.raises(TypeError, match="inputs"):
        session.run_graph(1, inputs)


def test_run_graph_accepts_tuple(session):
    session.add_graph(1, add_graph())
    (c,) = session.run_graph(1, (A, A))
    np.testing.assert_array_equal(c.numpy(), 2 * A)


def test_run_graph_accepts_any_sequence(session):
    """The type hints say runs take a Sequence of inputs: any sequence is taken (a str is none of inputs)."""
    session.add_graph(1, add_graph())
    (c,) = session.run_graph(1, collections.UserList([A, A]))
    np.testing.assert_array_equal(c.numpy(), 2 * A)
    with pytest.raises(TypeError, match="inputs must be a list"):
        session.run_graph(1, "ab")


def test_run_graph_accepts_tensors_and_numpy(session):
    session.add_graph(1, add_graph())
    b = np.arange(16, dtype=np.float32).reshape(1, 16)
    (c1,) = session.run_graph(1, [ga.Tensor.from_numpy(A), ga.Tensor.from_numpy(b)])
    (c2,) = session.run_graph(1, [A, b])
    (c3,) = session.run_graph(1, [ga.Tensor.from_numpy(A), b])
    for c in (c1, c2, c3):
        assert isinstance(c, ga.Tensor)
        np.testing.assert_array_equal(c.numpy(), A + b)


def test_run_graph_unknown_id_ge_error(session):
    with pytest.raises(ga.GeError) as ei:
        session.run_graph(7, [A, A])
    e = ei.value
    assert e.status != 0
    assert "graph_id=7" in e.error_message
    assert "RunGraph" in e.api_name
    assert "run_graph" in e.context


# --- run_graph_with_stream_async -----------------------------------------------------------------

@pytest.mark.parametrize("graph_id", NOT_INTS)
def test_stream_async_graph_id_not_int(session, graph_id):
    with ga.Stream() as st:
        with pytest.raises(TypeError, match="graph_id"):
            session.run_graph_with_stream_async(graph_id, int(st), [A, A])


@pytest.mark.parametrize("stream", ["0x1234", 1.5, None, [1], True])
def test_stream_async_stream_not_int(session, stream):
    session.add_graph(1, add_graph())
    with pytest.raises(TypeError, match="stream"):
        session.run_graph_with_stream_async(1, stream, [A, A])


@pytest.mark.parametrize("as_int", [True, False])
def test_stream_async_accepts_int_and_stream(session, as_int):
    session.add_graph(1, add_graph())
    with ga.Stream() as st:
        outs = session.run_graph_with_stream_async(1, int(st) if as_int else st, [A, A])
        st.synchronize()
        np.testing.assert_array_equal(outs[0].to_host().numpy(), 2 * A)
        del outs


@pytest.mark.parametrize("inputs", [(A, A), A, {"a": A, "b": A}, "ab", None])
def test_stream_async_inputs_not_list(session, inputs):
    session.add_graph(1, add_graph())
    with ga.Stream() as st:
        with pytest.raises(TypeError, match="inputs"):
            session.run_graph_with_stream_async(1, st, inputs)


@pytest.mark.parametrize("inputs", [["a", "b"], [1, 2], [A, "b"], [A, [1.0] * 16]])
def test_stream_async_non_tensor_elements(session, inputs):
    session.add_graph(1, add_graph())
    with ga.Stream() as st:
        with pytest.raises(TypeError, match=r"inputs\[\d\]"):
            session.run_graph_with_stream_async(1, st, inputs)


def test_stream_async_unknown_graph_ge_error(session):
    with ga.Stream() as st:
        with pytest.raises(ga.GeError) as ei:
            session.run_graph_with_stream_async(5, st, [A, A])
        assert "5" in ei.value.error_message


# --- register / unregister allocator ------------------------------------------------------------

@pytest.mark.parametrize("stream", ["1", 1.0, None, True])
def test_register_allocator_stream_not_int(session, stream):
    with pytest.raises(TypeError, match="stream"):
        session.register_external_allocator(stream, MyAllocator())


@pytest.mark.parametrize("allocator", [None, object(), ga.DeviceAllocator, "alloc", 0])
def test_register_allocator_not_allocator(session, allocator):
    with ga.Stream() as st:
        with pytest.raises(TypeError, match="allocator"):
            session.register_external_allocator(int(st), allocator)


@pytest.mark.parametrize("stream", ["1", 1.0, None, True])
def test_unregister_allocator_stream_not_int(session, stream):
    with pytest.raises(TypeError, match="stream"):
        session.unregister_external_allocator(stream)


def test_register_allocator_null_stream_ge_error(session):
    with pytest.raises(ga.GeError) as ei:
        session.register_external_allocator(0, MyAllocator())
    assert ei.value.status != 0
    assert "RegisterExternalAllocator" in ei.value.api_name


def test_reregister_allocator_overrides(session):
    session.add_graph(1, add_graph())
    first, second = MyAllocator(), MyAllocator()
    with ga.Stream() as st:
        session.register_external_allocator(int(st), first)
        session.register_external_allocator(int(st), second)
        outs = session.run_graph_with_stream_async(1, int(st), [A, A])
        st.synchronize()
        np.testing.assert_array_equal(outs[0].to_host().numpy(), 2 * A)
        del outs
        session.unregister_external_allocator(int(st))
    assert first.mallocs == []
    assert second.mallocs == [A.nbytes]


# --- copy ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("fn", [copy.copy, copy.deepcopy])
def test_copy_raises_runtime_error(session, fn):
    with pytest.raises(RuntimeError):
        fn(session)
    assert not session.closed


# --- lifetime ------------------------------------------------------------------------------------

def test_context_manager_closes_and_close_idempotent():
    with ga.Session() as s:
        assert not s.closed
    assert s.closed
    s.close()
    s.close()
    assert s.closed


def test_close_explicit_idempotent():
    s = ga.Session()
    s.add_graph(1, add_graph())
    s.close()
    s.close()
    assert s.closed


@pytest.mark.parametrize("call", [
    lambda s: s.add_graph(1, add_graph()),
    lambda s: s.add_graph_clone(1, add_graph()),
    lambda s: s.remove_graph(1),
    lambda s: s.run_graph(1, [A, A]),
    lambda s: s.compile_graph(1),
    lambda s: s.load_graph(1),
    lambda s: s.get_compiled_graph_summary(1),
    lambda s: s.is_graph_need_rebuild(1),
    lambda s: s.session_id,
    lambda s: s.register_external_allocator(0x1000, MyAllocator()),
    lambda s: s.unregister_external_allocator(0x1000),
], ids=["add_graph", "add_graph_clone", "remove_graph", "run_graph", "compile_graph", "load_graph", "summary",
        "need_rebuild", "session_id", "register", "unregister"])
def test_calls_after_close_raise_session_closed(call):
    s = ga.Session()
    s.add_graph(1, add_graph())
    s.close()
    with pytest.raises(ga.SessionClosedError) as ei:
        call(s)
    assert isinstance(ei.value, ga.GeError)
    assert "closed" in str(ei.value)


def test_stream_async_after_close_raises_session_closed():
    s = ga.Session()
    s.add_graph(1, add_graph())
    s.close()
    with ga.Stream() as st:
        with pytest.raises(ga.SessionClosedError):
            s.run_graph_with_stream_async(1, st, [A, A])


def test_session_id_int_and_distinct():
    with ga.Session() as s1, ga.Session() as s2:
        assert type(s1.session_id) is int and type(s2.session_id) is int
        assert s1.session_id != s2.session_id
        assert s1.session_id == s1.session_id


# --- compile / load / summary / rebuild ----------------------------------------------------------

def test_summary_before_compile_ge_error(session):
    session.add_graph(1, add_graph())
    with pytest.raises(ga.GeError) as ei:
        session.get_compiled_graph_summary(1)
    assert ei.value.status == 1343242295  # GE_GRAPH_NOT_BUILT
    assert "GetCompiledGraphSummary" in ei.value.api_name


def test_summary_unknown_graph_ge_error(session):
    with pytest.raises(ga.GeError):
        session.get_compiled_graph_summary(3)


def test_summary_after_compile(session):
    session.add_graph(1, add_graph())
    session.compile_graph(1)
    summary = session.get_compiled_graph_summary(1)
    assert isinstance(summary, ga.CompiledGraphSummary)
    assert [tuple(s) for s in summary.output_shapes] == [(1, 16)]
    assert summary.output_dtypes == [np.dtype(np.float32)]
    assert summary.is_static


def test_summary_mlp_dynamic_batch_compiled_with_inputs(session):
    session.add_graph(1, ga.Graph.from_onnx(make_mlp()))
    session.compile_graph(1, [np.zeros((3, 784), np.float32)])
    summary = session.get_compiled_graph_summary(1)
    assert [tuple(s) for s in summary.output_shapes] == [(3, 10)]
    assert summary.output_dtypes == [np.dtype(np.float32)]


def test_summary_mlp_symbolic_batch(session):
    session.add_graph(1, ga.Graph.from_onnx(make_mlp()))
    session.compile_graph(1)
    summary = session.get_compiled_graph_summary(1)
    assert [tuple(s) for s in summary.output_shapes] == [(-1, 10)]


def test_summary_available_after_run(session):
    session.add_graph(1, add_graph())
    session.run_graph(1, [A, A])
    assert [tuple(s) for s in session.get_compiled_graph_summary(1).output_shapes] == [(1, 16)]


def test_compile_twice_fine(session):
    session.add_graph(1, add_graph())
    session.compile_graph(1)
    session.compile_graph(1)
    (c,) = session.run_graph(1, [A, A])
    np.testing.assert_array_equal(c.numpy(), 2 * A)


def test_compile_unknown_graph_ge_error(session):
    with pytest.raises(ga.GeError) as ei:
        session.compile_graph(9)
    assert ei.value.status == 1343242242  # GE_GRAPH_GRAPH_NOT_EXIST


def test_load_twice_ge_error(session):
    session.add_graph(1, add_graph())
    session.load_graph(1)
    with pytest.raises(ga.GeError) as ei:
        session.load_graph(1)
    assert ei.value.status != 0
    assert "LoadGraph" in ei.value.api_name
    # still runnable
    (c,) = session.run_graph(1, [A, A])
    np.testing.assert_array_equal(c.numpy(), 2 * A)


def test_load_compiles_first(session):
    session.add_graph(1, add_graph())
    session.load_graph(1)
    assert not session.is_graph_need_rebuild(1)
    assert [tuple(s) for s in session.get_compiled_graph_summary(1).output_shapes] == [(1, 16)]


def test_is_graph_need_rebuild(session):
    session.add_graph(1, add_graph())
    assert session.is_graph_need_rebuild(1) is True
    session.compile_graph(1)
    assert session.is_graph_need_rebuild(1) is False


# --- Graph.from_onnx -----------------------------------------------------------------------------

def _run_mlp(session, graph, gid):
    session.add_graph(gid, graph)
    x = np.random.default_rng(gid).random((2, 784), dtype=np.float32)
    (y,) = session.run_graph(gid, [x])
    return y.numpy().copy()


def test_graph_from_onnx_path_bytes_modelproto(session, tmp_path):
    model = onnx.load(str(MLP_PATH))
    p = tmp_path / "m.onnx"
    p.write_bytes(model.SerializeToString())
    sources = [MLP_PATH, str(MLP_PATH), p, MLP_PATH.read_bytes(), bytearray(MLP_PATH.read_bytes()), model]
    results = [_run_mlp(session, ga.Graph.from_onnx(src), 1 + i) for i, src in enumerate(sources)]
    x = np.random.default_rng(1).random((2, 784), dtype=np.float32)
    for r in results:
        assert r.shape == (2, 10)
        np.testing.assert_allclose(r.sum(axis=1), 1.0, rtol=1e-5)
    # same input (seed 1) for sources 0 vs a re-run via bytes
    session.add_graph(100, ga.Graph.from_onnx(MLP_PATH.read_bytes()))
    (y,) = session.run_graph(100, [x])
    np.testing.assert_allclose(y.numpy(), results[0], rtol=1e-6)


def test_same_graph_object_twice_fails_clone_works(session):
    g = add_graph()
    session.add_graph(1, g)
    with pytest.raises(ga.GeError) as ei:
        session.add_graph(2, g)
    assert ei.value.status != 0
    for gid in (3, 4, 5):
        session.add_graph_clone(gid, g)
        (c,) = session.run_graph(gid, [A, A])
        np.testing.assert_array_equal(c.numpy(), 2 * A)


def test_same_graph_object_twice_across_sessions_fails(session):
    g = add_graph()
    session.add_graph(1, g)
    with ga.Session() as other:
        with pytest.raises(ga.GeError):
            other.add_graph(1, g)
        other.add_graph_clone(1, g)
        (c,) = other.run_graph(1, [A, A])
        np.testing.assert_array_equal(c.numpy(), 2 * A)


def test_add_graph_clone_type_errors(session):
    with pytest.raises(TypeError):
        session.add_graph_clone("1", add_graph())
    with pytest.raises(TypeError):
        session.add_graph_clone(1, add_model())
    with pytest.raises(TypeError):
        session.add_graph_clone(1, add_graph(), "opts")


def test_ge_error_is_runtime_error_with_attributes():
    assert issubclass(ga.GeError, RuntimeError)
    assert issubclass(ga.SessionClosedError, ga.GeError)
    e = ga.GeError(1343225857, "msg", "Api", "ctx")
    assert (e.status, e.error_message, e.api_name, e.context) == (1343225857, "msg", "Api", "ctx")
    assert "msg" in str(e) and "Api" in str(e)
