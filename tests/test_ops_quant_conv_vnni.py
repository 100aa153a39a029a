"""Quantised convolutions on the byte GEMM (AVX-512 VNNI vpdpbusd: unsigned x signed bytes summed four at a time
into int32, exactly; zero points applied afterwards from row and column sums) against onnx.reference: ConvInteger,
QLinearConv and the fused DequantizeLinear -> Conv -> QuantizeLinear block, with K (C kh kw / group) off every
multiple of 4 and 64 and past one 1024-value block, zero points at the ends of the range, per-channel weights,
groups, strides, pads, dilations and batches (sums of fewer than 32 products keep the int16 GEMM, and depthwise
convolutions sum directly, tests/test_ops_quant_dw.py: checked alike). Integer outputs must be exact. The file is
rerun with the vector kernels capped at AVX2 and at the baseline (GEASYNC_TWIN_SIMD), where the int16 GEMM runs
instead: same checks."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_cases import graph_model, reference, rerun_file_with_instruction_set, run_once, value_info

from onnx import TensorProto, helper, numpy_helper

U8, S8 = np.uint8, np.int8
QT = {U8: TensorProto.UINT8, S8: TensorProto.INT8}

CONVS = [  # (x shape, w shape, attributes): K = w.shape[1:] product
    ((1, 1, 6, 7), (3, 1, 1, 1), {}),  # K 1
    ((2, 2, 9, 8), (5, 2, 1, 1), {"strides": [2, 2]}),  # K 2, batch 2
    ((1, 3, 8, 19), (7, 3, 1, 1), {}),  # K 3, a partial panel
    ((1, 5, 7, 7), (6, 5, 1, 1), {"pads": [1, 0, 0, 1]}),  # K 5, pads on a 1x1 kernel
    ((1, 33, 6, 7), (9, 33, 1, 1), {}),  # K 33: the first byte-path size, one value past a quad
    ((2, 7, 8, 9), (5, 7, 5, 1), {"pads": [2, 0, 2, 0]}),  # K 35
    ((1, 7, 9, 9), (13, 7, 3, 3), {"pads": [1, 1, 1, 1]}),  # K 63
    ((2, 13, 6, 10), (8, 13, 5, 1), {"pads": [2, 0, 2, 0], "strides": [1, 2]}),  # K 65, stride 2 along rows
    ((1, 16, 12, 12), (16, 16, 2, 2), {"dilations": [2, 3]}),  # K 64
    ((1, 115, 5, 5), (9, 115, 3, 3), {"pads": [1, 1, 1, 1]}),  # K 1035: past one block of 1024
    ((1, 6, 10, 11), (9, 2, 3, 3), {"group": 3, "pads": [0, 1, 2, 1], "strides": [2, 1]}),  # K 18 per group
    ((2, 12, 7, 9), (12, 1, 3, 3), {"group": 12, "pads": [1, 1, 1, 1]}),  # depthwise, K 9
    ((1, 8, 8, 8), (16, 4, 3, 3), {"group": 2, "dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    ((1, 3, 40, 3), (4, 3, 3, 3), {"strides": [1, 3]}),  # stride 3: panels gathered element by element
    ((1, 4, 33, 5), (6, 4, 3, 3), {}),  # panels spanning several output rows
    ((1, 6, 9, 11), (70, 6, 3, 3), {"pads": [1, 1, 1, 1]}),  # M past 64 (6-row tiles, a partial one)
    ((2, 3, 25), (5, 3, 4), {"pads": [1, 2], "strides": [2]}),  # 1-D, K 12
]
IDS = [f"K{int(np.prod(w[1:]))}-{'x'.join(map(str, x))}-{'x'.join(map(str, w))}-{sorted(a.items())}"
       for x, w, a in CONVS]


def _ints(rng, dtype, shape):
    """Random 8-bit values, a quarter of them at the type's extremes (and 0)."""
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)
    flat = x.reshape(-1)
    pick = rng.random(flat.size) < 0.25
    flat[pick] = rng.choice(np.array([info.min, info.max, 0], dtype), int(pick.sum()))
    return x


def _model(op, names, values, const, out_dtype, attrs):
    """One node; inputs named in ``const`` are initializers, the others graph inputs (None: omitted)."""
    inputs, inits, feeds, node_in = [], [], [], []
    for name, v in zip(names, values, strict=True):
        if v is None:
            node_in.append("")
            continue
        node_in.append(name)
        v = np.asarray(v)
        if name in const:
            inits.append(numpy_helper.from_array(v, name))
        else:
            inputs.append(value_info(name, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)))
            feeds.append(v)
    while node_in and node_in[-1] == "":
        node_in.pop()
    node = helper.make_node(op, node_in, ["y"], **attrs)
    return graph_model([node], inputs, [value_info("y", out_dtype)], opset=21, initializers=inits), feeds


def _check(session, model, feeds):
    want = reference(model, feeds)[0]
    got = run_once(session, model, feeds)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def _zero_points(dtype):
    info = np.iinfo(dtype)
    return [info.min, info.max, 0] if dtype == S8 else [0, info.max, 77]


@pytest.mark.parametrize("conv", CONVS, ids=IDS)
@pytest.mark.parametrize("types", [(U8, S8), (S8, S8), (U8, U8), (S8, U8)], ids=str)
def test_conv_integer(session, conv, types):
    xshape, wshape, attrs = conv
    xt, wt = types
    rng = np.random.default_rng(int(np.prod(wshape)) + len(xshape))
    x, w = _ints(rng, xt, xshape), _ints(rng, wt, wshape)
    for i, xzp in enumerate(_zero_points(xt)):
        # per output channel weight zero points (the reference expands them for 2-D kernels only)
        wzp = _ints(rng, wt, (wshape[0],)) if len(wshape) == 4 and i != 1 else _ints(rng, wt, ())
        for const in [("w", "wz"), ()]:
            m, feeds = _model("ConvInteger", ["x", "w", "xz", "wz"], [x, w, xt(xzp), wzp], const, TensorProto.INT32,
                              attrs)
            _check(session, m, feeds)


@pytest.mark.parametrize("conv", CONVS, ids=IDS)
@pytest.mark.parametrize("types", [(U8, S8, U8), (S8, S8, S8), (U8, U8, S8)], ids=str)
def test_qlinear_conv(session, conv, types):
    xshape, wshape, attrs = conv
    xt, wt, yt = types
    rng = np.random.default_rng(int(np.prod(wshape)) + 7)
    x, w = _ints(rng, xt, xshape), _ints(rng, wt, wshape)
    mch, kk = wshape[0], int(np.prod(wshape[1:]))
    ys = np.float32(1.0 / (64.0 * np.sqrt(kk)))  # outputs spread over the whole range, some saturated
    per = (0.5 + rng.random(mch)).astype(np.float32) if len(wshape) == 4 else np.float32(0.7)
    bias = rng.integers(-50000, 50000, mch).astype(np.int32)
    for xzp, (const, ws, wzp, b) in zip(_zero_points(xt), [
            (("w", "ws", "wz", "b"), per, np.zeros(mch if len(wshape) == 4 else (), wt), bias),
            ((), np.float32(0.9), _ints(rng, wt, ()), None),
            (("w", "ws", "wz"), np.float32(1.1), _ints(rng, wt, ()), bias)], strict=True):
        vals = [x, np.float32(0.5), xt(xzp), w, ws, wzp, ys, _ints(rng, yt, ()), b]
        m, feeds = _model("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], vals, const, QT[yt],
                          attrs)
        _check(session, m, feeds)


def _qdq_block(xt, xzp, wshape, attrs, per_channel, rng):
    """DequantizeLinear(x) -> Conv(DequantizeLinear(int8 weights), float bias) -> QuantizeLinear, as QDQ models
    write a quantised convolution (the twin fuses it into one integer convolution)."""
    mch = wshape[0]
    w = _ints(rng, S8, wshape)
    ws = ((0.5 + rng.random(mch)) * 4e-3).astype(np.float32) if per_channel else np.float32(3e-3)
    arr = numpy_helper.from_array
    inits = [arr(np.float32(0.02), "xs"), arr(xt(xzp), "xz"), arr(w, "w"), arr(np.asarray(ws), "ws"),
             arr(np.zeros(np.shape(ws), np.int8), "wz"), arr((rng.standard_normal(mch) * 0.3).astype(np.float32), "b"),
             arr(np.float32(0.05), "ys"), arr(xt(xzp), "yz")]
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], **({"axis": 0} if per_channel else {})),
             helper.make_node("Conv", ["xf", "wf", "b"], ["yf"], **attrs),
             helper.make_node("QuantizeLinear", ["yf", "ys", "yz"], ["y"])]
    return nodes, inits


def check_qdq_block(session, xt, xzp, xshape, wshape, attrs, per_channel, rng):
    """Runs the fused DQ -> Conv -> Q block on random integers and checks it against onnx.reference: the block sums
    exactly where the reference's float Conv rounds its partial sums, so a value within float rounding of a half-way
    point may land one step apart (docs/operators.md), never more, and rarely. Returns (x, initializers, output)."""
    nodes, inits = _qdq_block(xt, xzp, wshape, attrs, per_channel, rng)
    m = graph_model(nodes, [value_info("x", QT[xt], list(xshape))], [value_info("y", QT[xt])], opset=21,
                    initializers=inits)
    x = _ints(rng, xt, xshape)
    want = reference(m, [x])[0]
    got = run_once(session, m, [x])[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
    assert diff.max() <= 1
    assert np.mean(diff) < 0.01
    return x, inits, got


@pytest.mark.parametrize("conv", [c for c in CONVS if int(np.prod(c[1][1:])) >= 32], ids=lambda c: str(c[1]))
@pytest.mark.parametrize("xt,xzp", [(U8, 0), (U8, 255), (U8, 128), (S8, -128), (S8, 5)])
@pytest.mark.parametrize("per_channel", [True, False], ids=["per-channel", "per-tensor"])
def test_qdq_conv_block(session, conv, xt, xzp, per_channel):
    xshape, wshape, attrs = conv
    rng = np.random.default_rng(int(np.prod(wshape)) + xzp)
    x, inits, got = check_qdq_block(session, xt, xzp, xshape, wshape, attrs, per_channel, rng)
    # Exactly the documented rule: the exact integer sum (ConvInteger's, from the reference) times x_scale *
    # w_scale[m] plus the bias in double, rounded once to float, then QuantizeLinear's float steps.
    init = {i.name: numpy_helper.to_array(i) for i in inits}
    ci, feeds = _model("ConvInteger", ["x", "w", "xz"], [x, init["w"], init["xz"]], ("w", "xz"), TensorProto.INT32,
                       attrs)
    acc = reference(ci, feeds)[0].astype(np.float64)
    shape = (1, -1) + (1,) * (acc.ndim - 2)
    xw = np.float64(init["xs"]) * np.broadcast_to(init["ws"], (wshape[0],)).astype(np.float64)
    v = (acc * xw.reshape(shape) + init["b"].astype(np.float64).reshape(shape)).astype(np.float32)
    info = np.iinfo(xt)
    zp = np.float32(xzp)
    q = np.clip(v / init["ys"], np.float32(info.min) - zp, np.float32(info.max) - zp)
    np.testing.assert_array_equal(got, (np.rint(q) + zp).astype(xt))


@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_fallback_instruction_sets_pass_the_same_checks(isa):
    rerun_file_with_instruction_set(__file__, isa)
