"""Quantised CNNs as users make them: small ResNet-style and MobileNet-style float networks (Conv with folded
BatchNorm, Relu, Add residuals, MaxPool, GlobalAveragePool, Gemm; depthwise-separable blocks) quantised by
onnxruntime's quantize_static (skipped without onnxruntime), and standard-domain QOperator chains (QuantizeLinear,
QLinearConv per channel / per tensor / depthwise, MaxPool on 8-bit values, DequantizeLinear) built with onnx.helper,
all through the public API against onnx.reference.

Integer results must be exact. The QDQ models' outputs are float Gemm results of dequantised values: the twin runs
their Convs in float as written, summing in another order than the reference, so a requantisation landing within
float rounding of a half may flip one step and the flip propagates; they are checked within a few output steps, as
tests/test_ops_quant_models.py and docs/operators.md describe.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import geasync as ga  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from onnx_cases import run_twin  # noqa: E402

F = TensorProto.FLOAT
QT = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}


# ---- QOperator chains in the standard domain (no onnxruntime needed) ----

def _qconv_chain(xt, wt, *, per_channel, xzp, yzp, x_scale=0.05, y_scale=0.08, c=8, depthwise=True, seed=0,
                 w_range=None):
    """x (float) -> QuantizeLinear -> QLinearConv 3x3 (c -> c) -> [QLinearConv depthwise 3x3 stride 2] -> MaxPool
    -> DequantizeLinear, every intermediate a graph output too (so that each integer step is compared)."""
    rng = np.random.default_rng(seed)
    wi = np.iinfo(wt)
    lo, hi = w_range or (wi.min, wi.max)
    inits, nodes = [], []

    def const(name, a):
        inits.append(numpy_helper.from_array(np.asarray(a), name))
        return name

    const("xs", np.float32(x_scale))
    const("xz", xt(xzp))
    const("ys", np.float32(y_scale))
    const("yz", xt(yzp))
    nodes.append(helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["q0"]))
    prev, outs = "q0", ["q0"]
    convs = [(c, 1, 1)] + ([(c, c, 2)] if depthwise else [])
    for i, (cout, group, stride) in enumerate(convs):
        w = rng.integers(lo, hi, (cout, c // group, 3, 3), endpoint=True).astype(wt)
        ws = (rng.uniform(0.5, 2.0, cout if per_channel else ()) * 0.02).astype(np.float32)
        wz = np.zeros(cout if per_channel else (), wt)
        b = rng.integers(-2000, 2000, cout).astype(np.int32)
        names = [prev, "xs" if i == 0 else "ys", "xz" if i == 0 else "yz", const(f"w{i}", w), const(f"ws{i}", ws),
                 const(f"wz{i}", wz), "ys", "yz", const(f"b{i}", b)]
        nodes.append(helper.make_node("QLinearConv", names, [f"q{i + 1}"], pads=[1, 1, 1, 1], group=group,
                                      strides=[stride, stride]))
        prev = f"q{i + 1}"
        outs.append(prev)
    nodes += [helper.make_node("MaxPool", [prev], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
              helper.make_node("DequantizeLinear", ["mp", "ys", "yz"], ["y"])]
    outs += ["mp"]
    vi = [helper.make_tensor_value_info(n, QT[xt], None) for n in outs] + [helper.make_tensor_value_info("y", F, None)]
    g = helper.make_graph(nodes, "qchain", [helper.make_tensor_value_info("x", F, [1, c, 12, 12])], vi,
                          initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])


def _check_exact(model, x):
    got = run_twin(model, {"x": x})
    want = [np.asarray(w) for w in ReferenceEvaluator(model).run(None, {"x": x})]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_array_equal(g, w)
    return got


@pytest.mark.parametrize("xt", [np.uint8, np.int8])
@pytest.mark.parametrize("per_channel", [True, False])
def test_qoperator_chain_matches_reference_exactly(xt, per_channel):
    info = np.iinfo(xt)
    mid = (int(info.min) + int(info.max) + 1) // 2
    model = _qconv_chain(xt, np.int8, per_channel=per_channel, xzp=mid, yzp=mid - 3)
    x = (np.random.default_rng(1).standard_normal((1, 8, 12, 12)) * 3).astype(np.float32)
    got = _check_exact(model, x)
    assert len(np.unique(got[2])) > 20  # the chain is not degenerate (everything saturated or zero)


@pytest.mark.parametrize("xt,xzp,yzp", [(np.uint8, 0, 0), (np.uint8, 255, 255), (np.uint8, 0, 255),
                                        (np.int8, -128, 127), (np.int8, 127, -128)])
def test_qoperator_chain_zero_points_at_the_ends(xt, xzp, yzp):
    """Zero points at 0 / 255 (-128 / 127): half the inputs saturate when quantised, the padding holds the zero
    point, and the outputs pile up at one end."""
    model = _qconv_chain(xt, np.int8, per_channel=True, xzp=xzp, yzp=yzp, seed=2)
    x = (np.random.default_rng(3).standard_normal((1, 8, 12, 12)) * 4).astype(np.float32)
    _check_exact(model, x)


@pytest.mark.parametrize("xt", [np.uint8, np.int8])
def test_qoperator_chain_saturates(xt):
    """An output scale far too small: most requantised values saturate at both ends of the type; full-range
    weights (-128 included) and inputs far beyond the input scale's range."""
    info = np.iinfo(xt)
    model = _qconv_chain(xt, np.int8, per_channel=True, xzp=0, yzp=0, y_scale=0.001, seed=4)
    x = (np.random.default_rng(5).standard_normal((1, 8, 12, 12)) * 100).astype(np.float32)
    got = _check_exact(model, x)
    assert (got[1] == info.min).sum() > 50 and (got[1] == info.max).sum() > 50


def test_qoperator_chain_uint8_weights():
    """uint8 weights with per-channel zero points (onnxruntime writes those for QUInt8 weights)."""
    model = _qconv_chain(np.uint8, np.uint8, per_channel=True, xzp=128, yzp=100, depthwise=False, seed=6)
    for t in model.graph.initializer:
        if t.name == "wz0":
            t.CopyFrom(numpy_helper.from_array(np.arange(8, dtype=np.uint8) * 30, "wz0"))
    x = (np.random.default_rng(7).standard_normal((1, 8, 12, 12)) * 3).astype(np.float32)
    _check_exact(model, x)


# ---- quantize_static: QDQ and QOperator formats of small CNNs (onnxruntime's quantizer) ----

def _small_models():
    import bench_quant as bq

    return {"resnet": bq.make_resnet(16, widths=(64, 32, 48, 64), blocks=(1, 1, 1, 1)),
            "mobilenet": bq.make_mobilenet(16)}


def _quantized(name, variant):
    pytest.importorskip("onnxruntime")
    import bench_quant as bq

    return bq.quantize(_small_models()[name], variant, samples=2)


def _output_scale(model):
    """The scale of the DequantizeLinear writing the graph output (quantize_static ends the graph with one)."""
    out = model.graph.output[0].name
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for n in model.graph.node:
        if n.output[0] == out and n.op_type == "DequantizeLinear":
            return float(inits[n.input[1]])
    return None


@pytest.mark.parametrize("variant", ["QDQ u8/s8 per-channel", "QDQ u8/s8 per-tensor", "QDQ s8/s8 per-channel"])
@pytest.mark.parametrize("name", ["resnet", "mobilenet"])
def test_quantize_static_qdq_models(name, variant):
    model = _quantized(name, variant)
    x = np.random.default_rng(11).standard_normal([d.dim_value for d in
                                                   model.graph.input[0].type.tensor_type.shape.dim]).astype(np.float32)
    (got,) = run_twin(model, {"x": x})
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    assert got.shape == want.shape and got.dtype == want.dtype
    step = _output_scale(model)
    assert step is not None
    # the outputs are whole steps; most equal the reference's, the rest within a few steps (float Convs summing in
    # another order flip a requantisation near a half; the flip propagates through the later layers)
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64)) / step
    assert diff.max() <= 4 and np.mean(diff > 0.5) <= 0.25, (diff.max(), np.mean(diff > 0.5))
    try:
        import onnxruntime as ort
    except ImportError:
        return
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the graph as written
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    (ref2,) = sess.run(None, {"x": x})
    diff2 = np.abs(got.astype(np.float64) - ref2.astype(np.float64)) / step
    assert diff2.max() <= 4 and np.mean(diff2 > 0.5) <= 0.25, (diff2.max(), np.mean(diff2 > 0.5))


@pytest.mark.parametrize("name", ["resnet", "mobilenet"])
def test_quantize_static_qoperator_models_are_refused_naming_the_operator(name):
    """The QOperator format writes com.microsoft QLinearAdd / QLinearGlobalAveragePool / QGemm for these networks:
    refused when the graph is added, naming the operator and its domain."""
    model = _quantized(name, "QOp u8/s8 per-channel")
    with ga.Session() as s, pytest.raises(ga.GeError, match="com.microsoft"):
        s.add_graph(1, ga.Graph.from_onnx(model))


def test_bench_models_build_and_quantize_in_every_variant():
    """The benchmark's builders at their real sizes give valid float models (checked by onnx's checker) with the
    operators the brief asks for."""
    import bench_quant as bq

    for m in (bq.make_resnet(224), bq.make_mobilenet(56)):
        onnx.checker.check_model(m)
        ops = {n.op_type for n in m.graph.node}
        assert {"Conv", "Relu", "Add", "GlobalAveragePool", "Gemm"} <= ops
    assert "MaxPool" in {n.op_type for n in bq.make_resnet(224).graph.node}
    assert any(a.name == "group" and a.i > 1 for n in bq.make_mobilenet(56).graph.node for a in n.attribute)


# ---- DequantizeLinear -> Conv -> QuantizeLinear as one integer convolution ----

def _qdq_conv(xt, *, c=16, m=12, hw=9, k=3, group=1, stride=1, per_channel=True, xs=2.0 ** -4, ys=1.0,
              xzp=None, yzp=None, wscale=2.0 ** -6, bias=True, seed=0, extra_reader=False, conv_output=False):
    """x (8-bit) -> DequantizeLinear -> Conv (weights: DequantizeLinear of int8, bias: DequantizeLinear of int32 at
    x_scale * w_scale, as quantize_static writes them) -> QuantizeLinear -> DequantizeLinear -> y. Power-of-two
    scales (the default) make every float step of the graph exact, ties included, whatever the summation order."""
    rng = np.random.default_rng(seed)
    info = np.iinfo(xt)
    xzp = (int(info.min) + int(info.max) + 1) // 2 if xzp is None else xzp
    yzp = xzp if yzp is None else yzp
    w = rng.integers(-128, 128, (m, c // group, k, k)).astype(np.int8)
    if per_channel:
        ws = (np.float32(wscale) * np.float32(2.0) ** rng.integers(-2, 3, m)).astype(np.float32)
    else:
        ws = np.float32(wscale)
    b = rng.integers(-3000, 3000, m).astype(np.int32)
    arr = numpy_helper.from_array
    inits = [arr(np.float32(xs), "xs"), arr(np.array(xzp, xt), "xz"), arr(w, "w"), arr(np.asarray(ws), "ws"),
             arr(np.zeros(np.shape(ws), np.int8), "wz"), arr(np.float32(ys), "ys"), arr(np.array(yzp, xt), "yz"),
             arr(b, "b"), arr((np.float32(xs) * np.asarray(ws, np.float32)).astype(np.float32), "bs")]
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=0),
             helper.make_node("DequantizeLinear", ["b", "bs"], ["bf"], axis=0),
             helper.make_node("Conv", ["xf", "wf"] + (["bf"] if bias else []), ["cf"], pads=[k // 2] * 4,
                              strides=[stride, stride], group=group),
             helper.make_node("QuantizeLinear", ["cf", "ys", "yz"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    outs = [helper.make_tensor_value_info("y", F, None), helper.make_tensor_value_info("yq", QT[xt], None)]
    if extra_reader:  # the dequantised input read by a second node too
        nodes.append(helper.make_node("Relu", ["xf"], ["r"]))
        outs.append(helper.make_tensor_value_info("r", F, None))
    if conv_output:  # the Conv's float output is a graph output: no fusion
        outs.append(helper.make_tensor_value_info("cf", F, None))
    g = helper.make_graph(nodes, "qdqconv", [helper.make_tensor_value_info("x", QT[xt], [1, c, hw, hw])], outs,
                          initializer=inits)
    x = rng.integers(info.min, int(info.max) + 1, (1, c, hw, hw)).astype(xt)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)]), x


@pytest.mark.parametrize("xt", [np.uint8, np.int8])
@pytest.mark.parametrize("shape", [dict(), dict(k=1), dict(stride=2), dict(group=4), dict(c=12, m=12, group=12),
                                   dict(per_channel=False), dict(bias=False), dict(extra_reader=True),
                                   dict(conv_output=True)])
def test_qdq_conv_exact_with_power_of_two_scales(xt, shape):
    """Power-of-two scales: the graph's float arithmetic is exact, so the integer convolution must give the
    reference's integers exactly, half-way requantisations (frequent here) included."""
    model, x = _qdq_conv(xt, **shape)
    got = _check_exact(model, x)
    info = np.iinfo(xt)
    ends = np.isin(got[1], [info.min, info.max]).mean()
    assert len(np.unique(got[1])) > 20 and ends < 0.3, (len(np.unique(got[1])), ends)


@pytest.mark.parametrize("xt,xzp,yzp,ys", [(np.uint8, 0, 0, 1.0), (np.uint8, 255, 255, 1.0), (np.uint8, 0, 255, 1.0),
                                           (np.int8, -128, 127, 1.0), (np.uint8, 128, 128, 2.0 ** -6),
                                           (np.int8, 0, 0, 2.0 ** -6)])
def test_qdq_conv_zero_points_at_the_ends_and_saturation(xt, xzp, yzp, ys):
    """Zero points at the ends of the range (the padding is the zero point's value) and output scales so small that
    most results saturate at both ends."""
    model, x = _qdq_conv(xt, xzp=xzp, yzp=yzp, ys=ys, seed=3)
    got = _check_exact(model, x)
    if ys < 0.5:
        info = np.iinfo(xt)
        assert (got[1] == info.min).sum() > 20 and (got[1] == info.max).sum() > 20


@pytest.mark.parametrize("xt", [np.uint8, np.int8])
def test_qdq_conv_any_scales_within_one_step(xt):
    """Scales as calibration gives them (not powers of two): the float graph rounds its partial sums, in an order the
    reference leaves to numpy; the integer sum is exact, so a result may differ by one step where the float Conv
    lands within rounding of a half, and nowhere else (rarely: at most 1% here)."""
    model, x = _qdq_conv(xt, c=64, m=32, hw=14, xs=0.0173, ys=0.0411, wscale=0.00371, seed=5)
    got = run_twin(model, {"x": x})
    want = ReferenceEvaluator(model).run(None, {"x": x})
    d = np.abs(got[1].astype(np.int64) - want[1].astype(np.int64))
    assert d.max() <= 1 and d.mean() <= 0.01, (d.max(), d.mean())
