"""Graph patterns of further model families (segmentation heads, UNets, RNNs, audio, recommendation, decoders with a
cache, float16 exports), rebuilt with onnx.helper (no torch needed) and checked against onnx.reference and the twin's
own float32 path: a float16 UNet's bilinear 2x upsampling (Resize on the last two axes of a float16 tensor), which
runs in the float32 plane kernel after widening each plane, and float16 NaN, which Resize used to clip to -65504."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
import geasync as ga  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from onnx_cases import check_runs  # noqa: E402

H = TensorProto.FLOAT16
RNG = np.random.default_rng(2048)


def _resize_model(dtype, mode, ctm, in_shape, sizes, opset=17, cubic_a=-0.75):
    attrs = dict(mode=mode, coordinate_transformation_mode=ctm)
    if mode == "cubic":
        attrs["cubic_coeff_a"] = cubic_a
    node = helper.make_node("Resize", ["x", "", "", "sz"], ["y"], **attrs)
    graph = helper.make_graph([node], "model", [helper.make_tensor_value_info("x", dtype, ["N", *in_shape[1:]])],
                              [helper.make_tensor_value_info("y", dtype, None)],
                              initializer=[helper.make_tensor("sz", TensorProto.INT64, [len(sizes)], sizes)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run(model, x):
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        out = s.run_graph(1, [x])
        y = out[0].numpy().copy()
        del out
    return y


# (mode, coordinate transformation, input shape, output sizes): both axes, one axis only, odd ratios, down-sampling.
RESIZES = [
    ("linear", "half_pixel", (2, 16, 8, 8), (2, 16, 16, 16)),         # the UNet's 2x bilinear upsampling
    ("linear", "pytorch_half_pixel", (1, 3, 5, 7), (1, 3, 11, 4)),    # up along H, down along W
    ("linear", "align_corners", (2, 2, 6, 9), (2, 2, 6, 20)),         # W only (rows copied)
    ("linear", "asymmetric", (1, 4, 9, 3), (1, 4, 4, 3)),             # H only (columns copied)
    ("cubic", "half_pixel", (1, 2, 7, 6), (1, 2, 13, 17)),            # four taps per axis
    ("linear", "half_pixel", (3, 5, 4), (3, 10, 9)),                  # rank 3
]


@pytest.mark.parametrize("mode,ctm,in_shape,sizes", RESIZES)
def test_float16_resize_of_the_last_two_axes(mode, ctm, in_shape, sizes):
    """float16 equals the twin's float32 result rounded to float16 (both compute in double: the same rounding
    chain), and agrees with onnx.reference within float16 precision, at two batch sizes."""
    x32 = RNG.uniform(-4, 4, in_shape).astype(np.float32)
    x16 = x32.astype(np.float16)
    y16 = _run(_resize_model(H, mode, ctm, in_shape, list(sizes)), x16)
    y32 = _run(_resize_model(TensorProto.FLOAT, mode, ctm, in_shape, list(sizes)), x16.astype(np.float32))
    assert y16.dtype == np.float16 and y16.shape == tuple(sizes)
    np.testing.assert_array_equal(y16.view(np.uint16), y32.astype(np.float16).view(np.uint16))
    model = _resize_model(H, mode, ctm, in_shape, list(sizes))
    big = (in_shape[0] + 2,) + tuple(in_shape[1:])
    check_runs(model, [[x16], [RNG.uniform(-4, 4, big).astype(np.float16)]], rtol=2e-3, atol=2e-3)


def test_float16_resize_saturates_and_keeps_specials():
    """Cubic overshoot past the float16 range clips to +-65504 (not inf), and a NaN input gives NaN outputs where
    float32 and onnx.reference have them (float16 used to clip NaN to -65504)."""
    x = np.full((1, 1, 4, 6), 60000, np.float16)
    x[..., ::2] = -60000  # alternating extremes: the cubic kernel's negative lobes overshoot
    y = _run(_resize_model(H, "cubic", "half_pixel", x.shape, [1, 1, 7, 11]), x)
    assert np.all(np.isfinite(y)) and np.max(np.abs(y.astype(np.float32))) == 65504
    y32 = _run(_resize_model(TensorProto.FLOAT, "cubic", "half_pixel", x.shape, [1, 1, 7, 11]), x.astype(np.float32))
    np.testing.assert_array_equal(y, np.clip(y32, -65504, 65504).astype(np.float16))
    z = RNG.uniform(-1, 1, (1, 2, 4, 4)).astype(np.float16)
    z[0, 0, 1, 2] = np.nan
    got = _run(_resize_model(H, "linear", "half_pixel", z.shape, [1, 2, 8, 8]), z)
    want = _run(_resize_model(TensorProto.FLOAT, "linear", "half_pixel", z.shape, [1, 2, 8, 8]), z.astype(np.float32))
    assert np.all(np.isfinite(got[0, 1]))  # the other plane is untouched by the NaN
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got).any()
    check_runs(_resize_model(H, "linear", "half_pixel", z.shape, [1, 2, 8, 8]), [[z]], rtol=2e-3, atol=2e-3)
