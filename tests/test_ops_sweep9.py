"""Single-op sweeps around rows that trailed onnxruntime: one-operand float32 Einsum reductions ("ij->i", "ij->j",
"bij->bi", "bij->bj", "bij->b") over many row counts / lengths (ragged ends, rows past a summing block, NaN / inf),
Transpose of 1-, 2- and 4-byte dtypes in 2-D and 3-D, and Cast between float and integer widths with NaN, inf and
out-of-range values. Everything is checked against onnx.reference; float32 sums also against the float64 sum."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from conftest import make_model  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from onnx_cases import reference, rerun_file_with_instruction_set, run_twin  # noqa: E402

RNG = np.random.default_rng(5509)
F32_EPS = float(np.finfo(np.float32).eps)


def _single(op, x, out_type, **attrs):
    t = helper.np_dtype_to_tensor_dtype(x.dtype)
    return make_model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", t, list(x.shape))],
                      [("y", out_type, None)], opset=18)


# ---- Einsum: one float32 operand, summed labels ----

EINSUM_SHAPES = {
    "ij->i": [(1, 1), (3, 5), (7, 8), (8, 9), (9, 31), (16, 32), (17, 33), (8, 128), (13, 129), (8, 130), (5, 257),
              (24, 1000), (3, 4099), (2048, 32)],
    "ij->j": [(1, 1), (3, 5), (7, 8), (16, 9), (17, 31), (33, 32), (15, 129), (100, 7), (2048, 32), (4099, 3)],
    "bij->bi": [(2, 3, 5), (3, 9, 17), (2, 8, 128), (4, 11, 130)],
    "bij->bj": [(2, 3, 5), (3, 17, 17), (2, 33, 130), (4, 16, 8)],
    "bij->b": [(2, 3, 5), (3, 17, 33)],
}
EINSUM_CASES = [(eq, s) for eq, shapes in EINSUM_SHAPES.items() for s in shapes]


def _check_sums(x, eq):
    got = run_twin(_single("Einsum", x, TensorProto.FLOAT, equation=eq), {"x": x})[0]
    want = reference(_single("Einsum", x, TensorProto.FLOAT, equation=eq), [x])[0]
    exact = np.einsum(eq, x.astype(np.float64))
    mag = np.einsum(eq, np.abs(x.astype(np.float64)))
    assert got.dtype == np.float32 and got.shape == want.shape
    # within a few float32 ulps of the sum of magnitudes, whatever the row length (a plain float32 running sum
    # drifts with it); the reference's own float32 sum within its wider bound
    finite = np.isfinite(exact)
    np.testing.assert_array_less(np.abs(got[finite] - exact[finite]), 8 * F32_EPS * mag[finite] + 1e-30)
    n = x.size // max(1, got.size)
    np.testing.assert_array_less(np.abs(got[finite] - want[finite]), (8 + n) * F32_EPS * mag[finite] + 1e-30)
    return got, want


@pytest.mark.parametrize("eq,shape", EINSUM_CASES)
def test_einsum_float32_sums(eq, shape):
    _check_sums(RNG.uniform(-2, 2, shape).astype(np.float32), eq)


@pytest.mark.parametrize("eq,shape", [("ij->i", (3, 200000)), ("ij->i", (9, 70000)), ("ij->j", (200000, 3)),
                                      ("ij->j", (70000, 9))])
def test_einsum_float32_long_rows_track_float64(eq, shape):
    # all positive: a running float32 sum of 200000 values near 1 is off by ~1e-4 relative; the twin's stays
    # within a few float32 ulps of the float64 sum
    x = RNG.uniform(0.5, 1.5, shape).astype(np.float32)
    got, _ = _check_sums(x, eq)
    exact = np.einsum(eq, x.astype(np.float64))
    np.testing.assert_allclose(got, exact, rtol=4 * F32_EPS, atol=0)


@pytest.mark.parametrize("eq,shape", [("ij->i", (9, 37)), ("ij->i", (8, 300)), ("ij->j", (37, 9)),
                                      ("bij->bi", (2, 9, 19))])
def test_einsum_float32_sums_special_values(eq, shape):
    x = RNG.uniform(-2, 2, shape).astype(np.float32)
    flat = x.reshape(-1)
    idx = RNG.choice(flat.size, 12, replace=False)
    flat[idx] = np.array([np.nan, np.inf, -np.inf, np.inf, -0.0, 3e38, -3e38, 1e-40, np.nan, -np.inf, 0.0, 2e38],
                         np.float32)
    got, want = _check_sums(x, eq)
    # NaN / inf positions (and overflow of float32 sums, which the reference's float32 sums share) match
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))


@pytest.mark.parametrize("eq,shape", [("ij->i", (8, 32)), ("ij->i", (9, 31)), ("ij->i", (17, 7)), ("ij->i", (16, 63)),
                                      ("ij->i", (8, 1)), ("ij->i", (24, 12)), ("bij->bi", (3, 8, 32)),
                                      ("bij->bi", (2, 11, 20))])
def test_einsum_short_row_sums_stay_double(eq, shape):
    # rows shorter than 64 take eight rows per step with 8-double accumulators: +-1e8 / +-3e8 around ones in
    # several lanes and the ragged end cancel exactly only in double (a float32 sum, like the reference's, loses the
    # ones)
    x = np.ones(shape, np.float32)
    rows = x.reshape(-1, shape[-1])
    n = shape[-1]
    rows[:, 0] = 1e8
    rows[:, n // 2] = -1e8 if n > 1 else 0
    rows[1::3, -1] = 3e8 if n > 2 else 1
    rows[1::3, 1 % n] = -3e8 if n > 2 else 1
    want = np.einsum(eq, x.astype(np.float64)).astype(np.float32)
    got = run_twin(_single("Einsum", x, TensorProto.FLOAT, equation=eq), {"x": x})[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape", [(8, 0), (0, 8), (5, 0)])
def test_einsum_float32_empty_sums(shape):
    x = np.zeros(shape, np.float32)
    for eq in ("ij->i", "ij->j"):
        got = run_twin(_single("Einsum", x, TensorProto.FLOAT, equation=eq), {"x": x})[0]
        want = reference(_single("Einsum", x, TensorProto.FLOAT, equation=eq), [x])[0]
        np.testing.assert_array_equal(got, want)


def test_einsum_float32_strided_row_sums():
    # rows summed out of a transposed view ("ji->i": the summed label is the outer one) and a diagonal first
    x = RNG.uniform(-1, 1, (33, 45)).astype(np.float32)
    for eq in ("ji->i", "ij->i", "ii->i"):
        y = x[:33, :33].copy() if eq == "ii->i" else x
        got = run_twin(_single("Einsum", y, TensorProto.FLOAT, equation=eq), {"x": y})[0]
        want = reference(_single("Einsum", y, TensorProto.FLOAT, equation=eq), [y])[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# ---- Transpose: every element width, 2-D and 3-D ----

TRANSPOSE_DTYPES = [np.uint8, np.int8, np.uint16, np.int16, np.float16, np.float32, np.int32, np.int64, np.bool_]
TRANSPOSE_CASES = [((2048, 32), [1, 0]), ((32, 2048), [1, 0]), ((17, 33), [1, 0]), ((16, 16), [1, 0]),
                   ((1, 7), [1, 0]), ((3, 100), [1, 0]), ((100, 3), [1, 0]), ((129, 47), [1, 0]),
                   ((4, 33, 20), [0, 2, 1]), ((4, 33, 20), [2, 1, 0]), ((4, 33, 20), [1, 0, 2]),
                   ((5, 16, 48), [2, 0, 1]), ((5, 16, 48), [1, 2, 0])]


def _values(dtype, shape):
    if dtype == np.bool_:
        return RNG.integers(0, 2, shape).astype(np.bool_)
    if np.dtype(dtype).kind == "f":
        x = RNG.uniform(-100, 100, shape).astype(dtype)
        x.reshape(-1)[::11] = np.nan  # moved as bits: NaN stays NaN
        return x
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


@pytest.mark.parametrize("shape,perm", TRANSPOSE_CASES)
@pytest.mark.parametrize("dtype", TRANSPOSE_DTYPES, ids=lambda d: np.dtype(d).name)
def test_transpose_dtypes(dtype, shape, perm):
    x = _values(dtype, shape)
    model = _single("Transpose", x, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), perm=perm)
    got = run_twin(model, {"x": x})[0]
    want = reference(model, [x])[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(np.ascontiguousarray(got).view(np.uint8), np.ascontiguousarray(want).view(np.uint8))


# ---- Cast between float and integer widths ----

CAST_TYPES = [np.float16, np.float32, np.float64, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32,
              np.int64, np.uint64]
FLOATS = [np.float16, np.float32, np.float64]
EDGES = [np.nan, np.inf, -np.inf, -0.0, 0.0, 0.5, -0.5, 0.999, -0.999, 1.5, -1.5, 127.9, 128.0, -128.9, -129.0,
         255.9, 256.0, 300.5, -300.5, 32767.5, 32768.0, 65535.9, 65536.0, -32769.0, 65504.0, 65520.0, 1e9, -1e9,
         2147483520.0, 2147483648.0, -2147483904.0, 4294967040.0, 4294967296.0, 1e12, -1e12, 3e38, -3e38, 1e-40]


def _cast_input(src, n):
    if np.dtype(src).kind == "f":
        with np.errstate(all="ignore"):
            edges = np.array(EDGES, np.float64).astype(src)
            x = np.concatenate([edges, RNG.uniform(-70000, 70000, n).astype(src)])
        return x
    return _values(src, (n,))


@pytest.mark.parametrize("n", [7, 1000, 65536 + 3])
@pytest.mark.parametrize("dst", CAST_TYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("src", CAST_TYPES, ids=lambda d: np.dtype(d).name)
def test_cast_widths(src, dst, n):
    if src == dst:
        pytest.skip("same type")
    x = _cast_input(src, n)
    model = _single("Cast", x, helper.np_dtype_to_tensor_dtype(np.dtype(dst)),
                    to=helper.np_dtype_to_tensor_dtype(np.dtype(dst)))
    with np.errstate(all="ignore"):
        got = run_twin(model, {"x": x})[0]
        want = reference(model, [x])[0]
    assert got.dtype == want.dtype == np.dtype(dst) and got.shape == want.shape
    if np.dtype(dst).kind == "f":
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        ok = ~np.isnan(want)
        np.testing.assert_array_equal(got[ok], want[ok])
        # signed zeros kept
        np.testing.assert_array_equal(np.signbit(got[ok]), np.signbit(want[ok]))
    else:
        # NaN, inf and out-of-range floats: onnx.reference is numpy's astype, which on x86 gives the truncating
        # conversion's integer-indefinite value (INT32_MIN / INT64_MIN, then the low bits); the twin does the same.
        # Not for uint32 / uint64: this numpy's values there (NaN -> 2^31 for uint32, inf -> 0 for uint64, ...)
        # differ from the twin's documented rule (a 64-bit truncation); only in-range values are compared.
        keep = np.ones(x.shape, bool)
        if np.dtype(src).kind == "f" and np.dtype(dst) in (np.dtype(np.uint32), np.dtype(np.uint64)):
            wide = x.astype(np.float64)
            keep = np.isfinite(wide) & (wide > -1) & (wide < 2.0 ** (8 * np.dtype(dst).itemsize))
        np.testing.assert_array_equal(got[keep], want[keep])


def test_fallback_instruction_sets():
    for isa in ("avx2", "baseline"):
        rerun_file_with_instruction_set(__file__, isa, select="einsum or transpose or (cast and 65539)")
