"""Graph patterns of further model families, rebuilt with onnx.helper (no torch needed) and checked against
onnx.reference: DeepLab's ASPP (3x3 convolutions at dilations far larger than the feature map, whose outer taps read
only padding, which the twin drops when it builds the plan) and a decoder step with a key/value cache whose past
length changes on every call."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx_cases import check_runs  # noqa: E402

F = TensorProto.FLOAT
RNG = np.random.default_rng(2031)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "model", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs], initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _w(name, shape):
    return numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32), name)


def _x(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# (kernel, dilations, pads, strides, input HxW): every output's window reaches the input through some taps only.
ASPP_GEOMETRIES = [
    ((3, 3), (12, 12), (12, 12, 12, 12), (1, 1), (4, 4)),   # ASPP at 1/16 of a 64x64 image: the centre tap only
    ((3, 3), (3, 3), (3, 3, 3, 3), (1, 1), (5, 7)),         # outer taps reach a few outputs: nothing to drop
    ((3, 3), (4, 9), (8, 0, 0, 14), (1, 1), (3, 5)),        # asymmetric pads: leading rows / trailing columns dead
    ((3, 3), (5, 5), (5, 5, 5, 5), (2, 2), (4, 4)),         # stride 2
    ((5, 3), (3, 7), (9, 7, 3, 7), (2, 1), (6, 4)),         # 5-tap rows, stride only along H
    ((3, 3), (8, 8), (0, 0, 16, 16), (1, 1), (4, 4)),       # the input through tap 0 only; taps 1 and 2 on padding
]


@pytest.mark.parametrize("kernel,dil,pads,strides,hw", ASPP_GEOMETRIES)
def test_dilated_conv_whose_outer_taps_read_padding_only(kernel, dil, pads, strides, hw):
    """Conv with and without bias, and Conv + BatchNormalization + Relu (folded by the twin), at two batch sizes."""
    c, m = 6, 5
    attrs = dict(kernel_shape=list(kernel), dilations=list(dil), pads=list(pads), strides=list(strides))
    bn = [numpy_helper.from_array(v.astype(np.float32), n) for n, v in
          (("s", RNG.uniform(0.5, 1.5, m)), ("sh", RNG.standard_normal(m)), ("mu", RNG.standard_normal(m)),
           ("var", RNG.uniform(0.5, 1.5, m)))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs),
             helper.make_node("Conv", ["x", "w"], ["y2"], **attrs),
             helper.make_node("Conv", ["x", "w"], ["c3"], **attrs),
             helper.make_node("BatchNormalization", ["c3", "s", "sh", "mu", "var"], ["n3"]),
             helper.make_node("Relu", ["n3"], ["y3"])]
    model = _model(nodes, [("x", F, ["N", c, *hw])], [("y", F, None), ("y2", F, None), ("y3", F, None)],
                   [_w("w", (m, c, *kernel)), _w("b", (m,)), *bn])
    check_runs(model, [[_x(1, c, *hw)], [_x(3, c, *hw)]], rtol=1e-4, atol=1e-4)


def test_dilated_conv_with_padding_only_taps_grouped_1d_and_runtime_bias():
    """Depthwise 2-D (DeepLab's MobileNet backbone at dilation 2 on a small map), 1-D, and a bias fed at run time
    (left as written)."""
    dw = helper.make_node("Conv", ["x", "wd"], ["y"], kernel_shape=[5, 5], dilations=[4, 4], pads=[8, 8, 8, 8],
                          group=4)
    one_d = helper.make_node("Conv", ["z", "w1"], ["y1"], kernel_shape=[3], dilations=[10], pads=[10, 10])
    rt = helper.make_node("Conv", ["x", "wr", "br"], ["yr"], kernel_shape=[3, 3], dilations=[9, 9], pads=[9, 9, 9, 9])
    model = _model([dw, one_d, rt], [("x", F, ["N", 4, 3, 3]), ("z", F, ["N", 2, 6]), ("br", F, [3])],
                   [("y", F, None), ("y1", F, None), ("yr", F, None)],
                   [_w("wd", (4, 1, 5, 5)), _w("w1", (3, 2, 3)), _w("wr", (3, 4, 3, 3))])
    check_runs(model, [[_x(2, 4, 3, 3), _x(2, 2, 6), _x(3)], [_x(1, 4, 3, 3), _x(1, 2, 6), _x(3)]],
               rtol=1e-4, atol=1e-4)


def test_decoder_step_with_a_growing_kv_cache():
    """One attention head of a decoder step as GPT-2 / Llama exports write it with past key/values: the new key and
    value concatenated to the past along the sequence axis, the mask's length the past's plus one, and the present
    key/value returned. Each call has a new past length (and batch), through one loaded graph."""
    d = 8
    nodes = [
        helper.make_node("MatMul", ["h", "wq"], ["q"]),
        helper.make_node("MatMul", ["h", "wk"], ["k"]),
        helper.make_node("MatMul", ["h", "wv"], ["v"]),
        helper.make_node("Concat", ["past_k", "k"], ["present_k"], axis=1),
        helper.make_node("Concat", ["past_v", "v"], ["present_v"], axis=1),
        helper.make_node("Transpose", ["present_k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["qk"]),
        helper.make_node("Mul", ["qk", "scale"], ["qks"]),
        # padding mask [B, P + 1] -> additive [B, 1, P + 1]
        helper.make_node("Cast", ["mask"], ["mf"], to=F),
        helper.make_node("Sub", ["one", "mf"], ["inv"]),
        helper.make_node("Mul", ["inv", "neg"], ["bias2"]),
        helper.make_node("Unsqueeze", ["bias2", "ax1"], ["bias"]),
        helper.make_node("Add", ["qks", "bias"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "present_v"], ["out"]),
    ]
    inits = [_w("wq", (d, d)), _w("wk", (d, d)), _w("wv", (d, d)),
             numpy_helper.from_array(np.float32(d ** -0.5), "scale"), numpy_helper.from_array(np.float32(1), "one"),
             numpy_helper.from_array(np.float32(-1e9), "neg"), numpy_helper.from_array(np.array([1], np.int64), "ax1")]
    model = _model(nodes, [("h", F, ["B", 1, d]), ("past_k", F, ["B", "P", d]), ("past_v", F, ["B", "P", d]),
                           ("mask", TensorProto.INT64, ["B", "T"])],
                   [("out", F, None), ("present_k", F, None), ("present_v", F, None)], inits)
    sets = []
    for b, p in ((2, 0), (2, 1), (2, 5), (1, 6), (3, 17), (2, 40)):
        mask = np.ones((b, p + 1), np.int64)
        mask[0, : p // 2] = 0  # left padding of the first sequence
        sets.append([_x(b, 1, d), _x(b, p, d), _x(b, p, d), mask])
    check_runs(model, sets)


# ---- models saved by onnxruntime after its extended optimizations: its own operators, refused by name, domain and
# with what to do instead ----

@pytest.mark.parametrize("op, domain, inputs", [
    ("FusedMatMul", "com.microsoft", ["x", "x"]),          # every transformer at ORT_ENABLE_EXTENDED
    ("FusedConv", "com.microsoft", ["i", "k"]),            # CNNs (Conv + activation)
    ("Conv", "com.microsoft.nchwc", ["i", "k"]),           # CNNs at ORT_ENABLE_ALL (blocked layout)
    ("SimplifiedLayerNormalization", "", ["x", "g"]),      # T5 / Llama RMS norm, in the default domain
])
def test_onnxruntime_optimized_model_operators_are_refused_with_a_way_out(op, domain, inputs):
    import geasync as ga

    nodes = [helper.make_node(op, inputs, ["y"], domain=domain, name=f"ort_{op}")]
    inits = [numpy_helper.from_array(np.ones(4, np.float32), "g"), _w("k", (2, 3, 1, 1))]
    graph = helper.make_graph(nodes, "model", [helper.make_tensor_value_info("x", F, [4, 4]),
                                               helper.make_tensor_value_info("i", F, [1, 3, 2, 2])],
                              [helper.make_tensor_value_info("y", F, None)], initializer=inits)
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=opsets)
    with ga.Session() as s, pytest.raises(ga.GeError) as err:
        s.add_graph(1, ga.Graph.from_onnx(model))
    msg = str(err.value)
    assert f"ort_{op}" in msg and op in msg and "ORT_ENABLE_BASIC" in msg, msg
    assert (f"domain '{domain}'" in msg) if domain else ("not an ONNX operator" in msg), msg


def test_stft_of_a_real_signal_without_the_component_axis():
    """torch.onnx.export's TorchScript exporter (opset 17) writes torch.stft (Whisper's log-mel front end) with a
    [batch, length] signal, no trailing component axis; onnxruntime runs it as a real signal. Checked against
    onnx.reference on the same graph with the axis added (the reference needs it)."""
    n_fft, hop = 16, 4
    window = numpy_helper.from_array(np.hanning(n_fft).astype(np.float32), "win")
    hop_t = numpy_helper.from_array(np.array(hop, np.int64), "hop")
    axis = numpy_helper.from_array(np.array([-1], np.int64), "ax")

    def graph(unsqueeze):
        nodes = [helper.make_node("Unsqueeze", ["audio", "ax"], ["sig"])] if unsqueeze else []
        nodes += [helper.make_node("STFT", ["sig" if unsqueeze else "audio", "hop", "win"], ["spec"], onesided=1),
                  helper.make_node("ReduceL2", ["spec", "ax"], ["mag"], keepdims=0)]
        return _model(nodes, [("audio", F, ["B", "N"])], [("mag", F, None)], [window, hop_t, axis], opset=18)

    from onnx.reference import ReferenceEvaluator

    check_runs(graph(False), [[_x(2, 64)], [_x(1, 103)]], rtol=1e-4, atol=1e-5,
               evaluator=ReferenceEvaluator(graph(True)))
