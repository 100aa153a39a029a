"""Dilated Conv at stride 1, which the twin runs as one undilated conv per dilation phase (the outputs d a + p read
only the input rows / columns congruent to p - pads_begin mod d) on the fast direct / Winograd kernels, and 3x3
ConvTranspose at stride 1. Checked against onnx.reference on odd sizes, groups (depthwise too), bias or not, pads
(asymmetric, auto_pad SAME_UPPER / SAME_LOWER), batches, weights as an input, a folded BatchNormalization + Relu,
output_padding / output_shape (ConvTranspose, which at stride 1 runs as that Conv with flipped, transposed weights;
without groups), on the CPU's best instruction set and on the AVX2 / baseline fallbacks."""
import warnings

import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnx_cases import rerun_file_with_instruction_set  # noqa: E402

import geasync as ga  # noqa: E402

F = TensorProto.FLOAT


def _model(op, x, w, b, const_w, bn=None, relu=False, **attrs):
    inits = [helper.make_tensor("b", F, b.shape, b.ravel())] if b is not None else []
    inputs = [helper.make_tensor_value_info("x", F, x.shape)]
    if const_w:
        inits.append(helper.make_tensor("w", F, w.shape, w.ravel()))
    else:
        inputs.append(helper.make_tensor_value_info("w", F, w.shape))
    nodes = [helper.make_node(op, ["x", "w"] + (["b"] if b is not None else []), ["c"], **attrs)]
    last = "c"
    if bn is not None:
        for name, v in zip(("s", "t", "mu", "var"), bn, strict=True):
            inits.append(helper.make_tensor(name, F, v.shape, v))
        nodes.append(helper.make_node("BatchNormalization", [last, "s", "t", "mu", "var"], ["n"]))
        last = "n"
    if relu:
        nodes.append(helper.make_node("Relu", [last], ["r"]))
        last = "r"
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", F, None)], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _check(op, xs, ws, *, bias=True, const_w=True, bn=False, relu=False, seed=0, **attrs):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    m = ws[0] if op == "Conv" else ws[1] * attrs.get("group", 1)
    b = rng.standard_normal(m).astype(np.float32) if bias else None
    bnv = None
    if bn:
        bnv = [rng.uniform(0.5, 1.5, m).astype(np.float32), rng.standard_normal(m).astype(np.float32),
               rng.standard_normal(m).astype(np.float32), rng.uniform(0.5, 2, m).astype(np.float32)]
    model = _model(op, x, w, b, const_w, bnv, relu, **attrs)
    feeds = [x] if const_w else [x, w]
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        got = s.run_graph(1, feeds)[0].numpy().copy()
    # The scale of each output's rounding error: the same op on |x|, |w|, |b| (and the |BatchNormalization scale|).
    absbn = None if bnv is None else [np.abs(bnv[0]) / np.sqrt(bnv[3] + 1e-5), np.abs(bnv[1]) + np.abs(
        bnv[2]) * np.abs(bnv[0]) / np.sqrt(bnv[3] + 1e-5), np.zeros(m, np.float32), np.ones(m, np.float32) - 1e-5]
    abs_model = _model(op, x, w, None if b is None else np.abs(b), True,
                       None if absbn is None else [v.astype(np.float32) for v in absbn], False, **attrs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = ReferenceEvaluator(model).run(None, {"x": x, "w": w})[0]
        abs_model.graph.initializer[[i.name for i in abs_model.graph.initializer].index("w")].CopyFrom(
            helper.make_tensor("w", F, w.shape, np.abs(w).ravel()))
        scale = ReferenceEvaluator(abs_model).run(None, {"x": np.abs(x)})[0].astype(np.float64)
    assert got.shape == ref.shape
    err = np.abs(got.astype(np.float64) - ref)
    assert np.all(err <= 1e-5 * scale + 1e-6), float(np.max(err / (scale + 1e-6)))
    return got


# (X shape, W shape, attributes): dilation 2 and 3, per axis too, maps wide enough for the phase path (>= 8 columns
# per phase) and some that are not, odd sizes (phases of different sizes), pads symmetric / asymmetric / auto_pad.
_DILATED = [
    ((1, 16, 28, 28), (16, 16, 3, 3), dict(dilations=[2, 2], pads=[2, 2, 2, 2])),
    ((1, 16, 28, 28), (16, 16, 3, 3), dict(dilations=[2, 2])),
    ((2, 8, 33, 31), (12, 8, 3, 3), dict(dilations=[2, 2], pads=[2, 1, 0, 3])),
    ((1, 5, 37, 40), (7, 5, 3, 3), dict(dilations=[3, 3], pads=[3, 3, 3, 3])),
    ((1, 6, 30, 35), (6, 6, 3, 3), dict(dilations=[1, 2], pads=[1, 2, 1, 2])),
    ((1, 6, 35, 30), (4, 6, 3, 3), dict(dilations=[2, 1], pads=[0, 1, 3, 0])),
    ((1, 32, 20, 20), (32, 32, 3, 3), dict(dilations=[2, 2], pads=[2, 2, 2, 2])),
    ((4, 32, 20, 20), (32, 32, 3, 3), dict(dilations=[2, 2])),
    ((1, 64, 34, 34), (64, 64, 3, 3), dict(dilations=[2, 2], pads=[2, 2, 2, 2])),  # Winograd on the phases
    ((1, 64, 14, 14), (64, 64, 3, 3), dict(dilations=[2, 2], pads=[2, 2, 2, 2])),
    ((1, 16, 27, 29), (16, 4, 3, 3), dict(dilations=[2, 2], pads=[2, 2, 2, 2], group=4)),
    ((2, 24, 26, 26), (24, 1, 3, 3), dict(dilations=[2, 2], pads=[2, 2, 2, 2], group=24)),  # depthwise
    ((1, 8, 25, 26), (8, 8, 3, 3), dict(dilations=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 8, 26, 25), (8, 8, 3, 3), dict(dilations=[2, 2], auto_pad="SAME_LOWER")),
    ((1, 8, 24, 24), (8, 8, 5, 5), dict(dilations=[2, 2], pads=[4, 4, 4, 4])),
    ((1, 4, 20, 40), (8, 4, 3, 3), dict(dilations=[4, 4], pads=[9, 2, 5, 6])),  # pads beyond a tap's reach
    ((1, 8, 5, 40), (8, 8, 3, 3), dict(dilations=[2, 2], pads=[0, 2, 0, 2])),  # a phase row entirely on padding
    ((3, 8, 40), (8, 8, 3), dict(dilations=[2], pads=[2, 2])),  # 1-D
]


@pytest.mark.parametrize("xs,ws,attrs", _DILATED)
@pytest.mark.parametrize("bias", [True, False])
def test_dilated_conv(xs, ws, attrs, bias):
    _check("Conv", xs, ws, bias=bias, **attrs)


@pytest.mark.parametrize("xs,ws,attrs", _DILATED[:3] + _DILATED[8:9])
def test_dilated_conv_weights_as_input(xs, ws, attrs):
    _check("Conv", xs, ws, const_w=False, seed=1, **attrs)


@pytest.mark.parametrize("xs,ws,attrs", [_DILATED[0], _DILATED[2], _DILATED[11]])
def test_dilated_conv_batchnorm_relu(xs, ws, attrs):
    got = _check("Conv", xs, ws, bn=True, relu=True, seed=2, **attrs)
    assert (got >= 0).all() and (got == 0).any()


def test_dilated_conv_phases_interleave():
    """Each output lands in its own place: a one-hot input gives the (flipped) kernel at the dilated taps."""
    x = np.zeros((1, 1, 32, 32), np.float32)
    x[0, 0, 13, 18] = 1
    w = np.arange(1, 10, dtype=np.float32).reshape(1, 1, 3, 3)
    model = _model("Conv", x, w, None, True, dilations=[2, 2], pads=[2, 2, 2, 2])
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        got = s.run_graph(1, [x])[0].numpy()
    want = np.zeros((32, 32), np.float32)
    for i in range(3):
        for j in range(3):
            want[13 + 2 - 2 * i, 18 + 2 - 2 * j] = w[0, 0, i, j]
    np.testing.assert_array_equal(got[0, 0], want)


# ConvTranspose 3x3 stride 1 (X shape, W shape [C, M, 3, 3], attributes); no groups: onnx.reference's grouped
# ConvTranspose reshapes W wrongly.
_TRANSPOSE = [
    ((1, 32, 28, 28), (32, 16, 3, 3), dict()),
    ((1, 32, 28, 28), (32, 16, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((4, 16, 16, 16), (16, 16, 3, 3), dict(pads=[1, 0, 2, 1])),
    ((2, 7, 13, 11), (7, 5, 3, 3), dict(output_padding=[0, 0])),
    ((1, 6, 10, 12), (6, 4, 3, 3), dict(auto_pad="SAME_UPPER")),
    ((1, 6, 11, 9), (6, 4, 3, 3), dict(auto_pad="SAME_LOWER")),
    ((1, 6, 10, 12), (6, 4, 3, 3), dict(output_shape=[12, 14])),
    ((1, 6, 10, 12), (6, 4, 3, 3), dict(dilations=[2, 2], pads=[1, 1, 1, 1])),
]


@pytest.mark.parametrize("xs,ws,attrs", _TRANSPOSE)
@pytest.mark.parametrize("bias", [True, False])
def test_convtranspose_stride1(xs, ws, attrs, bias):
    _check("ConvTranspose", xs, ws, bias=bias, **attrs)


@pytest.mark.parametrize("xs,ws,attrs", [_TRANSPOSE[0], _TRANSPOSE[2]])
def test_convtranspose_stride1_weights_as_input(xs, ws, attrs):
    _check("ConvTranspose", xs, ws, const_w=False, seed=3, **attrs)


def test_convtranspose_stride1_1d():
    _check("ConvTranspose", (2, 16, 40), (16, 8, 3), pads=[1, 0])


@pytest.mark.parametrize("isa", ["avx2", "baseline"])
def test_fallback_instruction_sets(isa):
    rerun_file_with_instruction_set(__file__, isa, "test_dilated or stride1")
