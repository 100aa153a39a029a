"""Conv3d run as one 2-D conv over (image, output depth) with the (channel, depth tap) pairs as input channels, and
grouped 2-D convs: odd sizes, symmetric / asymmetric / zero pads, strides and dilations per axis (depth too), kernels
deeper than the input, 1xkxk and kx1x1 kernels, bias, a fused Relu / BatchNormalization, weights as an input, several
images, groups, depthwise. Each against onnx.reference through the public API (ga.Graph.from_onnx, Session)."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx_cases import check_twin, conv_model, run_twin  # noqa: E402

RNG = np.random.default_rng(5656)


def _conv(xs, ws, bias, **attrs):
    x = RNG.standard_normal(xs).astype(np.float32)
    fan_in = int(np.prod(ws[1:]))
    w = (RNG.standard_normal(ws) / np.sqrt(fan_in)).astype(np.float32)
    b = RNG.standard_normal(ws[0]).astype(np.float32) if bias else None
    return x, w, b


# (x shape, w shape, attrs)
_CONV3D = [
    ((1, 16, 5, 9, 11), (20, 16, 3, 3, 3), {"pads": [1] * 6}),
    ((2, 8, 6, 7, 7), (12, 8, 3, 3, 3), {"pads": [1] * 6, "strides": [2, 2, 2]}),
    ((1, 6, 7, 8, 9), (8, 6, 2, 3, 3), {"pads": [0, 1, 1, 1, 0, 1], "strides": [1, 2, 1]}),
    ((1, 8, 9, 10, 10), (16, 8, 3, 3, 3), {"pads": [2, 1, 1, 2, 1, 1], "dilations": [2, 1, 1]}),
    ((1, 8, 4, 12, 12), (16, 8, 3, 3, 3), {"pads": [1, 2, 2, 1, 2, 2], "dilations": [1, 2, 2]}),
    ((2, 8, 5, 10, 10), (16, 8, 1, 3, 3), {"pads": [0, 1, 1, 0, 1, 1]}),
    ((1, 8, 6, 5, 5), (8, 8, 3, 1, 1), {"pads": [1, 0, 0, 1, 0, 0]}),
    ((1, 8, 1, 6, 6), (8, 8, 3, 3, 3), {"pads": [1] * 6}),
    ((1, 4, 5, 6, 7), (5, 4, 3, 3, 3), {}),
    ((1, 3, 6, 16, 16), (16, 3, 3, 7, 7), {"pads": [1, 3, 3, 1, 3, 3], "strides": [1, 2, 2]}),
    ((1, 64, 4, 14, 14), (64, 64, 3, 3, 3), {"pads": [1] * 6}),
    ((1, 16, 8, 32, 32), (16, 16, 3, 3, 3), {"pads": [1] * 6}),
    ((1, 16, 4, 8, 8), (16, 8, 3, 3, 3), {"pads": [1] * 6, "group": 2}),
    ((2, 12, 3, 7, 9), (24, 3, 3, 3, 3), {"pads": [1] * 6, "group": 4}),
    ((1, 8, 4, 6, 6), (8, 1, 3, 3, 3), {"pads": [1] * 6, "group": 8}),
]


@pytest.mark.parametrize("xs,ws,attrs", _CONV3D)
@pytest.mark.parametrize("bias,relu,w_input", [(False, False, False), (True, True, False), (True, False, True)])
def test_conv3d(xs, ws, attrs, bias, relu, w_input):
    x, w, b = _conv(xs, ws, bias)
    got = check_twin(*conv_model("Conv", x, w, b, w_input=w_input, relu=relu, kernel_shape=list(ws[2:]), **attrs))[0]
    if relu:
        assert (got >= 0).all() and (got > 0).any()
    else:
        assert (got < 0).any() and (got > 0).any()


def test_conv3d_images_independent():
    """Each image's (and each output depth's) output is its own: swapping two images swaps their outputs."""
    x, w, b = _conv((3, 8, 4, 9, 9), (16, 8, 3, 3, 3), True)
    model, feeds = conv_model("Conv", x, w, b, kernel_shape=[3, 3, 3], pads=[1] * 6)
    got = run_twin(model, feeds)[0]
    got2 = run_twin(model, {"x": x[::-1].copy()})[0]
    np.testing.assert_allclose(got2, got[::-1], rtol=1e-6, atol=1e-6)
    # depth reversed in, depth reversed out with the kernel's depth taps reversed
    wr = w[:, :, ::-1].copy()
    model_r, _ = conv_model("Conv", x, wr, b, kernel_shape=[3, 3, 3], pads=[1] * 6)
    got3 = run_twin(model_r, {"x": x[:, :, ::-1].copy()})[0]
    np.testing.assert_allclose(got3, got[:, :, ::-1], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("xs,ws,attrs", [((1, 16, 4, 10, 10), (24, 16, 3, 3, 3), {"pads": [1] * 6}),
                                         ((2, 32, 3, 7, 7), (32, 16, 3, 3, 3), {"pads": [1] * 6, "group": 2})])
def test_conv3d_batchnorm_relu(xs, ws, attrs):
    """Conv3d + BatchNormalization + Relu (the fused form of the kernel)."""
    from conftest import make_model

    x, w, b = _conv(xs, ws, True)
    m = ws[0]
    t = TensorProto.FLOAT
    bn = [("s", RNG.uniform(0.5, 1.5, m)), ("o", RNG.standard_normal(m)), ("mu", RNG.standard_normal(m) * 0.1),
          ("var", RNG.uniform(0.5, 1.5, m))]
    inits = [("w", w), ("b", b)] + [(n, v.astype(np.float32)) for n, v in bn]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=list(ws[2:]), **attrs),
             helper.make_node("BatchNormalization", ["c", "s", "o", "mu", "var"], ["n"]),
             helper.make_node("Relu", ["n"], ["y"])]
    model = make_model(nodes, [("x", t, list(xs))], [("y", t, None)], initializers=inits, opset=19)
    got = check_twin(model, {"x": x})[0]
    assert (got >= 0).all() and (got > 0).any() and (got == 0).any()


# Grouped 2-D convs (not depthwise): (x shape, w shape, attrs)
_GROUPED = [
    ((2, 256, 14, 14), (256, 128, 3, 3), {"pads": [1] * 4, "group": 2}),
    ((1, 128, 14, 14), (128, 32, 3, 3), {"pads": [1] * 4, "group": 4}),
    ((3, 48, 11, 9), (64, 12, 3, 3), {"pads": [1, 0, 0, 1], "group": 4}),
    ((1, 64, 17, 15), (96, 32, 3, 3), {"pads": [1] * 4, "group": 2, "strides": [2, 2]}),
    ((2, 32, 9, 9), (32, 16, 3, 3), {"pads": [0] * 4, "group": 2}),
    ((1, 64, 12, 12), (64, 2, 3, 3), {"pads": [1] * 4, "group": 32}),
]


@pytest.mark.parametrize("xs,ws,attrs", _GROUPED)
@pytest.mark.parametrize("bias,relu,w_input", [(False, False, False), (True, True, False), (True, False, True)])
def test_grouped_conv2d(xs, ws, attrs, bias, relu, w_input):
    x, w, b = _conv(xs, ws, bias)
    got = check_twin(*conv_model("Conv", x, w, b, w_input=w_input, relu=relu, kernel_shape=list(ws[2:]), **attrs))[0]
    if relu:
        assert (got >= 0).all() and (got > 0).any()
    else:
        assert (got < 0).any() and (got > 0).any()


@pytest.mark.parametrize("xs,ws,attrs", [((1, 16, 4, 10, 10), (16, 16, 3, 3, 3), {"pads": [1] * 6}),
                                         ((2, 64, 12, 12), (64, 32, 3, 3), {"pads": [1] * 4, "group": 2})])
def test_non_finite_inputs(xs, ws, attrs):
    """An inf / NaN in the input: Winograd's transforms would turn inf into NaN where the direct sum keeps inf (its
    callers recompute such runs directly); the outputs match the reference's, non-finite values included."""
    x, w, _ = _conv(xs, ws, False)
    x.reshape(-1)[[5, x.size // 2]] = np.inf
    x.reshape(-1)[x.size - 7] = np.nan
    model, feeds = conv_model("Conv", x, w, kernel_shape=list(ws[2:]), **attrs)
    got = check_twin(model, feeds)[0]
    assert np.isinf(got).any() and np.isnan(got).any() and np.isfinite(got).any()
