"""Graph metadata (Graph.inputs / outputs, Session.graph_inputs / graph_outputs), inputs by name, outputs by name."""

from __future__ import annotations

import random

import numpy as np
import onnx
import pytest

import geasync as ga
from conftest import MLP_PATH, TensorProto, add_model, helper, make_mlp, make_model

F = TensorProto.FLOAT
pytestmark = pytest.mark.timeout(120)


def two_in_two_out():
    """y = a + b, z = a * b (inputs declared b-first on purpose: order is the declaration order)."""
    return make_model([helper.make_node("Add", ["a", "b"], ["y"]), helper.make_node("Mul", ["a", "b"], ["z"])],
                      [("b", F, ["N", 3]), ("a", F, ["N", 3])], [("z", F, ["N", 3]), ("y", F, ["N", 3])])


# --- Graph.inputs / Graph.outputs ----------------------------------------------------------------------

def test_mlp_metadata_before_any_run():
    g = ga.Graph.from_onnx(MLP_PATH)
    (x,) = g.inputs
    (y,) = g.outputs
    assert (x.name, x.dtype, x.shape) == ("x", np.dtype(np.float32), ("N", 784))
    assert (y.name, y.dtype, y.shape) == ("probs", np.dtype(np.float32), ("N", 10))
    assert x.rank == 2 and not x.is_static


def test_fixed_named_unnamed_and_missing_dims():
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Identity", ["a"], ["y"]), helper.make_node("Identity", ["b"], ["z"]),
         helper.make_node("Identity", ["c"], ["w"])], "g",
        [vi("a", TensorProto.INT64, [2, "batch", None]), vi("b", TensorProto.BOOL, None),
         vi("c", TensorProto.FLOAT16, [])],
        [vi("y", TensorProto.INT64, None), vi("z", TensorProto.BOOL, [5]), vi("w", TensorProto.FLOAT16, [])])
    g = ga.Graph.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    a, b, c = g.inputs
    assert a == ("a", np.dtype(np.int64), (2, "batch", None))
    assert b == ("b", np.dtype(np.bool_), None) and b.rank is None  # no shape field: any rank
    assert c == ("c", np.dtype(np.float16), ()) and c.is_static  # an empty shape: 0-d
    assert [o.name for o in g.outputs] == ["y", "z", "w"]
    assert g.outputs[0].shape is None and g.outputs[1].shape == (5,)


def test_a_dim_with_an_empty_name_is_unnamed(session):
    """dim_param "" names nothing: the dim is reported as None, like one with neither field, and takes any size."""
    x = helper.make_tensor_value_info("x", F, ["N", 3])
    x.type.tensor_type.shape.dim[1].dim_param = ""  # (replaces dim_value: the two are a oneof)
    assert x.type.tensor_type.shape.dim[1].HasField("dim_param")
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x],
                              [helper.make_tensor_value_info("y", F, ["", None])])
    g = ga.Graph.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert g.inputs[0].shape == ("N", None) and g.outputs[0].shape == (None, None)
    session.add_graph(1, g)
    assert session.graph_inputs(1)[0].shape == ("N", None)
    (y,) = session.run_graph(1, {"x": -np.ones((2, 7), np.float32)})
    np.testing.assert_array_equal(y.numpy(), np.zeros((2, 7), np.float32))


def test_initializer_backed_inputs_are_not_inputs():
    """GE makes a graph input that has an initializer a constant holding it: it is not fed."""
    model = make_model([helper.make_node("Add", ["x", "bias"], ["y"])], [("x", F, [2]), ("bias", F, [2])],
                       [("y", F, [2])], initializers=[("bias", np.array([10, 20], np.float32))])
    g = ga.Graph.from_onnx(model)
    assert [i.name for i in g.inputs] == ["x"]
    with ga.Session() as s:
        s.add_graph(1, g)
        (y,) = s.run_graph(1, {"x": np.array([1, 2], np.float32)})
        np.testing.assert_array_equal(y.numpy(), [11, 22])
        with pytest.raises(ga.InputError, match="unknown input name.*'bias'"):
            s.run_graph(1, {"x": np.ones(2, np.float32), "bias": np.ones(2, np.float32)})


def test_dtype_numpy_lacks_is_none():
    model = make_model([helper.make_node("Cast", ["x"], ["y"], to=F)], [("x", TensorProto.FLOAT8E4M3FN, [2])],
                       [("y", F, [2])], opset=19)
    (x,) = ga.Graph.from_onnx(model).inputs
    assert x.dtype is None and x.shape == (2,)


def test_bfloat16_is_ml_dtypes_bfloat16():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    model = make_model([helper.make_node("Cast", ["x"], ["y"], to=F)], [("x", TensorProto.BFLOAT16, [2])],
                       [("y", F, [2])])
    (x,) = ga.Graph.from_onnx(model).inputs
    assert x.dtype == np.dtype(ml_dtypes.bfloat16) and x.shape == (2,)


def _onnx_view(info):
    t = info.type.tensor_type
    shape = None
    if t.HasField("shape"):
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param if d.HasField("dim_param") else None)
                      for d in t.shape.dim)
    dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type) if t.elem_type else None
    return info.name, dtype, shape


@pytest.mark.parametrize("make", [make_mlp, add_model, two_in_two_out])
def test_agrees_with_the_onnx_package(make):
    model = make()
    g = ga.Graph.from_onnx(model.SerializeToString())
    inits = {t.name for t in model.graph.initializer}
    assert [tuple(i) for i in g.inputs] == [_onnx_view(i) for i in model.graph.input if i.name not in inits]
    assert [tuple(o) for o in g.outputs] == [_onnx_view(o) for o in model.graph.output]


def test_agrees_with_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    model = two_in_two_out().SerializeToString()
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    g = ga.Graph.from_onnx(model)
    assert [i.name for i in g.inputs] == [i.name for i in sess.get_inputs()]
    assert [o.name for o in g.outputs] == [o.name for o in sess.get_outputs()]
    assert [list(i.shape) for i in g.inputs] == [list(i.shape) for i in sess.get_inputs()]


# --- corrupt and hostile bytes -------------------------------------------------------------------------

@pytest.mark.parametrize("data, needle", [
    (b"", "no graph"),
    (b"\x3a\x05abc", "runs past the end"),
    (b"\x3a\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f", "varint"),
    (b"\x3a\x02\x5a\x10", "runs past the end"),
    (b"\x3b", "wire type"),
    (b"\x00\x01", "field number"),
])
def test_corrupt_bytes_raise_model_format_error(data, needle):
    g = ga.Graph(data)
    with pytest.raises(ga.ModelFormatError, match=needle) as ei:
        _ = g.inputs
    assert isinstance(ei.value, ValueError) and "ONNX model" in str(ei.value)


def test_mutated_models_never_raise_anything_else():
    good = make_mlp().SerializeToString()
    rng = random.Random(1234)
    outcomes = set()
    for _ in range(1500):
        data = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            op = rng.randrange(3)
            pos = rng.randrange(len(data))
            if op == 0:
                data[pos] = rng.randrange(256)
            elif op == 1:
                del data[pos:]
            else:
                data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        try:
            _ = ga.Graph(bytes(data)).inputs
            outcomes.add("read")
        except ga.ModelFormatError:
            outcomes.add("refused")
    assert outcomes == {"read", "refused"}


# --- the session's view ---------------------------------------------------------------------------------

def test_session_graph_inputs_outputs(session):
    session.add_graph(3, ga.Graph.from_onnx(two_in_two_out()))
    assert [i.name for i in session.graph_inputs(3)] == ["b", "a"]
    assert [o.name for o in session.graph_outputs(3)] == ["z", "y"]
    session.add_graph_clone(4, ga.Graph.from_onnx(make_mlp()))
    assert session.graph_inputs(4)[0].shape == ("N", 784)
    session.remove_graph(3)
    with pytest.raises(ga.GeError, match="not exist"):
        session.graph_inputs(3)
    with pytest.raises(ga.GeError, match="not exist"):
        session.graph_outputs(99)
    with pytest.raises(TypeError, match="graph_id"):
        session.graph_inputs("4")


def test_compile_graph_with_inputs_fixes_the_shapes(session):
    session.add_graph(1, ga.Graph.from_onnx(make_mlp()))
    session.compile_graph(1, {"x": np.zeros((3, 784), np.float32)})
    assert session.graph_inputs(1)[0].shape == (3, 784)
    (y,) = session.run_graph(1, [np.zeros((3, 784), np.float32)])
    assert y.shape == (3, 10)
    with pytest.raises(ga.InputError, match=r"\[5, 784\].*\[3, 784\]"):
        session.run_graph(1, [np.zeros((5, 784), np.float32)])


# --- inputs by name, outputs by name ----------------------------------------------------------------------

def _check_two(outs, a, b):
    np.testing.assert_array_equal(outs[0].numpy(), a * b)
    np.testing.assert_array_equal(outs[1].numpy(), a + b)


A = np.arange(6, dtype=np.float32).reshape(2, 3)
B = np.full((2, 3), 3, np.float32)


def test_run_graph_dict_feed_and_output_dict(session):
    session.add_graph(1, ga.Graph.from_onnx(two_in_two_out()))
    by_name = session.run_graph(1, {"a": A, "b": B})
    assert type(by_name) is list
    _check_two(by_name, A, B)
    _check_two(session.run_graph(1, [B, A]), A, B)  # positional: the declaration order (b, a)
    named = session.output_dict(1, by_name)
    assert list(named) == ["z", "y"]
    np.testing.assert_array_equal(named["y"].numpy(), A + B)
    with pytest.raises(ValueError, match="2 output"):
        session.output_dict(1, by_name[:1])


@pytest.mark.parametrize("feeds, needle", [
    ({"a": A}, "missing input.*'b'"),
    ({"a": A, "b": B, "c": A}, "unknown input name.*'c'"),
    ({"a": A, "x": B}, "unknown input name.*'x'.*missing input.*'b'"),
    ({}, "missing input"),
])
def test_bad_dict_feeds_name_the_graph_inputs(session, feeds, needle):
    session.add_graph(1, ga.Graph.from_onnx(two_in_two_out()))
    with pytest.raises(ga.InputError, match=needle) as ei:
        session.run_graph(1, feeds)
    assert "'a'" in str(ei.value) and "'b'" in str(ei.value) and "graph_id=1" in str(ei.value)
    _check_two(session.run_graph(1, {"a": A, "b": B}), A, B)


def test_dict_feed_for_an_unknown_graph(session):
    with pytest.raises(ga.InputError, match="graph_id=5 was not added"):
        session.run_graph(5, {"a": A})


def test_stream_mode_takes_a_list_and_input_list_makes_it(session):
    session.add_graph(1, ga.Graph.from_onnx(two_in_two_out()))
    with ga.Stream() as st:
        with pytest.raises(TypeError, match="input_list"):
            session.run_graph_with_stream_async(1, st, {"a": A, "b": B})
        outs = session.run_graph_with_stream_async(1, st, session.input_list(1, {"a": A, "b": B}))
        st.synchronize()
        _check_two([o.to_host() for o in outs], A, B)
    with pytest.raises(ga.InputError, match="missing"):
        session.input_list(1, {"a": A})
    with pytest.raises(TypeError, match="mapping"):
        session.input_list(1, [A, B])


@pytest.mark.anyio
async def test_async_runs_take_dict_feeds(anyio_backend):
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(two_in_two_out()))
        s.add_graph(2, ga.Graph.from_onnx(two_in_two_out()))
        _check_two(await s.run_graph_async(1, {"a": A, "b": B}), A, B)
        _check_two(await s.run_graph_in_thread(2, {"b": B, "a": A}), A, B)
        with pytest.raises(ga.InputError, match="missing"):
            await s.run_graph_async(1, {"a": A})
        _check_two(await s.run_graph_async(1, {"a": A, "b": B}), A, B)


# --- an input declared with no shape takes any rank (as in onnxruntime) --------------------------------------

def unshaped(op: str):
    vi = helper.make_tensor_value_info
    if op == "MatMul":
        nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
        inputs = [vi("x", F, None), vi("w", F, [4, 2])]
    else:
        nodes = [helper.make_node(op, ["x"], ["y"])]
        inputs = [vi("x", F, None)]
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, [vi("y", F, None)]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("shape", [(), (3,), (3, 4), (2, 3, 4), (1, 1, 2, 1, 3)])
def test_unshaped_input_takes_any_rank(session, shape):
    session.add_graph(1, ga.Graph.from_onnx(unshaped("Relu")))
    assert session.graph_inputs(1)[0].shape is None
    x = np.linspace(-1, 1, int(np.prod(shape))).astype(np.float32).reshape(shape)
    (y,) = session.run_graph(1, {"x": x})
    np.testing.assert_array_equal(y.numpy(), np.maximum(x, 0))
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(unshaped("Relu").SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(y.numpy(), sess.run(None, {"x": x})[0])


def test_unshaped_input_matmul_and_summary(session):
    session.add_graph(1, ga.Graph.from_onnx(unshaped("MatMul")))
    w = np.arange(8, dtype=np.float32).reshape(4, 2)
    for shape in [(4,), (3, 4), (2, 3, 4)]:
        x = np.ones(shape, np.float32)
        (y,) = session.run_graph(1, [x, w])
        np.testing.assert_allclose(y.numpy(), x @ w)
    summary = session.get_compiled_graph_summary(1)
    assert not summary.is_static and summary.output_shapes == [(-2,)]  # GE's mark for an unknown rank
    with pytest.raises(ga.InputError, match=r"input 1 \('w'\).*\[4, 3\]"):
        session.run_graph(1, [np.ones(4, np.float32), np.ones((4, 3), np.float32)])


@pytest.mark.anyio
async def test_unshaped_input_async(anyio_backend):
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(unshaped("Neg")))
        s.compile_graph(1)  # compiled for the declaration: any rank stays free for every request
        for shape in [(2,), (2, 5), (1, 2, 3)]:
            (y,) = await s.run_graph_async(1, [np.ones(shape, np.float32)])
            np.testing.assert_array_equal(y.numpy(), -np.ones(shape, np.float32))
