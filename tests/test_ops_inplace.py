"""Steps written in place: when an intermediate dies at an element-wise step (a unary op, Clip, an arithmetic op
whose operand has the output's shape, BatchNormalization) or a row-wise normalisation (Softmax, LayerNormalization),
the twin writes the step's output over it. Checked through the public API: results against onnx.reference on random
and edge values (every in-place kernel: unary math, Clip, Add/Sub/Mul/Div/PRelu with and without broadcasting,
x op x), and the compiled graph's feature memory, which shows whether the intermediate's buffer was shared."""

from __future__ import annotations

import numpy as np
import pytest

import geasync as ga
from conftest import TensorProto, helper, make_model
from onnx_cases import assert_close
from onnx_cases import reference as _reference

UNARY_FLOAT = ("Sin Cos Tan Asin Acos Atan Sinh Cosh Asinh Acosh Atanh Round Floor Ceil Elu Selu Celu HardSigmoid "
               "HardSwish Mish Softplus Softsign ThresholdedRelu LeakyRelu Sqrt Exp Log Reciprocal Erf Sigmoid "
               "Tanh Gelu Neg Relu Abs Sign").split()
RNG = np.random.default_rng(77)
EDGES = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1e-40, -1e-40, 3e38, -3e38, 1.0, -1.0, 0.5], np.float32)


def _values(n: int, dtype=np.float32) -> np.ndarray:
    x = (RNG.standard_normal(n) * 3).astype(dtype)
    if np.issubdtype(dtype, np.floating):
        with np.errstate(over="ignore"):  # float16: the large magnitudes become infinities
            x[: len(EDGES)] = EDGES.astype(dtype)
    return x


def _aligned(nbytes: int) -> int:
    return (nbytes + 63) // 64 * 64


def reference(model, feeds):
    with np.errstate(all="ignore"):  # edge values: numpy warns where the operators' definitions give NaN / inf
        return _reference(model, [feeds[i.name] for i in model.graph.input])


def _run(model, feeds):
    """The twin's outputs and the compiled graph's feature memory (its arena of intermediates)."""
    names = [i.name for i in model.graph.input]
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        outs = s.run_graph(1, [feeds[n] for n in names])
        return [o.numpy().copy() for o in outs], s.get_compiled_graph_summary(1).feature_memory_size


def _chain_model(op: str, elem=TensorProto.FLOAT, shape=(1000,), *, opset: int = 20, attrs=None, inits=()):
    # x -> Neg -> op -> op -> Neg -> y: both op steps read an intermediate that dies there (the op's extra inputs,
    # such as scale and bias, are the constants inits)
    extra = [name for name, _ in inits]
    nodes = [helper.make_node("Neg", ["x"], ["a"]), helper.make_node(op, ["a", *extra], ["b"], **(attrs or {})),
             helper.make_node(op, ["b", *extra], ["c"], **(attrs or {})), helper.make_node("Neg", ["c"], ["y"])]
    return make_model(nodes, [("x", elem, list(shape))], [("y", elem, list(shape))], opset=opset,
                      initializers=list(inits))


# Inputs for which op(op(-x)) is well conditioned. Tan of a large intermediate (Acos, Asin, Atanh, Acosh of one
# near the edge of their domain) turns a legitimate 1-ulp difference in the first step into a relative difference
# of 1e-4 to 1e-3 in the second (seen on AVX-512: tan(tan(x)) -30.143 against -30.115); each op's own accuracy over
# its whole range is tested in test_vmath.py and test_ops_unary.py.
_CHAIN_DOMAIN = {"Tan": (-0.9, 0.9), "Acos": (-0.99, -0.6), "Asin": (-0.8, 0.8), "Atanh": (-0.7, 0.7),
                 "Acosh": (-10.0, -2.0)}


@pytest.mark.parametrize("op", UNARY_FLOAT)
def test_unary_chain_in_place_matches_reference(op):
    domain = _CHAIN_DOMAIN.get(op)
    x = _values(1000) if domain is None else RNG.uniform(*domain, 1000).astype(np.float32)
    model = _chain_model(op)
    (got,), feature = _run(model, {"x": x})
    (want,) = reference(model, {"x": x})
    with np.errstate(all="ignore"):
        assert_close([got], [want], rtol=2e-5 if op not in ("Tan", "Sinh", "Cosh") else 1e-4, atol=1e-6)
    assert feature == _aligned(4 * 1000), "one buffer: both op steps write over the intermediate they read"


@pytest.mark.parametrize("dtype, elem", [(np.float16, TensorProto.FLOAT16), (np.float64, TensorProto.DOUBLE),
                                          (np.int32, TensorProto.INT32), (np.int8, TensorProto.INT8)])
def test_unary_chain_in_place_other_dtypes(dtype, elem):
    x = _values(777, dtype) if np.issubdtype(dtype, np.floating) else RNG.integers(-100, 100, 777).astype(dtype)
    model = _chain_model("Relu", elem, (777,))
    (got,), feature = _run(model, {"x": x})
    (want,) = reference(model, {"x": x})
    np.testing.assert_array_equal(got, want)
    assert feature == _aligned(np.dtype(dtype).itemsize * 777)


def test_gelu_tanh_and_clip_in_place():
    x = _values(4099)
    for op, attrs, extra in (("Gelu", {"approximate": "tanh"}, ()), ("Clip", {}, ("lo", "hi"))):
        nodes = [helper.make_node("Neg", ["x"], ["a"]), helper.make_node(op, ["a", *extra], ["b"], **attrs),
                 helper.make_node("Neg", ["b"], ["y"])]
        inits = [(n, np.float32(v)) for n, v in zip(extra, (-0.5, 2.0), strict=False)]
        model = make_model(nodes, [("x", TensorProto.FLOAT, [4099])],
                           [("y", TensorProto.FLOAT, [4099])], opset=20,
                           initializers=inits)
        (got,), feature = _run(model, {"x": x})
        (want,) = reference(model, {"x": x})
        assert_close([got], [want], rtol=2e-5, atol=1e-6)
        assert feature == _aligned(4 * 4099), op


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "PRelu"])
@pytest.mark.parametrize("other_shape", [[8, 130], [130], [8, 1], [1]])
@pytest.mark.parametrize("intermediate_first", [True, False])
def test_binary_in_place_over_the_full_operand(op, other_shape, intermediate_first):
    # t = Neg(x) dies at op; the op writes over it when t has the output's shape (always here), broadcasting the
    # other operand (a graph input) whichever side it is on
    if op == "PRelu" and not intermediate_first:
        pytest.skip("PRelu's slope is the second input and broadcasts to X")
    x = _values(8 * 130).reshape(8, 130)
    w = (RNG.standard_normal(other_shape) + 0.1).astype(np.float32)
    args = ["t", "w"] if intermediate_first else ["w", "t"]
    nodes = [helper.make_node("Neg", ["x"], ["t"]), helper.make_node(op, args, ["u"]),
             helper.make_node("Neg", ["u"], ["y"])]
    model = make_model(nodes, [("x", TensorProto.FLOAT, [8, 130]),
                               ("w", TensorProto.FLOAT, other_shape)],
                       [("y", TensorProto.FLOAT, [8, 130])], opset=20)
    (got,), feature = _run(model, {"x": x, "w": w})
    (want,) = reference(model, {"x": x, "w": w})
    with np.errstate(all="ignore"):
        assert_close([got], [want], rtol=1e-6, atol=0)
    assert feature == _aligned(4 * 8 * 130)


def test_x_op_x_and_a_value_read_later_are_not_overwritten():
    # u = t * t (t dies: in place is fine); v = Exp(t2) where t2 is read again by the Add after it (not in place)
    x = _values(5000)
    nodes = [helper.make_node("Neg", ["x"], ["t"]), helper.make_node("Mul", ["t", "t"], ["u"]),
             helper.make_node("Abs", ["x"], ["t2"]), helper.make_node("Sigmoid", ["t2"], ["v"]),
             helper.make_node("Add", ["v", "t2"], ["s"]), helper.make_node("Add", ["u", "s"], ["y"])]
    model = make_model(nodes, [("x", TensorProto.FLOAT, [5000])],
                       [("y", TensorProto.FLOAT, [5000])], opset=20)
    (got,), _ = _run(model, {"x": x})
    (want,) = reference(model, {"x": x})
    with np.errstate(all="ignore"):
        assert_close([got], [want], rtol=1e-6, atol=1e-7)


def test_graph_inputs_and_outputs_are_never_written_in_place():
    # Relu's input is the caller's array and its output a graph output that the next step also reads
    x = _values(3000)
    keep = x.copy()
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Exp", ["r"], ["e"])]
    model = make_model(nodes, [("x", TensorProto.FLOAT, [3000])],
                       [("r", TensorProto.FLOAT, [3000]),
                        ("e", TensorProto.FLOAT, [3000])], opset=20)
    (r, e), _ = _run(model, {"x": x})
    np.testing.assert_array_equal(x, keep)
    np.testing.assert_array_equal(r, np.maximum(keep, 0))
    with np.errstate(all="ignore"):
        assert_close([e], [np.exp(np.maximum(keep, 0))], rtol=2e-6, atol=0)


def test_long_chain_uses_one_buffer():
    n = 1 << 16
    ops = ["Relu", "Tanh", "Sigmoid", "Exp", "Neg", "Abs", "Sqrt", "Log"]
    nodes = [helper.make_node("Neg", ["x"], ["v0"])]
    nodes += [helper.make_node(op, [f"v{i}"], [f"v{i + 1}"]) for i, op in enumerate(ops)]
    nodes.append(helper.make_node("Neg", [f"v{len(ops)}"], ["y"]))
    model = make_model(nodes, [("x", TensorProto.FLOAT, [n])],
                       [("y", TensorProto.FLOAT, [n])], opset=20)
    x = _values(n)
    (got,), feature = _run(model, {"x": x})
    (want,) = reference(model, {"x": x})
    with np.errstate(all="ignore"):
        assert_close([got], [want], rtol=1e-5, atol=1e-6)
    assert feature == _aligned(4 * n)


@pytest.mark.parametrize("dtype, elem", [(np.float32, TensorProto.FLOAT), (np.float64, TensorProto.DOUBLE)])
def test_batch_normalization_in_place(dtype, elem):
    shape = [2, 3, 5, 7]
    x = _values(210, dtype).reshape(shape)
    params = [("scale", RNG.standard_normal(3)), ("bias", RNG.standard_normal(3)), ("mean", RNG.standard_normal(3)),
              ("var", RNG.uniform(0.1, 2, 3))]
    nodes = [helper.make_node("Neg", ["x"], ["t"]),
             helper.make_node("BatchNormalization", ["t", "scale", "bias", "mean", "var"], ["u"]),
             helper.make_node("Neg", ["u"], ["y"])]
    model = make_model(nodes, [("x", elem, shape)], [("y", elem, shape)], opset=15,
                       initializers=[(n, v.astype(dtype)) for n, v in params])
    (got,), feature = _run(model, {"x": x})
    (want,) = reference(model, {"x": x})
    with np.errstate(all="ignore"):
        assert_close([got], [want], rtol=1e-5, atol=1e-6)
    assert feature == _aligned(np.dtype(dtype).itemsize * 210)


@pytest.mark.parametrize("dtype, elem", [(np.float32, TensorProto.FLOAT), (np.float64, TensorProto.DOUBLE)])
@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_softmax_in_place(dtype, elem, axis):
    # contiguous rows (axis -1) and a strided axis (1, 0: the inner index in the vector lanes)
    shape = [6, 37, 70]
    x = _values(6 * 37 * 70, dtype).reshape(shape)
    model = _chain_model("Softmax", elem, shape, opset=13, attrs={"axis": axis})
    (got,), feature = _run(model, {"x": x})
    (want,) = reference(model, {"x": x})
    with np.errstate(all="ignore"):
        assert_close([got], [want], rtol=1e-5, atol=1e-7)
    assert feature == _aligned(np.dtype(dtype).itemsize * x.size)


@pytest.mark.parametrize("dtype, elem", [(np.float32, TensorProto.FLOAT), (np.float64, TensorProto.DOUBLE)])
@pytest.mark.parametrize("axis", [-1, 1])
def test_log_softmax_is_not_in_place_and_stays_right(dtype, elem, axis):
    # LogSoftmax reads x again after storing the exps: it gets its own buffer (two, ping-pong), and its results
    # stay those of the reference
    shape = [5, 33, 40]
    x = _values(5 * 33 * 40, dtype).reshape(shape)
    # not +-3e38 in one row: there the reference's log(exp(x - max) / sum) is -inf where the twin's x - max - log(sum)
    # keeps the finite x - max (-3e38); both are LogSoftmax, one more exact
    x[np.abs(x) > 1e30] = 50
    model = _chain_model("LogSoftmax", elem, shape, opset=13, attrs={"axis": axis})
    (got,), feature = _run(model, {"x": x})
    (want,) = reference(model, {"x": x})
    with np.errstate(all="ignore"):
        assert_close([got], [want], rtol=1e-5, atol=1e-5)
    assert feature == 2 * _aligned(np.dtype(dtype).itemsize * x.size)


@pytest.mark.parametrize("dtype, elem", [(np.float32, TensorProto.FLOAT), (np.float64, TensorProto.DOUBLE)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_layer_normalization_in_place(dtype, elem, with_bias):
    shape = [4, 9, 130]
    x = _values(4 * 9 * 130, dtype).reshape(shape)
    x[0, 0] = 7.0  # a constant row: variance 0
    x[1, 1, 0] = np.nan  # a row with NaN stays NaN, the others stay finite
    inits = [("scale", RNG.standard_normal(130).astype(dtype))]
    if with_bias:
        inits.append(("bias", RNG.standard_normal(130).astype(dtype)))
    model = _chain_model("LayerNormalization", elem, shape, opset=17, attrs={"axis": -1, "epsilon": 1e-5},
                         inits=inits)
    (got,), feature = _run(model, {"x": x})
    (want,) = reference(model, {"x": x})
    with np.errstate(all="ignore"):
        assert_close([got], [want], rtol=1e-4, atol=1e-5)
    assert feature == _aligned(np.dtype(dtype).itemsize * x.size)

