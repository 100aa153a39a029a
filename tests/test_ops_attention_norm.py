"""Attention, the losses, the normalisations (RMS, Instance, Group, MeanVariance, LRN), RotaryEmbedding, Swish/SwiGLU,
ConvTranspose, LpPool and MaxUnpool checked against ``onnx.reference`` on random inputs beyond the ONNX node cases
(other shapes, dtypes and attribute combinations, edge values, empty batches), and their refusals of bad attributes
and shapes before anything runs."""

from __future__ import annotations

import numpy as np
import pytest

import geasync as ga

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnx_cases import rerun_file_with_instruction_set  # noqa: E402

_TYPES = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.float16: TensorProto.FLOAT16,
          np.int32: TensorProto.INT32, np.int64: TensorProto.INT64, np.bool_: TensorProto.BOOL}

RNG = np.random.default_rng(23)


def _model(op, inputs, n_out=1, opset=23, **attrs):
    names = [f"x{i}" if a is not None else "" for i, a in enumerate(inputs)]
    node = helper.make_node(op, names, [f"y{i}" for i in range(n_out)], **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(f"x{i}", _TYPES[a.dtype.type], a.shape)
         for i, a in enumerate(inputs) if a is not None],
        [helper.make_tensor_value_info(f"y{i}", TensorProto.UNDEFINED, None) for i in range(n_out)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run(model, inputs):
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        return [t.numpy() for t in s.run_graph(1, [a for a in inputs if a is not None])]


def _check(op, inputs, n_out=1, opset=23, rtol=1e-5, atol=1e-6, expected=None, **attrs):
    model = _model(op, inputs, n_out, opset, **attrs)
    if expected is None:
        feeds = {f"x{i}": a for i, a in enumerate(inputs) if a is not None}
        with np.errstate(all="ignore"):  # the reference's own inf - inf and inf * 0 on the edge-value tests
            expected = ReferenceEvaluator(model).run(None, feeds)
    got = _run(model, inputs)
    for g, e in zip(got, expected, strict=True):
        e = np.asarray(e)
        assert g.dtype == e.dtype and g.shape == e.shape, (op, g.dtype, e.dtype, g.shape, e.shape)
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, equal_nan=True)


def _f(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


# ---- Attention ----

@pytest.mark.parametrize("rank3", [False, True])
@pytest.mark.parametrize("causal", [0, 1])
def test_attention_gqa_past_mask_random(rank3, causal):
    b, hq, hkv, sq, skv, past, d, dv = 2, 6, 2, 3, 5, 4, 4, 6
    if rank3:
        q, k, v = _f(b, sq, hq * d), _f(b, skv, hkv * d), _f(b, skv, hkv * dv)
        attrs = {"q_num_heads": hq, "kv_num_heads": hkv}
    else:
        q, k, v = _f(b, hq, sq, d), _f(b, hkv, skv, d), _f(b, hkv, skv, dv)
        attrs = {}
    mask = RNG.random((b, 1, sq, past + skv)) > 0.3
    inputs = [q, k, v, mask, _f(b, hkv, past, d), _f(b, hkv, past, dv)]
    _check("Attention", inputs, n_out=4, is_causal=causal, qk_matmul_output_mode=2, softcap=3.0, scale=0.3, **attrs)


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_attention_other_dtypes_and_short_float_mask(dtype):
    q, k, v = _f(1, 2, 3, 8, dtype=dtype), _f(1, 2, 7, 8, dtype=dtype), _f(1, 2, 7, 8, dtype=dtype)
    mask = _f(3, 5, dtype=dtype)  # shorter than the key sequence: padded with -inf
    _check("Attention", [q, k, v, mask], n_out=4, qk_matmul_output_mode=3,
           rtol=1e-3 if dtype == np.float16 else 1e-7, atol=1e-3 if dtype == np.float16 else 1e-9)


def test_attention_fully_masked_rows_are_zero_and_nan_free():
    q, k, v = _f(1, 1, 2, 4), _f(1, 1, 3, 4), _f(1, 1, 3, 4)
    mask = np.array([[False, False, False], [True, False, True]])
    (y,) = _run(_model("Attention", [q, k, v, mask]), [q, k, v, mask])
    assert np.all(y[0, 0, 0] == 0) and np.all(np.isfinite(y))
    _check("Attention", [q, k, v, mask])


@pytest.mark.parametrize("skv", [1, 7, 37, 130])  # key rows around the vector widths
@pytest.mark.parametrize("mode", [0, 2, 3])
def test_attention_unmasked_rows_vectorised(skv, mode):
    """No mask, causality or window: rows skip the bias and take the vectorised exp; a NaN query, scores of
    +-1e3 (saturated softmax) and denormals against onnx.reference."""
    q, k, v = _f(2, 3, 5, 8) * 4, _f(2, 3, skv, 8) * 4, _f(2, 3, skv, 6)
    q[0, 0, 0, 0] = np.nan
    q[1, 2, 1] = 1e3
    k[0, 1, 0] = 1e-40
    _check("Attention", [q, k, v], n_out=4, qk_matmul_output_mode=mode, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("skv", [1, 9, 64])
@pytest.mark.parametrize("rank3", [False, True])
def test_attention_plain_output_only(skv, rank3):
    """Y alone, no past: 4-D K and V are read in place and each head's PV product is written straight into Y (3-D
    inputs are gathered per head first); NaN / inf queries in some rows, so the NaN rows are redone."""
    b, h, sq, d = 2, 3, 17, 8
    q = _f(b, h, sq, d) * 3
    q[0, 1, 5, 2] = np.nan
    q[1, 2, 16, 0] = np.inf
    k, v = _f(b, h, skv, d), _f(b, h, skv, d)
    attrs = {}
    if rank3:
        q, k, v = (x.transpose(0, 2, 1, 3).reshape(b, x.shape[2], h * d) for x in (q, k, v))
        attrs = {"q_num_heads": h, "kv_num_heads": h}
    _check("Attention", [q, k, v], rtol=2e-5, atol=1e-6, **attrs)


@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_attention_fallback_instruction_sets(isa):
    rerun_file_with_instruction_set(__file__, isa, select="test_attention")


# ---- losses ----

@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("tdtype", [np.int32, np.int64])
def test_losses_random(op, reduction, tdtype):
    x = _f(4, 6, 3, dtype=np.float64)
    t = RNG.integers(0, 6, (4, 3)).astype(tdtype)
    t[0, 0] = 2  # ignored below
    w = RNG.random(6).astype(np.float64)
    n_out = 2 if op == "SoftmaxCrossEntropyLoss" else 1
    _check(op, [x, t, w], n_out=n_out, reduction=reduction, ignore_index=2, rtol=1e-9, atol=1e-12)


def test_loss_target_out_of_range_fails_the_run():
    x, t = _f(2, 3), np.array([0, 7], np.int64)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(_model("NegativeLogLikelihoodLoss", [x, t])))
        with pytest.raises(ga.GeError, match="target value 7 is outside"):
            s.run_graph(1, [x, t])


# ---- normalisations, rotary, gates ----

def test_rms_normalization_broadcast_scale_and_edge_values():  # statistics in double: no float32 overflow
    x = _f(3, 4, 5)
    x[0, 0] = [np.nan, 1e-40, -1e-40, 1e3, 0.0]
    x[1, 1] = 0.0  # an all-zero row: 0 / sqrt(epsilon)
    _check("RMSNormalization", [x, _f(1, 5)], axis=-2, epsilon=1e-3, rtol=1e-4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_instance_and_group_normalization(dtype):
    x = _f(2, 6, 3, 4, dtype=dtype)
    _check("InstanceNormalization", [x, _f(6, dtype=dtype), _f(6, dtype=dtype)], epsilon=1e-3, rtol=1e-4, atol=1e-5)
    _check("GroupNormalization", [x, _f(6, dtype=dtype), _f(6, dtype=dtype)], num_groups=3, opset=21, rtol=1e-4,
           atol=1e-5)


def test_group_normalization_opset18_per_group_scale():
    x, s, b = _f(2, 6, 5), _f(3), _f(3)
    xg = x.reshape(2, 3, -1)
    norm = (xg - xg.mean(-1, keepdims=True)) / np.sqrt(xg.var(-1, keepdims=True) + 1e-5)
    want = (norm * s[None, :, None] + b[None, :, None]).reshape(x.shape)
    _check("GroupNormalization", [x, s, b], num_groups=3, opset=18, expected=[want], rtol=1e-4, atol=1e-5)


def test_mvn_lrn_swish_swiglu():
    x = _f(2, 5, 3, 4)
    _check("MeanVarianceNormalization", [x], axes=[1, 3], opset=13, rtol=1e-4, atol=1e-5)
    # N == C: the reference's LRN loops its channel window over range(N)
    _check("LRN", [_f(5, 5, 3, 2)], size=4, alpha=1e-2, beta=0.6, bias=1.5, opset=13, rtol=1e-5)
    _check("Swish", [x], alpha=0.7, opset=24)
    _check("SwiGLU", [x, _f(2, 5, 3, 4)], alpha=1.3, opset=28)


@pytest.mark.parametrize("beta", [0.75, 0.5, 1.0])
def test_lrn_square_root_betas(beta):
    # the betas computed by square roots instead of pow; N == C as above
    x = _f(6, 6, 4, 3) * 4
    _check("LRN", [x], size=3, alpha=0.3, beta=beta, bias=1.0, opset=13, rtol=1e-5)


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding_partial_3d(interleaved):
    x = _f(2, 5, 3 * 8)
    cos, sin = _f(10, 3), _f(10, 3)
    pos = RNG.integers(0, 10, (2, 5)).astype(np.int64)
    _check("RotaryEmbedding", [x, cos, sin, pos], num_heads=3, rotary_embedding_dim=6, interleaved=interleaved)


# ---- ConvTranspose, LpPool, MaxUnpool ----

def _conv_transpose_numpy(x, w, b, stride, pad, group):
    n, c, h = x.shape
    mg, k = w.shape[1], w.shape[2]
    full = (h - 1) * stride + k
    y = np.zeros((n, mg * group, full))
    for g in range(group):
        for ci in range(c // group):
            for m in range(mg):
                for i in range(h):
                    y[:, g * mg + m, i * stride:i * stride + k] += np.outer(x[:, g * (c // group) + ci, i],
                                                                           w[g * (c // group) + ci, m])
    return (y[:, :, pad:full - pad] + b[None, :, None]).astype(x.dtype)


def test_conv_transpose_groups_with_bias_against_numpy():
    x, w, b = _f(2, 4, 5), _f(4, 3, 3), _f(6)
    want = _conv_transpose_numpy(x, w, b, 2, 1, 2)
    _check("ConvTranspose", [x, w, b], group=2, strides=[2], pads=[1, 1], opset=22, expected=[want], rtol=1e-5)


@pytest.mark.parametrize("attrs", [
    {"strides": [2, 1], "dilations": [1, 2], "output_padding": [1, 0]},
    {"strides": [2, 3], "auto_pad": "SAME_LOWER"},
    {"strides": [1, 2], "pads": [0, 1, 2, 0]},
])
def test_conv_transpose_2d_attributes(attrs):
    _check("ConvTranspose", [_f(2, 3, 4, 5), _f(3, 2, 3, 2), _f(2)], opset=22, rtol=1e-5, **attrs)


@pytest.mark.parametrize("x_shape,w_shape,attrs", [
    ((1, 4, 5, 9), (4, 3, 2, 2), {"strides": [2, 2]}),
    ((2, 6, 3, 17), (6, 2, 3, 3), {"strides": [3, 3]}),
    ((1, 3, 4, 7), (3, 2, 2, 3), {"strides": [2, 3]}),
    ((1, 3, 4, 7), (3, 2, 1, 2), {"strides": [1, 2]}),
    ((1, 2, 3, 4, 5), (2, 2, 2, 2, 2), {"strides": [2, 2, 2]}),
    ((2, 3, 11), (3, 4, 2), {"strides": [2]}),
    ((1, 4, 5, 9), (4, 3, 2, 2), {"strides": [2, 2], "output_padding": [1, 1]}),  # not tiled: the scatter
    ((1, 4, 5, 9), (4, 3, 2, 2), {"strides": [2, 2], "pads": [1, 0, 1, 0]}),
])
@pytest.mark.parametrize("bias", [False, True])
def test_conv_transpose_stride_equal_to_kernel(x_shape, w_shape, attrs, bias):
    # Windows that tile the output (each output one product sum) and near misses that take the scatter; edge values.
    x, w = _f(*x_shape), _f(*w_shape)
    x.flat[RNG.choice(x.size, 4, replace=False)] = [np.nan, np.inf, 1e-40, -0.0]
    b = _f(w_shape[1]) if bias else None
    _check("ConvTranspose", [x, w] + ([b] if bias else []), opset=22, rtol=1e-5, atol=1e-5, **attrs)


def test_conv_transpose_stride_equal_to_kernel_groups_against_numpy():
    x, w, b = _f(2, 6, 13), _f(6, 2, 3), _f(6)
    want = _conv_transpose_numpy(x, w, b, 3, 0, 3)
    _check("ConvTranspose", [x, w, b], group=3, strides=[3], opset=22, expected=[want], rtol=1e-5)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lppool_and_maxunpool(p):
    _check("LpPool", [_f(1, 2, 7, 6)], kernel_shape=[3, 2], strides=[2, 2], p=p, opset=22, rtol=1e-5)
    x = _f(1, 2, 2, 2)
    idx = np.array([[[[0, 3], [9, 14]], [[16, 18], [25, 31]]]], np.int64)
    _check("MaxUnpool", [x, idx, np.array([1, 2, 5, 5], np.int64)], kernel_shape=[2, 2], strides=[2, 2], opset=22)


def _assert_refused(op, model, inputs, match):
    """Refused at add_graph (attribute checks) or when the graph compiles for its first run (shape checks), with
    a GeError naming the op."""
    with ga.Session() as s:
        with pytest.raises(ga.GeError, match=match) as ei:
            s.add_graph(1, ga.Graph.from_onnx(model))
            s.run_graph(1, inputs)
        assert f"op {op}" in str(ei.value)


# ---- refusals at add_graph ----

@pytest.mark.parametrize("op,inputs,attrs,match", [
    ("Attention", [_f(1, 2, 3, 4), _f(1, 2, 3, 5), _f(1, 2, 3, 4)], {}, "K .* must be"),
    ("Attention", [_f(1, 3, 8), _f(1, 3, 8), _f(1, 3, 8)], {"q_num_heads": 3, "kv_num_heads": 2}, "not a multiple"),
    ("Attention", [_f(1, 2, 3, 4), _f(1, 2, 3, 4), _f(1, 2, 3, 4)], {"qk_matmul_output_mode": 7},
     "qk_matmul_output_mode"),
    ("NegativeLogLikelihoodLoss", [_f(2, 3), np.zeros(2, np.int64)], {"reduction": "avg"}, "reduction"),
    ("SoftmaxCrossEntropyLoss", [_f(2, 3), np.zeros(3, np.int64)], {}, "target"),
    ("RMSNormalization", [_f(2, 3), _f(4)], {}, "does not broadcast"),
    ("GroupNormalization", [_f(2, 6, 3), _f(6), _f(6)], {"num_groups": 4}, "num_groups"),
    ("LRN", [_f(1, 3, 4, 4)], {}, "size"),
    ("RotaryEmbedding", [_f(2, 4, 3, 8), _f(10, 3), _f(10, 3), np.zeros((2, 3), np.int64)], {}, "cos_cache"),
    ("ConvTranspose", [_f(1, 3, 4, 4), _f(2, 2, 3, 3)], {}, "W .* must be"),
    ("ConvTranspose", [_f(1, 2, 4, 4), _f(2, 2, 3, 3)], {"strides": [0, 1]}, "positive"),
    ("LpPool", [_f(1, 2, 4, 4)], {}, "kernel_shape"),
])
def test_bad_attributes_and_shapes_refused_before_running(op, inputs, attrs, match):
    """Refused at add_graph (attribute checks) or when the graph compiles for its first run (shape checks)."""
    model = _model(op, inputs, opset=22 if op in ("ConvTranspose", "LpPool") else 23, **attrs)
    _assert_refused(op, model, inputs, match)


# ---- empty tensors ----

@pytest.mark.parametrize("op,inputs,attrs,opset,shape", [
    ("Attention", [_f(0, 2, 3, 4), _f(0, 2, 5, 4), _f(0, 2, 5, 4)], {}, 23, (0, 2, 3, 4)),
    ("Attention", [_f(1, 2, 3, 4), _f(1, 2, 0, 4), _f(1, 2, 0, 4)], {}, 23, (1, 2, 3, 4)),  # no keys: Y = 0
    ("SoftmaxCrossEntropyLoss", [_f(2, 3, 0), np.zeros((2, 0), np.int64)], {"reduction": "none"}, 23, (2, 0)),
    ("RMSNormalization", [_f(0, 5), _f(5)], {}, 23, (0, 5)),
    ("GroupNormalization", [_f(0, 4, 2), _f(4), _f(4)], {"num_groups": 2}, 21, (0, 4, 2)),
    ("RotaryEmbedding", [_f(0, 4, 3, 8), _f(0, 3, 4), _f(0, 3, 4)], {}, 23, (0, 4, 3, 8)),
    ("ConvTranspose", [_f(1, 0, 3), _f(0, 3, 2)], {}, 22, (1, 3, 4)),  # no input channels: Y = 0
    ("LpPool", [_f(0, 2, 4, 4)], {"kernel_shape": [2, 2]}, 22, (0, 2, 3, 3)),
])
def test_empty_tensors(op, inputs, attrs, opset, shape):
    (y,) = _run(_model(op, inputs, opset=opset, **attrs), inputs)
    assert y.shape == shape and y.dtype == np.float32
    assert np.all(y == 0)


@pytest.mark.parametrize("auto_pad,match", [("SAME", "auto_pad' is 'SAME'; expected NOTSET"), (1, "auto_pad")])
@pytest.mark.parametrize("op,inputs,attrs", [
    ("Conv", [_f(1, 2, 4, 4), _f(3, 2, 3, 3)], {}),
    ("ConvTranspose", [_f(1, 2, 4, 4), _f(2, 2, 3, 3)], {}),
    ("LpPool", [_f(1, 2, 4, 4)], {"kernel_shape": [2, 2]}),
    ("MaxPool", [_f(1, 2, 4, 4)], {"kernel_shape": [2, 2]}),
    ("AveragePool", [_f(1, 2, 4, 4)], {"kernel_shape": [2, 2]}),
])
def test_auto_pad_that_is_not_one_of_the_four_modes_is_refused(op, inputs, attrs, auto_pad, match):
    model = _model(op, inputs, opset=22, auto_pad=auto_pad, **attrs)
    _assert_refused(op, model, inputs, match)


@pytest.mark.parametrize("op,inputs,attrs,match", [
    ("Pad", [_f(2, 3), np.array([0, 1, 0, 1], np.int64)], {"mode": "mirror"},
     "attribute 'mode' is 'mirror'; expected constant, reflect, edge or wrap"),
    ("Pad", [_f(2, 3), np.array([0, 1, 0, 1], np.int64)], {"mode": 2}, "attribute 'mode'"),
    ("ScatterElements", [_f(2, 3), np.zeros((1, 3), np.int64), _f(1, 3)], {"reduction": "avg"},
     "attribute 'reduction' is 'avg'; expected none, add, mul, max or min"),
    ("ScatterND", [_f(2, 3), np.zeros((1, 1), np.int64), _f(1, 3)], {"reduction": 1}, "attribute 'reduction'"),
])
def test_a_string_attribute_outside_its_choices_is_refused_naming_them(op, inputs, attrs, match):
    model = _model(op, inputs, opset=22, **attrs)
    _assert_refused(op, model, inputs, match)
