"""Reductions over short last-axis rows (2-7 terms: one loop over many rows; 8-64: the vector row kernel called
once for all rows) and over a short first / middle axis, every dtype, against onnx.reference: the same values,
NaN rows, signed zeros and infinities included. And Cast float64 -> 8 / 16-bit integers."""
import warnings

import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from onnx_cases import run_twin  # noqa: E402

RNG = np.random.default_rng(4706)


def _model(op, x, axes, keepdims=1):
    t = helper.np_dtype_to_tensor_dtype(x.dtype)
    node = helper.make_node(op, ["x", "a"], ["y"], keepdims=keepdims)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", t, x.shape)],
                              [helper.make_tensor_value_info("y", t, None)],
                              initializer=[helper.make_tensor("a", TensorProto.INT64, [len(axes)], axes)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _check(op, x, axes, keepdims=1, exact=True):
    model = _model(op, x, axes, keepdims)
    got = run_twin(model, {"x": x})[0]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = np.asarray(ReferenceEvaluator(model).run(None, {"x": x})[0])
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    if x.dtype.kind != "f":
        np.testing.assert_array_equal(got, want)
        return
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    if exact:  # extrema pick an input value (a zero's sign is numpy's choice there, not the twin's rule)
        np.testing.assert_array_equal(got[ok], want[ok])
    else:
        # float16: the reference sums in float16, the twin in double
        half = x.dtype == np.float16
        np.testing.assert_allclose(got[ok], want[ok], rtol=1e-2 if half else 2e-6, atol=5e-2 if half else 1e-6)


def _rows(n, w, dtype):
    x = (RNG.standard_normal((n, w)) * 10).astype(dtype)
    if x.dtype.kind == "f" and n >= 7:
        x[1] = np.nan
        x[2, w // 2] = np.nan
        x[3] = -0.0
        x[4, :] = 0.0
        x[4, 0] = -0.0
        x[5, -1] = np.inf
        x[6] = -np.inf
    elif x.dtype.kind == "f":  # a NaN and an infinity down the columns
        x[0, 3] = np.nan
        x[-1, 5] = np.nan
        x[-1, 7] = np.inf
        x[:, 9] = -0.0
    return x


@pytest.mark.parametrize("w", [2, 3, 5, 7, 8, 13, 32, 64])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_extremum_rows(op, dtype, w):
    _check(op, _rows(67, w, dtype), [-1])
    _check(op, _rows(9, w, dtype).reshape(3, 3, w), [2], keepdims=0)


@pytest.mark.parametrize("w", [2, 3, 4, 6, 7])
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceProd",
                                "ReduceLogSum", "ReduceLogSumExp"])
def test_sum_like_rows(op, w):
    for n, dtype in ((41, np.float32), (12, np.float16)):
        x = _rows(n, w, dtype)
        if op == "ReduceLogSum":
            x = np.abs(x)
        if op == "ReduceLogSumExp":  # a row of -inf: the twin gives -inf (log 0), the reference NaN (-inf - -inf)
            x[6] = -5.0
        _check(op, x.reshape(2, -1, w) if n == 12 else x, [-1], exact=False)


@pytest.mark.parametrize(("op", "dtype"), [(op, t) for op in ("ReduceMax", "ReduceMin", "ReduceSum", "ReduceProd")
                                             for t in (np.int32, np.int64)] +
                         [(op, t) for op in ("ReduceMax", "ReduceMin") for t in (np.int8, np.uint8)])
def test_integer_rows(op, dtype):
    x = RNG.integers(-100 if np.dtype(dtype).kind == "i" else 0, 100, (29, 3)).astype(dtype)
    _check(op, x, [-1])


@pytest.mark.parametrize("axes", [[0], [1]])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.int64])
@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin", "ReduceSum", "ReduceMean"])
def test_short_leading_axis(op, dtype, axes):
    """Extents 2-5 over a first or middle axis with a long inner extent."""
    for k in (2, 3, 5):
        if np.dtype(dtype).kind == "f":
            x = _rows(k * 3, 77, dtype).reshape(3, k, 77) if axes == [1] else _rows(k, 231, dtype)
        else:
            x = RNG.integers(-1000, 1000, (3, k, 77) if axes == [1] else (k, 231)).astype(dtype)
        _check(op, x, axes, exact=op in ("ReduceMax", "ReduceMin"))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16])
def test_cast_float64_to_narrow_int(dtype):
    """float64 -> 8 / 16-bit integers (one vector pass): truncation, wrap, NaN / infinity / out-of-range values."""
    x = RNG.standard_normal(1037) * 50000
    x[::7] = np.nan
    x[3::11] = np.inf
    x[4::11] = -np.inf
    x[5::13] = -1e12
    x[6::17] = 2147483647.9
    x[8::19] = -2147483648.9
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=t)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.DOUBLE, x.shape)],
                              [helper.make_tensor_value_info("y", t, x.shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    got = run_twin(model, {"x": x})[0]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
