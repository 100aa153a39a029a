"""Fast paths and fixes a third sweep against onnxruntime added, compared with onnx.reference / numpy: float16
comparisons and IsNaN / IsInf (through float32, or on the bits), float64 IsNaN / IsInf on the bits, casts to and
from float16 through float32 (float64 -> float16 / bfloat16 rounded once, not twice), float64 -> narrow integers
through int32. The last test reruns the file with the fallback instruction sets."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

from conftest import TensorProto, helper, make_model
from onnx_cases import rerun_file_with_instruction_set, run_twin

RNG = np.random.default_rng(2027)
F16, F32, F64 = TensorProto.FLOAT16, TensorProto.FLOAT, TensorProto.DOUBLE
SIZES = [0, 1, 7, 31, 33, 1000, 4099]  # empty, shorter than a vector, odd tails, more than one cast block


def onnx_type(dtype):
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def reference(model, feeds):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's mean of an empty slice
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


# ---- float16 comparisons and classes ----

@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "GreaterOrEqual", "LessOrEqual"])
@pytest.mark.parametrize("shapes", [((33, 31), (33, 31)), ((33, 31), ()), ((33, 31), (31,)), ((33, 1), (1, 31)),
                                    ((0, 5), (5,))], ids=str)
def test_float16_comparisons(op, shapes):
    sa, sb = shapes
    a = (RNG.standard_normal(sa) * 4).round().astype(np.float16)
    b = np.asarray((RNG.standard_normal(sb) * 4).round().astype(np.float16))
    if a.size:
        a = with_specials(a)
    model = make_model([helper.make_node(op, ["a", "b"], ["y"])], [("a", F16, list(sa)), ("b", F16, list(sb))],
                       [("y", TensorProto.BOOL, None)], opset=18)
    (got,) = run_twin(model, {"a": a, "b": b})
    (want,) = reference(model, {"a": a, "b": b})
    assert got.dtype == np.bool_ and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("op, attrs", [("IsNaN", {}), ("IsInf", {}), ("IsInf", {"detect_negative": 0}),
                                       ("IsInf", {"detect_positive": 0}),
                                       ("IsInf", {"detect_positive": 0, "detect_negative": 0})], ids=str)
def test_class_on_bits(dtype, n, op, attrs):
    x = RNG.standard_normal(n).astype(dtype)
    if n:
        x = with_specials(x)
        # NaNs of both signs and other payloads (a quiet and a signalling pattern)
        bits = x.view(np.uint16 if dtype == np.float16 else np.uint64)
        nans = [0xFE00, 0x7C01, 0xFFFF] if dtype == np.float16 else [0xFFF8000000000000, 0x7FF0000000000001,
                                                                    0xFFFFFFFFFFFFFFFF]
        bits[RNG.choice(n, size=min(n, 3), replace=False)] = nans[:min(n, 3)]
    model = make_model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", onnx_type(dtype), [n])],
                       [("y", TensorProto.BOOL, [n])], opset=20)
    (got,) = run_twin(model, {"x": x})
    (want,) = reference(model, {"x": x})
    np.testing.assert_array_equal(got, want)


# ---- casts ----

CAST_TYPES = [np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.int64, np.float16, np.float32,
              np.float64]


def cast_inputs(src, n):
    if src == np.bool_:
        return RNG.random(n) > 0.5
    if np.dtype(src).kind in "iu":
        info = np.iinfo(src)
        x = RNG.integers(max(info.min, -70000), min(info.max, 70000) + 1, n).astype(src)
        edges = np.array([info.min, info.max, 0, 65504, 65519, 65520, -65520, 2049, 4097], dtype=np.int64)
        edges = edges[(edges >= info.min) & (edges <= info.max)].astype(src)
        k = min(len(edges), n)
        x[RNG.choice(n, size=k, replace=False)] = edges[:k]
        return x
    scale = 300.0 if src == np.float16 else 1e5
    return with_specials((RNG.standard_normal(n) * scale).astype(src)) if n else np.zeros(0, src)


@pytest.mark.parametrize("src, dst", [(np.float16, d) for d in CAST_TYPES if d != np.float16] +
                         [(s, np.float16) for s in CAST_TYPES if s != np.float16] +
                         [(np.float64, d) for d in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.bool_)],
                         ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("n", SIZES)
def test_casts_through_a_four_byte_type(src, dst, n):
    x = cast_inputs(src, n)
    if np.dtype(dst).kind in "iu" and np.dtype(src).kind == "f":
        x = np.where(np.isfinite(x), x, 7).astype(src)  # NaN / inf -> int: platform-defined, not compared
        x = np.clip(x, -30000, 30000).astype(src)  # in range of every destination: numpy's wrap is also x86's
    model = make_model([helper.make_node("Cast", ["x"], ["y"], to=onnx_type(dst))], [("x", onnx_type(src), [n])],
                       [("y", onnx_type(dst), [n])], opset=21)
    (got,) = run_twin(model, {"x": x})
    with np.errstate(all="ignore"):
        want = x.astype(dst)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_float64_to_float16_rounds_once():
    # values just above a float16 tie (half an ulp past a float16 value, plus less than a float32 ulp): rounding
    # to float32 first makes them the tie, which rounds to even, one ulp below the right answer
    h = (RNG.uniform(-60000, 60000, 4000)).astype(np.float16).astype(np.float64)
    ulp = np.spacing(np.abs(h).astype(np.float16)).astype(np.float64)
    tiny = np.abs(h) * 2.0 ** -30 + 1e-12
    x = np.concatenate([h + ulp / 2 + tiny, h - ulp / 2 - tiny, h + ulp / 2, h - ulp / 2, [65519.99, 65520.0,
                        -65520.0, 1e300, -1e300, 2.0 ** -25 + 2.0 ** -60, 2.0 ** -25, -(2.0 ** -25 + 2.0 ** -60)]])
    model = make_model([helper.make_node("Cast", ["x"], ["y"], to=F16)], [("x", F64, [x.size])],
                       [("y", F16, [x.size])], opset=21)
    (got,) = run_twin(model, {"x": x})
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def test_float64_to_bfloat16_rounds_once():
    # bfloat16 has no numpy dtype: cast back to float32 inside the graph and compare with onnx.reference's rounding
    b = RNG.uniform(-1e5, 1e5, 2000).astype(np.float32)
    b = (b.view(np.uint32) & 0xFFFF0000).view(np.float32).astype(np.float64)  # bfloat16 values
    ulp = np.abs(b) * 2.0 ** -7
    x = np.concatenate([b + ulp / 2 * (1 + 2.0 ** -40), b - ulp / 2 * (1 + 2.0 ** -40), [np.nan, np.inf, -np.inf]])
    model = make_model([helper.make_node("Cast", ["x"], ["h"], to=TensorProto.BFLOAT16),
                        helper.make_node("Cast", ["h"], ["y"], to=F32)], [("x", F64, [x.size])],
                       [("y", F32, [x.size])], opset=21)
    (got,) = run_twin(model, {"x": x})
    (want,) = reference(model, {"x": x})
    np.testing.assert_array_equal(got, want)


# ---- reductions: float64 Max / Min rows by vector lanes, short float32 rows by the ordered loop ----

@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("cols", [1, 3, 7, 8, 15, 16, 17, 33, 1024])
@pytest.mark.parametrize("special", ["none", "nan", "inf", "zeros", "nan_and_inf"])
def test_float64_row_extremum(op, cols, special):
    x = RNG.standard_normal((9, cols))
    if special in ("nan", "nan_and_inf"):
        x[1, cols // 2] = np.nan
        x[4, -1] = np.nan
    if special in ("inf", "nan_and_inf"):
        x[2, 0] = np.inf
        x[3, cols - 1] = -np.inf
        x[1, 0] = np.inf
    if special == "zeros":
        x[5] = -0.0
        x[6] = 0.0
        x[6, cols // 2] = -0.0
        x[7] = -np.abs(x[7])
        x[7, -1] = 0.0
    model = make_model([helper.make_node(op, ["x", "a"], ["y"], keepdims=0)], [("x", F64, list(x.shape))],
                       [("y", F64, None)], initializers=[("a", np.array([-1], np.int64))], opset=18)
    (got,) = run_twin(model, {"x": x})
    (want,) = reference(model, {"x": x})
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin", "ReduceSum", "ReduceMean", "ReduceL1", "ReduceL2"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("shape, axes", [((257, 3), [-1]), ((64, 7), [-1]), ((33, 8), [1]), ((5, 6, 3), [0, 2]),
                                         ((0, 3), [-1]), ((4, 0), [-1])], ids=str)
def test_short_row_reductions(op, dtype, shape, axes):
    if op in ("ReduceL1", "ReduceL2") and dtype == np.int32:
        pytest.skip("covered by the float cases")
    if op == "ReduceMean" and dtype == np.int32 and 0 in shape:
        pytest.skip("the mean of nothing is NaN: no int32 value")
    x = (RNG.standard_normal(shape) * 10).astype(dtype)
    if dtype != np.int32 and x.size > 8:
        x.reshape(-1)[5] = np.nan
    t = onnx_type(dtype)
    model = make_model([helper.make_node(op, ["x", "a"], ["y"], keepdims=1)], [("x", t, list(shape))],
                       [("y", t, None)], initializers=[("a", np.array(axes, np.int64))], opset=18)
    (got,) = run_twin(model, {"x": x})
    (want,) = reference(model, {"x": x})
    assert got.dtype == want.dtype and got.shape == want.shape
    if dtype == np.int32 or op in ("ReduceMax", "ReduceMin"):
        np.testing.assert_array_equal(got, want)
    else:
        # the reference sums float32 in float32, the twin in double: the cancellation error is the reference's
        f32 = dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-6 if f32 else 1e-13, atol=1e-4 if f32 else 1e-11, equal_nan=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, axes", [((1001, 3), [0]), ((7, 5, 3), [1]), ((33, 9), [1]), ((0, 3), [0])], ids=str)
def test_reduce_l1_of_signed_values(dtype, shape, axes):
    x = (RNG.standard_normal(shape) * 10).astype(dtype)
    if x.size > 20:
        x.reshape(-1)[[3, 7]] = [-0.0, np.nan]
        x.reshape(-1)[11] = -np.inf
    model = make_model([helper.make_node("ReduceL1", ["x", "a"], ["y"], keepdims=0)],
                       [("x", onnx_type(dtype), list(shape))], [("y", onnx_type(dtype), None)],
                       initializers=[("a", np.array(axes, np.int64))], opset=18)
    (got,) = run_twin(model, {"x": x})
    want = np.abs(x.astype(np.float64)).sum(axis=tuple(axes)).astype(dtype)
    np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)
    assert not np.signbit(got[~np.isnan(got)]).any()


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("cols", [1, 2, 3, 7, 8, 9])
@pytest.mark.parametrize("last", [0, 1])
def test_short_row_arg_extremum(op, cols, last):
    # ties (few distinct values), NaN first / later in a row, signed zeros
    x = RNG.integers(-2, 3, (257, cols)).astype(np.float32)
    x[3, -1] = np.nan
    x[4, 0] = np.nan
    x[5] = -0.0
    x[5, -1] = 0.0
    model = make_model([helper.make_node(op, ["x"], ["y"], axis=-1, keepdims=0, select_last_index=last)],
                       [("x", F32, list(x.shape))], [("y", TensorProto.INT64, None)], opset=13)
    (got,) = run_twin(model, {"x": x})
    (want,) = reference(model, {"x": x})
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.uint8, np.float16, np.float32, np.int64])
@pytest.mark.parametrize("channels", [2, 3, 4])
@pytest.mark.parametrize("hw", [(1, 1), (3, 5), (16, 17)], ids=str)
def test_transpose_nhwc_to_nchw_few_channels(dtype, channels, hw):
    x = (RNG.standard_normal((2, *hw, channels)) * 100).astype(dtype)
    t = onnx_type(dtype)
    model = make_model([helper.make_node("Transpose", ["x"], ["y"], perm=[0, 3, 1, 2])], [("x", t, list(x.shape))],
                       [("y", t, None)], opset=13)
    (got,) = run_twin(model, {"x": x})
    np.testing.assert_array_equal(got, x.transpose(0, 3, 1, 2))


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
@pytest.mark.parametrize("hw", [(1, 1), (3, 5), (16, 17)], ids=str)
def test_transpose_nchw_to_nhwc_eight_channels(dtype, hw):
    x = (RNG.standard_normal((2, 8, *hw)) * 100).astype(dtype)
    t = onnx_type(dtype)
    model = make_model([helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1])], [("x", t, list(x.shape))],
                       [("y", t, None)], opset=13)
    (got,) = run_twin(model, {"x": x})
    np.testing.assert_array_equal(got, x.transpose(0, 2, 3, 1))


@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_fallback_instruction_sets_pass_the_same_checks(isa):
    rerun_file_with_instruction_set(__file__, isa)
