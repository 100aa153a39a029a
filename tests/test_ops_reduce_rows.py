"""Reductions over short and medium rows (1 to 33 terms) against onnx.reference: the kernels that take several rows
at a time (odd rows of 3 / 5 / 7 deinterleaved 8 rows a step; Max / Min over rows of 8 to 64 in blocks of 8 float32
or 4 float64 rows) and ReduceLogSumExp's float32 exp, over every row length around those blocks' edges, last /
middle / negative / several axes, keepdims 0 / 1, with NaN, infinities and signed zeros placed in chosen rows."""
import warnings

import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from onnx_cases import rerun_file_with_instruction_set, run_twin  # noqa: E402

RNG = np.random.default_rng(5301)
WIDTHS = [1, 2, 3, 5, 8, 17, 32, 33]
OPS = ["ReduceMax", "ReduceMin", "ReduceSum", "ReduceMean", "ReduceL1", "ReduceL2", "ReduceSumSquare",
       "ReduceLogSum", "ReduceLogSumExp"]


def _model(op, x, axes, keepdims):
    t = helper.np_dtype_to_tensor_dtype(x.dtype)
    inits = [helper.make_tensor("a", TensorProto.INT64, [len(axes)], list(axes))]
    node = helper.make_node(op, ["x", "a"], ["y"], keepdims=keepdims)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", t, x.shape)],
                              [helper.make_tensor_value_info("y", t, None)], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _check(op, x, axes, keepdims=1, rtol=None, skip_rows=()):
    model = _model(op, x, axes, keepdims)
    got = run_twin(model, {"x": x})[0]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = np.asarray(ReferenceEvaluator(model).run(None, {"x": x})[0])
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    if skip_rows:
        want = want.copy()
        want[list(skip_rows)] = got[list(skip_rows)]  # checked by the caller
    if op in ("ReduceMax", "ReduceMin"):
        np.testing.assert_array_equal(got, want)  # exact, NaN where the reference has one
    else:
        if rtol is None:
            rtol = {np.float16: 2e-3, np.float32: 2e-6, np.float64: 1e-12}[x.dtype.type]
        # the reference sums in the input's type: its rounding grows with the terms (|x| <= 8) summed
        count = x.size // max(want.size, 1)
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol,
                                   atol=rtol * max(1, count // 16) * 8)
    return got


def _data(shape, dtype, op):
    lo = 0.01 if op == "ReduceLogSum" else -8.0
    return RNG.uniform(lo, 8.0, shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("w", WIDTHS)
@pytest.mark.parametrize("op", OPS)
def test_rows_last_axis(op, w, dtype):
    # 45 rows: blocks of 8 (and of 4) and a tail of 5; keepdims 1 then 0, axis -1 then its positive form
    x = _data((45, w), dtype, op)
    _check(op, x, [-1], keepdims=1)
    _check(op, x.reshape(5, 9, w), [2], keepdims=0)


@pytest.mark.parametrize("w", [3, 5, 7, 32])
@pytest.mark.parametrize("op", ["ReduceMax", "ReduceSum", "ReduceL2", "ReduceLogSumExp"])
def test_rows_float16(op, w):
    _check(op, _data((37, w), np.float16, op), [-1])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("w", WIDTHS)
@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin", "ReduceLogSumExp", "ReduceSum"])
def test_middle_and_several_axes(op, w, dtype):
    x = _data((4, w, 6, 3), dtype, op)
    _check(op, x, [1])
    _check(op, x, [-3], keepdims=0)
    _check(op, x, [1, 3])
    _check(op, x, [0, 2], keepdims=0)


def _specials(dtype, w, rows=41):
    """rows x w values with NaN, +-inf, all--inf rows and signed zeros placed in chosen rows (by position within a
    block of 8 rows)."""
    x = RNG.uniform(-8, 8, (rows, w)).astype(dtype)
    x[1, w // 2] = np.nan
    x[9, w - 1] = np.inf
    x[10, 0] = -np.inf
    x[12, :] = -np.inf
    x[13, :] = np.inf
    x[17, w - 1] = np.inf
    x[17, 0] = np.nan
    x[20, :] = 0.0
    x[20, w // 2] = -0.0
    x[21, :] = -0.0
    x[21, w - 1] = 0.0
    x[22, :] = -np.abs(x[22, :])
    x[22, 0] = 0.0
    x[23, :] = np.abs(x[23, :])
    x[23, w - 1] = -0.0
    x[33, 0] = -np.inf
    x[33, w - 1] = np.nan
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("w", WIDTHS)
@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin", "ReduceSum", "ReduceL1", "ReduceL2", "ReduceLogSumExp"])
def test_rows_special_values(op, w, dtype):
    x = _specials(dtype, w)
    # rows whose maximum is infinite (no NaN): the reference's max shift gives inf - inf = NaN there, the twin the
    # limit, the maximum itself
    inf_rows = [r for r in range(len(x)) if np.isinf(x[r].max()) and not np.isnan(x[r]).any()]
    got = _check(op, x, [-1], skip_rows=inf_rows if op == "ReduceLogSumExp" else ())
    if op == "ReduceLogSumExp":
        assert [got[r, 0] for r in inf_rows] == [x[r].max() for r in inf_rows]
    if op in ("ReduceMax", "ReduceMin"):
        assert np.isnan(got[1, 0]) and np.isnan(got[17, 0]) and np.isnan(got[33, 0])  # NaN propagates
        for row in (20, 21, 22, 23):  # a zero extremum: the sign of the first extreme zero, as an ordered fold
            best = -np.inf if op == "ReduceMax" else np.inf
            for v in x[row]:
                best = v if (v > best if op == "ReduceMax" else v < best) else best
            assert got[row, 0] == best and np.signbit(got[row, 0]) == np.signbit(best), (row, x[row], got[row])
    if op == "ReduceLogSumExp":
        assert got[12, 0] == -np.inf and got[13, 0] == np.inf


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("w", [1, 4, 5, 16, 17, 33])
@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_columns_special_values(op, w, dtype):
    # the special rows become columns' terms: a leading axis, then a middle one (column blocks of 4 / 16 / 32)
    x = _specials(dtype, w)
    _check(op, x, [0])
    _check(op, np.stack([x, x[::-1], np.abs(x)]), [1], keepdims=0)
    clean = RNG.uniform(-8, 8, (3, 41, w)).astype(dtype)
    _check(op, clean, [-2])


def test_logsumexp_large_values_stay_finite():
    # exp(x) alone overflows float32 from x > 88.7: the maximum is subtracted first, so the result stays finite
    x = np.array([[100.0, 99.0, 98.0], [-200.0, -201.0, -199.5], [1e30, 0.0, -1e30]] * 5, np.float32)
    model = _model("ReduceLogSumExp", x, [-1], 0)
    got = run_twin(model, {"x": x})[0]
    xd = x.astype(np.float64)
    m = xd.max(axis=1)
    want = np.log(np.exp(xd - m[:, None]).sum(axis=1)) + m
    np.testing.assert_allclose(got, want, rtol=2e-6)


@pytest.mark.parametrize("isa", ["avx2", "baseline"])
def test_fallback_instruction_sets(isa):
    # the AVX2 kernels (also taken on AVX-512 CPUs) and the portable loops give the same answers
    rerun_file_with_instruction_set(__file__, isa, select="float32")
