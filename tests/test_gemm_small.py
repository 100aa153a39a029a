"""The twin's float32 GEMM for few rows of A (M <= 4: an MLP at batch 1, MatMul of a [1, K] activation), which runs
on its own AVX-512 / AVX2 kernels instead of BLAS: Gemm (both B layouts, transA, alpha, beta, every C broadcast) and
MatMul (1-D, [1, K], batched) against a float64 reference and onnx.reference, with column counts around the vector
widths and the kernels' column chunk, edge values (NaN, infinities, denormals, large magnitudes), empty shapes, and
the same checks with the fallback instruction sets (GEASYNC_TWIN_SIMD caps the twin's choice, in a subprocess)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator
from onnx_cases import assert_same_ieee_pattern, gemm_edge_operands, rerun_file_with_instruction_set

import geasync as ga
from conftest import TensorProto, helper, make_model

F = TensorProto.FLOAT


def _run(model, feeds: list[np.ndarray]) -> np.ndarray:
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        outs = s.run_graph(1, feeds)
        y = outs[0].numpy().copy()
        del outs
    return y


def _gemm_model(a_shape, b_shape, y_shape, c_shape=None, **attrs):
    names = ["a", "b"] + (["c"] if c_shape is not None else [])
    inputs = [("a", F, list(a_shape)), ("b", F, list(b_shape))]
    if c_shape is not None:
        inputs.append(("c", F, list(c_shape)))
    return make_model([helper.make_node("Gemm", names, ["y"], **attrs)], inputs, [("y", F, list(y_shape))],
                      opset=13)


def _assert_close_to_float64(got, a, b, extra=0.0):
    """|got - exact| within float32 rounding of a K-term sum: K * eps * sum |a_k b_k| (+ the bias's size)."""
    ref = a.astype(np.float64) @ b.astype(np.float64) + extra
    bound = (a.shape[-1] + 2) * 2.0 ** -23 * (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
                                                  + np.abs(extra)) + 1e-30
    assert got.shape == ref.shape
    assert np.all(np.abs(got - ref) <= bound), np.max(np.abs(got - ref) / bound)


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("k,n", [(1, 1), (3, 7), (8, 8), (17, 9), (33, 31), (784, 256), (5, 1031), (2, 2100)])
@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm_few_rows_matches_float64(m, k, n, trans_b):
    rng = np.random.default_rng(m * 1000 + k * 10 + n + trans_b)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    model = _gemm_model(a.shape, b.shape, (m, n), bias.shape, transB=trans_b)
    got = _run(model, [a, b, bias])
    _assert_close_to_float64(got, a, b.T if trans_b else b, bias.astype(np.float64))


@pytest.mark.parametrize("trans_a,trans_b", [(1, 0), (1, 1), (0, 0), (0, 1)])
@pytest.mark.parametrize("c_shape", [None, (), (1,), (19,), (1, 19), (3, 1), (3, 19)])
def test_gemm_alpha_beta_transposes_and_bias_broadcast_match_reference(trans_a, trans_b, c_shape):
    rng = np.random.default_rng(len(c_shape or ()) * 7 + trans_a * 2 + trans_b)
    m, k, n = 3, 21, 19
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    feeds = [a, b]
    if c_shape is not None:
        feeds.append(rng.standard_normal(c_shape).astype(np.float32))
    model = _gemm_model(a.shape, b.shape, (m, n), c_shape, alpha=0.75, beta=-1.5, transA=trans_a, transB=trans_b)
    got = _run(model, feeds)
    ref = ReferenceEvaluator(model).run(None, dict(zip("abc", feeds, strict=False)))[0]
    np.testing.assert_allclose(got, ref, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("a_shape,b_shape", [
    ((300,), (300, 70)),           # 1-D A: one row
    ((1, 300), (300, 70)),         # an activation of batch 1
    ((3, 1, 64), (64, 40)),        # batched A, one shared B: folded into a GEMM of 3 rows
    ((2, 1, 64), (2, 64, 40)),     # a B per batch: GEMMs of 1 row each
    ((2, 4, 16), (1, 16, 9)),      # 4 rows per batch, B broadcast
    ((4, 50), (50,)),              # 1-D B: one column
])
def test_matmul_few_rows_matches_float64(a_shape, b_shape):
    rng = np.random.default_rng(sum(a_shape) + sum(b_shape))
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    out_shape = list(np.matmul(a, b).shape)
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["y"])], [("a", F, list(a_shape)),
                       ("b", F, list(b_shape))], [("y", F, out_shape)], opset=13)
    got = _run(model, [a, b])
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    bound = (a.shape[-1] + 2) * 2.0 ** -23 * np.matmul(np.abs(a).astype(np.float64), np.abs(b).astype(np.float64))
    assert got.shape == ref.shape
    assert np.all(np.abs(got - ref) <= bound + 1e-30)


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("m", [1, 4])
def test_gemm_few_rows_edge_values_follow_ieee(m, trans_b):
    """NaN and infinities propagate (inf * 0 and inf - inf give NaN), denormals are not flushed, large magnitudes
    overflow only where the float32 products do: the same NaN / inf pattern and finite values as onnx.reference."""
    k, n = 37, 45
    a, b = gemm_edge_operands(m, k, n, seed=m + 10 * trans_b)
    b_in = np.ascontiguousarray(b.T) if trans_b else b
    model = _gemm_model(a.shape, b_in.shape, (m, n), transB=trans_b)
    got = _run(model, [a, b_in])
    with np.errstate(all="ignore"):  # the reference's own inf * 0 and overflow
        ref = ReferenceEvaluator(model).run(None, {"a": a, "b": b_in})[0]
    assert_same_ieee_pattern(got, ref)
    tiny = np.zeros((1, k), np.float32)
    tiny[0, 10] = 1e-39
    only_denormal = make_model([helper.make_node("MatMul", ["a", "b"], ["y"])], [("a", F, [1, k]), ("b", F, [k, n])],
                               [("y", F, [1, n])], opset=13)
    got = _run(only_denormal, [tiny, np.full((k, n), 2.0, np.float32)])
    assert np.all(got == np.float32(2e-39))  # denormal in, denormal out: nothing flushed to zero


@pytest.mark.parametrize("m,k,n", [(0, 5, 3), (2, 0, 3), (2, 5, 0), (1, 0, 1)])
def test_gemm_few_rows_empty_shapes(m, k, n):
    a = np.ones((m, k), np.float32)
    b = np.ones((k, n), np.float32)
    bias = np.arange(n, dtype=np.float32)
    got = _run(_gemm_model(a.shape, b.shape, (m, n), bias.shape, beta=2.0), [a, b, bias])
    assert got.shape == (m, n)
    np.testing.assert_array_equal(got, np.broadcast_to(k + 2.0 * bias, (m, n)))


def test_gemm_few_rows_agrees_with_more_rows():
    """A row computed alone (the small-M kernels) matches the same row computed within a batch of 64 (BLAS)."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((64, 500)).astype(np.float32)
    w = rng.standard_normal((500, 130)).astype(np.float32)
    model = make_model([helper.make_node("MatMul", ["a", "w"], ["y"])], [("a", F, ["N", 500])], [("y", F, ["N", 130])],
                       initializers=[("w", w)], opset=13)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        whole = s.run_graph(1, [a])[0].numpy().copy()
        rows = np.concatenate([s.run_graph(1, [a[i:i + 1]])[0].numpy().copy() for i in range(0, 64, 9)])
    np.testing.assert_allclose(rows, whole[::9], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_fallback_instruction_sets_pass_the_same_checks(isa):
    rerun_file_with_instruction_set(__file__, isa)
