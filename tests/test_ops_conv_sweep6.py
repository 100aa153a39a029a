"""Shapes from the sixth conv survey (MobileNet / EfficientNet / DeepLab / WaveNet layers): depthwise convs at
stride 1 and 2 with 3x3 / 5x5 / 7x7 kernels, pads, dilations 2 / 3 / 6, one or two images, channel counts that
leave a partial vector (7, 17, 96, 144) and odd map widths; dilated dense 3x3 convs and dilated Conv1d; and the
activations exported models put after a Conv (Sigmoid, Tanh, HardSwish, SiLU as Sigmoid -> Mul in either operand
order, after a BatchNormalization too), each against onnx.reference and against the same graph with the Conv's
output also a graph output (which keeps the Conv and BatchNormalization apart) within an ulp or two."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from conftest import make_model  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from onnx_cases import assert_close, check_twin, conv_model, reference, run_twin  # noqa: E402

RNG = np.random.default_rng(5454)
F = TensorProto.FLOAT


def _weights(shape):
    fan = int(np.prod(shape[1:]))
    return (RNG.standard_normal(shape) / np.sqrt(fan)).astype(np.float32)


# (x shape, kernel, stride, pads, dilation) of depthwise convs (group = channels)
_DEPTHWISE = [
    ((1, 17, 15, 15), 3, 1, [1] * 4, 1),
    ((2, 96, 32, 32), 3, 2, [1] * 4, 1),
    ((1, 7, 13, 11), 3, 2, [1] * 4, 1),
    ((1, 144, 23, 21), 3, 1, [1] * 4, 1),
    ((1, 17, 20, 20), 5, 2, [2] * 4, 1),
    ((2, 33, 27, 29), 5, 2, [2] * 4, 1),
    ((1, 24, 14, 14), 5, 1, [2] * 4, 1),
    ((1, 17, 19, 17), 7, 1, [3] * 4, 1),
    ((1, 16, 25, 31), 7, 2, [3] * 4, 1),
    ((1, 17, 16, 15), 3, 2, [0, 1, 1, 0], 1),
    ((1, 9, 21, 21), 3, 1, [2] * 4, 2),
    ((2, 17, 17, 19), 3, 1, [3] * 4, 3),
    ((1, 7, 25, 25), 3, 1, [6] * 4, 6),
    ((1, 12, 19, 23), 3, 2, [2] * 4, 2),
    ((1, 8, 9, 9), 5, 1, [4] * 4, 2),
]


@pytest.mark.parametrize("xs,k,s,pads,d", _DEPTHWISE)
@pytest.mark.parametrize("bias,relu", [(False, False), (True, True)])
def test_depthwise(xs, k, s, pads, d, bias, relu):
    c = xs[1]
    x = RNG.standard_normal(xs).astype(np.float32)
    w = _weights((c, 1, k, k))
    b = RNG.standard_normal(c).astype(np.float32) if bias else None
    got = check_twin(*conv_model("Conv", x, w, b, relu=relu, kernel_shape=[k, k], strides=[s, s], pads=pads,
                                 dilations=[d, d], group=c))[0]
    assert (got >= 0).all() if relu else (got < 0).any()
    assert (got > 0).any()


# (x shape, out channels, kernel, dilation, pads): dense dilated convs (DeepLab's ASPP, WaveNet's Conv1d)
_DILATED = [
    ((4, 64, 14, 14), 64, [3, 3], 2, [2] * 4),
    ((1, 64, 7, 7), 64, [3, 3], 2, [2] * 4),
    ((1, 32, 15, 13), 40, [3, 3], 6, [6] * 4),
    ((2, 17, 11, 11), 24, [3, 3], 3, [3] * 4),
    ((1, 32, 301), 32, [2], 2, [2, 0]),
    ((2, 16, 257), 24, [3], 3, [6, 0]),
    ((1, 8, 99), 9, [2], 6, [6, 0]),
]


@pytest.mark.parametrize("xs,m,k,d,pads", _DILATED)
@pytest.mark.parametrize("bias", [False, True])
def test_dilated(xs, m, k, d, pads, bias):
    x = RNG.standard_normal(xs).astype(np.float32)
    w = _weights((m, xs[1], *k))
    b = RNG.standard_normal(m).astype(np.float32) if bias else None
    got = check_twin(*conv_model("Conv", x, w, b, kernel_shape=k, pads=pads, dilations=[d] * len(k)))[0]
    assert (got < 0).any() and (got > 0).any()


def _act_model(x, w, b, act, conv_attrs, also_conv_out=False, bn=False):
    """Conv (+ BatchNormalization) followed by `act`; with also_conv_out the conv's output is a graph output too,
    which keeps BatchNormalization from folding into the Conv."""
    inits = [("w", w)] + ([("b", b)] if b is not None else [])
    m = w.shape[0]
    nodes = [helper.make_node("Conv", ["x", "w"] + (["b"] if b is not None else []), ["c0"], **conv_attrs)]
    if bn:  # (the same parameters for the same m: the fused and unfused graphs must agree)
        r = np.random.default_rng(m)
        inits += [("sc", r.uniform(0.5, 1.5, m).astype(np.float32)), ("sh", r.standard_normal(m).astype(np.float32)),
                  ("mu", r.standard_normal(m).astype(np.float32)), ("var", r.uniform(0.5, 2, m).astype(np.float32))]
        nodes.append(helper.make_node("BatchNormalization", ["c0", "sc", "sh", "mu", "var"], ["c"]))
    else:
        nodes[0].output[0] = "c"
    if act == "SiLU":
        nodes += [helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
    elif act == "SiLU swapped":
        nodes += [helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["s", "c"], ["y"])]
    else:
        nodes.append(helper.make_node(act, ["c"], ["y"]))
    outs = [("y", F, None)] + ([("c", F, None)] if also_conv_out else [])
    return make_model(nodes, [("x", F, list(x.shape))], outs, initializers=inits, opset=19)


_ACTS = ["SiLU", "SiLU swapped", "Sigmoid", "Tanh", "HardSwish"]
# (x shape, w shape, attrs): depthwise at stride 1 and 2 (per-plane and channels-last paths), dense 3x3, 1x1
_ACT_CONVS = [
    ((1, 144, 28, 27), (144, 1, 3, 3), dict(kernel_shape=[3, 3], pads=[1] * 4, group=144)),
    ((2, 17, 9, 9), (17, 1, 5, 5), dict(kernel_shape=[5, 5], pads=[2] * 4, strides=[2, 2], group=17)),
    ((1, 96, 32, 32), (96, 1, 3, 3), dict(kernel_shape=[3, 3], pads=[1] * 4, strides=[2, 2], group=96)),
    ((1, 16, 13, 15), (24, 16, 3, 3), dict(kernel_shape=[3, 3], pads=[1] * 4)),
    ((2, 24, 7, 7), (40, 24, 1, 1), dict(kernel_shape=[1, 1])),
    ((1, 16, 12, 12), (16, 16, 3, 3), dict(kernel_shape=[3, 3], pads=[2] * 4, dilations=[2, 2])),
]


@pytest.mark.parametrize("xs,ws,attrs", _ACT_CONVS)
@pytest.mark.parametrize("act", _ACTS)
@pytest.mark.parametrize("bn", [False, True])
def test_fused_activation(xs, ws, attrs, act, bn):
    x = (2 * RNG.standard_normal(xs)).astype(np.float32)
    w = _weights(ws)
    b = RNG.standard_normal(ws[0]).astype(np.float32)
    fused = _act_model(x, w, b, act, attrs, bn=bn)
    got = run_twin(fused, {"x": x})
    assert_close(got, reference(fused, [x]), 1e-4, 1e-4)
    plain = run_twin(_act_model(x, w, b, act, attrs, also_conv_out=True, bn=bn), {"x": x})
    # Within an ulp or two: the unfused element-wise steps may take other kernels (a chain, small-tensor loops).
    np.testing.assert_allclose(got[0], plain[0], rtol=1e-6, atol=1e-7)
    y = got[0]
    if act in ("SiLU", "SiLU swapped", "HardSwish"):
        assert (y < 0).any() and (y > 0.5).any()
    if act == "Sigmoid":
        assert (y > 0).all() and (y <= 1).all() and (y < 0.5).any()


def test_silu_not_fused_when_sigmoid_is_read_elsewhere():
    """Sigmoid's output also a graph output, and a Mul of the conv with another tensor: both stay as written."""
    x = RNG.standard_normal((1, 8, 9, 9)).astype(np.float32)
    w = _weights((8, 1, 3, 3))
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1] * 4, group=8),
             helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
    model = make_model(nodes, [("x", F, list(x.shape))], [("y", F, None), ("s", F, None)], initializers=[("w", w)],
                       opset=19)
    assert_close(run_twin(model, {"x": x}), reference(model, [x]), 1e-5, 1e-5)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1] * 4, group=8),
             helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "z"], ["y"]),
             helper.make_node("Add", ["y", "s"], ["o"])]
    z = RNG.standard_normal((1, 8, 9, 9)).astype(np.float32)
    model = make_model(nodes, [("x", F, list(x.shape)), ("z", F, list(z.shape))], [("o", F, None)],
                       initializers=[("w", w)], opset=19)
    assert_close(run_twin(model, {"x": x, "z": z}), reference(model, [x, z]), 1e-5, 1e-5)


def test_relu_then_sigmoid():
    """Relu then Sigmoid: the Relu fuses, the Sigmoid runs on its own; the result is the graph's."""
    x = RNG.standard_normal((1, 16, 10, 10)).astype(np.float32)
    w = _weights((16, 1, 3, 3))
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1] * 4, group=16),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Sigmoid", ["r"], ["y"])]
    model = make_model(nodes, [("x", F, list(x.shape))], [("y", F, None)], initializers=[("w", w)], opset=19)
    got = run_twin(model, {"x": x})
    assert_close(got, reference(model, [x]), 1e-5, 1e-5)
    assert (got[0] >= 0.5).all()


@pytest.mark.parametrize("s", [1, 2])
def test_depthwise_float16(s):
    x = RNG.standard_normal((1, 24, 15, 17)).astype(np.float16)
    w = _weights((24, 1, 3, 3)).astype(np.float16)
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1] * 4,
                                         strides=[s, s], group=24)],
                       [("x", TensorProto.FLOAT16, list(x.shape))], [("y", TensorProto.FLOAT16, None)],
                       initializers=[("w", w)], opset=19)
    got = run_twin(model, {"x": x})
    want = reference(model, [x])
    np.testing.assert_allclose(got[0].astype(np.float32), want[0].astype(np.float32), rtol=2e-3, atol=2e-3)
