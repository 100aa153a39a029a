"""The graph patterns of the model families users deploy, as torch.onnx.export (dynamo and TorchScript) writes them
for Hugging Face transformers (BERT, DistilBERT, RoBERTa, GPT-2, T5 encoder, ViT, Whisper encoder, wav2vec2, ResNet,
ConvNeXt, Swin) and torchvision CNNs, and as users then rewrite them: onnxruntime's ``quantize_dynamic``
(DynamicQuantizeLinear + MatMulInteger / ConvInteger, a quantised embedding table), ``quantize_static`` in the QDQ
format (QuantizeLinear / DequantizeLinear pairs, int32 biases) and the QOperator format (QLinearConv, QLinearMatMul),
onnxconverter_common's float16 conversion (with and without float32 inputs and outputs), and the com.microsoft
operators of onnxruntime's transformer optimizer, which the twin refuses by name and domain. Rebuilt with
onnx.helper so that no torch is needed; each graph runs at two input sizes through one loaded graph and is checked
against onnx.reference (or numpy where noted)."""

from __future__ import annotations

import numpy as np
import pytest

import geasync as ga

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnx_cases import check_runs  # noqa: E402

F, F16, I64, U8, I8 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64, TensorProto.UINT8, TensorProto.INT8
RNG = np.random.default_rng(2027)


def _init(name, value, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def _model(nodes, inputs, outputs, inits=(), opset=17, domains=()):
    graph = helper.make_graph(nodes, "model", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs], initializer=list(inits))
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(graph, opset_imports=imports)


def _run(model, feeds):
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        outs = s.run_graph(1, list(feeds))
        got = [o.numpy().copy() for o in outs]
        del outs
    return got


def _reference(model):
    """onnx.reference at opset 21: it has no QuantizeLinear / DequantizeLinear before opset 19, and none of the ops
    used here changed meaning between 17 (what onnxruntime's quantizer keeps from the TorchScript export) and 21."""
    bumped = onnx.ModelProto()
    bumped.CopyFrom(model)
    for o in bumped.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = max(o.version, 21)
    return ReferenceEvaluator(bumped)


def _check_runs(model, feed_sets, rtol=1e-5, atol=1e-5, quantum=None):
    check_runs(model, feed_sets, rtol=rtol, atol=atol, quantum=quantum, evaluator=_reference(model))


def _randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ---- quantize_dynamic: a Linear on (batch, seq, hidden) activations, and a quantised embedding table ----

def _dynamic_linear(d_in=16, d_out=24, vocab=13, weight_type=I8):
    wdt = np.int8 if weight_type == I8 else np.uint8
    w = _randn(d_in, d_out)
    w_scale = np.float32(np.abs(w).max() / 127)
    w_zp = 0 if weight_type == I8 else 128
    w_q = np.clip(np.rint(w / w_scale) + w_zp, -128 if wdt == np.int8 else 0, 127 if wdt == np.int8 else 255)
    table = _randn(vocab, d_in)
    t_scale = np.float32((table.max() - table.min()) / 255)
    t_zp = np.uint8(np.clip(np.rint(-table.min() / t_scale), 0, 255))
    t_q = np.clip(np.rint(table / t_scale) + t_zp, 0, 255)
    nodes = [
        helper.make_node("Gather", ["table_q", "ids"], ["e_q"], axis=0),
        helper.make_node("DequantizeLinear", ["e_q", "t_scale", "t_zp"], ["e"]),
        helper.make_node("Add", ["e", "x"], ["h"]),
        helper.make_node("DynamicQuantizeLinear", ["h"], ["h_q", "h_scale", "h_zp"]),
        helper.make_node("Mul", ["h_scale", "w_scale"], ["scales"]),
        helper.make_node("MatMulInteger", ["h_q", "w_q", "h_zp", "w_zp"], ["acc"]),
        helper.make_node("Cast", ["acc"], ["acc_f"], to=F),
        helper.make_node("Mul", ["acc_f", "scales"], ["y0"]),
        helper.make_node("Add", ["bias", "y0"], ["y"]),
    ]
    inits = [_init("table_q", t_q, np.uint8), _init("t_scale", t_scale), _init("t_zp", t_zp, np.uint8),
             _init("w_q", w_q, wdt), _init("w_scale", w_scale), _init("w_zp", w_zp, wdt),
             _init("bias", 0.1 * _randn(d_out))]
    return _model(nodes, [("ids", I64, ["batch", "seq"]), ("x", F, ["batch", "seq", d_in])],
                  [("y", F, ["batch", "seq", d_out])], inits)


@pytest.mark.parametrize("weight_type", [I8, U8], ids=["int8-weights", "uint8-weights"])
def test_quantize_dynamic_linear_and_embedding(weight_type):
    model = _dynamic_linear(weight_type=weight_type)
    feeds = [[RNG.integers(0, 13, (2, 7)), _randn(2, 7, 16)], [RNG.integers(0, 13, (3, 1)), _randn(3, 1, 16)]]
    _check_runs(model, feeds, rtol=1e-5, atol=1e-5)


# ---- quantize_static, QDQ format: QuantizeLinear / DequantizeLinear pairs on activations, int8 weights, an int32
# Conv bias whose scale is x_scale * w_scale, a per-channel weight scale; dynamic batch ----

def _qdq(x, name, scale, zp, nodes, dtype=U8):
    nodes.append(helper.make_node("QuantizeLinear", [x, f"{name}_s", f"{name}_zp"], [f"{name}_q"]))
    nodes.append(helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_zp"], [f"{name}_dq"]))
    return [_init(f"{name}_s", scale), _init(f"{name}_zp", zp, np.uint8 if dtype == U8 else np.int8)], f"{name}_dq"


def _qdq_cnn(per_channel):
    c_in, c_out, classes = 3, 8, 5
    w = _randn(c_out, c_in, 3, 3) * 0.3
    w_scale = (np.abs(w).reshape(c_out, -1).max(axis=1) / 127).astype(np.float32) if per_channel else \
        np.float32(np.abs(w).max() / 127)
    w_q = np.clip(np.rint(w / (w_scale[:, None, None, None] if per_channel else w_scale)), -127, 127)
    x_scale = np.float32(4 / 255)
    b_q = RNG.integers(-200, 200, c_out)
    fc = _randn(c_out, classes) * 0.3
    fc_scale = np.float32(np.abs(fc).max() / 127)
    nodes = []
    inits, xd = _qdq("x", "xin", x_scale, 128, nodes)
    nodes += [helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_zp"], ["w"], axis=0),
              helper.make_node("DequantizeLinear", ["b_q", "b_s", "b_zp"], ["b"], axis=0),
              helper.make_node("Conv", [xd, "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
              helper.make_node("Relu", ["c"], ["r"])]
    more, rd = _qdq("r", "act", np.float32(0.02), 0, nodes)
    nodes += [helper.make_node("GlobalAveragePool", [rd], ["p"]),
              helper.make_node("Flatten", ["p"], ["f"], axis=1)]
    more2, fd = _qdq("f", "pool", np.float32(0.01), 0, nodes)
    nodes += [helper.make_node("DequantizeLinear", ["fc_q", "fc_s", "fc_zp"], ["fcw"]),
              helper.make_node("MatMul", [fd, "fcw"], ["y"])]
    zp_shape = (c_out,) if per_channel else ()
    inits += more + more2 + [
        _init("w_q", w_q, np.int8), _init("w_s", w_scale), _init("w_zp", np.zeros(zp_shape), np.int8),
        _init("b_q", b_q, np.int32), _init("b_s", x_scale * (w_scale if per_channel else w_scale)),
        _init("b_zp", np.zeros(zp_shape), np.int32),
        _init("fc_q", np.clip(np.rint(fc / fc_scale), -127, 127), np.int8), _init("fc_s", fc_scale),
        _init("fc_zp", 0, np.int8)]
    if not per_channel:  # a per-tensor bias scale is a scalar
        inits[-5] = _init("b_s", x_scale * w_scale)
    return _model(nodes, [("x", F, ["batch", c_in, "h", "w"])], [("y", F, ["batch", classes])], inits)


@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
def test_quantize_static_qdq_cnn(per_channel):
    model = _qdq_cnn(per_channel)
    # Every value the graph holds after a QuantizeLinear is exact; float sums in a different order can still put
    # an activation on the other side of a rounding boundary, which moves it by one step (0.02 here); one such step
    # reaches the output scaled by at most max |fc| / (h * w) (the pooling) - well under the 1e-3 allowed.
    _check_runs(model, [[_randn(2, 3, 8, 8)], [_randn(1, 3, 10, 6)]], rtol=1e-5, quantum=1e-3)


# ---- onnxconverter_common float16: the body in float16, with float32 inputs/outputs behind Casts
# (keep_io_types=True) or float16 ones; a GELU block after a LayerNorm and a masked Softmax ----

def _fp16_block(keep_io_types, d=16):
    io = F if keep_io_types else F16
    nodes = []
    x, y = "x", "y"
    if keep_io_types:
        nodes.append(helper.make_node("Cast", ["x"], ["x16"], to=F16))
        x, y = "x16", "y16"
    nodes += [
        helper.make_node("LayerNormalization", [x, "ln_w", "ln_b"], ["h"], axis=-1, epsilon=1e-5),
        helper.make_node("MatMul", ["h", "w1"], ["a0"]),
        helper.make_node("Add", ["a0", "b1"], ["a"]),
        helper.make_node("Div", ["a", "sqrt2"], ["a_s"]),
        helper.make_node("Erf", ["a_s"], ["erf"]),
        helper.make_node("Add", ["erf", "one"], ["erf1"]),
        helper.make_node("Mul", ["a", "erf1"], ["g0"]),
        helper.make_node("Mul", ["g0", "half"], ["g"]),
        helper.make_node("MatMul", ["g", "w2"], ["s0"]),
        helper.make_node("Add", ["s0", "mask"], ["s"]),
        helper.make_node("Softmax", ["s"], [y], axis=-1),
    ]
    if keep_io_types:
        nodes.append(helper.make_node("Cast", ["y16"], ["y"], to=F))
    f16 = np.float16
    mask = np.zeros(d, np.float32)
    mask[-3:] = -10000.0  # the exporters' additive padding mask, in float16 range
    inits = [_init("ln_w", 1 + 0.1 * _randn(d), f16), _init("ln_b", 0.1 * _randn(d), f16),
             _init("w1", _randn(d, 2 * d) / 4, f16), _init("b1", 0.1 * _randn(2 * d), f16),
             _init("w2", _randn(2 * d, d) / 6, f16), _init("sqrt2", np.sqrt(2), f16), _init("one", 1, f16),
             _init("half", 0.5, f16), _init("mask", mask, f16)]
    return _model(nodes, [("x", io, ["batch", "seq", d])], [("y", io, ["batch", "seq", d])], inits)


@pytest.mark.parametrize("keep_io_types", [True, False], ids=["float32-io", "float16-io"])
def test_float16_converted_block(keep_io_types):
    model = _fp16_block(keep_io_types)
    dt = np.float32 if keep_io_types else np.float16
    # The twin rounds each op's float32 result to float16 once; onnx.reference computes some ops (LayerNorm, the
    # MatMul sums) in float16 steps, so they differ by a few float16 ulps (2**-11 relative), not by more.
    _check_runs(model, [[_randn(2, 5, 16).astype(dt)], [_randn(1, 3, 16).astype(dt)]], rtol=1e-2, atol=2e-3)


# ---- onnxruntime's own operators (QOperator QLinearAdd / QLinearGlobalAveragePool, the transformer optimizer's
# fusions) are not ONNX: the twin, like GE, refuses them at add_graph, naming the node, the op and the domain ----

@pytest.mark.parametrize("op, inputs", [
    ("SkipLayerNormalization", ["x", "x", "g", "b"]),
    ("QLinearAdd", ["xq", "s", "zp", "xq", "s", "zp", "s", "zp"]),
    ("BiasGelu", ["x", "b"]),
])
def test_onnxruntime_contrib_ops_are_refused_by_name_and_domain(op, inputs):
    nodes = [helper.make_node(op, inputs, ["y"], domain="com.microsoft", name=f"fused_{op}")]
    inits = [_init("g", np.ones(4)), _init("b", np.zeros(4)), _init("s", 0.1), _init("zp", 0, np.uint8),
             _init("xq", np.zeros((2, 4)), np.uint8)]
    model = _model(nodes, [("x", F, [2, 4])], [("y", F, [2, 4])], inits, domains=["com.microsoft"])
    with ga.Session() as s, pytest.raises(ga.GeError) as err:
        s.add_graph(1, ga.Graph.from_onnx(model))
    msg = str(err.value)
    assert op in msg and "com.microsoft" in msg and f"fused_{op}" in msg, msg


# ---- MobileNetV3 / EfficientNet: depthwise convs on the small maps late in the network (a 5x5 window wider than a
# 2x2 map, stride 2 onto 2x2, dilation), channels-last on the twin; a BN-folded depthwise conv + Relu ----

@pytest.mark.parametrize("c, hw, k, stride, dil, bias", [
    (576, 2, 5, 1, 1, True), (96, 8, 5, 2, 1, True), (88, 8, 3, 1, 1, False), (24, 5, 3, 2, 2, True),
    (16, 4, 3, 1, 1, True),
    # channel counts that take every register block of the AVX2 kernel (64 + 8, 16 + 8 + a tail of 4, 16 + 4)
    (72, 3, 3, 1, 1, False), (28, 4, 5, 1, 1, True), (20, 8, 5, 2, 1, True), (672, 4, 5, 1, 1, True),
])
def test_depthwise_conv_on_small_maps(c, hw, k, stride, dil, bias):
    pad = dil * (k - 1) // 2
    ins = ["x", "w"] + (["b"] if bias else [])
    nodes = [helper.make_node("Conv", ins, ["c"], group=c, kernel_shape=[k, k], strides=[stride, stride],
                              dilations=[dil, dil], pads=[pad, pad, pad, pad]),
             helper.make_node("HardSigmoid", ["c"], ["hs"], alpha=1 / 6, beta=0.5),
             helper.make_node("Mul", ["c", "hs"], ["y"])]  # HardSwish as the exporters spell it
    inits = [_init("w", _randn(c, 1, k, k))] + ([_init("b", _randn(c))] if bias else [])
    model = _model(nodes, [("x", F, ["batch", c, hw, hw])], [("y", F, None)], inits)
    _check_runs(model, [[_randn(2, c, hw, hw)], [_randn(1, c, hw, hw)]], rtol=1e-4, atol=1e-4)


def test_depthwise_conv_folded_batchnorm_relu():
    c, hw = 32, 4
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], group=c, kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "beta", "mean", "var"], ["bn"], epsilon=1e-3),
             helper.make_node("Relu", ["bn"], ["y"])]
    inits = [_init("w", _randn(c, 1, 3, 3)), _init("g", 1 + 0.1 * _randn(c)), _init("beta", 0.1 * _randn(c)),
             _init("mean", 0.1 * _randn(c)), _init("var", 0.5 + RNG.random(c))]
    model = _model(nodes, [("x", F, ["batch", c, hw, hw])], [("y", F, None)], inits)
    x = _randn(3, c, hw, hw)
    x[0, 0, 0, 0] = np.nan  # NaN stays NaN through the fused Relu
    _check_runs(model, [[x], [_randn(1, c, hw, hw)]], rtol=1e-4, atol=1e-4)


# ---- a float16-converted EfficientNet's squeeze-excite: GlobalAveragePool on float16 maps, late 2x2 and 1x1 ones
# included (widened to float32 once, summed in double: the float16 result of the exact mean) ----

@pytest.mark.parametrize("shape", [(2, 144, 16, 16), (2, 40, 2, 2), (3, 24, 1, 1), (1, 8, 7, 7), (2, 5, 3, 1, 2)])
def test_float16_global_average_pool(shape):
    x = _randn(*shape).astype(np.float16)
    x.reshape(-1)[0] = np.float16(60000.0)  # float16 sums would overflow; the mean does not
    model = _model([helper.make_node("GlobalAveragePool", ["x"], ["y"])], [("x", F16, list(shape))],
                   [("y", F16, None)])
    want = x.astype(np.float64).mean(axis=tuple(range(2, len(shape))), keepdims=True).astype(np.float16)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        (got,) = s.run_graph(1, [x])
    np.testing.assert_array_equal(got.numpy(), want)


# ---- a float16-converted ResNet's stem: MaxPool 3x3 stride 2 (pads, ceil_mode, Indices) on float16 values ----

@pytest.mark.parametrize("ceil_mode, with_indices", [(0, False), (1, True)])
def test_float16_maxpool(ceil_mode, with_indices):
    outs = ["y", "idx"] if with_indices else ["y"]
    nodes = [helper.make_node("MaxPool", ["x"], outs, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                              ceil_mode=ceil_mode)]
    outputs = [("y", F16, None)] + ([("idx", I64, None)] if with_indices else [])
    model = _model(nodes, [("x", F16, ["batch", 8, "h", "w"])], outputs)
    x = _randn(2, 8, 17, 16).astype(np.float16)
    x[0, 1, 3, 4] = -np.inf
    x[1, 2, 5, 5] = np.nan
    # exact: the maximum of float16 values is one of them
    _check_runs(model, [[x], [_randn(1, 8, 9, 12).astype(np.float16)]], rtol=0, atol=0)


# ---- quantize_static, QOperator format: the standard-domain part (QuantizeLinear, QLinearConv with an int32 bias,
# QLinearMatMul, DequantizeLinear); onnxruntime's QLinearAdd / QLinearGlobalAveragePool are refused (above) ----

def test_quantize_static_qoperator_conv_matmul():
    c_in, c_out, classes = 3, 6, 4
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_s", "x_zp"], ["xq"]),
        helper.make_node("QLinearConv", ["xq", "x_s", "x_zp", "w_q", "w_s", "w_zp", "c_s", "c_zp", "b_q"], ["cq"],
                         pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Reshape", ["cq", "flat"], ["fq"]),
        helper.make_node("QLinearMatMul", ["fq", "c_s", "c_zp", "m_q", "m_s", "m_zp", "y_s", "y_zp"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "y_s", "y_zp"], ["y"]),
    ]
    w_s = (RNG.random(c_out) * 0.01 + 0.005).astype(np.float32)  # per output channel, as per_channel=True writes
    inits = [_init("x_s", 4 / 255), _init("x_zp", 128, np.uint8),
             _init("w_q", RNG.integers(-127, 128, (c_out, c_in, 3, 3)), np.int8), _init("w_s", w_s),
             _init("w_zp", np.zeros(c_out), np.int8), _init("c_s", 0.02), _init("c_zp", 100, np.uint8),
             _init("b_q", RNG.integers(-500, 500, c_out), np.int32), _init("flat", [0, -1], np.int64),
             _init("m_q", RNG.integers(-127, 128, (c_out * 4 * 4, classes)), np.int8), _init("m_s", 0.002),
             _init("m_zp", 0, np.int8), _init("y_s", 0.05), _init("y_zp", 128, np.uint8)]
    model = _model(nodes, [("x", F, ["batch", c_in, 8, 8])], [("y", F, ["batch", classes])], inits)
    # Integer accumulation is exact; the requantisation's rounding can break a tie differently: one output step.
    _check_runs(model, [[_randn(2, c_in, 8, 8)], [_randn(1, c_in, 8, 8)]], rtol=0, quantum=0.05 + 1e-6)
