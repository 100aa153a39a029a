"""Gemm and MatMul with a constant float32 B (a weight initializer) and a few dozen rows of A, which run on the twin's
panel kernel (B packed once when the graph is added; AVX-512: panels of 32 columns, blocks of 8 rows; AVX2: 16 and
6): row counts around the block sizes and the limits, column counts around the panel widths, K from 1 to 800, both B
layouts, alpha / beta with C of every broadcastable shape (input or initializer), batched A against a 2-D B (one
folded product), float16 through float32, edge values (NaN, infinities, denormals, large magnitudes); checked against
a float64 product within float32 rounding or against onnx.reference, and again under the fallback instruction sets
(GEASYNC_TWIN_SIMD caps the twin's choice, in a subprocess)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_cases import (
    assert_close,
    assert_same_ieee_pattern,
    gemm_edge_operands,
    reference,
    rerun_file_with_instruction_set,
    run_once,
)

import geasync as ga
from conftest import TensorProto, helper, make_model

F = TensorProto.FLOAT


@pytest.fixture(scope="module")
def sess():
    with ga.Session() as s:
        yield s


def _gemm(m, k, n, *, trans_a=0, trans_b=0, c_shape=None, const_c=False, b=None, c=None, **attrs):
    """Gemm with B an initializer; C an input, or an initializer when const_c."""
    a_shape = [k, m] if trans_a else [m, k]
    inputs = [("a", F, a_shape)]
    inits = [("b", b)]
    names = ["a", "b"]
    if c_shape is not None:
        names.append("c")
        if const_c:
            inits.append(("c", c))
        else:
            inputs.append(("c", F, list(c_shape)))
    node = helper.make_node("Gemm", names, ["y"], transA=trans_a, transB=trans_b, **attrs)
    return make_model([node], inputs, [("y", F, [m, n])], initializers=inits, opset=13)


def _matmul(a_shape, b):
    out = list(np.matmul(np.zeros(a_shape, np.float32), b).shape)
    return make_model(
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        [("a", F, list(a_shape))],
        [("y", F, out)],
        initializers=[("b", b)],
        opset=13,
    )


def _assert_close_to_float64(got, a, b, extra=0.0):
    """|got - exact| within float32 rounding of a K-term sum: (K + 2) eps sum |a_k b_k| (+ the bias's size)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = np.matmul(a64, b64) + extra
    bound = (a.shape[-1] + 2) * 2.0**-23 * (np.matmul(np.abs(a64), np.abs(b64)) + np.abs(extra)) + 1e-30
    assert got.shape == ref.shape
    assert np.all(np.abs(got - ref) <= bound), np.max(np.abs(got - ref) / bound)


ROWS = [1, 4, 5, 6, 7, 8, 9, 11, 12, 13, 16, 17, 31, 32, 33, 47, 64, 70]
COLS = [1, 15, 17, 31, 33, 100, 256]
KS = [1, 7, 64, 800, 33]


@pytest.mark.parametrize("m", ROWS)
@pytest.mark.parametrize("n", COLS)
@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm_constant_b_matches_float64(sess, m, n, trans_b):
    k = KS[(m + n + trans_b) % len(KS)]
    rng = np.random.default_rng(m * 1000 + n * 3 + trans_b)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    model = _gemm(m, k, n, trans_b=trans_b, c_shape=bias.shape, b=b)
    (got,) = run_once(sess, model, [a, bias])
    _assert_close_to_float64(got, a, b.T if trans_b else b, bias.astype(np.float64))


@pytest.mark.parametrize("m", [255, 256, 257])
def test_gemm_constant_b_around_the_row_limit(sess, m):
    """256 rows still on the AVX-512 panel kernel, 257 back on BLAS: both right, and without a bias."""
    rng = np.random.default_rng(m)
    k, n = 130, 47
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    (got,) = run_once(sess, _gemm(m, k, n, b=b), [a])
    _assert_close_to_float64(got, a, b)


@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (0, 1), (1, 0), (1, 1)])
@pytest.mark.parametrize("c_shape", [None, (), (1,), (33,), (1, 33), (13, 1), (13, 33)])
@pytest.mark.parametrize("alpha,beta", [(1.0, 1.0), (0.75, -1.5), (2.0, 0.0)])
@pytest.mark.parametrize("const_c", [False, True], ids=["c_input", "c_const"])
def test_gemm_alpha_beta_transposes_and_c_broadcast_match_reference(
    sess, trans_a, trans_b, c_shape, alpha, beta, const_c
):
    rng = np.random.default_rng(len(c_shape or ()) * 11 + trans_a * 2 + trans_b + int(alpha * 4) + const_c * 50)
    m, k, n = 13, 50, 33
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    c = rng.standard_normal(c_shape).astype(np.float32) if c_shape is not None else None
    model = _gemm(
        m, k, n, trans_a=trans_a, trans_b=trans_b, c_shape=c_shape, const_c=const_c, b=b, c=c, alpha=alpha, beta=beta
    )
    feeds = [a] + ([c] if c is not None and not const_c else [])
    (got,) = run_once(sess, model, feeds)
    (want,) = reference(model, feeds)
    assert_close([got], [want], rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize(
    "a_shape,b_shape",
    [
        ((13, 50), (50, 33)),
        ((3, 7, 50), (50, 100)),  # batched A, one B: a single product of 21 rows
        ((2, 3, 4, 64), (64, 17)),  # two batch dims: 24 rows
        ((70, 800), (800, 256)),
        ((1, 32, 784), (784, 256)),
        ((9, 50), (50,)),  # 1-D B: one column
        ((50,), (50, 33)),  # 1-D A: one row
        ((2, 9, 16), (2, 16, 17)),  # a B per batch: not one product (BLAS)
        ((2, 9, 16), (1, 16, 17)),  # B broadcast over A's batch
    ],
)
def test_matmul_constant_b_matches_float64(sess, a_shape, b_shape):
    rng = np.random.default_rng(sum(a_shape) * 7 + sum(b_shape))
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    (got,) = run_once(sess, _matmul(a_shape, b), [a])
    _assert_close_to_float64(got, a, b)


def test_matmul_float16_constant_b_exact(sess):
    """float16 runs through float32 with the widened B packed: small integers keep every sum exact."""
    rng = np.random.default_rng(5)
    a = rng.integers(-3, 4, (2, 10, 20)).astype(np.float16)
    b = rng.integers(-3, 4, (20, 40)).astype(np.float16)
    model = make_model(
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        [("a", TensorProto.FLOAT16, [2, 10, 20])],
        [("y", TensorProto.FLOAT16, [2, 10, 40])],
        initializers=[("b", b)],
        opset=13,
    )
    (got,) = run_once(sess, model, [a])
    np.testing.assert_array_equal(got, np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(np.float16))


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("m", [3, 8, 13, 40, 300])
def test_gemm_constant_b_edge_values_follow_ieee(sess, m, trans_b):
    """NaN and infinities propagate (inf * 0 and inf - inf give NaN), denormals are not flushed, large magnitudes
    overflow only where the float32 products do, and beta == 0 leaves C out, NaN included: the same NaN / inf pattern
    and finite values as onnx.reference (on the panel kernel, and with 3 / 300 rows on the small-GEMM kernel / BLAS)."""
    k, n = 37, 45
    a, b = gemm_edge_operands(m, k, n, seed=m + 10 * trans_b)
    c = np.random.default_rng(m).standard_normal((m, n)).astype(np.float32)
    c[2, 30] = np.nan
    b_in = np.ascontiguousarray(b.T) if trans_b else b
    for beta in (1.0, 0.0):
        model = _gemm(m, k, n, trans_b=trans_b, c_shape=c.shape, b=b_in, beta=beta)
        (got,) = run_once(sess, model, [a, c])
        with np.errstate(all="ignore"):  # the reference's own inf * 0 and overflow
            (ref,) = reference(model, [a, c])
        assert_same_ieee_pattern(got, ref)
    tiny = np.zeros((m, k), np.float32)
    tiny[:, 10] = 1e-39
    (got,) = run_once(sess, _matmul((m, k), np.full((k, n), 2.0, np.float32)), [tiny])
    assert np.all(got == np.float32(2e-39))  # denormal in, denormal out: nothing flushed to zero


@pytest.mark.parametrize("m", [3, 13, 300])
@pytest.mark.parametrize("const_b", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemm_alpha_zero_keeps_the_products_nans(sess, m, const_b, dtype):
    """alpha == 0 is 0 * A op(B), not nothing: NaN wherever the product is NaN or infinite (BLAS itself would skip
    the product), beta * C elsewhere, as onnx.reference computes it; with and without C."""
    rng = np.random.default_rng(m + 7 * const_b)
    k, n = 19, 23
    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    a[1, 2] = np.nan  # row 1 all NaN
    b[4, 5] = np.inf  # column 5 infinite (NaN once times 0)
    c = rng.standard_normal((m, n)).astype(dtype)
    for with_c in (True, False):
        names = ["a", "b", "c"] if with_c else ["a", "b"]
        inputs = [("a", elem, [m, k])] + ([] if const_b else [("b", elem, [k, n])])
        inputs += [("c", elem, [m, n])] if with_c else []
        model = make_model([helper.make_node("Gemm", names, ["y"], alpha=0.0, beta=0.5)], inputs,
                           [("y", elem, [m, n])], initializers=[("b", b)] if const_b else [], opset=13)
        feeds = [a] + ([] if const_b else [b]) + ([c] if with_c else [])
        (got,) = run_once(sess, model, feeds)
        with np.errstate(all="ignore"):
            (ref,) = reference(model, feeds)
        assert np.isnan(got[1]).all() and np.isnan(got[:, 5]).all()
        assert np.array_equal(np.isnan(got), np.isnan(ref))
        finite = np.isfinite(ref)
        np.testing.assert_allclose(got[finite], ref[finite], rtol=1e-6, atol=0)


def test_rows_alone_agree_with_the_batch(sess):
    """Rows computed in a batch of 64 (panel kernel) match the same rows computed 1 at a time (small-GEMM kernel)
    and 300 at a time (BLAS)."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((300, 500)).astype(np.float32)
    w = rng.standard_normal((500, 130)).astype(np.float32)
    model = make_model(
        [helper.make_node("MatMul", ["a", "w"], ["y"])],
        [("a", F, ["N", 500])],
        [("y", F, ["N", 130])],
        initializers=[("w", w)],
        opset=13,
    )
    (whole,) = run_once(sess, model, [a])
    (part,) = run_once(sess, model, [a[:64]])
    rows = np.concatenate([run_once(sess, model, [a[i : i + 1]])[0] for i in range(0, 64, 9)])
    np.testing.assert_allclose(part, whole[:64], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(rows, part[::9], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_fallback_instruction_sets_pass_the_same_checks(isa):
    rerun_file_with_instruction_set(__file__, isa)
