"""Graph patterns of quantised models (onnxruntime's quantize_static in the QDQ format, quantize_dynamic), rebuilt with
onnx.helper (no torch or onnxruntime needed) and checked against onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import geasync as ga  # noqa: E402

F = TensorProto.FLOAT
RNG = np.random.default_rng(4646)


def _model(nodes, inputs, outputs, inits=(), opset=19):
    graph = helper.make_graph(nodes, "model", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs], initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run(model, feeds):
    """The twin's first output and the compiled graph's constant memory (initializers plus folded values)."""
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        (out,) = s.run_graph(1, feeds)
        got = out.numpy().copy()
        del out
        return got, s.get_compiled_graph_summary(1).const_memory_size


@pytest.mark.parametrize("stored", ["int8 per channel", "uint8 per tensor", "float16"])
def test_big_stored_weight_is_decoded_once_when_the_plan_is_built(stored):
    """A Conv weight saved quantised (QDQ: DequantizeLinear of an int8 initializer) or in float16 (Cast) whose float32
    value is above the 1 MiB folding limit for computed constants: it is folded anyway, since it is no bigger than a
    few times its stored form, so the Conv gets a weight it can pack when the plan is built instead of decoding
    2.4 MB on every run and convolving with an unpacked weight (resnet18 in the QDQ format ran at 18x onnxruntime's
    time, 5x after)."""
    c = 256
    shape = (c, c, 3, 3)
    x = RNG.standard_normal((1, c, 4, 4)).astype(np.float32)
    if stored == "float16":
        w = numpy_helper.from_array((RNG.standard_normal(shape) * 0.05).astype(np.float16), "w")
        decode = helper.make_node("Cast", ["w"], ["wf"], to=F)
        inits = [w]
    else:
        per_channel = stored.startswith("int8")
        dtype = np.int8 if per_channel else np.uint8
        q = RNG.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, shape, dtype=dtype, endpoint=True)
        scale = (RNG.uniform(0.5, 2.0, c if per_channel else ()) * 1e-3).astype(np.float32)
        zero = np.zeros(c, dtype) if per_channel else np.array(128, dtype)
        inits = [numpy_helper.from_array(q, "w"), numpy_helper.from_array(scale, "s"),
                 numpy_helper.from_array(zero, "z")]
        decode = helper.make_node("DequantizeLinear", ["w", "s", "z"], ["wf"], axis=0)
    conv = helper.make_node("Conv", ["x", "wf"], ["y"], pads=[1, 1, 1, 1])
    model = _model([decode, conv], [("x", F, x.shape)], [("y", F, None)], inits)
    got, const_bytes = _run(model, [x])
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    stored_bytes = sum(numpy_helper.to_array(t).nbytes for t in inits)
    assert const_bytes >= stored_bytes + 4 * int(np.prod(shape)), (const_bytes, stored_bytes)


def test_constant_of_shape_filling_a_big_output_is_still_computed_at_run_time():
    """The folding limit stays for values much bigger than their constant inputs: a 4 MB ConstantOfShape output
    (from an 8-byte shape) is written into the run's output rather than held by the plan."""
    shape = numpy_helper.from_array(np.array([1024, 1024], np.int64), "shape")
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["c"], value=helper.make_tensor("v", F, [1], [2.0])),
             helper.make_node("Add", ["c", "x"], ["y"])]
    model = _model(nodes, [("x", F, [1])], [("y", F, None)], [shape])
    got, const_bytes = _run(model, [np.ones(1, np.float32)])
    np.testing.assert_array_equal(got, np.full((1024, 1024), 3.0, np.float32))
    assert const_bytes < 1 << 20, const_bytes


SIXTEEN_BIT = [(TensorProto.UINT16, np.uint16), (TensorProto.INT16, np.int16)]


@pytest.mark.parametrize(("qt", "npt"), SIXTEEN_BIT)
@pytest.mark.parametrize("n", [1, 37, 4099])
def test_sixteen_bit_quantize_dequantize_per_tensor(qt, npt, n):
    """quantize_static with 16-bit activations (QUInt16 / QInt16, opset 21): QuantizeLinear and DequantizeLinear per
    tensor through the vectorised loops (and their tails), with values past both ends of the range, exact halves
    (rounded to even) and NaN (the type's lowest value)."""
    info = np.iinfo(npt)
    scale, zero = np.float32(0.5), npt(7 if info.min == 0 else -3)
    x = (RNG.standard_normal(n) * info.max * 0.6).astype(np.float32)
    x[: min(n, 8)] = [info.max * 2.0, info.min * 2.0 - 10, 0.25, 0.75, -1.25, 2.5, np.nan, -0.0][: min(n, 8)]
    x[8:16] = (np.arange(8, 16)[: max(0, min(n, 16) - 8)] + 0.5) * float(scale)
    q = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"])
    dq = helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])
    inits = [numpy_helper.from_array(np.array(scale), "s"), numpy_helper.from_array(np.array(zero), "z")]
    model = _model([q, dq], [("x", F, [n])], [("q", qt, [n]), ("y", F, [n])], inits, opset=21)
    model.ir_version = 10
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        got = [o.numpy().copy() for o in s.run_graph(1, [x])]
    want_q = np.clip(np.round(np.nan_to_num(x / scale, nan=-np.inf)) + zero, info.min, info.max).astype(npt)
    np.testing.assert_array_equal(got[0], want_q)
    np.testing.assert_array_equal(got[1], (want_q.astype(np.float32) - np.float32(zero)) * scale)


@pytest.mark.parametrize(("qt", "npt"), SIXTEEN_BIT)
@pytest.mark.parametrize(("shape", "axis"), [((3, 5), 1), ((2, 4, 6), 1), ((4, 3), 0)])
def test_sixteen_bit_dequantize_per_axis(qt, npt, shape, axis):
    """DequantizeLinear of 16-bit values with a scale and zero point per slice of an axis (last, middle, first)."""
    info = np.iinfo(npt)
    x = RNG.integers(info.min, info.max, shape, npt, endpoint=True)
    c = shape[axis]
    scale = RNG.uniform(1e-3, 1e-2, c).astype(np.float32)
    zero = RNG.integers(info.min, info.max, c, npt, endpoint=True)
    inits = [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zero, "z")]
    model = _model([helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], axis=axis)],
                   [("x", qt, list(shape))], [("y", F, list(shape))], inits, opset=21)
    model.ir_version = 10
    got, _ = _run(model, [x])
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)


def _four_bit(name, values, signed, raw):
    """A 4-bit initializer (INT4 / UINT4) holding values, packed two a byte (low nibble first) in raw_data or in
    int32_data."""
    qt = TensorProto.INT4 if signed else TensorProto.UINT4
    if not raw:
        return helper.make_tensor(name, qt, values.shape, values.flatten().tolist())
    nibbles = (values.flatten().astype(np.int64) & 0xF).tolist() + [0]
    packed = bytes(nibbles[i] | (nibbles[i + 1] << 4) for i in range(0, values.size, 2))
    return helper.make_tensor(name, qt, values.shape, packed, raw=True)


@pytest.mark.parametrize("signed", [True, False])
@pytest.mark.parametrize("raw", [True, False])
@pytest.mark.parametrize("layout", ["per channel", "per tensor", "blocked"])
def test_four_bit_weights_dequantized(signed, raw, layout):
    """quantize_static with QInt4 / QUInt4 weights (opset 21) stores them as INT4 / UINT4 initializers read by
    DequantizeLinear (per channel, per tensor, or in blocks along K): the twin reads them (an odd count leaves half
    a byte of padding) and computes what onnx.reference does."""
    k, n = 9, 5
    lo, hi = (-8, 7) if signed else (0, 15)
    w = RNG.integers(lo, hi, (k, n), endpoint=True)
    w[0, :2] = [lo, hi]
    attrs, s_shape = {}, ()
    if layout == "per channel":
        attrs, s_shape = {"axis": 1}, (n,)
    elif layout == "blocked":
        attrs, s_shape = {"axis": 0, "block_size": 4}, (3, n)
    scale = RNG.uniform(0.01, 0.1, s_shape).astype(np.float32)
    zero = RNG.integers(lo, hi, s_shape, endpoint=True)
    inits = [_four_bit("w", w, signed, raw), numpy_helper.from_array(scale, "s"),
             _four_bit("z", np.asarray(zero), signed, raw)]
    nodes = [helper.make_node("DequantizeLinear", ["w", "s", "z"], ["wf"], **attrs),
             helper.make_node("MatMul", ["x", "wf"], ["y"])]
    model = _model(nodes, [("x", F, [3, k])], [("y", F, None)], inits, opset=21)
    model.ir_version = 10
    x = RNG.standard_normal((3, k)).astype(np.float32)
    got, _ = _run(model, [x])
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    wf = (w - (zero if layout != "blocked" else np.repeat(zero, 4, axis=0)[:k])) * (
        scale if layout != "blocked" else np.repeat(scale, 4, axis=0)[:k])
    np.testing.assert_allclose(got, x @ wf.astype(np.float32), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reader", ["Cast", "graph output", "Constant"])
def test_four_bit_values_outside_dequantize_linear_are_refused(reader):
    """Held one a byte, a 4-bit value read by anything but DequantizeLinear would show the wider type: refused at
    add_graph, naming the tensor, its type and the reader."""
    w = _four_bit("w", np.array([[1, -2], [3, 7]]), True, True)
    if reader == "Cast":
        model = _model([helper.make_node("Cast", ["w"], ["y"], to=F)], [], [("y", F, None)], [w], opset=21)
    elif reader == "graph output":
        model = _model([], [], [("w", TensorProto.INT4, [2, 2])], [w], opset=21)
    else:
        model = _model([helper.make_node("Constant", [], ["c"], value=w),
                        helper.make_node("DequantizeLinear", ["c", "s"], ["y"])], [], [("y", F, None)],
                       [numpy_helper.from_array(np.array(0.5, np.float32), "s")], opset=21)
    model.ir_version = 10
    with ga.Session() as s, pytest.raises(ga.GeError) as info:
        s.add_graph(1, ga.Graph.from_onnx(model))
        s.run_graph(1, [])
    message = str(info.value)
    assert "INT4" in message and "'w'" in message and "DequantizeLinear" in message, message
    if reader == "Cast":
        assert "Cast" in message, message
