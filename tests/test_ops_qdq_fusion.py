"""QuantizeLinear -> DequantizeLinear pairs (the "fake quantisation" between layers of QDQ models), which the twin
runs as one float -> float kernel when the 8/16-bit intermediate has no other reader: results must stay bit-equal
to onnx.reference of the graph as written (half-way values round to even, saturation, NaN, zero points at the
ends of the range), and pairs whose intermediate is a graph output or feeds two consumers must keep it.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import geasync as ga

from onnx import TensorProto, helper, numpy_helper  # noqa: E402  (a test dependency)
from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnx_cases import rerun_file_with_instruction_set, run_twin  # noqa: E402

F32 = TensorProto.FLOAT
QTYPES = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8, np.uint16: TensorProto.UINT16,
          np.int16: TensorProto.INT16}


def _model(nodes, inputs, outputs, inits=(), opset=21):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, t, None) for n, t in outputs], initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _run(model, feeds):
    got = run_twin(model, feeds)
    with np.errstate(all="ignore"), warnings.catch_warnings():  # NaN / inf cast to int32 in the reference
        warnings.simplefilter("ignore")
        want = [np.asarray(w) for w in ReferenceEvaluator(model).run(None, feeds)]
    return got, want


def _assert_bit_equal(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        if g.dtype == np.float32:  # bit patterns: -0.0 against 0.0 and NaN payloads count too
            np.testing.assert_array_equal(g.view(np.uint32), w.view(np.uint32))
        else:
            np.testing.assert_array_equal(g, w)


def _pair(qt, s_q, z_q, s_d=None, z_d=None):
    """x -> QuantizeLinear(s_q, z_q) -> DequantizeLinear(s_d, z_d) -> y (per tensor)."""
    s_d = s_q if s_d is None else s_d
    z_d = z_q if z_d is None else z_d
    arr = numpy_helper.from_array
    inits = [arr(np.array(s_q, np.float32), "sq"), arr(np.array(z_q, qt), "zq"), arr(np.array(s_d, np.float32), "sd"),
             arr(np.array(z_d, qt), "zd")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sq", "zq"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "sd", "zd"], ["y"])]
    return _model(nodes, [("x", F32, None)], [("y", F32)], inits)


def _edge_inputs(qt, scale, zp, n=203):
    """Values half-way between quantisation steps (both parities), just either side of them, at and beyond both
    saturation limits, +-0, then random ones; n is not a multiple of any vector width. (No NaN and no quotients
    beyond int32: the reference's cast of those to int32 is undefined; see test_pair_saturates_huge_values_and_nan.)"""
    info = np.iinfo(qt)
    k = np.arange(info.min - zp - 3, info.max - zp + 3, max(1, (info.max - info.min) // 40), dtype=np.float64)
    halves = (k + 0.5) * scale
    vals = np.concatenate([halves, np.nextafter(halves.astype(np.float32), np.float32(np.inf)),
                           np.nextafter(halves.astype(np.float32), np.float32(-np.inf)),
                           [(info.min - zp) * scale, (info.max - zp) * scale, 1e9 * scale, -1e9 * scale, 0.0,
                            -0.0]]).astype(np.float32)
    rng = np.random.default_rng(7)
    rand = (rng.standard_normal(max(0, n - vals.size)) * scale * (info.max - info.min) / 4).astype(np.float32)
    return np.concatenate([vals, rand]).reshape(1, -1)


@pytest.mark.parametrize("qt", list(QTYPES))
@pytest.mark.parametrize("where", ["min", "mid", "max"])
def test_pair_matches_reference_bitwise(qt, where):
    info = np.iinfo(qt)
    zp = {"min": info.min, "max": info.max, "mid": (int(info.min) + int(info.max)) // 2 + 1}[where]
    scale = 0.0625 if np.dtype(qt).itemsize == 1 else 0.0009765625  # powers of two: exact half-way values
    x = _edge_inputs(qt, scale, zp)
    got, want = _run(_pair(qt, scale, zp), {"x": x})
    _assert_bit_equal(got, want)


@pytest.mark.parametrize("qt", list(QTYPES))
def test_pair_saturates_huge_values_and_nan(qt):
    """Quotients beyond any integer type and infinities saturate as the spec says, NaN to the type's low end
    (onnx.reference casts them to int32 first, which numpy leaves undefined): as the unfused QuantizeLinear ->
    DequantizeLinear (an Identity between them keeps them apart) does."""
    info = np.iinfo(qt)
    zp, scale = int(info.min) + 3, np.float32(0.5)
    x = np.array([[1e30, -1e30, np.inf, -np.inf, 3e38, np.nan] * 7], np.float32)
    fused = _pair(qt, scale, zp)
    apart = _pair(qt, scale, zp)
    apart.graph.node[0].output[0] = "q0"
    apart.graph.node.insert(1, helper.make_node("Identity", ["q0"], ["q"]))
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(fused))
        s.add_graph(2, ga.Graph.from_onnx(apart))
        (y,) = [o.numpy().copy() for o in s.run_graph(1, [x])]
        (y2,) = [o.numpy().copy() for o in s.run_graph(2, [x])]
    hi, lo = np.float32(info.max - zp) * scale, np.float32(info.min - zp) * scale
    np.testing.assert_array_equal(y, np.array([[hi, lo, hi, lo, hi, lo] * 7], np.float32))
    np.testing.assert_array_equal(y2, y)


@pytest.mark.parametrize("qt", [np.uint8, np.int8])
def test_pair_with_other_dequantize_parameters(qt):
    """The Dequantize may use another scale and zero point than the Quantize (legal, if unusual)."""
    info = np.iinfo(qt)
    x = _edge_inputs(qt, 0.1, 3, n=1000)
    got, want = _run(_pair(qt, 0.1, 3, s_d=0.37, z_d=info.max), {"x": x})
    _assert_bit_equal(got, want)


def test_pair_without_zero_points_and_odd_scale():
    """Zero points omitted (uint8 by default), a scale whose quotients are not exact, shapes of any rank."""
    inits = [numpy_helper.from_array(np.array(0.0137, np.float32), "s")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s"], ["y"])]
    model = _model(nodes, [("x", F32, None)], [("y", F32)], inits)
    x = (np.random.default_rng(1).standard_normal((2, 3, 17, 5)) * 2).astype(np.float32)
    got, want = _run(model, {"x": x})
    _assert_bit_equal(got, want)


def _conv_block(qt, act_zp, keep_q_output=False, second_reader=False):
    """A QDQ convolution block as quantize_static writes it: x -> Q -> DQ -> Conv(DQ(int8 weights, per channel),
    bias) -> Q -> DQ -> Relu -> Q -> DQ -> y; optionally the middle Q's output is also a graph output, or read by a
    second DequantizeLinear as well."""
    rng = np.random.default_rng(3)
    w = rng.integers(-127, 128, (6, 3, 3, 3)).astype(np.int8)
    w[0] = 127
    w[1] = -128
    ws = (rng.random(6).astype(np.float32) + 0.5) * 0.01
    arr = numpy_helper.from_array
    inits = [arr(w, "w"), arr(ws, "ws"), arr(np.zeros(6, np.int8), "wz"),
             arr(rng.standard_normal(6).astype(np.float32), "b"), arr(np.array(0.02, np.float32), "s1"),
             arr(np.array(act_zp, qt), "z1"), arr(np.array(0.05, np.float32), "s2"), arr(np.array(act_zp, qt), "z2")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s1", "z1"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s1", "z1"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
             helper.make_node("Conv", ["xd", "wd", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c", "s2", "z2"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "s2", "z2"], ["cd"]),
             helper.make_node("Relu", ["cd"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "s2", "z2"], ["rq"]),
             helper.make_node("DequantizeLinear", ["rq", "s2", "z2"], ["y"])]
    outputs = [("y", F32)]
    if keep_q_output:
        outputs.append(("cq", QTYPES[qt]))
    if second_reader:
        nodes.append(helper.make_node("DequantizeLinear", ["cq", "s1", "z1"], ["y2"]))
        outputs.append(("y2", F32))
    return _model(nodes, [("x", F32, [1, 3, 9, 11])], outputs, inits)


@pytest.mark.parametrize("qt,zp", [(np.uint8, 128), (np.uint8, 0), (np.uint8, 255), (np.int8, 0), (np.int8, -128)])
@pytest.mark.parametrize("variant", ["plain", "q_output_is_graph_output", "q_output_read_twice"])
def test_qdq_conv_block(qt, zp, variant):
    model = _conv_block(qt, zp, keep_q_output=variant == "q_output_is_graph_output",
                        second_reader=variant == "q_output_read_twice")
    x = (np.random.default_rng(11).standard_normal((1, 3, 9, 11)) * 1.5).astype(np.float32)
    x.reshape(-1)[:4] = [9.0, -9.0, 0.01, -0.03]  # saturated at any zero point; half-way steps of s1
    got, want = _run(model, {"x": x})
    # Conv's float sums may differ from the reference's in the last bit, and a product that lands next to a rounding
    # tie may then quantise one step apart: allow one step of s2 on the Conv side, nothing else.
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        if g.dtype == np.float32:
            np.testing.assert_allclose(g, w, rtol=0, atol=0.05 * 1.001)
            assert np.mean(g == w) > 0.99
        else:
            assert np.max(np.abs(g.astype(np.int64) - w.astype(np.int64))) <= 1
    # The pair before the Conv sees the input directly: bit-equal whatever the Conv does.
    q_only = _model(model.graph.node[:2], [("x", F32, [1, 3, 9, 11])], [("xd", F32)],
                    [i for i in model.graph.initializer if i.name in ("s1", "z1")])
    got, want = _run(q_only, {"x": x})
    _assert_bit_equal(got, want)


def test_per_axis_pair_is_unchanged():
    """Per-channel activation quantisation is not fused; the unfused pair still matches."""
    s = np.array([0.1, 0.25, 0.5], np.float32)
    z = np.array([0, 128, 255], np.uint8)
    inits = [numpy_helper.from_array(s, "s"), numpy_helper.from_array(z, "z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1)]
    model = _model(nodes, [("x", F32, None)], [("y", F32)], inits)
    x = (np.random.default_rng(2).standard_normal((2, 3, 40)) * 30).astype(np.float32)
    got, want = _run(model, {"x": x})
    _assert_bit_equal(got, want)


def test_chained_pairs_in_place():
    """Two pairs back to back (the second may overwrite the first's output in place), then an Add of both."""
    arr = numpy_helper.from_array
    inits = [arr(np.array(0.03, np.float32), "s"), arr(np.array(-5, np.int8), "z"),
             arr(np.array(0.07, np.float32), "t"), arr(np.array(9, np.int8), "u")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q1"]),
             helper.make_node("DequantizeLinear", ["q1", "s", "z"], ["d1"]),
             helper.make_node("QuantizeLinear", ["d1", "t", "u"], ["q2"]),
             helper.make_node("DequantizeLinear", ["q2", "t", "u"], ["d2"]),
             helper.make_node("Add", ["d2", "x"], ["y"])]
    model = _model(nodes, [("x", F32, [4, 257])], [("y", F32)], inits)
    x = (np.random.default_rng(4).standard_normal((4, 257)) * 3).astype(np.float32)
    got, want = _run(model, {"x": x})
    _assert_bit_equal(got, want)


@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_fallback_instruction_sets_pass_the_same_checks(isa):
    rerun_file_with_instruction_set(__file__, isa)
