"""Shapes from the "conv sweep 3" benchmark family (benchmarks/bench_ops.py) whose kernels changed: dilated 2-D and
1-D convs on the direct kernel (the taps read the padded input d apart; DeepLab / ASPP 3x3 dilation 2 and 4, WaveNet /
TCN Conv1d k 2 / 3), with bias, groups, a fused Relu, asymmetric pads, several images, weights as an input, and small
maps where im2col stays. Each is checked against onnx.reference at small sizes."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx_cases import check_twin, conv_model, run_twin  # noqa: E402

RNG = np.random.default_rng(4711)


# (x shape, M, kernel, dilations, pads, group): 2-D maps from 5x5 to 20x20 (flat and row layouts, maps that fall
# back to im2col), 1-D lengths past a 16-lane chunk, dilation unequal per axis, asymmetric pads.
_DILATED = [
    ((1, 16, 7, 7), 16, (3, 3), (2, 2), (2, 2, 2, 2), 1),
    ((1, 16, 7, 7), 8, (3, 3), (4, 4), (4, 4, 4, 4), 1),
    ((3, 12, 14, 14), 16, (3, 3), (2, 2), (2, 2, 2, 2), 1),
    ((2, 8, 14, 14), 8, (3, 3), (4, 4), (4, 4, 4, 4), 1),
    ((1, 8, 20, 19), 12, (3, 2), (2, 3), (1, 0, 2, 3), 1),
    ((1, 8, 9, 21), 8, (3, 3), (1, 3), (0, 3, 1, 3), 2),
    ((1, 8, 5, 5), 8, (3, 3), (2, 2), (0, 0, 0, 0), 1),
    ((1, 16, 300), 16, (2,), (16,), (16, 0), 1),
    ((2, 12, 133), 20, (3,), (5,), (10, 0), 1),
    ((1, 24, 64), 24, (3,), (8,), (8, 8), 4),
]


@pytest.mark.parametrize("xs,m,k,d,pads,group", _DILATED)
@pytest.mark.parametrize("bias", [False, True])
def test_dilated_conv(xs, m, k, d, pads, group, bias):
    x = RNG.standard_normal(xs).astype(np.float32)
    w = RNG.standard_normal((m, xs[1] // group) + k).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32) if bias else None
    got = check_twin(*conv_model("Conv", x, w, b, kernel_shape=list(k), dilations=list(d), pads=list(pads),
                                 group=group))
    # a causal 1-D conv: output t reads inputs up to t only, so changing the last input changes the last output alone
    if len(xs) == 3 and pads[1] == 0:
        x2 = x.copy()
        x2[..., -1] += 1.0
        got2 = run_twin(*conv_model("Conv", x2, w, b, kernel_shape=list(k), dilations=list(d), pads=list(pads),
                                     group=group))
        np.testing.assert_array_equal(got2[0][..., :-1], got[0][..., :-1])
        assert not np.array_equal(got2[0][..., -1], got[0][..., -1])


@pytest.mark.parametrize("w_input", [False, True])
def test_dilated_conv_relu_and_weight_input(w_input):
    x = RNG.standard_normal((2, 16, 14, 14)).astype(np.float32)
    w = RNG.standard_normal((24, 16, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(24).astype(np.float32)
    got = check_twin(*conv_model("Conv", x, w, b, w_input=w_input, relu=True, kernel_shape=[3, 3], dilations=[2, 2],
                              pads=[2, 2, 2, 2]))
    assert (got[0] >= 0).all() and (got[0] == 0).any()


def test_dilated_conv_nan_stays_local():
    # a NaN input reaches exactly the outputs whose taps read it: dilation 2 at 3x3 -> a 3x3 grid 2 apart
    x = np.zeros((1, 8, 12, 12), np.float32)
    x[0, 3, 6, 6] = np.nan
    w = np.ones((8, 8, 3, 3), np.float32)
    got = run_twin(*conv_model("Conv", x, w, kernel_shape=[3, 3], dilations=[2, 2], pads=[2, 2, 2, 2]))[0]
    nan_at = {(int(r), int(c)) for r, c in zip(*np.nonzero(np.isnan(got[0, 0])), strict=True)}
    assert nan_at == {(6 + a, 6 + b) for a in (-2, 0, 2) for b in (-2, 0, 2)}


# Depthwise at stride 1 with 3 / 5 / 7 taps per row (AVX-512: aligned rows, the kw windows made in registers):
# (x shape, kernel, pads); widths below, at and past 16 lanes, heights that leave blocks of 8, 4 and 1 rows.
_DEPTHWISE = [
    ((1, 8, 14, 14), (5, 5), (2, 2, 2, 2)),
    ((2, 4, 15, 17), (7, 7), (3, 3, 3, 3)),
    ((1, 3, 13, 33), (3, 3), (1, 1, 1, 1)),
    ((1, 5, 9, 16), (7, 7), (1, 3, 2, 0)),
    ((1, 6, 21, 7), (5, 5), (0, 2, 0, 2)),
    ((1, 4, 12, 40), (3, 5), (1, 2, 1, 2)),
]


@pytest.mark.parametrize("xs,k,pads", _DEPTHWISE)
@pytest.mark.parametrize("bias", [False, True])
def test_depthwise_stride1(xs, k, pads, bias):
    c = xs[1]
    x = RNG.standard_normal(xs).astype(np.float32)
    w = RNG.standard_normal((c, 1) + k).astype(np.float32)
    b = RNG.standard_normal(c).astype(np.float32) if bias else None
    got = check_twin(*conv_model("Conv", x, w, b, kernel_shape=list(k), pads=list(pads), group=c))
    # channels stay apart: zeroing one channel's input leaves the other channels' outputs as they were
    x2 = x.copy()
    x2[:, 0] = 0
    got2 = run_twin(*conv_model("Conv", x2, w, b, kernel_shape=list(k), pads=list(pads), group=c))
    np.testing.assert_array_equal(got2[0][:, 1:], got[0][:, 1:])


@pytest.mark.parametrize("w_input", [False, True])
def test_depthwise_7x7_relu_and_weight_input(w_input):
    x = RNG.standard_normal((1, 16, 20, 20)).astype(np.float32)
    w = RNG.standard_normal((16, 1, 7, 7)).astype(np.float32)
    b = RNG.standard_normal(16).astype(np.float32)
    got = check_twin(*conv_model("Conv", x, w, b, w_input=w_input, relu=True, kernel_shape=[7, 7], pads=[3, 3, 3, 3],
                              group=16))
    assert (got[0] >= 0).all() and (got[0] == 0).any()
