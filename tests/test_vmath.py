"""The twin's vectorised float32 kernels (Exp, Log, Tanh, Erf, Sigmoid, Sqrt, Gelu, Sin, Cos, Atan, Asin, Acos,
Floor/Ceil/Round, fused Softmax/LogSoftmax and LayerNormalization, Cast to float16, ReduceSum along a contiguous
axis, tiled Transpose), through the public API: accuracy in ulp against float64 references on dense grids, edge
values (NaN, infinities, signed zeros, denormals, overflow/underflow thresholds), and the same checks with the
fallback instruction sets (GEASYNC_TWIN_SIMD caps the twin's choice, in a subprocess)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator
from onnx_cases import rerun_file_with_instruction_set, script_output_per_instruction_set

import geasync as ga
from conftest import TensorProto, helper, make_model

F = TensorProto.FLOAT
_erf = np.frompyfunc(math.erf, 1, 1)
_erfc = np.frompyfunc(math.erfc, 1, 1)


def run_op(op: str, x: np.ndarray, opset: int = 20, **attrs) -> np.ndarray:
    model = make_model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", F, list(x.shape))],
                       [("y", F, list(x.shape))], opset=opset)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        outs = s.run_graph(1, [x])
        y = outs[0].numpy().copy()
        del outs
    return y


def ulp_error(got: np.ndarray, ref64: np.ndarray) -> np.ndarray:
    """|got - ref| in units of the float32 spacing at the reference (denormal spacing below FLT_MIN)."""
    ref64 = np.asarray(ref64, dtype=np.float64)
    with np.errstate(all="ignore"):  # spacing(FLT_MAX) overflows: that float32 ulp is inf
        ref32 = np.abs(ref64.astype(np.float32))
        spacing = np.maximum(np.spacing(ref32), np.float32(2.0 ** -149)).astype(np.float64)
        spacing = np.where(np.isinf(spacing), 2.0 ** 104, spacing)
    return np.abs(got.astype(np.float64) - ref64) / spacing


def _grid() -> np.ndarray:
    rng = np.random.default_rng(7)
    return np.concatenate([
        np.linspace(-12, 12, 120001), rng.standard_normal(50000) * 4, rng.uniform(-110, 100, 50000),
        np.geomspace(1e-30, 80, 20000), -np.geomspace(1e-30, 80, 20000),
    ]).astype(np.float32)


# op -> (float64 reference, domain filter, max ulp error)
ACCURACY = {
    "Exp": (np.exp, lambda x: x, 2.0),
    "Log": (np.log, lambda x: np.abs(x) + np.float32(1e-38), 2.0),
    "Tanh": (np.tanh, lambda x: x, 3.0),
    "Erf": (lambda v: _erf(v).astype(np.float64), lambda x: x, 4.0),
    "Sigmoid": (lambda v: 1.0 / (1.0 + np.exp(-v)), lambda x: x, 4.0),
    "Sqrt": (np.sqrt, np.abs, 0.5),
    "Sin": (np.sin, lambda x: x, 2.0),
    "Cos": (np.cos, lambda x: x, 2.0),
    "Gelu": (lambda v: 0.5 * v * _erfc(-v / math.sqrt(2.0)).astype(np.float64), lambda x: x[x > -3], 16.0),
    "Atan": (np.arctan, lambda x: x, 2.5),
    "Asin": (np.arcsin, lambda x: x[np.abs(x) <= 1], 2.5),  # just above 0.5: 2 asin(s) doubles its error
    "Acos": (np.arccos, lambda x: x[np.abs(x) <= 1], 2.0),
}


@pytest.mark.parametrize("op", sorted(ACCURACY))
def test_float32_kernel_within_ulps_of_float64_reference(op):
    ref_fn, domain, max_ulp = ACCURACY[op]
    x = np.ascontiguousarray(domain(_grid())).astype(np.float32)
    got = run_op(op, x)
    with np.errstate(all="ignore"):
        ref = ref_fn(x.astype(np.float64))
        representable = np.isfinite(ref.astype(np.float32))
    assert np.array_equal(np.isfinite(got), representable), x[np.isfinite(got) != representable][:5]
    with np.errstate(all="ignore"):
        err = ulp_error(got[representable], ref[representable])
    worst = int(np.argmax(err))
    assert err[worst] <= max_ulp, f"{op}: {err[worst]:.2f} ulp at x={x[representable][worst]!r}"


EDGES = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1e-40, -1e-40, 1.1754944e-38,
                  3.4028235e38, -3.4028235e38, 88.72, 88.73, 89.0, -87.3, -87.4, -103.0, -103.9, -104.0, -120.0,
                  0.625, -0.625, 0.8, -0.8, 9.0, -9.0, 10.0, -10.0, 20.0, -20.0, 1e30, -1e30], dtype=np.float32)


@pytest.mark.parametrize("op", sorted(ACCURACY))
def test_edge_values_match_float64_reference(op):
    ref_fn, domain, max_ulp = ACCURACY[op]
    x = EDGES if op != "Gelu" else EDGES[(EDGES > -3) | ~np.isfinite(EDGES)]
    got = run_op(op, x)
    with np.errstate(all="ignore"):
        ref = np.asarray(ref_fn(x.astype(np.float64)), dtype=np.float64)
        if op == "Gelu":  # like 0.5 x (1 + erf(x / sqrt2)) in numpy: inf at +inf, NaN (-inf * 0) at -inf
            ref = np.where(x == np.inf, np.inf, np.where(x == -np.inf, np.nan, ref))
        ref32 = ref.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref32), err_msg=f"{op}: NaN positions, x={x}")
    inf = np.isinf(ref32)
    np.testing.assert_array_equal(got[inf], ref32[inf], err_msg=f"{op}: infinities")
    fin = np.isfinite(ref32)
    err = ulp_error(got[fin], ref[fin])
    assert err.max() <= max(max_ulp, 2.0), f"{op}: {err.max():.2f} ulp at x={x[fin][int(np.argmax(err))]!r}"


def test_gelu_negative_tail_relative_error():
    # below x = -3 the result is a tiny erfc tail: x / sqrt2 and its square are rounded to float32 there, which
    # bounds the relative error (in ulp it grows with x^2), as in any float32 evaluation of the formula
    x = np.linspace(-13, -3, 20001).astype(np.float32)
    got = run_op("Gelu", x).astype(np.float64)
    ref = (0.5 * x.astype(np.float64) * _erfc(-x.astype(np.float64) / math.sqrt(2.0))).astype(np.float64)
    np.testing.assert_allclose(got, ref, rtol=3e-5, atol=0)


def test_exp_underflow_gives_denormals_and_zero_like_numpy():
    x = np.array([-87.5, -95.0, -100.0, -103.2, -104.5, -200.0], np.float32)
    got = run_op("Exp", x)
    ref = np.exp(x.astype(np.float64)).astype(np.float32)
    assert (got[:4] > 0).all() and (got[:4] < np.float32(1.1754944e-38)).all()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=2 * 2.0 ** -149)
    assert got[-1] == 0 and got[-2] == 0


@pytest.mark.parametrize("op", ["Sin", "Cos"])
def test_trig_accurate_near_zeros_and_beyond_the_fast_range(op):
    # the floats nearest to multiples of pi/2 (where the result is tiny: relative accuracy needs an exact
    # reduction), both sides of the vector loop's limit 8192, and the huge arguments libm takes over
    k = np.arange(1, 5300, dtype=np.float64)
    near = (k * np.pi / 2).astype(np.float32)
    near = np.concatenate([near, np.nextafter(near, np.float32(np.inf)), np.nextafter(near, np.float32(0))])
    rng = np.random.default_rng(3)
    x = np.concatenate([near, -near, rng.uniform(8000, 8400, 4000), np.geomspace(8192, 3e38, 2000)]).astype(np.float32)
    x = np.concatenate([x, -x])
    got = run_op(op, x)
    ref = getattr(np, op.lower())(x.astype(np.float64))
    err = ulp_error(got, ref)
    assert err.max() <= 2.0, f"{op}: {err.max():.2f} ulp at x={x[int(np.argmax(err))]!r}"


def run_graph_1(nodes, x: np.ndarray, out_type, out_shape, initializers=()) -> np.ndarray:
    model = make_model(nodes, [("x", helper.np_dtype_to_tensor_dtype(x.dtype), list(x.shape))],
                       [("y", out_type, out_shape)], initializers=initializers, opset=20)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        outs = s.run_graph(1, [x])
        y = outs[0].numpy().copy()
        del outs
    return y


def test_cast_float_to_float16_rounds_like_numpy():
    rng = np.random.default_rng(11)
    special = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 65504.0, 65519.99, 65520.0, -65520.0, 1e6,
                        3.4e38, 6.1035156e-05, 6.0975552e-05, 5.9604645e-08, 2.9802322e-08, 2.98023259e-08, 1e-45,
                        -1e-40, 1.00048828125, 1.00146484375, 2049.0, 2051.0], np.float32)
    x = np.concatenate([special, rng.standard_normal(5000).astype(np.float32) * 100,
                        (rng.standard_normal(3001) * 1e-5).astype(np.float32),
                        rng.integers(0, 2**32, 4003, dtype=np.uint64).astype(np.uint32).view(np.float32)])
    got = run_graph_1([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16)], x, TensorProto.FLOAT16,
                      list(x.shape))
    with np.errstate(all="ignore"):
        ref = x.astype(np.float16)
    nan = np.isnan(ref)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint16), ref[~nan].view(np.uint16))  # bit for bit, signs too


@pytest.mark.parametrize("cols", [1, 3, 8, 15, 16, 17, 31, 32, 33, 40, 47, 64, 100, 1000])
def test_reduce_sum_last_axis_matches_float64(cols):
    rng = np.random.default_rng(cols)
    x = (rng.standard_normal((13, cols)) * 10).astype(np.float32)
    x[0, 0] = np.nan
    x[1, -1] = np.inf
    x[2, 0], x[2, -1] = np.inf, -np.inf if cols > 1 else np.inf
    axes = np.array([-1], np.int64)
    for op in ("ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceL1"):
        got = run_graph_1([helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)], x, F, [13],
                          initializers=[("axes", axes)])
        with np.errstate(all="ignore"):  # the inf - inf row
            ref = ReferenceEvaluator(make_model([helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)],
                                                [("x", F, [13, cols])], [("y", F, [13])],
                                                initializers=[("axes", axes)], opset=20)).run(None, {"x": x})[0]
            x64 = x.astype(np.float64)
            exact = {"ReduceSum": x64.sum(1), "ReduceMean": x64.mean(1), "ReduceSumSquare": (x64 * x64).sum(1),
                     "ReduceL1": np.abs(x64).sum(1)}[op]
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref), err_msg=op)
        np.testing.assert_allclose(got, exact.astype(np.float32), rtol=1e-6, atol=1e-6, err_msg=op)


@pytest.mark.parametrize("cols", [8, 33, 64, 100, 1000])
def test_reduce_sum_last_axis_accumulates_in_double(cols):
    """1e8 + 1 + ... + 1 - 1e8 with the large terms in different lanes (and the scalar tail): exact in double."""
    x = np.ones((5, cols), np.float32)
    x[:, 0], x[:, cols // 2 + 1], x[1, -1], x[2, 3] = 1e8, -1e8, 3e8, -3e8
    x[3, 1] = -0.5
    axes = np.array([-1], np.int64)
    for op, terms in (("ReduceSum", x), ("ReduceL1", np.abs(x))):
        got = run_graph_1([helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)], x, F, [5],
                          initializers=[("axes", axes)])
        np.testing.assert_array_equal(got, terms.astype(np.float64).sum(1).astype(np.float32), err_msg=op)


@pytest.mark.parametrize("shape,perm", [((37, 53), (1, 0)), ((300, 70), (1, 0)), ((3, 33, 65), (0, 2, 1)),
                                        ((2, 17, 3, 40), (0, 3, 1, 2)), ((5, 130, 7), (2, 1, 0)),
                                        ((1, 64, 1, 48), (3, 1, 2, 0))])
@pytest.mark.parametrize("dtype", [np.uint8, np.float16, np.float32, np.int64])
def test_transpose_matches_numpy(shape, perm, dtype):
    x = np.arange(int(np.prod(shape))).reshape(shape).astype(dtype)
    out_shape = [shape[p] for p in perm]
    got = run_graph_1([helper.make_node("Transpose", ["x"], ["y"], perm=list(perm))], x,
                      helper.np_dtype_to_tensor_dtype(x.dtype), out_shape)
    np.testing.assert_array_equal(got, np.transpose(x, perm))


@pytest.mark.parametrize("op", ["Floor", "Ceil", "Round"])
def test_rounding_kernels_are_exact(op):
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.uniform(-50, 50, 10001), np.arange(-8, 8.5, 0.5), EDGES]).astype(np.float32)
    np.testing.assert_array_equal(run_op(op, x), ReferenceEvaluator(
        make_model([helper.make_node(op, ["x"], ["y"])], [("x", F, list(x.shape))], [("y", F, list(x.shape))],
                   opset=20)).run(None, {"x": x})[0])


# ---- fused row kernels ----

def _softmax_model(op, shape, axis):
    return make_model([helper.make_node(op, ["x"], ["y"], axis=axis)], [("x", F, list(shape))],
                      [("y", F, list(shape))], opset=20)


def _run_model(model, feeds):
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        outs = s.run_graph(1, list(feeds.values()))
        got = [o.numpy().copy() for o in outs]
        del outs
    return got


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape", [(1, 1), (3, 15), (4, 16), (2, 17), (5, 1000), (2, 3, 33),
                                   # rows go in blocks (16 rows, fewer from 1024 floats a row, 1 from 16384):
                                   # partial and whole blocks, and every block size
                                   (37, 3), (2, 16, 8), (33, 1024), (5, 3000), (3, 16384), (2, 17000)])
def test_softmax_rows_match_reference(op, shape):
    rng = np.random.default_rng(11)
    x = (rng.standard_normal(shape) * 20).astype(np.float32)
    model = _softmax_model(op, shape, -1)
    got = _run_model(model, {"x": x})[0]
    with np.errstate(divide="ignore"):  # the reference's log(softmax) is -inf where softmax underflows
        ref = ReferenceEvaluator(model).run(None, {"x": x})[0]
    if op == "LogSoftmax":
        x64 = x.astype(np.float64)
        ref = x64 - x64.max(axis=-1, keepdims=True)
        ref = (ref - np.log(np.exp(ref).sum(axis=-1, keepdims=True))).astype(np.float32)
    np.testing.assert_allclose(got, ref, rtol=2e-6, atol=1e-6 if op == "Softmax" else 1e-5)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_edge_rows(op):
    x = np.array([[1e30, -1e30, 0.0, 5.0], [-np.inf, 0.0, 1.0, 2.0], [np.nan, 1.0, 2.0, 3.0],
                  [-87.0, -200.0, 0.0, 1e-40], [3.0, 3.0, 3.0, 3.0]], np.float32)
    got = _run_model(_softmax_model(op, x.shape, -1), {"x": x})[0]
    with np.errstate(all="ignore"):  # float64 formula (the reference takes log(softmax), -inf where it underflows)
        x64 = x.astype(np.float64)
        shifted = x64 - x64.max(axis=-1, keepdims=True)
        lse = np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        ref = (shifted - lse if op == "LogSoftmax" else np.exp(shifted - lse)).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape,axis", [((4, 16), -1), ((3, 7, 33), -1), ((2, 5, 8), 1), ((1, 1000), -1), ((6, 1), -1)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_layer_norm_rows_match_reference(shape, axis, with_bias):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(shape) * 3 + 100).astype(np.float32)  # a large mean: cancellation must not hurt
    tail = list(shape[axis:])
    inits = [("s", rng.uniform(0.5, 1.5, tail).astype(np.float32))]
    names = ["x", "s"]
    if with_bias:
        inits.append(("b", rng.standard_normal(tail).astype(np.float32)))
        names.append("b")
    node = helper.make_node("LayerNormalization", names, ["y", "mean", "inv"], axis=axis, epsilon=1e-5)
    stat = list(shape[:axis % len(shape)]) + [1] * len(tail)
    model = make_model([node], [("x", F, list(shape))], [("y", F, list(shape)), ("mean", F, stat), ("inv", F, stat)],
                       initializers=inits, opset=20)
    got = _run_model(model, {"x": x})
    ref = ReferenceEvaluator(model).run(None, {"x": x})
    for g, r in zip(got, ref, strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4)


# ---- IsNaN / IsInf on the bits of float32 ----

@pytest.mark.parametrize("length", [1, 15, 16, 17, 63, 64, 65, 1000])
@pytest.mark.parametrize("op,attrs", [("IsNaN", {}), ("IsInf", {}), ("IsInf", {"detect_negative": 0}),
                                      ("IsInf", {"detect_positive": 0}),
                                      ("IsInf", {"detect_positive": 0, "detect_negative": 0})])
def test_float_class_matches_numpy(length, op, attrs):
    rng = np.random.default_rng(length)
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, 3.4028235e38, -3.4028235e38],
                        np.float32)
    x = rng.standard_normal(length).astype(np.float32)
    x[rng.integers(0, length, length // 2 + 1)] = rng.choice(specials, length // 2 + 1)
    bits = x.view(np.uint32)
    bits[rng.integers(0, length, 2)] = [0xFFFFFFFF, 0x7F800001]  # NaNs with other payloads
    model = make_model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", F, [length])],
                       [("y", TensorProto.BOOL, [length])], opset=20)
    got = _run_model(model, {"x": x})[0]
    if op == "IsNaN":
        ref = np.isnan(x)
    else:
        ref = (np.isposinf(x) & bool(attrs.get("detect_positive", 1))) | (
            np.isneginf(x) & bool(attrs.get("detect_negative", 1)))
    np.testing.assert_array_equal(got, ref)


# ---- the fallback instruction sets run the same checks ----

@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_fallback_instruction_sets_pass_the_same_checks(isa):
    rerun_file_with_instruction_set(__file__, isa)


# ---- direct convolution (stride 1, no dilation: the AVX-512 / AVX2 register-blocked kernel where the CPU has one) ----

@pytest.mark.parametrize("shape,m,group,pads,relu", [
    ((1, 3, 8, 8), 4, 1, [1, 1, 1, 1], False),
    ((2, 6, 7, 19), 13, 1, [1, 0, 2, 1], False),
    ((1, 16, 10, 33), 8, 2, [0, 0, 0, 0], True),
    ((1, 4, 5, 5), 3, 1, [2, 2, 2, 2], True),
    ((1, 32, 6, 11), 5, 1, [1, 1, 1, 1], False),  # C x 3 x 3 = 288: still the direct kernel on AVX2
    ((1, 64, 5, 21), 6, 1, [1, 1, 1, 1], True),  # 576: the direct kernel's largest K on AVX2; 21 = 16 + 5 columns
    ((1, 72, 4, 9), 3, 1, [1, 1, 1, 1], False),  # 648: im2col + BLAS on AVX2
    ((1, 5, 9, 19), 5, 5, [1, 1, 1, 1], False),  # depthwise: blocks of 4 output rows, then single rows
    ((2, 3, 6, 33), 3, 3, [1, 0, 2, 1], True),
    ((1, 4, 3, 7), 4, 4, [0, 0, 0, 0], False),
    # AVX2 channel blocks of 6 (straddling the weight pack's blocks of 8), 7 and 8 left as 4 + 3 and 4 + 4
    ((1, 3, 6, 20), 1, 1, [1, 1, 1, 1], True),
    ((1, 5, 6, 9), 14, 1, [1, 1, 1, 1], False),
    ((1, 4, 5, 17), 7, 1, [0, 1, 0, 1], True),
    ((1, 6, 4, 12), 20, 1, [1, 1, 1, 1], False),
])
def test_direct_conv_matches_reference(shape, m, group, pads, relu):
    rng = np.random.default_rng(sum(shape) + m)
    n, c, h, w = shape
    x = rng.standard_normal(shape).astype(np.float32)
    wt = rng.standard_normal((m, c // group, 3, 3)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    oh, ow = h + pads[0] + pads[2] - 2, w + pads[1] + pads[3] - 2
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if relu else "y"], pads=pads, group=group)]
    if relu:  # Conv + Relu: the twin fuses the Relu into the convolution's stores
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    model = make_model(nodes, [("x", F, list(shape))], [("y", F, [n, m, oh, ow])],
                       initializers=[("w", wt), ("b", b)], opset=20)
    got = _run_model(model, {"x": x})[0]
    ref = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("c,m,kernel,pads,height,width", [
    (3, 5, (3, 3), [1, 1, 1, 1], 9, 17),   # odd sizes: the last window reaches the bottom / right pad
    (8, 16, (3, 3), [1, 1, 1, 1], 64, 64),
    (2, 3, (3, 3), [0, 0, 0, 0], 8, 40),   # 19 outputs: a 16-wide chunk and a tail
    (4, 9, (5, 4), [2, 1, 2, 2], 11, 23),  # other kernel sizes, uneven pads
    (2, 4, (2, 1), [0, 0, 1, 0], 6, 5),
    (1, 2, (3, 3), [1, 1, 1, 1], 5, 70),
    (40, 3, (3, 3), [1, 1, 1, 1], 6, 10),  # K = 360: im2col + BLAS
    (3, 14, (3, 3), [1, 1, 1, 1], 10, 21),  # AVX2 channel blocks 6 + 4 + 4
    (2, 1, (3, 3), [1, 1, 1, 1], 7, 9),
    (5, 11, (3, 3), [0, 0, 1, 1], 12, 34),  # 6 + 5
])
@pytest.mark.parametrize("relu", [False, True])
def test_conv_stride2_matches_reference(c, m, kernel, pads, height, width, relu):
    """Stride 2 (the direct kernel over column phases on AVX-512 and AVX2, im2col with even-lane copies otherwise), the
    bias, the fused Relu, edge values in the input."""
    rng = np.random.default_rng(c * 100 + width)
    x = rng.standard_normal((2, c, height, width)).astype(np.float32)
    x.reshape(-1)[rng.choice(x.size, 6, replace=False)] = [np.nan, np.inf, -np.inf, 1e-40, -0.0, 3e30]
    wt = rng.standard_normal((m, c) + kernel).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    oh = (height + pads[0] + pads[2] - kernel[0]) // 2 + 1
    ow = (width + pads[1] + pads[3] - kernel[1]) // 2 + 1
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if relu else "y"], pads=pads, strides=[2, 2])]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    model = make_model(nodes, [("x", F, list(x.shape))], [("y", F, [2, m, oh, ow])],
                       initializers=[("w", wt), ("b", b)], opset=20)
    got = _run_model(model, {"x": x})[0]
    with np.errstate(invalid="ignore", over="ignore"):
        ref = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kernel", [(3, 3), (5, 2), (1, 4)])
@pytest.mark.parametrize("width", [7, 16, 29])
@pytest.mark.parametrize("height,relu", [(10, False), (15, True)])
def test_depthwise_conv_matches_reference(kernel, width, height, relu):
    """One channel per group (the depthwise kernel: blocks of 8 and 4 output rows on AVX-512, 4 on AVX2, then single
    rows), other kernel sizes, the fused Relu, edge values in the input."""
    rng = np.random.default_rng(width + kernel[1] + height)
    c = 3
    x = rng.standard_normal((1, c, height, width)).astype(np.float32)
    x.reshape(-1)[rng.choice(x.size, 6, replace=False)] = [np.nan, np.inf, -np.inf, 1e-40, -0.0, 3e30]
    wt = rng.standard_normal((c, 1) + kernel).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    pads = [kernel[0] // 2, kernel[1] // 2, kernel[0] // 2, kernel[1] // 2]
    oh, ow = height + 2 * pads[0] - kernel[0] + 1, width + 2 * pads[1] - kernel[1] + 1
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if relu else "y"], pads=pads, group=c)]
    if relu:  # fused into the convolution's stores
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    model = make_model(nodes, [("x", F, list(x.shape))], [("y", F, [1, c, oh, ow])],
                       initializers=[("w", wt), ("b", b)], opset=20)
    got = _run_model(model, {"x": x})[0]
    with np.errstate(invalid="ignore", over="ignore"):
        ref = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


# ---- MaxPool 2x2 stride 2 (vectorised where the CPU has AVX2 or AVX-512; scalar under the baseline set) ----

def _maxpool_2x2(x: np.ndarray) -> np.ndarray:
    """The largest tap of each window (inputs without NaN)."""
    n, c, h, w = x.shape
    win = x[:, :, : h // 2 * 2, : w // 2 * 2].reshape(n, c, h // 2, 2, w // 2, 2)
    return np.where(np.isnan(win), -np.inf, win).max(axis=(3, 5)).astype(np.float32)


def _run_maxpool_2x2(x: np.ndarray):
    """The model of one MaxPool 2x2 stride 2 over x's shape, and its output from the twin."""
    n, c, h, w = x.shape
    model = make_model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
                       [("x", F, list(x.shape))], [("y", F, [n, c, h // 2, w // 2])], opset=17)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        return model, s.run_graph(1, [x])[0].numpy().copy()


@pytest.mark.parametrize("shape", [
    (1, 1, 2, 2), (1, 3, 8, 8), (2, 5, 7, 9), (1, 2, 4, 16), (1, 2, 6, 17), (1, 4, 32, 34), (1, 1, 3, 50),
    (3, 16, 16, 16),
])
def test_maxpool_2x2_matches_reference(shape):
    """Every output-row tail (OW % 8 from 0 to 7), odd H and W (the last row / column is outside every window),
    and edge values: +-inf, denormals, -0.0, the largest magnitudes, against onnx.reference."""
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    picks = rng.choice(flat.size, size=min(flat.size, 12), replace=False)
    edge = np.array([np.inf, -np.inf, 1e-42, -1e-42, -0.0, 3.4e38, -3.4e38, 0.0, np.inf, -np.inf, 1e-45, -1.0],
                    np.float32)
    flat[picks] = edge[: picks.size]
    model, got = _run_maxpool_2x2(x)
    np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, {"x": x})[0])
    np.testing.assert_array_equal(got, _maxpool_2x2(x))


@pytest.mark.parametrize("shape", [(1, 2, 4, 16), (1, 3, 5, 21)])
def test_maxpool_2x2_nan_taps_as_reference(shape):
    """As onnx.reference at stride 2, on every instruction set: a NaN first tap (top left) is kept, a later NaN tap
    is skipped."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[rng.choice(x.size, size=x.size // 3, replace=False)] = np.nan
    x[0, 0, :2, :2] = np.nan  # one whole window
    x[0, 1, 0, :4] = [1.0, np.nan, 2.0, 3.0]
    x[0, 1, 1, :4] = [np.nan, 5.0, 4.0, np.nan]
    model, got = _run_maxpool_2x2(x)
    assert np.isnan(got[0, 0, 0, 0]) and got[0, 1, 0, 0] == 5.0 and got[0, 1, 0, 1] == 4.0
    np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, {"x": x})[0])


# ---- InstanceNormalization / GroupNormalization (one shifted pass of double moments, float32 affine pass) ----

def _channel_norm_model(op, shape, opset, **attrs):
    c = shape[1]
    per = attrs["num_groups"] if op == "GroupNormalization" and opset < 21 else c
    rng = np.random.default_rng(c + len(shape))
    inits = [("s", rng.uniform(0.5, 1.5, per).astype(np.float32)), ("b", rng.standard_normal(per).astype(np.float32))]
    node = helper.make_node(op, ["x", "s", "b"], ["y"], **attrs)
    return make_model([node], [("x", F, list(shape))], [("y", F, list(shape))], initializers=inits, opset=opset)


def _channel_norm64(x, scale, bias, groups, eps, per_group):
    """float64 formula: statistics per (n, group), scale/bias per channel (or per group before opset 21)."""
    n, c = x.shape[:2]
    g = x.astype(np.float64).reshape(n, groups, -1)
    mean, var = g.mean(axis=-1, keepdims=True), g.var(axis=-1, keepdims=True)
    y = ((g - mean) / np.sqrt(var + eps)).reshape(x.shape)
    s, b = (np.repeat(scale, c // groups), np.repeat(bias, c // groups)) if per_group else (scale, bias)
    bshape = [1, c] + [1] * (x.ndim - 2)
    return y * s.astype(np.float64).reshape(bshape) + b.astype(np.float64).reshape(bshape)


# Spatial sizes hit every remainder of the 16-lane moment loop (blocks of 32, then 16) and the 8- / 16-wide affine
# loops.
CHANNEL_NORM_CASES = [
    ("InstanceNormalization", (2, 3, 5), 17, {}),
    ("InstanceNormalization", (1, 4, 16), 17, {}),
    ("InstanceNormalization", (2, 2, 17), 17, {"epsilon": 1e-3}),
    ("InstanceNormalization", (1, 3, 7, 9), 17, {}),
    ("InstanceNormalization", (1, 2, 33, 31), 17, {}),
    ("InstanceNormalization", (3, 1, 1), 17, {}),
    # AVX-512: blocks of 32 (pairs into 16 lanes), one block of 16, scalar tails; masked affine tails
    ("InstanceNormalization", (1, 2, 32), 17, {}),
    ("InstanceNormalization", (1, 2, 47), 17, {}),
    ("InstanceNormalization", (1, 2, 48), 17, {}),
    ("InstanceNormalization", (2, 2, 49), 17, {}),
    ("InstanceNormalization", (1, 3, 100), 17, {}),
    ("InstanceNormalization", (1, 2, 64, 64), 17, {}),
    ("GroupNormalization", (1, 4, 97), 21, {"num_groups": 2}),
    ("GroupNormalization", (2, 6, 5, 3), 21, {"num_groups": 3}),
    ("GroupNormalization", (1, 8, 11), 21, {"num_groups": 2}),
    ("GroupNormalization", (2, 4, 7), 18, {"num_groups": 4}),
]


@pytest.mark.parametrize("op,shape,opset,attrs", CHANNEL_NORM_CASES)
@pytest.mark.parametrize("offset", [0.0, 1e4])
def test_channel_norms_match_reference(op, shape, opset, attrs, offset):
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * 3 + offset).astype(np.float32)
    model = _channel_norm_model(op, shape, opset, **attrs)
    got = _run_model(model, {"x": x})[0]
    if offset == 0.0:
        ref = ReferenceEvaluator(model).run(None, {"x": x})[0]
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    # A large mean: the reference's float32 statistics lose digits there, the float64 formula does not.
    inits = {i.name: np.frombuffer(i.raw_data, np.float32) for i in model.graph.initializer}
    groups = attrs.get("num_groups", shape[1])
    want = _channel_norm64(x, inits["s"], inits["b"], groups, attrs.get("epsilon", 1e-5),
                           op == "GroupNormalization" and opset < 21)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("length", [37, 101])
def test_channel_norm_edge_values(length):
    x = np.random.default_rng(3).standard_normal((1, 6, length)).astype(np.float32)
    x[0, 0, 5] = np.nan  # channel 0: NaN everywhere
    x[0, 1, 30] = np.inf  # channel 1: inf makes every value NaN (inf - inf)
    x[0, 2] = x[0, 2] * 1e30  # channel 2: 1e30-ish magnitudes, whose float32 squares overflow
    x[0, 3] = np.float32(1e-40) * np.arange(length, dtype=np.float32)  # channel 3: denormals
    x[0, 4] = 2.5  # channel 4: constant: (x - mean) is exactly 0, y is the bias
    x[0, 5, ::2] = -0.0
    model = _channel_norm_model("InstanceNormalization", x.shape, 17)
    got = _run_model(model, {"x": x})[0]
    inits = {i.name: np.frombuffer(i.raw_data, np.float32) for i in model.graph.initializer}
    with np.errstate(all="ignore"):
        want = _channel_norm64(x, inits["s"], inits["b"], 6, 1e-5, False).astype(np.float32)
    assert np.isnan(got[0, :2]).all()
    np.testing.assert_allclose(got[0, 2:], want[0, 2:], rtol=1e-5, atol=2e-5)
    np.testing.assert_array_equal(got[0, 4], np.full(length, inits["b"][4], np.float32))


_CHANNEL_NORM_BITS = """
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from test_vmath import _channel_norm_model, _run_model
out = []
for op, shape, attrs in [("InstanceNormalization", (2, 3, 1000), {}), ("InstanceNormalization", (1, 2, 49), {}),
                         ("GroupNormalization", (1, 4, 97), {"num_groups": 2})]:
    x = (np.random.default_rng(7).standard_normal(shape) * 3 + 50).astype(np.float32)
    x.reshape(-1)[::7] *= 1e4
    y = _run_model(_channel_norm_model(op, shape, 21 if "num_groups" in attrs else 17, **attrs), {"x": x})[0]
    out.append(y.tobytes().hex())
print("|".join(out))
"""


def test_channel_norms_identical_bits_on_every_instruction_set():
    """The moment lanes and the affine pass do the same operations in the same order with AVX-512, AVX2 and without
    SIMD (no fused multiply-adds): the outputs agree bit for bit. (A fused multiply-add in the float32 affine pass
    shows here; one in the double moments would rarely reach the float32 outputs.)"""
    outs = script_output_per_instruction_set(_CHANNEL_NORM_BITS, __file__)
    assert outs["avx512"] == outs["avx2"] == outs["baseline"]


def test_channel_norm_empty_spatial():
    model = _channel_norm_model("InstanceNormalization", (2, 3, 0), 17)
    assert _run_model(model, {"x": np.zeros((2, 3, 0), np.float32)})[0].shape == (2, 3, 0)


# ---- Resize linear / cubic of the last two axes (float32 plane kernel: double row pass, paired column pass) ----

def _resize_model(in_shape, out_shape, *, scales=None, **attrs):
    inputs = ["x", "", "sc"] if scales is not None else ["x", "", "", "sz"]
    init = ("sc", np.array(scales, np.float32)) if scales is not None else ("sz", np.array(out_shape, np.int64))
    return make_model([helper.make_node("Resize", inputs, ["y"], **attrs)], [("x", F, list(in_shape))],
                      [("y", F, list(out_shape))], initializers=[init], opset=19)


RESIZE_CASES = [  # in shape, out shape, scales (None: sizes), attributes
    ((1, 3, 5, 7), (1, 3, 10, 14), [1, 1, 2, 2], dict(mode="linear")),
    ((2, 2, 9, 13), (2, 2, 18, 26), [1, 1, 2, 2], dict(mode="linear", coordinate_transformation_mode="align_corners")),
    ((1, 2, 6, 11), (1, 2, 12, 22), [1, 1, 2, 2], dict(mode="linear", coordinate_transformation_mode="asymmetric")),
    ((1, 1, 7, 17), (1, 1, 9, 21), None, dict(mode="linear")),
    ((1, 1, 7, 17), (1, 1, 5, 11), None, dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel")),
    ((1, 2, 8, 9), (1, 2, 4, 19), None, dict(mode="linear", coordinate_transformation_mode="half_pixel_symmetric")),
    ((1, 2, 8, 16), (1, 2, 3, 5), None, dict(mode="linear", antialias=1)),
    ((3, 6, 10), (3, 12, 23), None, dict(mode="linear")),  # rank 3: the plane is the last two axes
    ((1, 2, 5, 8), (1, 2, 5, 19), None, dict(mode="linear")),  # only the columns
    ((1, 2, 5, 8), (1, 2, 11, 8), None, dict(mode="linear")),  # only the rows
    ((1, 2, 6, 9), (1, 2, 12, 18), [1, 1, 2, 2], dict(mode="cubic")),
    ((1, 1, 6, 9), (1, 1, 13, 7), None, dict(mode="cubic", exclude_outside=1, cubic_coeff_a=-0.5)),
    ((1, 1, 1, 1), (1, 1, 3, 2), None, dict(mode="linear")),
    ((1, 1, 4, 4), (1, 1, 1, 1), None, dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel")),
]


@pytest.mark.parametrize("in_shape,out_shape,scales,attrs", RESIZE_CASES)
def test_resize_planes_match_reference(in_shape, out_shape, scales, attrs):
    rng = np.random.default_rng(sum(in_shape) + sum(out_shape))
    x = rng.uniform(-3, 3, in_shape).astype(np.float32)
    model = _resize_model(in_shape, out_shape, scales=scales, **attrs)
    got = _run_model(model, {"x": x})[0]
    ref = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ctm,mode", [("half_pixel", "linear"), ("align_corners", "linear"), ("asymmetric", "linear"),
                                      ("asymmetric", "cubic")])
def test_resize_plane_edge_values(ctm, mode):
    """Zero-weight taps count like the reference's: 0 * NaN (or inf) next to an integer source coordinate is NaN."""
    x = np.random.default_rng(1).uniform(-1, 1, (1, 2, 6, 13)).astype(np.float32)
    x[0, 0, 2, 3] = np.nan
    x[0, 0, 4, 0] = np.inf  # on the edge column: the clamped taps
    x[0, 0, 5, 12] = -np.inf
    x[0, 1, 0] = 3e38  # near FLT_MAX: sums in double, the result clips to the finite range like the reference
    x[0, 1, 1] = np.float32(1e-40)  # denormals
    x[0, 1, 2] = -0.0
    x[0, 1, 3, ::2] = 1e30
    model = _resize_model(x.shape, (1, 2, 12, 26), scales=[1, 1, 2, 2], mode=mode,
                          coordinate_transformation_mode=ctm)
    got = _run_model(model, {"x": x})[0]
    with np.errstate(all="ignore"):
        ref = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-30)


def test_resize_plane_empty():
    model = _resize_model((0, 2, 3, 4), (0, 2, 6, 8), scales=[1, 1, 2, 2], mode="linear")
    assert _run_model(model, {"x": np.zeros((0, 2, 3, 4), np.float32)})[0].shape == (0, 2, 6, 8)


# ---- TopK float32 (rank keys: a heap scan with an AVX2 prefilter for small K, nth_element for large K) ----

def _topk_model(shape, k, **attrs):
    axis = attrs.get("axis", -1) % len(shape)
    out = list(shape)
    out[axis] = k
    return make_model([helper.make_node("TopK", ["x", "k"], ["v", "i"], **attrs)], [("x", F, list(shape))],
                      [("v", F, out), ("i", TensorProto.INT64, out)],
                      initializers=[("k", np.array([k], np.int64))], opset=20)


def _topk_input(shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(-20, 20, shape).astype(np.float32) * np.float32(0.5)  # many ties
    flat = x.reshape(-1)
    picks = rng.choice(flat.size, size=min(flat.size, 12), replace=False)
    specials = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, -1e-40, 3e38, -3e38, 1e30, np.nan, -0.0],
                        np.float32)
    flat[picks] = specials[:picks.size]
    return x


TOPK_CASES = [  # shape, k, attributes
    ((5, 64), 3, {}), ((3, 67), 8, {}), ((4, 61), 1, {}), ((2, 100), 12, {}), ((2, 100), 13, {}),
    ((3, 29), 29, {}), ((3, 40), 20, {}), ((6, 9), 2, {}), ((1, 1), 1, {}), ((3, 64), 5, {"largest": 0}),
    ((2, 57), 40, {"largest": 0}), ((37, 6), 4, {"axis": 0}), ((9, 50, 11), 3, {"axis": 1}),
    ((4, 20, 3), 20, {"axis": 1, "largest": 0}), ((3, 33, 17), 2, {"axis": -2}), ((4, 5), 0, {}),
]


@pytest.mark.parametrize("shape,k,attrs", TOPK_CASES)
def test_topk_float_matches_reference(shape, k, attrs):
    x = _topk_input(shape, sum(shape) + k)
    model = _topk_model(shape, k, **attrs)
    got = _run_model(model, {"x": x})
    ref = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_array_equal(got[1], ref[1])  # the indices: lower index first among equal values, NaN highest
    want = np.take_along_axis(x, ref[1], axis=attrs.get("axis", -1))
    np.testing.assert_array_equal(got[0].view(np.uint32), want.view(np.uint32))  # the very values, bit for bit


def test_topk_float_all_nan_and_constant_rows():
    x = np.full((3, 70), np.nan, np.float32)
    x[1] = 2.0
    x[2, 5::7] = np.nan
    for attrs in ({}, {"largest": 0}):
        model = _topk_model(x.shape, 9, **attrs)
        got = _run_model(model, {"x": x})
        ref = ReferenceEvaluator(model).run(None, {"x": x})
        np.testing.assert_array_equal(got[1], ref[1])


def test_topk_float_empty():
    model = _topk_model((0, 8), 3)
    got = _run_model(model, {"x": np.zeros((0, 8), np.float32)})
    assert got[0].shape == (0, 3) and got[1].shape == (0, 3)


# ---- MeanVarianceNormalization float32 (double sums over merged contiguous chunks, float32 affine pass) ----

def _mvn64(x, axes):
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=tuple(axes), keepdims=True)
    std = np.sqrt(np.maximum(0.0, (x64 * x64).mean(axis=tuple(axes), keepdims=True) - mean * mean))
    return (x64 - mean) / (std + 1e-9)


MVN_CASES = [((2, 3, 5, 7), None), ((1, 4, 17, 3), [0, 2, 3]), ((3, 4, 6), [1]), ((5, 33), [0]), ((4, 37), [-1]),
             ((2, 3, 4, 5), [0, 1, 2, 3]), ((2, 3, 4, 5), [1, 3]), ((3, 2, 19), [0, 2]), ((2, 1, 1, 1), None)]


@pytest.mark.parametrize("shape,axes", MVN_CASES)
@pytest.mark.parametrize("offset", [0.0, 50.0])
def test_mvn_float_matches_reference(shape, axes, offset):
    x = (np.random.default_rng(sum(shape)).standard_normal(shape) + offset).astype(np.float32)
    attrs = {} if axes is None else {"axes": axes}
    model = make_model([helper.make_node("MeanVarianceNormalization", ["x"], ["y"], **attrs)], [("x", F, list(shape))],
                       [("y", F, list(shape))], opset=20)
    got = _run_model(model, {"x": x})[0]
    if offset == 0.0:  # the reference's float32 E[x^2] - mean^2 cancels badly under an offset
        np.testing.assert_allclose(got, ReferenceEvaluator(model).run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, _mvn64(x, axes if axes is not None else [0, 2, 3]), rtol=1e-5, atol=1e-5)


def test_mvn_float_edge_values():
    x = np.random.default_rng(2).standard_normal((2, 4, 3, 11)).astype(np.float32)
    x[1, 0, 2, 5] = np.nan
    x[0, 1, 0, 0] = np.inf
    x[:, 2] = 7.0  # constant channel: 0 / (0 + 1e-9) = 0
    x[:, 3] *= np.float32(1e-40)
    model = make_model([helper.make_node("MeanVarianceNormalization", ["x"], ["y"])], [("x", F, list(x.shape))],
                       [("y", F, list(x.shape))], opset=20)
    got = _run_model(model, {"x": x})[0]
    with np.errstate(all="ignore"):
        want = _mvn64(x, [0, 2, 3])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[:, 2], 0.0)
    np.testing.assert_allclose(got[:, 3], want[:, 3], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["Atan", "Asin", "Acos"])
@pytest.mark.parametrize("n", [1, 7, 8, 9, 17, 255, 256, 257, 1000])
def test_inverse_trig_matches_onnx_reference(op, n):
    """Random values around every reduction boundary (tan(pi/8), tan(3pi/8), 0.5, 1) and edge values, at lengths
    that leave every vector and sqrt-block remainder, against onnx.reference."""
    rng = np.random.default_rng(n)
    x = rng.choice(np.array([0.41421354, 0.41421357, 2.4142134, 2.4142137, 0.5, 0.50000006, 0.49999997, 1.0,
                             -1.0, 1.0000001, 0.99999994, 3.0, -7.5, 1e20], np.float32), n)
    x[::3] = rng.uniform(-1.2, 1.2, len(x[::3])).astype(np.float32)
    x[::5] = rng.choice(EDGES, len(x[::5]))
    with np.errstate(invalid="ignore"):
        want = ReferenceEvaluator(make_model([helper.make_node(op, ["x"], ["y"])], [("x", F, [n])], [("y", F, [n])],
                                             opset=20)).run(None, {"x": x})[0]
    got = run_op(op, x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=4e-7, atol=0)
    zeros = x == 0
    if op != "Acos":  # odd functions keep the zero's sign
        np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(x[zeros]))


_CAST_EDGES = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-40, 0.5, -0.5, 0.99999994, -1.5,
                        127.9, 128.0, -128.5, 255.5, 256.0, 32767.5, 65535.9, 65536.0, 2147483520.0, -2147483648.0,
                        2147483648.0, -2147483904.0, 4294967040.0, 4294967296.0, 9.223372e18, -9.223372e18,
                        9.2233725e18, 1e30, -3e38], np.float32)


@pytest.mark.parametrize("to", [TensorProto.INT32, TensorProto.INT16, TensorProto.INT8, TensorProto.UINT16,
                                TensorProto.UINT8, TensorProto.INT64, TensorProto.UINT32, TensorProto.BOOL])
@pytest.mark.parametrize("n", [1, 3, 4, 5, 255, 256, 257, 1001])
def test_cast_from_float_matches_reference(to, n):
    """float32 -> integer and bool casts (cvttps2dq blocks, 64-bit cvttss2si) against onnx.reference (numpy's
    astype): truncation, NaN / out-of-range results and wrapping, at lengths leaving every block remainder."""
    rng = np.random.default_rng(n + to)
    x = (rng.standard_normal(n) * 300).astype(np.float32)
    x[::4] = rng.choice(_CAST_EDGES, len(x[::4]))
    if to == TensorProto.UINT32:  # numpy's result for NaN, inf and x < -2^31 depends on its SIMD path: left out
        x[~(np.abs(x) < 2.1e9)] = 7.0
    _check_cast(x, to)


@pytest.mark.parametrize("n", [1, 7, 8, 9, 1001])
def test_cast_half_and_bool_to_float_match_reference(n):
    rng = np.random.default_rng(n)
    bits = rng.integers(0, 1 << 16, n).astype(np.uint16)  # every class of half: denormals, inf, NaN payloads
    bits[:4] = np.array([0x7c00, 0xfc00, 0x0001, 0x8000], np.uint16)[: min(n, 4)]
    got = _check_cast(bits.view(np.float16), TensorProto.FLOAT)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(bits.view(np.float16)))
    _check_cast(rng.random(n) < 0.5, TensorProto.FLOAT)


def _check_cast(x: np.ndarray, to: int) -> np.ndarray:
    src = {np.float32: F, np.float16: TensorProto.FLOAT16, np.bool_: TensorProto.BOOL}[x.dtype.type]
    model = make_model([helper.make_node("Cast", ["x"], ["y"], to=to)], [("x", src, list(x.shape))],
                       [("y", to, list(x.shape))], opset=20)
    with np.errstate(invalid="ignore"):
        want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = _run_model(model, {"x": x})[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    return got


# ---- BatchNormalization (inference): y = x a + b per channel, a and b folded in double ----

def _batch_norm_model(shape):
    c = shape[1]
    rng = np.random.default_rng(sum(shape))
    inits = [("s", rng.uniform(0.5, 2, c).astype(np.float32)), ("b", rng.standard_normal(c).astype(np.float32)),
             ("m", rng.standard_normal(c).astype(np.float32)), ("v", rng.uniform(0.1, 3, c).astype(np.float32))]
    return make_model([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3)],
                      [("x", F, list(shape))], [("y", F, list(shape))], initializers=inits, opset=15)


_BN_SHAPES = [(1, 3, 5, 7), (2, 4, 16), (1, 2, 33, 3), (2, 5, 1), (1, 1, 8, 8)]


def _bn_input(shape):
    x = np.random.default_rng(len(shape) + shape[-1]).standard_normal(shape).astype(np.float32)
    # (3e30, not near float32's limit: the reference's (x - mean) / sqrt(var + eps) can overflow where x a + b does not)
    x.reshape(-1)[: min(6, x.size)] = [np.nan, np.inf, -np.inf, 1e-41, -0.0, 3e30][: min(6, x.size)]
    return x


@pytest.mark.parametrize("shape", _BN_SHAPES)
def test_batch_norm_matches_reference(shape):
    """Plane lengths with and without a vector tail, edge values in the input."""
    model = _batch_norm_model(shape)
    x = _bn_input(shape)
    got = _run_model(model, {"x": x})[0]
    with np.errstate(invalid="ignore", over="ignore"):
        ref = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


_BN_BITS = r"""
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import test_vmath as t
out = []
for shape in t._BN_SHAPES:
    y = t._run_model(t._batch_norm_model(shape), {"x": t._bn_input(shape)})[0]
    out.append(y.tobytes().hex())
print("|".join(out))
"""


def test_batch_norm_identical_bits_on_every_instruction_set():
    """The per-channel pass is one multiply and one add per element with every instruction set (no fused
    multiply-add): the outputs agree bit for bit."""
    outs = script_output_per_instruction_set(_BN_BITS, __file__)
    assert outs["avx512"] == outs["avx2"] == outs["baseline"]
