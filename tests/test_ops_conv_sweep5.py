"""Shapes from the "conv sweep 5" benchmark family (benchmarks/bench_ops.py): dilated Conv on small maps through the
channels-last path (positions x output-channel panels): 2-D and 3-D, dilations 2 to 4 (and unequal per axis),
symmetric / asymmetric / zero pads, strides with dilation, odd map sizes, bias or none, a fused Relu, weights as an
input, several images, channel counts that are not a multiple of the panel width; and depthwise 3x3 / 5x5 / 7x7 on
small maps at stride 1 and 2 through the AVX-512 channels-last kernel (channel counts with a partial last 16-lane
block, outputs rows of 1 to 9 columns, symmetric / asymmetric / zero / large pads). Each is checked against
onnx.reference."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx_cases import check_twin, conv_model  # noqa: E402

RNG = np.random.default_rng(4949)


# (x shape, w shape, dilations, pads, strides)
_DILATED = [
    ((1, 64, 7, 7), (64, 64, 3, 3), (2, 2), (2, 2, 2, 2), (1, 1)),
    ((1, 64, 7, 7), (64, 64, 3, 3), (4, 4), (4, 4, 4, 4), (1, 1)),
    ((2, 32, 8, 8), (48, 32, 3, 3), (2, 2), (2, 2, 2, 2), (1, 1)),
    ((1, 24, 9, 11), (40, 24, 3, 3), (2, 3), (1, 3, 2, 0), (1, 1)),
    ((1, 16, 14, 13), (33, 16, 3, 3), (4, 4), (4, 4, 4, 4), (1, 1)),
    ((3, 8, 6, 6), (16, 8, 3, 3), (2, 2), (0, 0, 0, 0), (1, 1)),
    ((1, 20, 13, 13), (24, 20, 3, 3), (2, 2), (2, 2, 2, 2), (2, 2)),
    ((1, 16, 10, 12), (17, 16, 5, 3), (2, 3), (4, 3, 4, 3), (1, 2)),
    ((1, 96, 5, 5), (80, 96, 3, 3), (3, 3), (3, 3, 3, 3), (1, 1)),
    ((1, 16, 28, 28), (16, 16, 3, 3), (4, 4), (4, 4, 4, 4), (1, 1)),
]


@pytest.mark.parametrize("xs,ws,dil,pads,strides", _DILATED)
@pytest.mark.parametrize("bias,relu,w_input", [(False, False, False), (True, True, False), (True, False, True)])
def test_dilated_small_maps(xs, ws, dil, pads, strides, bias, relu, w_input):
    check_dilated_conv(xs, ws, dil, pads, strides, bias, relu, w_input)


def check_dilated_conv(xs, ws, dil, pads, strides, bias, relu, w_input):
    """A dilated Conv of these shapes against onnx.reference (check_twin); its outputs must not be all one sign."""
    x = RNG.standard_normal(xs).astype(np.float32)
    w = (RNG.standard_normal(ws) / np.sqrt(ws[1] * ws[2] * ws[3])).astype(np.float32)
    b = RNG.standard_normal(ws[0]).astype(np.float32) if bias else None
    got = check_twin(*conv_model("Conv", x, w, b, w_input=w_input, relu=relu, kernel_shape=list(ws[2:]),
                                 dilations=list(dil), pads=list(pads), strides=list(strides)))[0]
    if relu:
        assert (got >= 0).all() and (got > 0).any()
    else:
        assert (got < 0).any()


# Conv3d with a dilation (the 3-D form of the same path).
@pytest.mark.parametrize("xs,dil,pads", [((1, 16, 5, 6, 7), (1, 2, 2), [0, 2, 2, 0, 2, 2]),
                                         ((2, 8, 6, 6, 6), (2, 2, 2), [2] * 6),
                                         ((1, 12, 4, 9, 8), (2, 1, 3), [1, 0, 3, 1, 1, 3])])
@pytest.mark.parametrize("bias", [False, True])
def test_dilated_conv3d(xs, dil, pads, bias):
    ws = (20, xs[1], 3, 3, 3)
    x = RNG.standard_normal(xs).astype(np.float32)
    w = (RNG.standard_normal(ws) / np.sqrt(xs[1] * 27)).astype(np.float32)
    b = RNG.standard_normal(ws[0]).astype(np.float32) if bias else None
    check_twin(*conv_model("Conv", x, w, b, kernel_shape=[3, 3, 3], dilations=list(dil), pads=pads))


# A grouped dilated conv stays on its own path; still right against the reference.
def test_dilated_grouped():
    x = RNG.standard_normal((1, 32, 7, 7)).astype(np.float32)
    w = (RNG.standard_normal((32, 16, 3, 3)) / 12).astype(np.float32)
    check_twin(*conv_model("Conv", x, w, kernel_shape=[3, 3], dilations=[2, 2], pads=[2] * 4, group=2))


# (x shape, kernel, stride, pads): maps up to 28x28 (the small-map rule and the larger maps the kernel takes).
_DW = [
    ((1, 768, 7, 7), 7, 1, (3, 3, 3, 3)),
    ((2, 40, 7, 7), 7, 1, (3, 3, 3, 3)),
    ((1, 37, 8, 6), 5, 1, (2, 2, 2, 2)),
    ((1, 24, 5, 9), 3, 1, (1, 0, 0, 1)),
    ((1, 17, 6, 5), 5, 1, (0, 0, 0, 0)),
    ((1, 16, 3, 3), 7, 1, (3, 3, 3, 3)),
    ((1, 672, 14, 14), 5, 2, (2, 2, 2, 2)),
    ((2, 33, 13, 11), 5, 2, (2, 1, 1, 2)),
    ((1, 48, 15, 15), 3, 2, (1, 1, 1, 1)),
    ((1, 20, 9, 9), 7, 2, (3, 3, 3, 3)),
    ((1, 16, 6, 6), 5, 2, (0, 0, 0, 0)),
    ((1, 16, 7, 7), 3, 1, (4, 4, 4, 4)),
    ((1, 40, 14, 14), 7, 1, (3, 3, 3, 3)),
    ((1, 24, 28, 28), 5, 2, (2, 2, 2, 2)),
    ((2, 19, 27, 29), 3, 1, (1, 1, 1, 1)),
    ((1, 16, 25, 23), 7, 2, (3, 2, 1, 3)),
]


@pytest.mark.parametrize("xs,k,s,pads", _DW)
@pytest.mark.parametrize("bias,relu,w_input", [(False, False, False), (True, True, False), (True, False, True)])
def test_depthwise_channels_last(xs, k, s, pads, bias, relu, w_input):
    c = xs[1]
    x = RNG.standard_normal(xs).astype(np.float32)
    w = RNG.standard_normal((c, 1, k, k)).astype(np.float32)
    b = RNG.standard_normal(c).astype(np.float32) if bias else None
    got = check_twin(*conv_model("Conv", x, w, b, w_input=w_input, relu=relu, kernel_shape=[k, k], strides=[s, s],
                                 pads=list(pads), group=c))[0]
    if relu:
        assert (got >= 0).all() and (got > 0).any()
