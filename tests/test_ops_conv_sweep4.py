"""Shapes from the "conv sweep 4" benchmark family (benchmarks/bench_ops.py): depthwise Conv at stride 2 (the
AVX-512 kernel that reads the input planes directly: 3 / 5 / 7 taps, symmetric and asymmetric pads, rows shorter and
longer than a 16-lane chunk, bias, a fused Relu, weights as an input, several images), and the ConvTranspose /
Conv1d / Conv3d shapes of upsampling decoders, vocoders and TTS models. Each is checked against onnx.reference at
small sizes."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx_cases import check_twin, conv_model, reference, run_twin  # noqa: E402

RNG = np.random.default_rng(4848)


# (x shape, kernel, pads): output rows of 8 to 40 columns (one and several chunks, a partial last one), odd input
# sizes, pads 0 / asymmetric, and maps small enough for the channels-last path.
_DW_S2 = [
    ((2, 24, 32, 32), 3, (1, 1, 1, 1)),
    ((1, 16, 33, 35), 3, (1, 1, 1, 1)),
    ((1, 8, 40, 81), 5, (2, 2, 2, 2)),
    ((1, 8, 28, 28), 5, (1, 2, 2, 1)),
    ((1, 8, 20, 50), 7, (3, 3, 3, 3)),
    ((1, 16, 34, 34), 3, (0, 0, 0, 0)),
    ((1, 8, 16, 17), 3, (0, 1, 1, 0)),
    ((1, 32, 14, 14), 5, (2, 2, 2, 2)),
    ((1, 16, 9, 9), 3, (1, 1, 1, 1)),
]


@pytest.mark.parametrize("xs,k,pads", _DW_S2)
@pytest.mark.parametrize("bias,relu,w_input", [(False, False, False), (True, True, False), (True, False, True)])
def test_depthwise_stride2(xs, k, pads, bias, relu, w_input):
    c = xs[1]
    x = RNG.standard_normal(xs).astype(np.float32)
    w = RNG.standard_normal((c, 1, k, k)).astype(np.float32)
    b = RNG.standard_normal(c).astype(np.float32) if bias else None
    got = check_twin(*conv_model("Conv", x, w, b, w_input=w_input, relu=relu, kernel_shape=[k, k], strides=[2, 2],
                         pads=list(pads), group=c))[0]
    if relu:
        assert (got >= 0).all() and (got > 0).any()


def test_depthwise_stride2_nan_and_channel_independence():
    """A NaN in one channel's input reaches only that channel's outputs in its window (lanes past the row's end and
    the other channels read no garbage)."""
    x = RNG.standard_normal((1, 8, 34, 36)).astype(np.float32)
    x[0, 3, 11, 21] = np.nan
    w = RNG.standard_normal((8, 1, 3, 3)).astype(np.float32)
    got = check_twin(*conv_model("Conv", x, w, kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4, group=8))[0]
    nan = np.isnan(got)
    assert nan[0, 3, 5:7, 10:12].all() and nan.sum() == 4  # odd row and column: rows 5-6 x columns 10-11


# (op, x shape, w shape, attrs)
_UPSAMPLE = [
    ("ConvTranspose", (1, 16, 8, 8), (16, 8, 2, 2), dict(kernel_shape=[2, 2], strides=[2, 2])),
    ("ConvTranspose", (2, 16, 7, 9), (16, 8, 4, 4), dict(kernel_shape=[4, 4], strides=[2, 2], pads=[1] * 4)),
    ("ConvTranspose", (1, 8, 9, 9), (8, 12, 3, 3),
     dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4, output_padding=[1, 1])),
    ("ConvTranspose", (1, 16, 8, 8), (16, 1, 4, 4), dict(kernel_shape=[4, 4], strides=[2, 2], pads=[1] * 4, group=16)),
    ("ConvTranspose", (1, 16, 6, 6), (16, 4, 2, 2), dict(kernel_shape=[2, 2], strides=[2, 2], group=4)),
    ("ConvTranspose", (1, 32, 20), (32, 16, 16), dict(kernel_shape=[16], strides=[8], pads=[4, 4])),
    ("ConvTranspose", (1, 16, 50), (16, 8, 4), dict(kernel_shape=[4], strides=[2], pads=[1, 1])),
    ("Conv", (1, 24, 40), (32, 24, 1), dict(kernel_shape=[1])),
    ("Conv", (1, 24, 40), (32, 24, 3), dict(kernel_shape=[3], pads=[1, 1])),
    ("Conv", (1, 20, 33), (24, 20, 5), dict(kernel_shape=[5], pads=[2, 2])),
    ("Conv", (1, 4, 4, 10, 10), (6, 4, 3, 3, 3), dict(kernel_shape=[3, 3, 3], pads=[1] * 6)),
]


@pytest.mark.parametrize("op,xs,ws,attrs", _UPSAMPLE)
def test_upsampling_and_sequence_shapes(op, xs, ws, attrs):
    x = RNG.standard_normal(xs).astype(np.float32)
    w = RNG.standard_normal(ws).astype(np.float32)
    group = attrs.get("group", 1)
    b = RNG.standard_normal(ws[1] * group if op == "ConvTranspose" else ws[0]).astype(np.float32)
    if op == "Conv" or group == 1:
        check_twin(*conv_model(op, x, w, b, **attrs))
        return
    # onnx.reference's grouped ConvTranspose fails on some shapes (a broadcast error) or adds the bias per group
    # wrongly: the oracle is one ungrouped ConvTranspose per group, concatenated, plus the bias
    got = run_twin(*conv_model(op, x, w, b, **attrs))[0]
    ungrouped = {k: v for k, v in attrs.items() if k != "group"}
    cg = xs[1] // group
    parts = []
    for g in range(group):
        part, feeds = conv_model(op, x[:, g * cg:(g + 1) * cg].copy(), w[g * cg:(g + 1) * cg].copy(), **ungrouped)
        parts.append(reference(part, [feeds["x"]])[0])
    want = np.concatenate(parts, axis=1) + b.reshape((1, -1) + (1,) * (x.ndim - 2))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
