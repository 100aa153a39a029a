"""A model's declared graph outputs against what the graph computes.

GE's ONNX parser reads only the names of graph.output, so nothing in GE stops a model whose declared output type
or shape contradicts its nodes, and the twin runs it as GE does; geasync's metadata (Graph.outputs,
Session.graph_outputs) reads that declaration, so geasync warns once on the ``geasync`` logger, after compile or the
first run (onnxruntime refuses a dtype contradiction and warns of a shape one). A symbolic or unknown dim, or an
output declared with no type, never contradicts anything.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import geasync as ga
from geasync import _check
from conftest import MLP_PATH, make_model

ort = pytest.importorskip("onnxruntime")

F, I64 = TensorProto.FLOAT, TensorProto.INT64
pytestmark = pytest.mark.timeout(120)


def relu(declared_type, declared_shape, x_shape=(4,)):
    return make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [("x", F, list(x_shape))],
                      [("y", declared_type, declared_shape)])


def ort_session(model):
    so = ort.SessionOptions()
    so.log_severity_level = 3  # the shape-mismatch warnings onnxruntime prints are expected here
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def declaration_warnings(caplog):
    return [r for r in caplog.records if r.name == "geasync" and r.levelno == logging.WARNING
            and "declared" in r.getMessage()]


# --- dtype: runs, as on GE, and warns -------------------------------------------------------------------

def test_onnxruntime_refuses_the_dtype_contradiction():
    with pytest.raises(Exception, match="int64"):
        ort_session(relu(I64, [4]))


@pytest.mark.parametrize("how", ["compile_graph", "load_graph", "run_graph"])
def test_dtype_contradiction_runs_and_warns_once_naming_output_and_dtypes(session, caplog, how):
    g = ga.Graph.from_onnx(relu(I64, [4]))
    assert g.outputs[0].dtype == np.dtype(np.int64)  # the declaration, read before anything runs
    x = np.arange(-2, 2, dtype=np.float32)
    with caplog.at_level(logging.WARNING, logger="geasync"):
        session.add_graph(1, g)
        if how == "compile_graph":
            session.compile_graph(1)
        elif how == "load_graph":
            session.load_graph(1)
        for _ in range(3):
            (y,) = session.run_graph(1, [x])
    # GE's parser reads only graph.output's names: the graph runs and returns what its nodes compute
    assert y.dtype == np.dtype(np.float32)
    np.testing.assert_array_equal(y.numpy(), np.maximum(x, 0))
    (record,) = declaration_warnings(caplog)
    text = record.getMessage()
    for part in ("graph 1", "'y'", "dtype int64 but runs return float32", "fix the model's declared outputs"):
        assert part in text, text


@pytest.mark.anyio
async def test_dtype_contradiction_warned_on_the_first_async_run(caplog):
    async with ga.Session() as session:
        session.add_graph(1, ga.Graph.from_onnx(relu(TensorProto.DOUBLE, ["N"], x_shape=["N"])))
        with caplog.at_level(logging.WARNING, logger="geasync"):
            (y,) = await session.run_graph_async(1, [np.ones(3, np.float32)])
            await session.run_graph_async(1, [np.ones(2, np.float32)])
    assert y.dtype == np.dtype(np.float32)
    (record,) = declaration_warnings(caplog)
    assert "'y' is declared with dtype float64 but runs return float32" in record.getMessage()


def test_second_of_several_outputs_named(session, caplog):
    model = make_model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Shape", ["x"], ["s"]),
                        helper.make_node("Neg", ["x"], ["n"])],
                       [("x", F, [2, 3])], [("a", F, [2, 3]), ("s", F, [2]), ("n", F, [2, 3])])
    session.add_graph(1, ga.Graph.from_onnx(model))
    with caplog.at_level(logging.WARNING, logger="geasync"):
        session.compile_graph(1)
    (record,) = declaration_warnings(caplog)
    text = record.getMessage()
    assert "'s' is declared with dtype float32 but runs return int64" in text
    assert "'a'" not in text and "'n'" not in text


def test_model_check_runs_the_dtype_contradiction_as_ge_does():
    assert _check.check_model(relu(I64, [4])).runs_on_twin
    assert _check.check_model(relu(F, [4])).runs_on_twin


def test_fixed_declaration_runs(session):
    session.add_graph(1, ga.Graph.from_onnx(relu(F, [4])))
    x = np.array([-1, 2, -3, 4], np.float32)
    (y,) = session.run_graph(1, [x])
    np.testing.assert_array_equal(y.numpy(), ReferenceEvaluator(relu(F, [4])).run(None, {"x": x})[0])


# --- shape: runs, warns once -------------------------------------------------------------------------------

@pytest.mark.parametrize("declared", [[5], [2, 2], []])
def test_shape_contradiction_runs_and_warns_once(session, caplog, declared):
    model = relu(F, declared)
    x = np.array([-1, 2, -3, 4], np.float32)
    want = ort_session(model).run(None, {"x": x})[0]  # onnxruntime runs it (and warns)
    session.add_graph(1, ga.Graph.from_onnx(model))
    with caplog.at_level(logging.WARNING, logger="geasync"):
        session.compile_graph(1)
        session.load_graph(1)
        session.compile_graph(1)
        (y,) = session.run_graph(1, [x])
    np.testing.assert_array_equal(y.numpy(), want)
    assert y.numpy().shape == (4,)
    records = declaration_warnings(caplog)
    assert len(records) == 1, [r.getMessage() for r in records]
    text = records[0].getMessage()
    shown = "[" + ", ".join(map(str, declared)) + "]"
    assert f"'y' is declared with shape {shown} but the graph computes [4]" in text, text
    assert "graph 1" in text and "fix the model's declared outputs" in text


def test_warned_again_for_a_graph_added_again(session, caplog):
    with caplog.at_level(logging.WARNING, logger="geasync"):
        for _ in range(2):
            session.add_graph(1, ga.Graph.from_onnx(relu(F, [5])))
            session.compile_graph(1)
            session.remove_graph(1)
    assert len(declaration_warnings(caplog)) == 2


@pytest.mark.anyio
async def test_shape_contradiction_warned_on_the_first_async_run(caplog):
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, ["N", 3])], [("y", F, ["N", 4])])
    x = np.ones((2, 3), np.float32)
    async with ga.Session() as session:
        with caplog.at_level(logging.WARNING, logger="geasync"):
            session.add_graph(1, ga.Graph.from_onnx(model))
            (y,) = await session.run_graph_async(1, [x])
            await session.run_graph_async(1, [x])
    assert y.numpy().shape == (2, 3)
    records = declaration_warnings(caplog)
    assert len(records) == 1 and "'y' is declared with shape [N, 4] but the graph computes [?, 3]" in \
        records[0].getMessage()


def test_only_the_contradicting_output_is_named(session, caplog):
    model = make_model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"])],
                       [("x", F, [2, 3])], [("a", F, [2, 3]), ("b", F, [3, 2])])
    session.add_graph(1, ga.Graph.from_onnx(model))
    with caplog.at_level(logging.WARNING, logger="geasync"):
        session.compile_graph(1)
    (record,) = declaration_warnings(caplog)
    assert "'b' is declared with shape [3, 2]" in record.getMessage() and "'a'" not in record.getMessage()


# --- what never contradicts -------------------------------------------------------------------------------

@pytest.mark.parametrize("declared", [["N"], [None], None])
def test_symbolic_unknown_or_absent_dims_are_fine(session, caplog, declared):
    with caplog.at_level(logging.WARNING, logger="geasync"):
        session.add_graph(1, ga.Graph.from_onnx(relu(F, declared)))
        session.compile_graph(1)
        (y,) = session.run_graph(1, [np.ones(4, np.float32)])
    assert y.numpy().shape == (4,) and not declaration_warnings(caplog)


def test_symbolic_declared_dims_with_a_dynamic_input(session, caplog):
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, ["N", 3])], [("y", F, ["B", 3])])
    with caplog.at_level(logging.WARNING, logger="geasync"):
        session.add_graph(1, ga.Graph.from_onnx(model))
        session.compile_graph(1)
        for n in (1, 5):
            (y,) = session.run_graph(1, [np.ones((n, 3), np.float32)])
            assert y.numpy().shape == (n, 3)
    assert not declaration_warnings(caplog)


def test_output_with_no_declared_type_is_fine(session, caplog):
    graph = helper.make_graph([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Relu", ["x"], ["y"])],
                              "g", [helper.make_tensor_value_info("x", F, [2, 3])],
                              [onnx.ValueInfoProto(name="s"), helper.make_tensor_value_info("y", F, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    g = ga.Graph.from_onnx(model)
    assert g.outputs[0].dtype is None and g.outputs[0].shape is None
    with caplog.at_level(logging.WARNING, logger="geasync"):
        session.add_graph(1, g)
        session.compile_graph(1)
        s, y = session.run_graph(1, [np.ones((2, 3), np.float32)])
    np.testing.assert_array_equal(s.numpy(), np.array([2, 3], np.int64))
    assert y.numpy().shape == (2, 3) and not declaration_warnings(caplog)


# --- real-ish models: the metadata says what runs return ---------------------------------------------------

def _conv_net():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]), helper.make_node("Flatten", ["p"], ["logits"]),
             helper.make_node("ArgMax", ["logits"], ["label"], axis=1, keepdims=0),
             helper.make_node("ReduceMax", ["logits"], ["top"], keepdims=0, axes=[1])]
    model = make_model(nodes, [("x", F, ["N", 3, 8, 8])],
                       [("logits", F, ["N", 8]), ("label", I64, ["N"]), ("top", F, ["N"])], initializers=[("w", w)])
    return model, {"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)}


def _mixed_types():
    nodes = [helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16),
             helper.make_node("Greater", ["x", "t"], ["mask"]),
             helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Cast", ["x"], ["d"], to=TensorProto.DOUBLE),
             helper.make_node("Cast", ["x"], ["i"], to=TensorProto.INT32)]
    model = make_model(nodes, [("x", F, [2, "T"])],
                       [("h", TensorProto.FLOAT16, [2, "T"]), ("mask", TensorProto.BOOL, [2, "T"]),
                        ("shape", I64, [2]), ("d", TensorProto.DOUBLE, [2, "T"]), ("i", TensorProto.INT32, [2, "T"])],
                       initializers=[("t", np.float32(0.5))])
    return model, {"x": np.linspace(-3, 3, 10, dtype=np.float32).reshape(2, 5)}


def _mlp():
    model = onnx.load(str(MLP_PATH))
    return model, {"x": np.random.default_rng(1).standard_normal((3, 784)).astype(np.float32)}


def _gather_embedding():
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    nodes = [helper.make_node("Gather", ["table", "ids"], ["emb"]),
             helper.make_node("ReduceSum", ["emb", "axes"], ["pooled"], keepdims=0),
             helper.make_node("TopK", ["pooled", "k"], ["vals", "idx"])]
    model = make_model(nodes, [("ids", I64, ["B", "L"])],
                       [("vals", F, ["B", 2]), ("idx", I64, ["B", 2]), ("emb", F, ["B", "L", 4])],
                       initializers=[("table", table), ("axes", np.array([1], np.int64)),
                                     ("k", np.array([2], np.int64))])
    return model, {"ids": np.array([[1, 2, 3], [9, 0, 4]], np.int64)}


@pytest.mark.parametrize("build", [_conv_net, _mixed_types, _mlp, _gather_embedding],
                         ids=["conv_net", "mixed_types", "mlp", "gather_embedding"])
def test_metadata_matches_run_outputs(session, caplog, build):
    model, feeds = build()
    g = ga.Graph.from_onnx(model)
    with caplog.at_level(logging.WARNING, logger="geasync"):
        session.add_graph(1, g)
        session.compile_graph(1)
        outs = session.run_graph(1, [feeds[i.name] for i in g.inputs])
    assert not declaration_warnings(caplog)
    want = ort_session(model).run(None, feeds)
    assert [o.name for o in session.graph_outputs(1)] == [o.name for o in g.outputs]
    assert len(outs) == len(g.outputs) == len(want)
    for info, got, ref in zip(g.outputs, outs, want, strict=True):
        arr = got.numpy()
        assert arr.dtype == info.dtype == ref.dtype, info
        assert info.shape is not None and len(info.shape) == arr.ndim, info
        assert all(type(d) is not int or d == n for d, n in zip(info.shape, arr.shape, strict=True)), (info, arr.shape)
        if arr.dtype.kind == "f":
            np.testing.assert_allclose(arr.astype(np.float64), ref.astype(np.float64), rtol=1e-3, atol=1e-4)
        else:
            np.testing.assert_array_equal(arr, ref)


def test_graph_built_from_numpy_helper_metadata(session):
    """A Constant output declared with its real type and shape: metadata, summary and the run agree."""
    value = np.arange(6, dtype=np.int32).reshape(2, 3)
    model = make_model([helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(value)),
                        helper.make_node("Identity", ["x"], ["y"])],
                       [("x", F, [1])], [("c", TensorProto.INT32, [2, 3]), ("y", F, [1])])
    g = ga.Graph.from_onnx(model)
    session.add_graph(1, g)
    session.compile_graph(1)
    summary = session.get_compiled_graph_summary(1)
    c, _ = session.run_graph(1, [np.zeros(1, np.float32)])
    assert summary.output_dtypes[0] == g.outputs[0].dtype == c.numpy().dtype
    assert tuple(summary.output_shapes[0]) == g.outputs[0].shape == c.numpy().shape
    np.testing.assert_array_equal(c.numpy(), value)


def test_inverse_onesided_dft_with_its_axis_fed_infers_a_real_output(session, caplog):
    """With the axis a graph input, the lengths wait for the run, but an inverse one-sided DFT (irfft) is real: its
    last dim is 1 already at compile (it used to be inferred 2, contradicting ONNX's own node test declaration)."""
    model = make_model([helper.make_node("DFT", ["x", "", "axis"], ["y"], inverse=1, onesided=1)],
                       [("x", F, [1, 6, 10, 2]), ("axis", I64, [])], [("y", F, [1, 10, 10, 1])], opset=20)
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal((1, 6, 10, 2)).astype(np.float32), "axis": np.array(1, np.int64)}
    with caplog.at_level(logging.WARNING, logger="geasync"):
        session.add_graph(1, ga.Graph.from_onnx(model))
        session.compile_graph(1)
    assert not declaration_warnings(caplog)
    assert session.get_compiled_graph_summary(1).output_shapes[0][-1] == 1
    (y,) = session.run_graph(1, [feeds["x"], feeds["axis"]])
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    assert y.numpy().shape == want.shape == (1, 10, 10, 1)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)


def test_shape_contradiction_warned_after_the_first_plain_run(session, caplog):
    x = np.array([-1, 2, -3, 4], np.float32)
    session.add_graph(1, ga.Graph.from_onnx(relu(F, [2, 2])))
    with caplog.at_level(logging.WARNING, logger="geasync"):
        for _ in range(3):
            (y,) = session.run_graph(1, [x])  # GE compiles at the first run: the check follows it
    np.testing.assert_array_equal(y.numpy(), np.maximum(x, 0))
    (record,) = declaration_warnings(caplog)
    assert "'y' is declared with shape [2, 2] but the graph computes [4]" in record.getMessage()
