"""Unary element-wise math and activation operators (and PRelu, Pow's mixed dtypes), run through
Session.run_graph: ONNX's node test cases for each of them, then random and edge values (NaN, infinities, signed
zeros, denormals, large magnitudes) in every dtype ONNX allows, compared with onnx.reference."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator

import geasync as ga
from conftest import TensorProto, helper, make_model
from onnx_cases import run_twin

FLOAT_OPS = ("Sin Cos Tan Asin Acos Atan Sinh Cosh Asinh Acosh Atanh Round Floor Ceil Elu Selu Celu HardSigmoid "
             "HardSwish Mish Softplus Softsign ThresholdedRelu LeakyRelu Sqrt Exp Log Reciprocal Erf Sigmoid Tanh "
             "Gelu").split()
NUMERIC_OPS = ("Sign", "Abs")
SIGNED_OPS = ("Neg", "Relu")
OTHER_OPS = ("IsNaN", "IsInf", "PRelu", "BitwiseNot")
ALL_OPS = FLOAT_OPS + list(NUMERIC_OPS) + list(SIGNED_OPS) + list(OTHER_OPS)

NP_TO_ONNX = {np.float16: TensorProto.FLOAT16, np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE,
              np.int8: TensorProto.INT8, np.int16: TensorProto.INT16, np.int32: TensorProto.INT32,
              np.int64: TensorProto.INT64, np.uint8: TensorProto.UINT8, np.uint16: TensorProto.UINT16,
              np.uint32: TensorProto.UINT32, np.uint64: TensorProto.UINT64, np.bool_: TensorProto.BOOL}
FLOATS = (np.float16, np.float32, np.float64)
SIGNED_INTS = (np.int8, np.int16, np.int32, np.int64)
UNSIGNED_INTS = (np.uint8, np.uint16, np.uint32, np.uint64)
RNG = np.random.default_rng(2024)


def compare(model, feeds, *, rtol, atol=0.0, expected=None):
    got = run_twin(model, feeds)
    if expected is None:
        with np.errstate(all="ignore"):
            expected = ReferenceEvaluator(model).run(None, feeds)
    for g, e in zip(got, expected, strict=True):
        e = np.asarray(e)
        assert g.dtype == e.dtype and g.shape == e.shape, (g.dtype, g.shape, e.dtype, e.shape)
        if e.dtype.kind in "biu":
            np.testing.assert_array_equal(g, e)
        else:
            np.testing.assert_array_equal(np.isnan(g), np.isnan(e), err_msg="NaN positions")
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)


def unary_model(op, dtype, shape, out_dtype=None, opset=20, **attrs):
    t = NP_TO_ONNX[dtype]
    return make_model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", t, list(shape))],
                      [("y", NP_TO_ONNX[out_dtype] if out_dtype else t, list(shape))], opset=opset)


# ---- ONNX node test cases ----

def _node_cases():
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    out = []
    for case in cases:
        nodes = case.model.graph.node
        if len(nodes) == 1 and nodes[0].op_type in ALL_OPS and nodes[0].domain in ("", "ai.onnx"):
            out.append(case)
    return out


def _has_bfloat16(model) -> bool:
    values = list(model.graph.input) + list(model.graph.output)
    return any(v.type.tensor_type.elem_type == TensorProto.BFLOAT16 for v in values)


NODE_CASES = [c for c in _node_cases() if not _has_bfloat16(c.model)]  # numpy has no bfloat16 to feed


def test_every_operator_has_node_cases():
    missing = set(ALL_OPS) - {c.model.graph.node[0].op_type for c in NODE_CASES}
    assert not missing, sorted(missing)


@pytest.mark.parametrize("case", NODE_CASES, ids=[c.name for c in NODE_CASES])
def test_node_case(case):
    for inputs, outputs in case.data_sets:
        names = [i.name for i in case.model.graph.input]
        feeds = {n: np.asarray(onnx.numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else v)
                 for n, v in zip(names, inputs, strict=True)}
        compare(case.model, feeds, rtol=case.rtol, atol=case.atol, expected=[np.asarray(o) for o in outputs])


# ---- random and edge values in every float dtype ----

# op -> (low, high) of the random inputs (inside the domain, away from poles) and attribute variants
FLOAT_CASES = {
    "Sin": (-10, 10, [{}]), "Cos": (-10, 10, [{}]), "Tan": (-1.4, 1.4, [{}]), "Asin": (-1, 1, [{}]),
    "Acos": (-1, 1, [{}]), "Atan": (-10, 10, [{}]), "Sinh": (-5, 5, [{}]), "Cosh": (-5, 5, [{}]),
    "Asinh": (-10, 10, [{}]), "Acosh": (1, 10, [{}]), "Atanh": (-0.99, 0.99, [{}]), "Round": (-10, 10, [{}]),
    "Floor": (-10, 10, [{}]), "Ceil": (-10, 10, [{}]), "Elu": (-5, 5, [{}, {"alpha": 0.5}]),
    "Selu": (-5, 5, [{}, {"alpha": 2.0, "gamma": 3.0}]), "Celu": (-5, 5, [{}, {"alpha": 2.0}]),
    "HardSigmoid": (-6, 6, [{}, {"alpha": 0.3, "beta": 0.4}]), "HardSwish": (-6, 6, [{}]), "Mish": (-8, 8, [{}]),
    "Softplus": (-8, 8, [{}]), "Softsign": (-8, 8, [{}]), "ThresholdedRelu": (-3, 3, [{}, {"alpha": 0.5}]),
    "LeakyRelu": (-3, 3, [{}, {"alpha": 0.2}]), "Sqrt": (0, 10, [{}]), "Exp": (-10, 10, [{}]),
    "Log": (0.01, 100, [{}]), "Reciprocal": (0.1, 10, [{}]), "Erf": (-4, 4, [{}]), "Sigmoid": (-10, 10, [{}]),
    "Tanh": (-6, 6, [{}]), "Gelu": (-6, 6, [{}, {"approximate": "tanh"}]),
    "Sign": (-3, 3, [{}]), "Abs": (-3, 3, [{}]), "Neg": (-3, 3, [{}]), "Relu": (-3, 3, [{}]),
}
RTOL = {np.float16: 2e-3, np.float32: 2e-5, np.float64: 1e-12}
ATOL = {np.float16: 1e-3, np.float32: 1e-6, np.float64: 1e-12}
# ops whose float32 kernel is a vectorised approximation (a few ulp) instead of libm
APPROX32 = {"Exp", "Log", "Tanh", "Erf", "Sigmoid", "Gelu"}
# float64 inputs the reference evaluates with float32 constants or functions (erf, Gelu's tanh form, HardSwish's
# alpha = 1/6 as a float32): the twin computes them in double, so they differ beyond float64 precision
FLOAT32_REFERENCE = {"Erf", "Gelu", "HardSwish"}


def _edges(dtype):
    info = np.finfo(dtype)
    vals = [np.nan, np.inf, -np.inf, 0.0, -0.0, float(info.smallest_subnormal), -float(info.smallest_subnormal),
            float(info.tiny), float(info.max), -float(info.max), 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 30.0, -30.0,
            100.0, -100.0, 1e4, -1e4]
    return np.array(vals, dtype=np.float64).astype(dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.__name__)
@pytest.mark.parametrize("op", sorted(FLOAT_CASES))
def test_random_values_match_reference(op, dtype):
    lo, hi, variants = FLOAT_CASES[op]
    x = RNG.uniform(lo, hi, size=(7, 37)).astype(dtype)
    for attrs in variants:
        rtol = max(RTOL[dtype], 1e-5) if (op in APPROX32 and dtype == np.float32) else RTOL[dtype]
        atol = ATOL[dtype]
        if op in FLOAT32_REFERENCE and dtype == np.float64:
            rtol, atol = 1e-6, 1e-7
        compare(unary_model(op, dtype, x.shape, **attrs), {"x": x}, rtol=rtol, atol=atol)


def _stable_softplus(x):
    x64 = x.astype(np.float64)
    return (np.maximum(x64, 0) + np.log1p(np.exp(-np.abs(x64)))).astype(x.dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.__name__)
@pytest.mark.parametrize("op", sorted(FLOAT_CASES))
def test_edge_values_match_reference(op, dtype):
    x = _edges(dtype)
    _, _, variants = FLOAT_CASES[op]
    model = unary_model(op, dtype, x.shape, **variants[0])
    expected = None
    if op == "Softplus":  # the reference's log(exp(x) + 1) overflows where log1p form does not
        with np.errstate(all="ignore"):
            expected = [_stable_softplus(x)]
    if op == "Gelu":
        pytest.skip("covered with its limits by tests/test_vmath.py; the reference's tanh form overflows at +-max")
    rtol = 1e-5 if dtype == np.float32 else RTOL[dtype]
    atol = ATOL[dtype]
    if op in FLOAT32_REFERENCE and dtype == np.float64:
        rtol, atol = 1e-6, 1e-7
    if op in ("Sinh", "Cosh") and dtype == np.float16:
        rtol = 5e-3  # float16 rounding of exp near the top of the range
    compare(model, {"x": x}, rtol=rtol, atol=atol, expected=expected)


# ---- integer dtypes ----

INT_OPS = {"Sign": SIGNED_INTS + UNSIGNED_INTS, "Abs": SIGNED_INTS + UNSIGNED_INTS, "Neg": SIGNED_INTS,
           "Relu": SIGNED_INTS, "BitwiseNot": SIGNED_INTS + UNSIGNED_INTS}


@pytest.mark.parametrize("op,dtype", [(op, d) for op, ds in INT_OPS.items() for d in ds],
                         ids=lambda v: v if isinstance(v, str) else v.__name__)
def test_integer_dtypes_match_reference(op, dtype):
    info = np.iinfo(dtype)
    x = np.concatenate([RNG.integers(info.min, info.max, size=50, dtype=dtype, endpoint=True),
                        np.array([info.min, info.max, 0, 1], dtype=dtype)])
    if info.min < 0:
        x = np.concatenate([x, np.array([-1], dtype=dtype)])
    compare(unary_model(op, dtype, x.shape), {"x": x}, rtol=0)


def test_integer_abs_and_neg_wrap_like_numpy():
    x = np.array([-128, 127, 0, -1], np.int8)
    assert run_twin(unary_model("Abs", np.int8, x.shape), {"x": x})[0].tolist() == [-128, 127, 0, 1]
    assert run_twin(unary_model("Neg", np.int8, x.shape), {"x": x})[0].tolist() == [-128, -127, 0, 1]


# ---- IsNaN / IsInf ----

@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.__name__)
@pytest.mark.parametrize("attrs", [{}, {"detect_positive": 0}, {"detect_negative": 0},
                                   {"detect_positive": 0, "detect_negative": 0}])
def test_is_inf_flags(dtype, attrs):
    x = _edges(dtype)
    compare(unary_model("IsInf", dtype, x.shape, out_dtype=np.bool_, **attrs), {"x": x}, rtol=0)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.__name__)
def test_is_nan(dtype):
    x = _edges(dtype)
    got = run_twin(unary_model("IsNaN", dtype, x.shape, out_dtype=np.bool_), {"x": x})[0]
    np.testing.assert_array_equal(got, np.isnan(x))


# ---- PRelu: the slope broadcasts to the input ----

@pytest.mark.parametrize("dtype", FLOATS + (np.int32, np.int64, np.uint32, np.uint64), ids=lambda d: d.__name__)
@pytest.mark.parametrize("slope_shape", [(1,), (5,), (3, 1), (2, 3, 5), ()])
def test_prelu_broadcast_slope(dtype, slope_shape):
    t = NP_TO_ONNX[dtype]
    shape = (2, 3, 5)
    if np.dtype(dtype).kind == "f":
        x = RNG.uniform(-3, 3, shape).astype(dtype)
        slope = RNG.uniform(-1, 1, slope_shape).astype(dtype)
    else:
        info = np.iinfo(dtype)
        x = RNG.integers(max(info.min, -100), 100, shape).astype(dtype)
        slope = RNG.integers(0, 5, slope_shape).astype(dtype)
    model = make_model([helper.make_node("PRelu", ["x", "slope"], ["y"])], [("x", t, list(shape)),
                       ("slope", t, list(slope_shape))], [("y", t, list(shape))], opset=16)
    compare(model, {"x": x, "slope": slope}, rtol=RTOL.get(dtype, 0), atol=ATOL.get(dtype, 0))


def test_prelu_slope_that_does_not_broadcast_to_the_input_is_a_clear_error():
    model = make_model([helper.make_node("PRelu", ["x", "slope"], ["y"])],
                       [("x", TensorProto.FLOAT, [2, 3]), ("slope", TensorProto.FLOAT, [4, 2, 3])],
                       [("y", TensorProto.FLOAT, None)], opset=16)
    with ga.Session() as s, pytest.raises(ga.GeError, match="slope"):
        s.add_graph(1, ga.Graph.from_onnx(model))
        s.run_graph(1, [np.zeros((2, 3), np.float32), np.zeros((4, 2, 3), np.float32)])


# ---- Pow with mixed dtypes ----

@pytest.mark.parametrize("base,exp", [(np.float32, np.int64), (np.float32, np.int32), (np.float64, np.float32),
                                      (np.float16, np.float32), (np.int64, np.int64), (np.int32, np.float32),
                                      (np.int64, np.float64), (np.float32, np.uint8), (np.float32, np.float16)],
                         ids=lambda d: d.__name__)
def test_pow_mixed_dtypes(base, exp):
    shape = (4, 6)
    # integer bases with a float exponent stay >= 1: NaN and inf (a negative base to a fractional power, 0 to a
    # negative one) have no integer value (numpy's cast gives INT_MIN there, the twin saturates)
    lo = -4 if np.dtype(exp).kind != "f" else 1
    b = (RNG.uniform(0.5, 3, shape) if np.dtype(base).kind == "f" else RNG.integers(lo, 5, shape)).astype(base)
    e = (RNG.uniform(-2, 3, shape) if np.dtype(exp).kind == "f" else RNG.integers(0, 4, shape)).astype(exp)
    model = make_model([helper.make_node("Pow", ["b", "e"], ["y"])],
                       [("b", NP_TO_ONNX[base], list(shape)), ("e", NP_TO_ONNX[exp], list(shape))],
                       [("y", NP_TO_ONNX[base], list(shape))], opset=15)
    compare(model, {"b": b, "e": e}, rtol=RTOL.get(base, 0), atol=ATOL.get(base, 0))


# ---- dtypes ONNX does not allow are refused clearly ----

@pytest.mark.parametrize("op,dtype", [("Sin", np.int32), ("Round", np.int64), ("BitwiseNot", np.float32),
                                      ("IsNaN", np.int32), ("Neg", np.uint8)], ids=str)
def test_disallowed_dtype_is_a_clear_error(op, dtype):
    out = np.bool_ if op == "IsNaN" else dtype
    model = unary_model(op, dtype, (3,), out_dtype=out)
    with ga.Session() as s, pytest.raises(ga.GeError, match=op):
        s.add_graph(1, ga.Graph.from_onnx(model))
        s.run_graph(1, [np.zeros(3, dtype)])
