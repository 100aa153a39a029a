"""Fast paths a fourth sweep against onnxruntime added, compared with onnx.reference / numpy: float64 Mod (one FMA
per lane, libm's fmod for the lanes it cannot prove), GreaterOrEqual / LessOrEqual on the comparisons' vector runs,
ArgMax / ArgMin over short rows, float64 ReduceMax / ReduceMin over kept columns, float16 Sign on the bits and
float16 2-D Transpose. The last test reruns the file with the fallback instruction sets."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

from conftest import TensorProto, helper, make_model
from onnx_cases import rerun_file_with_instruction_set, run_twin

RNG = np.random.default_rng(2028)
F16, F32, F64 = TensorProto.FLOAT16, TensorProto.FLOAT, TensorProto.DOUBLE


def onnx_type(dtype):
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def reference(model, feeds):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return [np.asarray(r) for r in ReferenceEvaluator(model).run(None, feeds)]


def with_specials(x):
    """x (float) with NaN, +-inf, +-0, the largest finite values and denormals of its dtype at random places."""
    x = x.copy()
    info = np.finfo(x.dtype)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, info.max, -info.max, info.smallest_subnormal,
                         -info.smallest_subnormal, 1.0, -1.0], dtype=x.dtype)
    k = min(len(specials), x.size)
    x.reshape(-1)[RNG.choice(x.size, size=k, replace=False)] = specials[:k]
    return x


def binary(op, a, b, out_type, **attrs):
    model = make_model([helper.make_node(op, ["a", "b"], ["y"], **attrs)],
                       [("a", onnx_type(a.dtype), list(a.shape)), ("b", onnx_type(b.dtype), list(b.shape))],
                       [("y", out_type, None)], opset=18)
    (got,) = run_twin(model, {"a": a, "b": b})
    (want,) = reference(model, {"a": a, "b": b})
    return got, want


SHAPES = [((33, 31), (33, 31)), ((33, 31), ()), ((33, 31), (31,)), ((33, 1), (1, 31)), ((3,), (3,)), ((0, 5), (5,))]


# ---- float64 Mod ----

@pytest.mark.parametrize("fmod", [1, 0])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_mod_float64_matches_fmod_bit_for_bit(fmod, shapes):
    sa, sb = shapes
    a = RNG.uniform(-100, 100, sa)
    b = np.asarray(RNG.uniform(0.5, 7, sb) * RNG.choice([-1.0, 1.0], sb))
    if a.size:
        a = with_specials(a)
        # quotients near 2^51 and beyond, exact multiples (a zero remainder of either sign) and a / b rounding up
        # onto an integer (0.7 / 0.1 is 7 in double, the true quotient is below 7)
        flat = a.reshape(-1)
        flat[:6] = [3e15, -3e15, 7.0, -7.0, 0.7, 1e300][: flat.size]
    if b.size and b.ndim:
        b.reshape(-1)[:3] = [1.0, 0.1, 0.0][: b.size]
    got, want = binary("Mod", a, b, F64, fmod=fmod)
    assert got.shape == want.shape and got.dtype == np.float64
    np.testing.assert_array_equal(got.view(np.uint64)[~np.isnan(want)], want.view(np.uint64)[~np.isnan(want)])
    assert np.isnan(got[np.isnan(want)]).all()


def test_mod_float64_many_random_quotients():
    a = RNG.standard_normal(20000) * 10.0 ** RNG.integers(-20, 20, 20000)
    b = RNG.standard_normal(20000) * 10.0 ** RNG.integers(-20, 20, 20000)
    # a / b rounded up onto an integer (1 / 0.1 is 10 in double; the true quotient is below 10)
    a[:6] = [1.0, -1.0, 0.7, 3.0, 0.3, -0.3]
    b[:6] = [0.1, 0.1, 0.1, -0.1, 0.1, -0.1]
    got, _ = binary("Mod", a, b, F64, fmod=1)
    np.testing.assert_array_equal(got.view(np.uint64), np.fmod(a, b).view(np.uint64))


# ---- GreaterOrEqual / LessOrEqual ----

@pytest.mark.parametrize("op", ["GreaterOrEqual", "LessOrEqual"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32, np.int8, np.uint8])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_or_equal_comparisons(op, dtype, shapes):
    sa, sb = shapes
    a = (RNG.standard_normal(sa) * 4).round().astype(dtype)
    b = np.asarray((RNG.standard_normal(sb) * 4).round().astype(dtype))
    if a.size and np.dtype(dtype).kind == "f":
        a = with_specials(a)
    got, want = binary(op, a, b, TensorProto.BOOL)
    assert got.dtype == np.bool_ and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


# ---- ArgMax / ArgMin over short rows ----

@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("width", [1, 2, 3, 5, 7])
@pytest.mark.parametrize("rows", [0, 1, 9, 67])
@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_arg_short_rows(op, width, rows, last, keepdims):
    # few distinct values: ties everywhere; NaNs in some rows (the first / last one wins)
    x = RNG.integers(-2, 3, (2, rows, width)).astype(np.float32)
    if x.size > 4:
        x.reshape(-1)[RNG.choice(x.size, size=max(1, x.size // 9), replace=False)] = np.nan
        x.reshape(-1)[RNG.choice(x.size, size=2, replace=False)] = [-0.0, np.inf]
    model = make_model([helper.make_node(op, ["x"], ["y"], axis=-1, keepdims=keepdims, select_last_index=last)],
                       [("x", F32, list(x.shape))], [("y", TensorProto.INT64, None)], opset=13)
    (got,) = run_twin(model, {"x": x})
    (want,) = reference(model, {"x": x})
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


# ---- float64 ReduceMax / ReduceMin over a leading or middle axis ----

@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("shape", [(5, 3, 19), (2, 7, 4), (3, 9, 37), (4, 0, 6)], ids=str)
@pytest.mark.parametrize("axes, keepdims", [([1], 1), ([1], 0), ([0], 1), ([0, 1], 0)], ids=str)
def test_reduce_extremum_float64_columns(op, shape, axes, keepdims):
    # ties of +0 / -0, NaNs (the first one wins) and infinities in some columns
    x = RNG.integers(-3, 4, shape).astype(np.float64)
    if x.size:
        flat = x.reshape(-1)
        flat[RNG.choice(x.size, size=max(1, x.size // 10), replace=False)] = -0.0
        flat[RNG.choice(x.size, size=3, replace=False)] = [np.nan, np.inf, -np.inf]
    model = make_model([helper.make_node(op, ["x", "a"], ["y"], keepdims=keepdims)],
                       [("x", F64, list(shape)), ("a", TensorProto.INT64, [len(axes)])], [("y", F64, None)], opset=18)
    feeds = {"x": x, "a": np.array(axes, np.int64)}
    (got,) = run_twin(model, feeds)
    (want,) = reference(model, feeds)
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    # (which zero numpy's maximum / minimum keep of a +0 / -0 tie depends on its vector loop: values only)
    np.testing.assert_array_equal(got[~np.isnan(want)], want[~np.isnan(want)])


# ---- float16 Sign and 2-D Transpose ----

@pytest.mark.parametrize("n", [0, 1, 7, 33, 1000])
def test_sign_float16(n):
    x = (RNG.standard_normal(n) * 1000).astype(np.float16)
    if n:
        x = with_specials(x)
    model = make_model([helper.make_node("Sign", ["x"], ["y"])], [("x", F16, [n])], [("y", F16, [n])], opset=13)
    (got,) = run_twin(model, {"x": x})
    (want,) = reference(model, {"x": x})
    assert got.dtype == np.float16
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(want)], want[~np.isnan(want)])


@pytest.mark.parametrize("dtype", [np.float16, np.int16])
@pytest.mark.parametrize("shape", [(0, 3), (1, 1), (3, 5), (17, 33), (64, 130), (257, 64)], ids=str)
def test_transpose_2d_16_bit(dtype, shape):
    x = (RNG.standard_normal(shape) * 100).astype(dtype)
    t = onnx_type(dtype)
    model = make_model([helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0])], [("x", t, list(shape))],
                       [("y", t, None)], opset=13)
    (got,) = run_twin(model, {"x": x})
    np.testing.assert_array_equal(got, x.T)


@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_fallback_instruction_sets_pass_the_same_checks(isa):
    rerun_file_with_instruction_set(__file__, isa)
