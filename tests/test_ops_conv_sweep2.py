"""Shapes from the "conv sweep 2" benchmark family (benchmarks/bench_ops.py) whose kernels changed: 1x1 convs on
small maps of several images (the images' maps stacked into one GEMM: late ResNet stages, classifier heads as 1x1
convs on 1x1 maps), with bias, groups, a fused Relu / BatchNormalization, weights as an input, float64 and float16;
and depthwise convs at stride 2 on maps up to 32x32 (channels-last path), with pads on one side, 5x5 kernels, 1-D
and weights as an input. Each is checked against onnx.reference at small sizes."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from conftest import TensorProto, helper, make_model  # noqa: E402
from onnx_cases import assert_close, reference, run_twin  # noqa: E402

F = TensorProto.FLOAT
RNG = np.random.default_rng(4611)


def _conv_model(x, w, b=None, w_input=False, after=(), **attrs):
    """Conv (then the ops in `after`, each on the previous output) with w (and b) as initializers, or w as a second
    input when w_input."""
    t = helper.np_dtype_to_tensor_dtype(x.dtype)
    inits = [] if w_input else [("w", w)]
    if b is not None:
        inits.append(("b", b))
    nodes = [helper.make_node("Conv", ["x", "w"] + (["b"] if b is not None else []), ["c"], **attrs)]
    last = "c"
    for i, (op, extra) in enumerate(after):
        names = [last] + [n for n, _ in extra]
        inits += list(extra)
        nodes.append(helper.make_node(op, names, [f"a{i}"]))
        last = f"a{i}"
    ins = [("x", t, list(x.shape))] + ([("w", t, list(w.shape))] if w_input else [])
    model = make_model(nodes, ins, [(last, t, None)], initializers=inits, opset=19)
    feeds = {"x": x, "w": w} if w_input else {"x": x}
    return model, feeds


def _check(model, feeds, rtol=1e-4, atol=1e-4):
    names = [i.name for i in model.graph.input]
    got = run_twin(model, feeds)
    assert_close(got, reference(model, [feeds[n] for n in names]), rtol, atol)
    return got


# (x shape, M, group): batches of 1x1 / 2x2 / 7x7 maps; (2, 16, 2, 2) stays one GEMM per image (8 columns).
_STACKED = [((8, 24, 1, 1), 40, 1), ((4, 32, 2, 2), 20, 1), ((2, 16, 2, 2), 24, 1), ((3, 16, 7, 7), 12, 1),
            ((4, 16, 1, 1), 8, 2), ((5, 12, 3, 3), 6, 3), ((6, 10, 5), 7, 1)]


@pytest.mark.parametrize("xs,m,group", _STACKED)
@pytest.mark.parametrize("bias", [False, True])
def test_conv1x1_stacked_images(xs, m, group, bias):
    x = RNG.standard_normal(xs).astype(np.float32)
    w = RNG.standard_normal((m, xs[1] // group) + (1,) * (len(xs) - 2)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32) if bias else None
    got = _check(*_conv_model(x, w, b, kernel_shape=[1] * (len(xs) - 2), group=group))
    # each image's output is its own: swapping two images swaps their outputs (no mixing across the stack)
    got2 = run_twin(*_conv_model(x[::-1].copy(), w, b, kernel_shape=[1] * (len(xs) - 2), group=group))
    np.testing.assert_allclose(got2[0], got[0][::-1], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("pattern", ["relu", "bn_relu", "add", "w_input"])
def test_conv1x1_stacked_patterns(pattern):
    x = RNG.standard_normal((8, 32, 1, 1)).astype(np.float32)
    w = RNG.standard_normal((48, 32, 1, 1)).astype(np.float32)
    b = RNG.standard_normal(48).astype(np.float32)
    c = 48
    after = {
        "relu": [("Relu", [])],
        "bn_relu": [("BatchNormalization", [(f"bn{i}", RNG.uniform(0.5, 1.5, c).astype(np.float32)) for i in
                                            range(4)]), ("Relu", [])],
        "add": [("Add", [("r", RNG.standard_normal((8, c, 1, 1)).astype(np.float32))])],
        "w_input": [],
    }[pattern]
    model, feeds = _conv_model(x, w, b, w_input=pattern == "w_input", after=after, kernel_shape=[1, 1])
    got = _check(model, feeds)
    if pattern.endswith("relu"):
        assert (got[0] >= 0).all() and (got[0] == 0).any()


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-10), (np.float16, 2e-2)])
def test_conv1x1_stacked_dtypes(dtype, tol):
    x = RNG.standard_normal((4, 16, 2, 2)).astype(dtype)
    w = (RNG.standard_normal((24, 16, 1, 1)) * 0.25).astype(dtype)
    b = RNG.standard_normal(24).astype(dtype)
    _check(*_conv_model(x, w, b, kernel_shape=[1, 1]), rtol=tol, atol=tol)


# (x shape, kernel, pads): depthwise at stride 2, maps past the small-map limit (64 outputs / 256 inputs) up to
# 1024 inputs; pads on one side (SAME_UPPER-like), 5x5, 1-D.
_DW_S2 = [((2, 16, 32, 32), [3, 3], [1, 1, 1, 1]), ((1, 12, 31, 29), [3, 3], [0, 0, 1, 1]),
          ((1, 8, 24, 20), [5, 5], [2, 2, 2, 2]), ((3, 9, 500), [3], [1, 1]), ((1, 8, 17, 33), [3, 3], [1, 0, 1, 0])]


@pytest.mark.parametrize("xs,k,pads", _DW_S2)
@pytest.mark.parametrize("variant", ["plain", "bias_relu", "w_input"])
def test_depthwise_stride2(xs, k, pads, variant):
    c = xs[1]
    x = RNG.standard_normal(xs).astype(np.float32)
    w = RNG.standard_normal((c, 1, *k)).astype(np.float32)
    b = RNG.standard_normal(c).astype(np.float32) if variant == "bias_relu" else None
    after = [("Relu", [])] if variant == "bias_relu" else []
    got = _check(*_conv_model(x, w, b, w_input=variant == "w_input", after=after, kernel_shape=k,
                              strides=[2] * len(k), pads=pads, group=c))
    assert got[0].shape[2] == (xs[2] + pads[0] + pads[len(k)] - k[0]) // 2 + 1


def test_depthwise_stride2_auto_pad():
    x = RNG.standard_normal((1, 32, 28, 28)).astype(np.float32)
    w = RNG.standard_normal((32, 1, 3, 3)).astype(np.float32)
    for mode in ("SAME_UPPER", "SAME_LOWER"):
        got = _check(*_conv_model(x, w, kernel_shape=[3, 3], strides=[2, 2], auto_pad=mode, group=32))
        assert got[0].shape == (1, 32, 14, 14)
