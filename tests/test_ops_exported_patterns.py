"""The graph patterns ``torch.onnx.export`` writes (the dynamo exporter at opsets 18 and 23, the TorchScript exporter at
opsets 14 and 17), rebuilt with onnx.helper so that no torch is needed: dynamic batch and sequence dims carried through
Shape(start, end) / Squeeze / Concat / Reshape(allowzero=1) arithmetic, constants as initializers, Range + Gather
position embeddings, Expand + Trilu + Not + Where causal masks, bool padding masks, opset-18 reductions with an axes
input, the opset-23 RMSNormalization / Gelu / Attention, RNNs fed by batch-sized initial states, Resize / pools /
flips as the exporters spell them, and the refusal of ``export_modules_as_functions`` models. Every graph runs at two
input sizes through one loaded graph and is compared with onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest

import geasync as ga
from geasync import _check

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx_cases import check_runs  # noqa: E402

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
RNG = np.random.default_rng(2026)


def _init(name, value, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def _i64(name, *values):
    return _init(name, list(values), np.int64)


def _model(nodes, inputs, outputs, inits=(), opset=18):
    graph = helper.make_graph(nodes, "exported", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs], initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ---- a GPT block's attention as the dynamo exporter (opset 18) writes it: batch and sequence both dynamic ----

def _causal_block(d=8, heads=2, vocab=11, max_t=9):
    hd = d // heads
    nodes = [
        helper.make_node("Shape", ["ids"], ["b"], start=0, end=1),
        helper.make_node("Shape", ["ids"], ["t"], start=1, end=2),
        helper.make_node("Squeeze", ["t"], ["t_scalar"]),
        helper.make_node("Range", ["zero", "t_scalar", "one"], ["positions"]),
        helper.make_node("Gather", ["tok", "ids"], ["e_tok"], axis=0),
        helper.make_node("Gather", ["pos", "positions"], ["e_pos"], axis=0),
        helper.make_node("Add", ["e_tok", "e_pos"], ["x"]),
        helper.make_node("LayerNormalization", ["x", "ln_w", "ln_b"], ["h"], axis=-1, epsilon=1e-5, stash_type=1),
        helper.make_node("MatMul", ["h", "w_qkv"], ["qkv0"]),
        helper.make_node("Add", ["qkv0", "b_qkv"], ["qkv"]),
        helper.make_node("Split", ["qkv"], ["q", "k", "v"], axis=2, num_outputs=3),
        helper.make_node("Concat", ["b", "t", "heads", "hd"], ["bthd"], axis=0),
        helper.make_node("Reshape", ["q", "bthd"], ["q4"], allowzero=1),
        helper.make_node("Reshape", ["k", "bthd"], ["k4"], allowzero=1),
        helper.make_node("Reshape", ["v", "bthd"], ["v4"], allowzero=1),
        helper.make_node("Transpose", ["q4"], ["qh"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["v4"], ["vh"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["qh", "kt"], ["s0"]),
        helper.make_node("Mul", ["s0", "scale"], ["s"]),
        helper.make_node("Concat", ["t", "t"], ["tt"], axis=0),
        helper.make_node("Expand", ["true", "tt"], ["ones"]),
        helper.make_node("Trilu", ["ones", "zero"], ["tril"], upper=0),
        helper.make_node("Not", ["tril"], ["future"]),
        helper.make_node("Where", ["future", "neg_inf", "s"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "vh"], ["o4"]),
        helper.make_node("Transpose", ["o4"], ["o4t"], perm=[0, 2, 1, 3]),
        helper.make_node("Concat", ["b", "t", "minus1"], ["btd"], axis=0),
        helper.make_node("Reshape", ["o4t", "btd"], ["o"], allowzero=1),
        helper.make_node("MatMul", ["o", "tok_t"], ["logits"]),  # the head tied to the token embedding
    ]
    tok = _randn(vocab, d)
    inits = [_init("tok", tok), _init("pos", _randn(max_t, d)), _init("tok_t", tok.T.copy()),
             _init("ln_w", 1 + 0.1 * _randn(d)), _init("ln_b", 0.1 * _randn(d)),
             _init("w_qkv", _randn(d, 3 * d) / np.sqrt(d)), _init("b_qkv", 0.1 * _randn(3 * d)),
             _init("zero", 0, np.int64), _init("one", 1, np.int64), _i64("heads", heads), _i64("hd", hd),
             _i64("minus1", -1), _init("scale", 1 / np.sqrt(hd), np.float32), _init("true", True, np.bool_),
             _init("neg_inf", -np.inf, np.float32)]
    return _model(nodes, [("ids", I64, ["batch", "seq"])], [("logits", F, ["batch", "seq", vocab])], inits)


def test_dynamo_causal_attention_with_dynamic_batch_and_sequence():
    model = _causal_block()
    check_runs(model, [[RNG.integers(0, 11, (2, 7))], [RNG.integers(0, 11, (3, 4))], [RNG.integers(0, 11, (1, 1))]],
                rtol=1e-4)


# ---- nn.TransformerEncoderLayer's key padding mask (dynamo, opset 18): bool mask -> -inf float mask ----

def test_dynamo_key_padding_mask_to_additive_mask():
    nodes = [
        helper.make_node("Shape", ["mask"], ["mshape"], start=0),
        helper.make_node("Expand", ["zero_f", "mshape"], ["zeros_like"]),
        helper.make_node("Where", ["mask", "neg_inf", "zeros_like"], ["additive"]),
        helper.make_node("Shape", ["mask"], ["b"], start=0, end=1),
        helper.make_node("Shape", ["mask"], ["t"], start=-1),
        helper.make_node("Concat", ["minus1", "one", "one", "t"], ["b11t"], axis=0),
        helper.make_node("Reshape", ["additive", "b11t"], ["m4"], allowzero=1),
        helper.make_node("Expand", ["m4", "one_h_one_one"], ["mh"]),
        helper.make_node("Add", ["scores", "mh"], ["s"]),
        helper.make_node("Softmax", ["s"], ["p"], axis=-1),
        helper.make_node("Cast", ["mask"], ["mask_i"], to=TensorProto.INT64),
        helper.make_node("ReduceSum", ["mask_i", "axis1"], ["n_pad"], keepdims=0),
    ]
    inits = [_init("zero_f", 0.0, np.float32), _init("neg_inf", -np.inf, np.float32), _i64("minus1", -1),
             _i64("one", 1), _i64("one_h_one_one", 1, 3, 1, 1), _i64("axis1", 1)]
    model = _model(nodes, [("scores", F, ["b", 3, "t", "t"]), ("mask", B, ["b", "t"])],
                   [("p", F, ["b", 3, "t", "t"]), ("n_pad", I64, ["b"])], inits)

    def feeds(b, t):
        lengths = np.arange(b) % t + 1 if t > 1 else np.ones(b, np.int64)
        mask = np.arange(t)[None, :] >= np.maximum(lengths, 1)[:, None]  # padding after each sequence's length
        return [_randn(b, 3, t, t), mask]

    check_runs(model, [feeds(2, 5), feeds(4, 3)])


# ---- opset 23: RMSNormalization, Gelu and Attention as the dynamo exporter writes them ----

def test_opset23_rmsnorm_gelu_attention():
    nodes = [
        helper.make_node("RMSNormalization", ["x", "w"], ["n"], axis=-1, epsilon=1e-6, stash_type=1),
        helper.make_node("Gelu", ["n"], ["g"], approximate="none"),
        helper.make_node("Gelu", ["n"], ["gt"], approximate="tanh"),
        helper.make_node("Shape", ["x"], ["b"], start=0, end=1),
        helper.make_node("Concat", ["b", "heads_t_hd"], ["shape4"], axis=0),
        helper.make_node("Reshape", ["g", "shape4"], ["q0"], allowzero=1),
        helper.make_node("Transpose", ["q0"], ["q"], perm=[0, 2, 1, 3]),
        helper.make_node("Attention", ["q", "q", "q"], ["causal"], is_causal=1, qk_matmul_output_mode=0, softcap=0.0),
        # a key padding mask broadcast over heads and query rows ([B, 1, 1, T]), as nn.MultiheadAttention's is
        helper.make_node("Attention", ["q", "q", "q", "kmask"], ["padded"], is_causal=0, qk_matmul_output_mode=0,
                         softcap=0.0),
    ]
    inits = [_init("w", 1 + 0.1 * _randn(8)), _i64("heads_t_hd", 6, 2, 4)]
    model = _model(nodes, [("x", F, ["b", 6, 8]), ("kmask", B, ["b", 1, 1, 6])],
                   [("gt", F, ["b", 6, 8]), ("causal", F, ["b", 2, 6, 4]), ("padded", F, ["b", 2, 6, 4])], inits,
                   opset=23)

    def feeds(b):
        keep = np.arange(6)[None, :] < (np.arange(b) % 3 + 4)[:, None]
        return [_randn(b, 6, 8), keep.reshape(b, 1, 1, 6)]

    check_runs(model, [feeds(2), feeds(3)], rtol=1e-4)


# ---- TorchScript exporter (opsets 14 / 17): LayerNorm and RMSNorm spelled out, shapes by Shape + Gather ----

@pytest.mark.parametrize("opset", [14, 17, 18])
def test_torchscript_decomposed_norms_and_shape_gathers(opset):
    axes_attr = opset < 18  # opset 18 moved ReduceMean's axes to an input
    red = (lambda i, o: helper.make_node("ReduceMean", [i], [o], axes=[-1], keepdims=1)) if axes_attr else \
        (lambda i, o: helper.make_node("ReduceMean", [i, "last"], [o], keepdims=1))
    nodes = [
        red("x", "mean"),
        helper.make_node("Sub", ["x", "mean"], ["xc"]),
        helper.make_node("Pow", ["xc", "two"], ["sq"]),
        red("sq", "var"),
        helper.make_node("Add", ["var", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["sd"]),
        helper.make_node("Div", ["xc", "sd"], ["ln"]),
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "idx0"], ["b"], axis=0),
        helper.make_node("Gather", ["shape", "idx1"], ["t"], axis=0),
        helper.make_node("Div", ["t", "two_i"], ["half"]),  # python's t // 2 on a positive int64
        helper.make_node("Mul", ["half", "two_i"], ["even"]),
        helper.make_node("Unsqueeze", ["b", "zero_axis"], ["b1"]),
        helper.make_node("Unsqueeze", ["even", "zero_axis"], ["e1"]),
        helper.make_node("Concat", ["b1", "e1", "minus1"], ["target"], axis=0),
        helper.make_node("Slice", ["ln", "zero_axis", "e1", "one_axis"], ["head"]),
        helper.make_node("Reshape", ["head", "target"], ["y"]),
        helper.make_node("Shape", ["y"], ["head_shape"]),
        helper.make_node("ConstantOfShape", ["head_shape"], ["filled"],
                         value=numpy_helper.from_array(np.array([0.5], np.float32))),
        helper.make_node("Add", ["y", "filled"], ["out"]),
        helper.make_node("Mod", ["shape", "three"], ["shape_mod"], fmod=0),
    ]
    inits = [_i64("last", -1), _init("two", 2.0, np.float32), _init("eps", 1e-5, np.float32),
             _init("idx0", 0, np.int64), _init("idx1", 1, np.int64), _init("two_i", 2, np.int64),
             _i64("zero_axis", 0), _i64("one_axis", 1), _i64("minus1", -1), _i64("three", 3)]
    if axes_attr:
        inits = inits[1:]
    model = _model(nodes, [("x", F, ["b", "t", 6])], [("out", F, None), ("shape_mod", I64, [3])], inits, opset=opset)
    check_runs(model, [[_randn(2, 5, 6)], [_randn(3, 8, 6)]], rtol=1e-4)


# ---- RNNs: the initial state sized by the dynamic batch (TorchScript: ConstantOfShape; dynamo: Expand) ----

@pytest.mark.parametrize("op,direction", [("LSTM", "forward"), ("LSTM", "bidirectional"), ("GRU", "forward"),
                                          ("GRU", "bidirectional")])
def test_rnn_with_batch_sized_initial_state(op, direction):
    hidden, feat, dirs = 5, 4, 2 if direction == "bidirectional" else 1
    gates = 4 if op == "LSTM" else 3
    attrs = {"hidden_size": hidden, "direction": direction}
    if op == "GRU":
        attrs["linear_before_reset"] = 1  # torch's GRU
    state_inputs = ["h0", "h0"] if op == "LSTM" else ["h0"]
    nodes = [
        helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),  # batch_first -> ONNX's [T, B, F]
        helper.make_node("Shape", ["x"], ["b"], start=0, end=1),
        helper.make_node("Concat", ["dirs", "b", "hid"], ["hshape"], axis=0),
        helper.make_node("ConstantOfShape", ["hshape"], ["h0"],
                         value=numpy_helper.from_array(np.zeros(1, np.float32))),
        helper.make_node(op, ["xt", "W", "R", "Bias", ""] + state_inputs, ["Y", "Y_h"], **attrs),
        helper.make_node("Transpose", ["Y"], ["yt"], perm=[2, 0, 1, 3]),  # [B, T, dirs, H]
        helper.make_node("Shape", ["yt"], ["bt"], start=0, end=2),
        helper.make_node("Concat", ["bt", "minus1"], ["bt_1"], axis=0),
        helper.make_node("Reshape", ["yt", "bt_1"], ["y"]),
    ]
    inits = [_i64("dirs", dirs), _i64("hid", hidden), _i64("minus1", -1),
             _init("W", 0.4 * _randn(dirs, gates * hidden, feat)),
             _init("R", 0.4 * _randn(dirs, gates * hidden, hidden)),
             _init("Bias", 0.1 * _randn(dirs, 2 * gates * hidden))]
    model = _model(nodes, [("x", F, ["b", "t", feat])], [("y", F, None), ("Y_h", F, None)], inits, opset=17)
    check_runs(model, [[_randn(2, 6, feat)], [_randn(3, 2, feat)]], rtol=1e-4)


# ---- Resize / pools / flips / indexing as the exporters spell them ----

@pytest.mark.parametrize("mode,ctm", [("nearest", "asymmetric"), ("linear", "half_pixel"),
                                      ("linear", "align_corners"), ("linear", "pytorch_half_pixel")])
def test_resize_by_scales_and_by_sizes(mode, ctm):
    nodes = [
        helper.make_node("Resize", ["x", "", "scales"], ["up"], mode=mode, coordinate_transformation_mode=ctm,
                         nearest_mode="floor", cubic_coeff_a=-0.75),
        helper.make_node("Shape", ["x"], ["nc"], start=0, end=2),
        helper.make_node("Concat", ["nc", "hw"], ["sizes"], axis=0),
        helper.make_node("Resize", ["x", "", "", "sizes"], ["fixed"], mode=mode, coordinate_transformation_mode=ctm,
                         nearest_mode="floor"),
    ]
    inits = [_init("scales", [1.0, 1.0, 2.0, 2.0], np.float32), _i64("hw", 7, 5)]
    model = _model(nodes, [("x", F, ["b", 2, 6, 9])], [("up", F, None), ("fixed", F, None)], inits)
    check_runs(model, [[_randn(2, 2, 6, 9)], [_randn(1, 2, 6, 9)]])


def test_pools_flip_and_index_patterns():
    int_min = np.iinfo(np.int64).min
    nodes = [
        helper.make_node("MaxPool", ["x"], ["mp"], kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 0, 0],
                         ceil_mode=1, dilations=[1, 1]),
        helper.make_node("AveragePool", ["x"], ["ap"], kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 0, 0],
                         ceil_mode=1, count_include_pad=0),
        helper.make_node("AveragePool", ["x"], ["ap_pad"], kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1],
                         count_include_pad=1),
        helper.make_node("Slice", ["x", "m1", "int_min", "last", "m1"], ["flip"]),  # x.flip(-1)
        helper.make_node("Slice", ["x", "one", "int_max", "ax2", "two"], ["strided"]),  # x[:, :, 1::2]
        helper.make_node("GatherND", ["x", "rows"], ["adv"], batch_dims=0),  # x[[1, 0]]
        helper.make_node("CumSum", ["x", "ax2_scalar"], ["cs"]),
        helper.make_node("TopK", ["x", "k"], ["tv", "ti"], axis=-1, largest=1, sorted=1),
        helper.make_node("ArgMax", ["x"], ["am"], axis=1, keepdims=0, select_last_index=0),
    ]
    inits = [_i64("m1", -1), _i64("int_min", int_min), _i64("last", 3), _i64("one", 1),
             _i64("int_max", np.iinfo(np.int64).max), _i64("ax2", 2), _i64("two", 2),
             _init("rows", [[1], [0]], np.int64), _init("ax2_scalar", 2, np.int64), _i64("k", 3)]
    model = _model(nodes, [("x", F, ["b", 3, 11, 13])],
                   [(n, t, None) for n, t in [("mp", F), ("ap", F), ("ap_pad", F), ("flip", F), ("strided", F),
                                              ("adv", F), ("cs", F), ("tv", F), ("ti", I64), ("am", I64)]], inits)
    check_runs(model, [[_randn(2, 3, 11, 13)], [_randn(3, 3, 11, 13)]])


# ---- export_modules_as_functions: refused, with the same advice by `geasync check` as by loading ----

def test_local_function_advice_is_the_same_in_check_and_load():
    fn = helper.make_function("__main__", "Block", ["x"], ["y"],
                              [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "x"], ["y"])],
                              opset_imports=[helper.make_opsetid("", 17)])
    graph = helper.make_graph([helper.make_node("Block", ["x"], ["y"], name="/block/Block", domain="__main__")],
                              "g", [helper.make_tensor_value_info("x", F, ["b", 3])],
                              [helper.make_tensor_value_info("y", F, ["b", 3])])
    model = helper.make_model(graph, functions=[fn], opset_imports=[helper.make_opsetid("", 17),
                                                                     helper.make_opsetid("__main__", 1)])
    report = _check.check_model(model)
    assert not report.runs_on_twin
    (problem,) = report.problems
    assert "model-local function '__main__.Block'" in problem and "inline_local_functions" in problem, problem
    with ga.Session() as s:
        with pytest.raises(ga.GeError) as ei:
            s.add_graph(1, ga.Graph.from_onnx(model))
    assert problem in ei.value.error_message
    import onnx.inliner

    check_runs(onnx.inliner.inline_local_functions(model), [[_randn(2, 3)], [_randn(5, 3)]])


# ---- torch.stft(center=True, return_complex=True).abs() as the dynamo exporter writes it ----

@pytest.mark.parametrize("n_fft,hop", [(64, 16), (400, 160)])  # the radix-2 path and the direct sum
def test_dynamo_stft_magnitude(n_fft, hop):
    length, half = 4 * n_fft, n_fft // 2
    nodes = [
        helper.make_node("Reshape", ["x", "one_m1_len"], ["x3"], allowzero=1),
        helper.make_node("Pad", ["x3", "pads"], ["padded"], mode="reflect"),
        helper.make_node("Reshape", ["padded", "m1_plen"], ["p2"], allowzero=1),
        helper.make_node("Unsqueeze", ["p2", "m1"], ["signal"]),
        helper.make_node("STFT", ["signal", "hop", "window", "n_fft"], ["spec"], onesided=1),
        helper.make_node("Transpose", ["spec"], ["spec_t"], perm=[0, 2, 1, 3]),
        helper.make_node("ReduceL2", ["spec_t", "m1"], ["mag"], keepdims=0),
    ]
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)).astype(np.float32)  # hann_window
    inits = [_i64("one_m1_len", 1, -1, length), _i64("pads", 0, 0, half, 0, 0, half),
             _i64("m1_plen", -1, length + 2 * half), _i64("m1", -1), _init("hop", hop, np.int64),
             _init("window", window), _init("n_fft", n_fft, np.int64)]
    model = _model(nodes, [("x", F, ["b", length])], [("mag", F, None)], inits)
    check_runs(model, [[_randn(2, length)], [_randn(3, length)]], rtol=1e-4, atol=1e-4)


# ---- nn.EmbeddingBag through the dynamo exporter: a Loop that SequenceInserts a row per bag ----

def test_embedding_bag_sequence_loop_is_refused_with_the_reason():
    body = helper.make_graph(
        [helper.make_node("Gather", ["table", "i"], ["row"], axis=0),
         helper.make_node("SequenceInsert", ["seq_in", "row"], ["seq_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("cond_in", B, []),
                 helper.make_tensor_sequence_value_info("seq_in", F, None)],
        [helper.make_tensor_value_info("cond_out", B, []), helper.make_tensor_sequence_value_info("seq_out", F, None)])
    nodes = [helper.make_node("SequenceEmpty", [], ["empty"], name="n16"),
             helper.make_node("Loop", ["n_bags", "true", "empty"], ["rows"], name="loop", body=body),
             helper.make_node("ConcatFromSequence", ["rows"], ["y"], name="concat", axis=0)]
    model = _model(nodes, [("n_bags", I64, [])], [("y", F, None)],
                   [_init("table", _randn(4, 3)), _init("true", True, np.bool_)])
    problems = _check.check_model(model).problems
    assert len(problems) == 3, problems  # every sequence operator, the one inside the Loop's body too
    for where, op in [("'n16'", "SequenceEmpty"), ("'loop'", "SequenceInsert"), ("'concat'", "ConcatFromSequence")]:
        (p,) = [p for p in problems if p.startswith(f"node {where}")]
        assert op in p and "no ONNX sequence values" in p, p
    with ga.Session() as s:
        with pytest.raises(ga.GeError) as ei:
            s.add_graph(1, ga.Graph.from_onnx(model))
    assert "SequenceEmpty" in ei.value.error_message and "no ONNX sequence values" in ei.value.error_message


# ---- the late stages of a ResNet at small inputs: 3x3 / 5x5 convolutions on maps a few columns wide ----

@pytest.mark.parametrize("c,m,hw,k,pad,group", [
    (32, 32, (6, 6), 3, 1, 1), (16, 20, (8, 8), 3, 1, 1), (8, 8, (5, 7), 3, 0, 1), (12, 6, (7, 9), 3, 1, 2),
    (8, 16, (6, 6), 5, 2, 1), (4, 9, (3, 12), 3, 1, 1), (24, 8, (1, 10), 3, 1, 1)])
def test_conv_relu_on_small_maps(c, m, hw, k, pad, group):
    kh = 1 if hw[0] == 1 else k  # a Conv1d-like [1, k] kernel on one-row maps
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["conv"], kernel_shape=[kh, k], pads=[pad if kh > 1 else 0,
                                                                                             pad] * 2, group=group),
             helper.make_node("Relu", ["conv"], ["relu"]),
             helper.make_node("Conv", ["x", "w"], ["plain"], kernel_shape=[kh, k],
                              pads=[pad if kh > 1 else 0, pad] * 2, group=group)]
    inits = [_init("w", _randn(m, c // group, kh, k) / np.sqrt(c * k)), _init("b", _randn(m))]
    model = _model(nodes, [("x", F, ["b", c, *hw])], [("relu", F, None), ("plain", F, None)], inits, opset=17)
    x2 = _randn(2, c, *hw)
    x2[1, 0, 0, -1] = np.nan  # a NaN reaches exactly the outputs whose window holds it
    x2[0, c - 1, hw[0] // 2, 0] = np.inf
    check_runs(model, [[x2], [_randn(3, c, *hw)], [_randn(1, c, *hw)]], rtol=1e-4, atol=1e-5)


# ---- ResNet downsampling at small inputs: stride-2 convolutions on maps a few columns wide ----

@pytest.mark.parametrize("c,m,hw,k,pads,group", [
    (16, 32, (11, 11), 3, [1, 1, 1, 1], 1), (8, 16, (16, 16), 3, [1, 1, 1, 1], 1), (8, 16, (5, 5), 3, [1, 1, 1, 1], 1),
    (12, 20, (7, 7), 3, [1, 1, 1, 1], 1), (16, 12, (13, 13), 3, [1, 1, 1, 1], 2), (9, 7, (13, 11), 3, [0, 1, 2, 0], 1),
    (8, 8, (12, 12), 3, [1, 1, 1, 1], 8), (8, 16, (9, 10), 5, [2, 2, 2, 2], 1), (6, 10, (10, 9), 4, [1, 2, 2, 1], 1),
    (16, 32, (11, 11), 1, [0, 0, 0, 0], 1), (4, 8, (2, 14), 3, [1, 1, 1, 1], 1), (8, 8, (34, 33), 3, [1, 1, 1, 1], 1),
    (16, 16, (15, 13), 3, [1, 0, 1, 2], 16), (5, 5, (7, 7), 3, [1, 1, 1, 1], 5), (8, 16, (31, 20), 3, [1, 1, 1, 1], 8)])
def test_conv_relu_stride2_on_small_maps(c, m, hw, k, pads, group):
    attrs = dict(kernel_shape=[k, k], strides=[2, 2], pads=pads, group=group)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["conv"], **attrs),
             helper.make_node("Relu", ["conv"], ["relu"]),
             helper.make_node("Conv", ["x", "w"], ["plain"], **attrs)]
    inits = [_init("w", _randn(m, c // group, k, k) / np.sqrt(c * k)), _init("b", _randn(m))]
    model = _model(nodes, [("x", F, ["b", c, *hw])], [("relu", F, None), ("plain", F, None)], inits, opset=17)
    x2 = _randn(2, c, *hw)
    x2[1, 0, 0, -1] = np.nan  # a NaN reaches exactly the outputs whose window holds it
    x2[0, c - 1, hw[0] // 2, 0] = np.inf
    x2[1, c // 2, -1, hw[1] // 2] = -np.inf
    check_runs(model, [[x2], [_randn(3, c, *hw)], [_randn(1, c, *hw)]], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_small_map_convs_fallback_instruction_sets(isa):
    """The small-map conv tests above with the twin capped at the fallback instruction sets (AVX2 has its own flat
    stride-2 kernel)."""
    from onnx_cases import rerun_file_with_instruction_set
    rerun_file_with_instruction_set(__file__, isa, select="small_maps")
