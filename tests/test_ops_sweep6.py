"""Shapes from the "sweep 6" benchmark family (benchmarks/bench_ops.py): dilated Conv on small maps whose taps
partly read padding, through the channels-last path by regions (each run of outputs multiplies only the taps inside
the input): dilations 2 to 8, pads bigger than the kernel (outputs that read padding alone), 1x1 and 1xN maps,
strides, asymmetric pads, several images, odd channel counts, channel counts large enough that the K chunks of the
packed weights split a tap's slice, 3-D windows; each checked against onnx.reference."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx_cases import check_twin, conv_model  # noqa: E402
from test_ops_conv_sweep5 import check_dilated_conv  # noqa: E402

RNG = np.random.default_rng(5050)


# (x shape, w shape, dilations, pads, strides)
_REGIONS = [
    ((1, 64, 7, 7), (64, 64, 3, 3), (4, 4), (4, 4, 4, 4), (1, 1)),
    ((1, 64, 7, 7), (64, 64, 3, 3), (2, 2), (2, 2, 2, 2), (1, 1)),
    ((2, 19, 7, 7), (21, 19, 3, 3), (4, 4), (4, 4, 4, 4), (1, 1)),
    ((1, 16, 1, 1), (24, 16, 3, 3), (2, 2), (2, 2, 2, 2), (1, 1)),
    ((3, 9, 1, 1), (17, 9, 3, 3), (6, 6), (6, 6, 6, 6), (1, 1)),
    ((1, 16, 1, 9), (16, 16, 3, 3), (3, 3), (3, 3, 3, 3), (1, 1)),
    ((1, 24, 4, 4), (32, 24, 3, 3), (8, 8), (8, 8, 8, 8), (1, 1)),
    ((1, 16, 5, 5), (16, 16, 3, 3), (2, 2), (7, 7, 7, 7), (1, 1)),
    ((1, 16, 5, 6), (20, 16, 3, 3), (2, 3), (9, 1, 0, 8), (1, 1)),
    ((1, 33, 9, 9), (35, 33, 3, 3), (4, 4), (4, 4, 4, 4), (2, 2)),
    ((1, 16, 12, 10), (16, 16, 5, 3), (3, 2), (6, 2, 6, 2), (1, 2)),
    ((2, 200, 16, 16), (40, 200, 3, 3), (4, 4), (4, 4, 4, 4), (1, 1)),
    ((1, 130, 8, 8), (64, 130, 3, 3), (4, 4), (4, 4, 4, 4), (1, 1)),
    ((1, 16, 14, 14), (16, 16, 3, 3), (6, 6), (6, 6, 6, 6), (1, 1)),
]


@pytest.mark.parametrize("xs,ws,dil,pads,strides", _REGIONS)
@pytest.mark.parametrize("bias,relu,w_input", [(False, False, False), (True, True, False), (True, False, True)])
def test_dilated_regions(xs, ws, dil, pads, strides, bias, relu, w_input):
    check_dilated_conv(xs, ws, dil, pads, strides, bias, relu, w_input)


# 1-D and 3-D windows, and the outputs that see padding only equal to the bias.
@pytest.mark.parametrize("xs,ws,dil,pads", [
    ((2, 16, 9), (24, 16, 3), (4,), (4, 4)),
    ((1, 16, 3, 5, 5), (20, 16, 3, 3, 3), (2, 2, 2), (2, 2, 2, 2, 2, 2)),
    ((1, 12, 2, 6, 5), (16, 12, 3, 3, 3), (1, 3, 3), (1, 3, 3, 1, 3, 3)),
])
@pytest.mark.parametrize("bias", [False, True])
def test_dilated_regions_1d_3d(xs, ws, dil, pads, bias):
    x = RNG.standard_normal(xs).astype(np.float32)
    w = (RNG.standard_normal(ws) / np.sqrt(np.prod(ws[1:]))).astype(np.float32)
    b = RNG.standard_normal(ws[0]).astype(np.float32) if bias else None
    check_twin(*conv_model("Conv", x, w, b, kernel_shape=list(ws[2:]), dilations=list(dil), pads=list(pads)))


def test_padding_only_outputs_are_the_bias():
    x = RNG.standard_normal((1, 16, 3, 3)).astype(np.float32)
    w = (RNG.standard_normal((16, 16, 3, 3)) / 12).astype(np.float32)
    b = RNG.standard_normal(16).astype(np.float32)
    # pads 10: output (0, 0) reads rows / columns -10, -8, -6 only
    got = check_twin(*conv_model("Conv", x, w, b, kernel_shape=[3, 3], dilations=[2, 2], pads=[10] * 4))[0]
    np.testing.assert_array_equal(got[0, :, 0, 0], b)
