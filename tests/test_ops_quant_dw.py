"""Depthwise quantised convolutions (one input and one output channel per group), which the twin sums directly from
the padded 8-bit image (two taps a step, int16 products summed exactly in int32) instead of through a GEMM:
ConvInteger and QLinearConv against onnx.reference (and the DequantizeLinear -> Conv -> QuantizeLinear block).
3x3 and 5x5 kernels, strides 1, 2 and 3 (the last element by element), pads, dilations, row widths off every
multiple of 8 and 16 (the vector loops' tails), odd channel counts, batches, per-channel scales and zero points,
input zero points at both ends of the range and in between. Integer outputs must be exact (the QDQ block: within
one step, as documented). The file is rerun with the vector kernels capped at AVX2 and at the
baseline (GEASYNC_TWIN_SIMD), where the scalar loop runs."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_cases import reference, rerun_file_with_instruction_set, run_once
from test_ops_quant_conv_vnni import QT, S8, U8, _ints, _model, check_qdq_block

from onnx import TensorProto

DW = [  # (x shape, kernel, attributes); W is (C, 1, *kernel), group C
    ((1, 3, 7, 21), (3, 3), {"pads": [1, 1, 1, 1]}),  # 21 wide: a 16-block and a tail
    ((2, 5, 9, 16), (3, 3), {"pads": [1, 1, 1, 1]}),  # batch 2, exactly one 16-block
    ((1, 7, 12, 35), (3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),  # stride 2: 8-blocks and a tail
    ((1, 4, 11, 40), (3, 3), {"pads": [0, 1, 1, 0], "strides": [2, 2]}),  # asymmetric pads
    ((1, 9, 10, 37), (5, 5), {"pads": [2, 2, 2, 2]}),  # 5x5: an odd tap count (a zero-weight pad tap)
    ((2, 3, 13, 29), (5, 5), {"pads": [2, 2, 2, 2], "strides": [2, 2]}),
    ((1, 6, 12, 33), (3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
    ((1, 5, 14, 30), (3, 3), {"strides": [3, 3], "pads": [1, 1, 1, 1]}),  # stride 3: the scalar loop
    ((1, 3, 8, 19), (3, 3), {"strides": [1, 2]}),  # no pads, stride 2 along the row only
    ((1, 3, 5, 6), (1, 1), {}),  # one tap
    ((2, 5, 41), (3,), {"pads": [1, 1]}),  # 1-D
    ((1, 4, 3, 3), (3, 3), {"pads": [1, 1, 1, 1]}),  # rows narrower than one vector step
]
IDS = [f"{'x'.join(map(str, x))}-k{'x'.join(map(str, k))}-{sorted(a.items())}" for x, k, a in DW]


def _wshape(xshape, kernel):
    return (xshape[1], 1) + tuple(kernel)


def _zero_points(dtype):
    return [-128, 127, 0, 5] if dtype == S8 else [0, 255, 128, 77]


@pytest.mark.parametrize("conv", DW, ids=IDS)
@pytest.mark.parametrize("types", [(U8, S8), (S8, S8), (U8, U8)], ids=str)
def test_depthwise_conv_integer(session, conv, types):
    xshape, kernel, attrs = conv
    wshape = _wshape(xshape, kernel)
    xt, wt = types
    rng = np.random.default_rng(len(xshape) * 100 + xshape[-1])
    x, w = _ints(rng, xt, xshape), _ints(rng, wt, wshape)
    attrs = dict(attrs, group=xshape[1])
    for i, xzp in enumerate(_zero_points(xt)):
        # per channel weight zero points (the reference expands them for 2-D kernels only)
        wzp = _ints(rng, wt, (wshape[0],)) if len(wshape) == 4 and i % 2 == 0 else _ints(rng, wt, ())
        for const in [("w", "wz"), ()]:
            m, feeds = _model("ConvInteger", ["x", "w", "xz", "wz"], [x, w, xt(xzp), wzp], const, TensorProto.INT32,
                              attrs)
            want = reference(m, feeds)[0]
            got = run_once(session, m, feeds)[0]
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("conv", DW, ids=IDS)
@pytest.mark.parametrize("types", [(U8, S8, U8), (S8, S8, S8), (U8, U8, S8)], ids=str)
def test_depthwise_qlinear_conv(session, conv, types):
    xshape, kernel, attrs = conv
    wshape = _wshape(xshape, kernel)
    xt, wt, yt = types
    rng = np.random.default_rng(len(xshape) * 100 + xshape[-1] + 7)
    x, w = _ints(rng, xt, xshape), _ints(rng, wt, wshape)
    attrs = dict(attrs, group=xshape[1])
    mch, kk = wshape[0], int(np.prod(wshape[1:]))
    ys = np.float32(1.0 / (64.0 * np.sqrt(kk)))  # outputs over the whole range, some saturated
    per = (0.5 + rng.random(mch)).astype(np.float32) if len(wshape) == 4 else np.float32(0.7)
    bias = rng.integers(-5000, 5000, mch).astype(np.int32)
    for xzp in _zero_points(xt):
        for const, ws, wzp, b in [(("w", "ws", "wz", "b"), per, np.zeros(mch if len(wshape) == 4 else (), wt), bias),
                                  ((), np.float32(0.9), _ints(rng, wt, ()), None)]:
            vals = [x, np.float32(0.5), xt(xzp), w, ws, wzp, ys, _ints(rng, yt, ()), b]
            m, feeds = _model("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], vals, const,
                              QT[yt], attrs)
            want = reference(m, feeds)[0]
            got = run_once(session, m, feeds)[0]
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("conv", [c for c in DW if len(c[0]) == 4], ids=lambda c: f"{c[0]}-{c[1]}")
@pytest.mark.parametrize("xt,xzp", [(U8, 0), (U8, 255), (U8, 128), (S8, -128), (S8, 5)])
@pytest.mark.parametrize("per_channel", [True, False], ids=["per-channel", "per-tensor"])
def test_depthwise_qdq_conv_block(session, conv, xt, xzp, per_channel):
    """DequantizeLinear -> depthwise Conv -> QuantizeLinear (which the twin keeps as a float Conv: faster than the
    integer path on these short sums) within one step of the reference, rarely."""
    xshape, kernel, attrs = conv
    wshape = _wshape(xshape, kernel)
    attrs = dict(attrs, group=xshape[1])
    rng = np.random.default_rng(xshape[-1] + abs(xzp))
    check_qdq_block(session, xt, xzp, xshape, wshape, attrs, per_channel, rng)


@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_fallback_instruction_sets_pass_the_same_checks(isa):
    rerun_file_with_instruction_set(__file__, isa)
