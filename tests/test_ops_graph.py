"""Twin operators that need structural work: Resize/Upsample, TopK, the quantisation family, NonMaxSuppression,
RoiAlign, Einsum, RNN/GRU/LSTM.

Two kinds of checks, both through geasync's public API: every numeric ONNX node test case of these operators, and
onnx.reference on random inputs beyond those cases (other shapes and attributes, ties, NaN/inf, large magnitudes,
denormals, empty tensors).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import geasync as ga

import onnx  # noqa: E402  (a test dependency)
import onnx.numpy_helper  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from onnx_cases import assert_close, check_against_reference, fresh_graph_id, rerun_file_with_instruction_set  # noqa: E402
from onnx_cases import run_once as _run  # noqa: E402

OPS = ("Resize Upsample TopK QuantizeLinear DequantizeLinear DynamicQuantizeLinear MatMulInteger QLinearMatMul "
       "ConvInteger QLinearConv NonMaxSuppression RoiAlign Einsum RNN GRU LSTM").split()

# Element types neither the twin nor numpy (as geasync exchanges tensors) represent.
_EXOTIC_TYPES = {TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2,
                 TensorProto.FLOAT8E5M2FNUZ, TensorProto.UINT4, TensorProto.INT4, TensorProto.BFLOAT16,
                 TensorProto.FLOAT4E2M1, TensorProto.STRING}
for _name in ("UINT2", "INT2", "FLOAT8E8M0", "FLOAT6E2M3", "FLOAT6E3M2"):
    if hasattr(TensorProto, _name):
        _EXOTIC_TYPES.add(getattr(TensorProto, _name))


def _uses_exotic_type(model) -> bool:
    g = model.graph
    types = [v.type.tensor_type.elem_type for v in list(g.input) + list(g.output)]
    types += [a.i for n in g.node for a in n.attribute if a.name == "output_dtype"]
    return any(t in _EXOTIC_TYPES for t in types)


def _node_cases():
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    out = []
    for c in cases:
        nodes = c.model.graph.node
        if len(nodes) == 1 and nodes[0].op_type in OPS and not _uses_exotic_type(c.model):
            out.append(pytest.param(c, id=c.name))
    return out


@pytest.fixture(scope="module")
def session():
    with ga.Session() as s:
        yield s


@pytest.mark.parametrize("case", _node_cases())
def test_node_case(session, case):
    for inputs, outputs in case.data_sets:
        ins = [onnx.numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else np.asarray(x) for x in inputs]
        outs = [onnx.numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else np.asarray(x) for x in outputs]
        assert_close(_run(session, case.model, ins), outs, rtol=1e-3, atol=1e-5)


def test_node_cases_cover_every_operator():
    covered = {p.values[0].model.graph.node[0].op_type for p in _node_cases()}
    assert covered == set(OPS)


# ---------------------------------------------------------------------------------------------------------------
# Random and edge-value inputs against onnx.reference


def _model(op, inputs, outputs, opset, **attrs):
    """A one-node model; inputs/outputs are (name, numpy dtype or TensorProto type, shape or None)."""
    def vi(name, dtype, shape):
        t = dtype if isinstance(dtype, int) else helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        return helper.make_tensor_value_info(name, t, shape)

    node = helper.make_node(op, [i[0] for i in inputs], [o[0] for o in outputs], **attrs)
    graph = helper.make_graph([node], op.lower(), [vi(*i) for i in inputs if i[0]], [vi(*o) for o in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(session, model, feeds, rtol=1e-4, atol=1e-5):
    check_against_reference(session, model, feeds, rtol=rtol, atol=atol)


def _edge_floats(rng, shape, dtype=np.float32):
    """Random values with large magnitudes and denormals mixed in."""
    x = rng.standard_normal(shape).astype(dtype)
    flat = x.reshape(-1)
    if flat.size >= 4:
        flat[rng.integers(0, flat.size, 2)] = np.array([3e30, -2e-39], dtype)
    return x


RESIZE_COMBOS = [
    ("nearest", ctm, nm) for ctm in ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel")
    for nm in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
] + [
    (mode, ctm, "round_prefer_floor") for mode in ("linear", "cubic")
    for ctm in ("half_pixel", "half_pixel_symmetric", "asymmetric", "align_corners", "pytorch_half_pixel")
]


@pytest.mark.parametrize("mode,ctm,nearest_mode", RESIZE_COMBOS)
@pytest.mark.parametrize("scales", [(1, 1, 1.7, 0.6), (1, 1, 0.5, 2.25)])
def test_resize_random(session, mode, ctm, nearest_mode, scales):
    rng = np.random.default_rng(7)
    x = _edge_floats(rng, (2, 3, 5, 7)) if mode == "nearest" else rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    s = np.array(scales, np.float32)
    m = _model("Resize", [("x", np.float32, x.shape), ("", None, None), ("s", np.float32, [4])],
               [("y", np.float32, None)], 19, mode=mode, coordinate_transformation_mode=ctm, nearest_mode=nearest_mode)
    _check(session, m, [x, s], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("exclude_outside", [0, 1])
def test_resize_sizes_antialias_axes(session, mode, exclude_outside):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 9, 11)).astype(np.float32)
    sizes = np.array([4, 5], np.int64)
    m = _model("Resize", [("x", np.float32, x.shape), ("", None, None), ("", None, None), ("sz", np.int64, [2])],
               [("y", np.float32, None)], 19, mode=mode, antialias=1, axes=[2, 3], exclude_outside=exclude_outside,
               keep_aspect_ratio_policy="not_larger")
    _check(session, m, [x, sizes], rtol=1e-4, atol=1e-5)


def test_resize_integer_and_empty(session):
    rng = np.random.default_rng(5)
    x = rng.integers(0, 256, (1, 1, 4, 6), dtype=np.uint8)
    m = _model("Resize", [("x", np.uint8, x.shape), ("", None, None), ("s", np.float32, [4])],
               [("y", np.uint8, None)], 19, mode="linear")
    _check(session, m, [x, np.array([1, 1, 1.5, 0.75], np.float32)])
    e = np.zeros((0, 3, 4, 4), np.float32)
    m = _model("Resize", [("x", np.float32, e.shape), ("", None, None), ("s", np.float32, [4])],
               [("y", np.float32, None)], 19, mode="cubic")
    (y,) = _run(session, m, [e, np.array([1, 1, 2, 2], np.float32)])
    assert y.shape == (0, 3, 8, 8)


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_topk_random_ties_nan(session, largest, axis):
    rng = np.random.default_rng(11)
    x = rng.integers(-3, 4, (6, 7, 5)).astype(np.float32)  # many ties
    x[1, 2, 3] = np.nan
    x[0, 0, 0] = np.inf
    x[2, 1, 1] = -np.inf
    k = np.array([3], np.int64)
    m = _model("TopK", [("x", np.float32, x.shape), ("k", np.int64, [1])],
               [("v", np.float32, None), ("i", np.int64, None)], 11, axis=axis, largest=largest)
    _check(session, m, [x, k])


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64, np.uint8])
def test_topk_dtypes_and_empty(session, dtype):
    rng = np.random.default_rng(12)
    x = rng.integers(0, 50, (4, 9)).astype(dtype)
    m = _model("TopK", [("x", dtype, x.shape), ("k", np.int64, [1])], [("v", dtype, None), ("i", np.int64, None)], 11)
    _check(session, m, [x, np.array([9], np.int64)])
    _check(session, m, [x, np.array([0], np.int64)])


@pytest.mark.parametrize("qtype", [np.uint8, np.int8, np.uint16, np.int16])
@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize_dequantize_random(session, qtype, per_axis):
    rng = np.random.default_rng(13)
    x = (rng.standard_normal((3, 4, 5)) * 200).astype(np.float32)
    x.reshape(-1)[:4] = [np.nan, 1e30, -1e-40, 2.5]  # NaN, saturation, denormal, a half-way tie
    scale = (rng.random(4) + 0.5).astype(np.float32) if per_axis else np.array(1.0, np.float32)
    info = np.iinfo(qtype)
    zp = rng.integers(info.min // 4, info.max // 4, scale.shape).astype(qtype)
    m = _model("QuantizeLinear", [("x", np.float32, x.shape), ("s", np.float32, scale.shape), ("z", qtype, zp.shape)],
               [("y", qtype, None)], 21, axis=1)
    want_nan_free = x.copy()
    want_nan_free[np.isnan(want_nan_free) | (np.abs(want_nan_free) > 1e9)] = 0  # see note below
    _check(session, m, [want_nan_free, scale, zp])
    # Beyond int32 the reference's int32 conversion wraps; the twin saturates as the operator's spec says.
    (y,) = _run(session, m, [x, scale, zp])
    assert y.reshape(-1)[1] == info.max
    q = rng.integers(info.min, info.max, x.shape, endpoint=True).astype(qtype)
    m = _model("DequantizeLinear", [("q", qtype, q.shape), ("s", np.float32, scale.shape), ("z", qtype, zp.shape)],
               [("y", np.float32, None)], 21, axis=1)
    _check(session, m, [q, scale, zp])


def test_quantize_blocked_and_float16(session):
    rng = np.random.default_rng(14)
    x = rng.standard_normal((4, 6)).astype(np.float16)
    scale = (rng.random((4, 2)) + 0.1).astype(np.float16)
    m = _model("DequantizeLinear", [("q", np.int8, x.shape), ("s", np.float16, scale.shape)],
               [("y", np.float16, None)], 21, axis=1, block_size=3)
    q = rng.integers(-128, 128, x.shape).astype(np.int8)
    _check(session, m, [q, scale], rtol=1e-3)


def test_dynamic_quantize_and_integer_matmuls(session):
    rng = np.random.default_rng(15)
    x = _edge_floats(rng, (3, 8)) / 1e28
    m = _model("DynamicQuantizeLinear", [("x", np.float32, x.shape)],
               [("y", np.uint8, None), ("s", np.float32, None), ("z", np.uint8, None)], 11)
    _check(session, m, [x])
    a = rng.integers(0, 256, (2, 3, 4, 5), dtype=np.uint8)
    b = rng.integers(-128, 128, (5, 6), dtype=np.int8)
    # Per-column zero point for B (the reference broadcasts a per-row one for A along the wrong axis).
    m = _model("MatMulInteger", [("a", np.uint8, a.shape), ("b", np.int8, b.shape), ("az", np.uint8, []),
                                 ("bz", np.int8, [6])], [("y", np.int32, None)], 10)
    _check(session, m, [a, b, np.asarray(np.uint8(77)), rng.integers(-128, 128, 6, dtype=np.int8)])
    m = _model("QLinearMatMul", [("a", np.uint8, [4, 5]), ("as", np.float32, []), ("az", np.uint8, []),
                                 ("b", np.uint8, [5, 3]), ("bs", np.float32, []), ("bz", np.uint8, []),
                                 ("ys", np.float32, []), ("yz", np.uint8, [])], [("y", np.uint8, None)], 10)
    feeds = [rng.integers(0, 256, (4, 5), dtype=np.uint8), np.float32(0.02), np.uint8(120),
             rng.integers(0, 256, (5, 3), dtype=np.uint8), np.float32(0.03), np.uint8(130), np.float32(0.5),
             np.uint8(128)]
    _check(session, m, [np.asarray(f) for f in feeds])


@pytest.mark.parametrize("qtype", [np.uint8, np.int8])
@pytest.mark.parametrize("n", [7, 32, 100, 4133])  # below, at and past the 32-element vector steps
def test_quantize_vector_paths(session, qtype, n):
    """One float scale: the vectorised QuantizeLinear and DynamicQuantizeLinear against onnx.reference, with exact
    half-way ties (both roundings), NaN, +-inf, values past the type's range and denormals."""
    rng = np.random.default_rng(n)
    scale = np.float32(0.25)
    x = (rng.standard_normal(n) * 40).astype(np.float32)
    ties = (rng.integers(-300, 300, n) + 0.5) * scale  # x / s lands on k + 0.5
    x[::3] = ties[::3].astype(np.float32)
    x[1:7] = [np.nan, np.inf, -np.inf, 3e9, -1e-42, -0.0][: len(x[1:7])]
    zp = np.asarray(qtype(7 if qtype == np.uint8 else -5))
    m = _model("QuantizeLinear", [("x", np.float32, x.shape), ("s", np.float32, []), ("z", qtype, [])],
               [("y", qtype, None)], 21)
    finite = np.where(np.isfinite(x) & (np.abs(x) < 1e9), x, np.float32(0))  # the reference wraps past int32
    _check(session, m, [finite, np.asarray(scale), zp])
    (y,) = _run(session, m, [x, np.asarray(scale), zp])
    info = np.iinfo(qtype)
    if n > 6:
        assert list(y[1:5]) == [info.min, info.max, info.min, info.max]  # NaN, inf, -inf, 3e9: saturated
    m = _model("DynamicQuantizeLinear", [("x", np.float32, x.shape)],
               [("y", np.uint8, None), ("s", np.float32, None), ("z", np.uint8, None)], 11)
    _check(session, m, [finite])


@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_quantize_fallback_instruction_sets(isa):
    """The quantisation tests above with the twin capped at the fallback instruction sets (AVX-512 CPUs take
    16-lane QuantizeLinear / DynamicQuantizeLinear kernels, AVX2 ones 32-value steps)."""
    rerun_file_with_instruction_set(__file__, isa, select="quantize")


@pytest.mark.parametrize("k", [1, 257, 600, 2100])  # 600 and 2100: several exact float slices of K
def test_integer_matmul_slices_stay_exact(session, k):
    rng = np.random.default_rng(k)
    a = rng.integers(0, 256, (3, 9, k), dtype=np.uint8)
    a[0, 0] = 255  # the largest products: 255 * (-128 - 127)
    b = rng.integers(-128, 128, (k, 11), dtype=np.int8)
    b[:, 0] = -128
    bz = rng.integers(-128, 128, 11, dtype=np.int8)
    bz[0] = 127
    m = _model("MatMulInteger", [("a", np.uint8, a.shape), ("b", np.int8, b.shape), ("az", np.uint8, []),
                                 ("bz", np.int8, [11])], [("y", np.int32, None)], 10)
    (y,) = _run(session, m, [a, b, np.asarray(np.uint8(0)), bz])
    want = a.astype(np.int64) @ (b.astype(np.int64) - bz.astype(np.int64))
    np.testing.assert_array_equal(y, want.astype(np.int32))


def test_integer_matmul_wraps_like_int32(session):
    k = 40000  # 255 * 255 * 40000 > 2^31: an int32 accumulator wraps
    a = np.full((1, k), 255, np.uint8)
    b = np.full((k, 2), 255, np.uint8)
    m = _model("MatMulInteger", [("a", np.uint8, a.shape), ("b", np.uint8, b.shape)], [("y", np.int32, None)], 10)
    (y,) = _run(session, m, [a, b])
    want = (a.astype(np.int64) @ b.astype(np.int64)) % 2**32
    np.testing.assert_array_equal(y.astype(np.int64) % 2**32, want)


def test_conv_integer_random(session):
    rng = np.random.default_rng(16)
    x = rng.integers(0, 256, (1, 2, 6, 7), dtype=np.uint8)
    w = rng.integers(0, 256, (4, 2, 3, 3), dtype=np.uint8)
    m = _model("ConvInteger", [("x", np.uint8, x.shape), ("w", np.uint8, w.shape), ("xz", np.uint8, []),
                               ("wz", np.uint8, [4])], [("y", np.int32, None)], 10, pads=[1, 0, 1, 2],
               strides=[1, 2])
    _check(session, m, [x, w, np.asarray(np.uint8(100)), rng.integers(0, 256, 4, dtype=np.uint8)])


# Geometries the integer Conv's own im2col must lay out: 1-D / 2-D / 3-D, strides, dilations, asymmetric and
# auto pads, groups, a batch; (x shape, w shape, attributes).
CONV_INT_GEOMETRIES = [
    ((2, 3, 9), (4, 3, 3), {"pads": [2, 1]}),
    ((1, 4, 7, 8), (6, 2, 3, 2), {"group": 2, "strides": [2, 3], "pads": [1, 0, 2, 1]}),
    ((1, 3, 6, 5), (2, 3, 2, 3), {"dilations": [2, 1], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 5, 7), (3, 2, 3, 3), {"auto_pad": "SAME_LOWER", "strides": [2, 2]}),
    ((1, 2, 4, 5, 6), (2, 2, 2, 3, 2), {"strides": [1, 2, 1], "pads": [1, 0, 1, 0, 1, 1]}),
    ((2, 8, 11, 13), (8, 8, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((1, 4, 6, 6), (4, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),  # depthwise
    ((1, 3, 4, 4), (2, 3, 5, 5), {"pads": [2, 2, 2, 2], "strides": [3, 3]}),  # windows mostly padding
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", CONV_INT_GEOMETRIES)
@pytest.mark.parametrize("xt,wt", [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8)])
def test_conv_integer_geometries(session, x_shape, w_shape, attrs, xt, wt):
    rng = np.random.default_rng(sum(x_shape) + sum(w_shape))
    info_x, info_w = np.iinfo(xt), np.iinfo(wt)
    x = rng.integers(info_x.min, info_x.max + 1, x_shape, dtype=xt)
    w = rng.integers(info_w.min, info_w.max + 1, w_shape, dtype=wt)
    xz = np.asarray(xt(rng.integers(info_x.min, info_x.max + 1)))
    # per output channel zero points (onnx.reference takes them for 2-D kernels only), one zero point otherwise
    wz = rng.integers(info_w.min, info_w.max + 1, w_shape[0] if len(w_shape) == 4 else ()).astype(wt)
    m = _model("ConvInteger", [("x", xt, x.shape), ("w", wt, w.shape), ("xz", xt, []), ("wz", wt, wz.shape)],
               [("y", np.int32, None)], 10, **attrs)
    _check(session, m, [x, w, xz, wz], rtol=0, atol=0)


@pytest.mark.parametrize("x_shape,w_shape,attrs", CONV_INT_GEOMETRIES[:6])
@pytest.mark.parametrize("yt", [np.uint8, np.int8])
def test_qlinear_conv_geometries(session, x_shape, w_shape, attrs, yt):
    rng = np.random.default_rng(len(attrs) + sum(x_shape))
    x = rng.integers(0, 256, x_shape, dtype=np.uint8)
    w = rng.integers(-128, 128, w_shape, dtype=np.int8)
    M = w_shape[0]
    per = M if len(w_shape) == 4 else ()  # onnx.reference takes per-channel scales for 2-D kernels only
    feeds = [x, np.float32(0.02), np.uint8(rng.integers(0, 256)), w,
             rng.uniform(0.001, 0.01, per).astype(np.float32), np.zeros(per, np.int8), np.float32(0.5),
             yt(rng.integers(np.iinfo(yt).min, np.iinfo(yt).max + 1)), rng.integers(-5000, 5000, M).astype(np.int32)]
    feeds = [np.asarray(f) for f in feeds]
    names = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"]
    m = _model("QLinearConv", [(n, f.dtype, f.shape) for n, f in zip(names, feeds, strict=True)], [("y", yt, None)], 10,
               **attrs)
    _check(session, m, feeds, rtol=0, atol=0)


def test_conv_integer_sums_past_float_precision_stay_exact(session):
    # 255 * 255 products over K = 64 * 3 * 3 = 576 taps reach 3.7e7 > 2^24: the float32 GEMM must be sliced over K
    x = np.full((1, 64, 5, 6), 255, np.uint8)
    x[0, ::3, 1, 2] = 0
    w = np.full((3, 64, 3, 3), 255, np.uint8)
    w[1, 5, 1, 1] = 254
    m = _model("ConvInteger", [("x", np.uint8, x.shape), ("w", np.uint8, w.shape)], [("y", np.int32, None)], 10,
               pads=[1, 1, 1, 1])
    (y,) = _run(session, m, [x, w])
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # [1, 64, 5, 6, 3, 3]
    want = np.einsum("nchwij,mcij->nmhw", cols, w.astype(np.int64))
    assert want.max() > 2**24
    np.testing.assert_array_equal(y, want.astype(np.int32))


@pytest.mark.parametrize("center", [0, 1])
def test_nms_random(session, center):
    rng = np.random.default_rng(17 + center)
    boxes = rng.random((2, 30, 4)).astype(np.float32)
    scores = rng.random((2, 3, 30)).astype(np.float32)
    scores[0, 0, :5] = 0.5  # ties
    m = _model("NonMaxSuppression", [("b", np.float32, boxes.shape), ("s", np.float32, scores.shape),
                                     ("m", np.int64, [1]), ("i", np.float32, [1]), ("t", np.float32, [1])],
               [("y", np.int64, None)], 11, center_point_box=center)
    _check(session, m, [boxes, scores, np.array([7], np.int64), np.array([0.3], np.float32),
                        np.array([0.2], np.float32)])


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("ctm", ["half_pixel", "output_half_pixel"])
def test_roialign_random(session, mode, ctm):
    rng = np.random.default_rng(19)
    x = rng.standard_normal((2, 3, 10, 8)).astype(np.float32)
    rois = np.array([[0, 0, 7, 9], [1.5, 2.2, 6.1, 4.3], [-3, -2, 4, 12]], np.float32)
    bi = np.array([0, 1, 1], np.int64)
    m = _model("RoiAlign", [("x", np.float32, x.shape), ("r", np.float32, rois.shape), ("b", np.int64, bi.shape)],
               [("y", np.float32, None)], 16, mode=mode, coordinate_transformation_mode=ctm, output_height=3,
               output_width=4, sampling_ratio=2, spatial_scale=0.8)
    _check(session, m, [x, rois, bi], rtol=1e-4, atol=1e-5)


def _max_roi_pool(x, rois, pooled, scale):
    """Fast R-CNN's RoI max pooling as onnxruntime computes it (onnx.reference has no MaxRoiPool): corners rounded
    to pixels (half away from zero), a malformed region taken as 1x1, bins of float32 size, an empty bin 0, NaN
    never the max."""
    h, w = x.shape[2:]

    def pixel(v):
        return int(np.copysign(np.floor(abs(v) + 0.5), v))

    def edges(k, size, start, limit):  # [floor(k * size), ceil((k + 1) * size)) + start, within [0, limit]
        lo, hi = int(np.floor(np.float32(k) * size)), int(np.ceil(np.float32(k + 1) * size))
        return min(max(lo + start, 0), limit), min(max(hi + start, 0), limit)

    out = np.zeros((len(rois), x.shape[1]) + tuple(pooled), x.dtype)
    for q, (b, *corners) in enumerate(rois.astype(np.float32)):
        sw, sh, ew, eh = (pixel(v) for v in np.float32(corners) * np.float32(scale))
        bh = np.float32(max(eh - sh + 1, 1)) / np.float32(pooled[0])
        bw = np.float32(max(ew - sw + 1, 1)) / np.float32(pooled[1])
        for ph in range(pooled[0]):
            hs, he = edges(ph, bh, sh, h)
            for pw in range(pooled[1]):
                ws, we = edges(pw, bw, sw, w)
                if he > hs and we > ws:
                    win = x[int(b), :, hs:he, ws:we].reshape(x.shape[1], -1)
                    out[q, :, ph, pw] = np.where(np.isnan(win), -np.inf, win).max(axis=1)
    return out


@pytest.mark.parametrize("pooled,scale", [((2, 2), 1.0), ((3, 4), 0.5), ((1, 1), 0.0625), ((4, 3), 2.0)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_max_roi_pool_random(session, pooled, scale, dtype):
    rng = np.random.default_rng(23)
    x = rng.standard_normal((2, 3, 11, 9)).astype(dtype)
    x[0, 1, 2, 3] = np.nan
    rois = np.concatenate([rng.integers(0, 2, (7, 1)), rng.uniform(-4, 24, (7, 4))], axis=1).astype(dtype)
    rois[0, 1:] = [0, 0, 8, 10]  # the whole map
    rois[1, 1:] = [6, 5, 2, 1]  # end before start: a 1x1 region
    rois[2, 1:] = [40, 40, 50, 50]  # outside the map: empty bins
    m = _model("MaxRoiPool", [("x", dtype, x.shape), ("r", dtype, rois.shape)], [("y", dtype, None)], 18,
               pooled_shape=list(pooled), spatial_scale=scale)
    (y,) = _run(session, m, [x, rois])
    want = _max_roi_pool(x, rois, pooled, scale)
    assert y.shape == want.shape and y.dtype == dtype
    np.testing.assert_array_equal(y, want)
    try:
        import onnxruntime as ort
    except ImportError:
        return
    if dtype == np.float32:  # onnxruntime (a benchmark dependency) computes the same
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        np.testing.assert_array_equal(y, sess.run(None, {"x": x, "r": rois})[0])


@pytest.mark.parametrize("batch", [2.0, -1.0, np.nan])
def test_max_roi_pool_refuses_a_batch_index_outside_x(session, batch):
    x = np.ones((2, 1, 4, 4), np.float32)
    rois = np.array([[0, 0, 0, 3, 3], [batch, 0, 0, 1, 1]], np.float32)
    m = _model("MaxRoiPool", [("x", np.float32, x.shape), ("r", np.float32, rois.shape)], [("y", np.float32, None)],
               22, pooled_shape=[2, 2])
    with pytest.raises(ga.GeError, match=r"region of interest 1: batch index .* is outside \[0, 2\)"):
        _run(session, m, [x, rois])


@pytest.mark.parametrize("attrs", [{}, {"pooled_shape": [2]}, {"pooled_shape": [0, 2]}])
def test_max_roi_pool_needs_a_pooled_shape(session, attrs):
    m = _model("MaxRoiPool", [("x", np.float32, (1, 1, 4, 4)), ("r", np.float32, (1, 5))], [("y", np.float32, None)],
               22, **attrs)
    with pytest.raises(ga.GeError, match="pooled_shape"):
        _run(session, m, [np.ones((1, 1, 4, 4), np.float32), np.zeros((1, 5), np.float32)])


EINSUMS = [("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ii->i", [(4, 4)]),
           ("ii", [(5, 5)]), ("...ij,...jk", [(2, 1, 3, 4), (3, 4, 2)]), ("i,i->", [(6,), (6,)]),
           ("ij->ji", [(3, 4)]), ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 2)]), ("ij,ij->ij", [(0, 3), (0, 3)]),
           ("iJ,Jk", [(2, 3), (3, 4)]),
           # matrix products run as GEMMs: in place, transposed, copied operands and a permuted output
           ("bhqd,bhkd->bhqk", [(2, 3, 5, 4), (2, 3, 6, 4)]), ("bhqk,bhkd->bhqd", [(1, 2, 5, 6), (1, 2, 6, 3)]),
           ("ij,jk->ki", [(3, 4), (4, 5)]), ("ikj,jl->lik", [(3, 2, 4), (4, 5)]), ("ji,kj->ik", [(4, 3), (5, 4)]),
           ("i,j->ij", [(3,), (4,)]), ("ij,ij->i", [(3, 7), (3, 7)]), ("bij,jk", [(2, 3, 4), (4, 33)]),
           ("...ij,...jk->...ik", [(2, 3, 17, 9), (2, 3, 9, 5)]), ("abc,bca->", [(2, 3, 4), (3, 4, 2)])]


@pytest.mark.parametrize("eq,shapes", EINSUMS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_einsum_random(session, eq, shapes, dtype):
    rng = np.random.default_rng(23)
    feeds = [(rng.standard_normal(s) * 5).astype(dtype) for s in shapes]
    if dtype == np.float32 and feeds[0].size:
        feeds[0].reshape(-1)[0] = np.nan
    m = _model("Einsum", [(f"x{i}", dtype, f.shape) for i, f in enumerate(feeds)], [("y", dtype, None)], 12,
               equation=eq)
    _check(session, m, feeds, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("layout", [0, 1])
def test_recurrent_random(session, op, layout):
    rng = np.random.default_rng(29)
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    seq, batch, inp, hid = 4, 3, 5, 6
    x = rng.standard_normal((seq, batch, inp) if layout == 0 else (batch, seq, inp)).astype(np.float32)
    w = (rng.standard_normal((1, gates * hid, inp)) * 0.5).astype(np.float32)
    r = (rng.standard_normal((1, gates * hid, hid)) * 0.5).astype(np.float32)
    b = (rng.standard_normal((1, 2 * gates * hid)) * 0.1).astype(np.float32)
    h0 = rng.standard_normal((1, batch, hid) if layout == 0 else (batch, 1, hid)).astype(np.float32)
    inputs = [("x", np.float32, x.shape), ("w", np.float32, w.shape), ("r", np.float32, r.shape),
              ("b", np.float32, b.shape), ("", None, None), ("h0", np.float32, h0.shape)]
    m = _model(op, inputs, [("y", np.float32, None), ("yh", np.float32, None)], 14, hidden_size=hid, layout=layout)
    _check(session, m, [x, w, r, b, h0], rtol=1e-4, atol=1e-5)


_RECURRENT_VARIANTS = [
    ("LSTM", dict(direction="bidirectional")),
    ("LSTM", dict(direction="reverse", clip=0.7, input_forget=1)),
    ("LSTM", dict(activations=["HardSigmoid", "Relu", "Softsign"])),
    ("GRU", dict(direction="bidirectional", linear_before_reset=1)),
    ("GRU", dict(direction="reverse", clip=0.5)),
    ("GRU", dict(activations=["HardSigmoid", "Softsign"], linear_before_reset=1)),
    ("RNN", dict(direction="bidirectional", clip=1.5)),
]


@pytest.mark.parametrize("op,attrs", _RECURRENT_VARIANTS,
                         ids=[f"{o}-{i}" for i, (o, _) in enumerate(_RECURRENT_VARIANTS)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_recurrent_gates_vectorised(session, op, attrs, dtype):
    """Hidden sizes off the vector width (37), per-row sequence lengths (one 0), peepholes, clip, every direction,
    non-default activations and large inputs: the gate arithmetic on whole rows against ONNX's equations."""
    rng = np.random.default_rng(31)
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    seq, batch, inp, hid = 7, 4, 9, 37
    x = rng.standard_normal((seq, batch, inp)).astype(dtype)
    x[2, 1, :3] = [40.0, -60.0, 3e4]  # saturates the gates
    w = (rng.standard_normal((dirs, gates * hid, inp)) * 0.4).astype(dtype)
    r = (rng.standard_normal((dirs, gates * hid, hid)) * 0.3).astype(dtype)
    b = (rng.standard_normal((dirs, 2 * gates * hid)) * 0.2).astype(dtype)
    lens = np.array([7, 3, 0, 5], np.int32)
    h0 = rng.standard_normal((dirs, batch, hid)).astype(dtype)
    inputs = [("x", dtype, x.shape), ("w", dtype, w.shape), ("r", dtype, r.shape),
              ("b", dtype, b.shape), ("l", np.int32, lens.shape), ("h0", dtype, h0.shape)]
    feeds = [x, w, r, b, lens, h0]
    outputs = [("y", dtype, None), ("yh", dtype, None)]
    if op == "LSTM":
        c0 = rng.standard_normal((dirs, batch, hid)).astype(dtype)
        p = (rng.standard_normal((dirs, 3 * hid)) * 0.5).astype(dtype)
        inputs += [("c0", dtype, c0.shape), ("p", dtype, p.shape)]
        feeds += [c0, p]
        outputs.append(("yc", dtype, None))
    m = _model(op, inputs, outputs, 14, hidden_size=hid, **attrs)
    # onnx.reference ignores sequence_lens, clip, activations and input_forget: the oracle is ONNX's equations
    want = _recurrent_equations(op, feeds, attrs, dtype)
    check_against_reference(session, m, feeds, rtol=1e-4, atol=1e-5, want=want)


@pytest.mark.parametrize("op,attrs", [("LSTM", {}), ("GRU", {}), ("GRU", dict(linear_before_reset=1)), ("RNN", {})])
@pytest.mark.parametrize("batch", [1, 5, 9, 40])
def test_recurrent_batches(session, op, attrs, batch):
    """Batches in four-row blocks with a partial last block, and past the small-GEMM rows (40): every row's
    recurrence through the transposed R, including GRU's h-gate block of it."""
    rng = np.random.default_rng(37 + batch)
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    seq, inp, hid = 5, 6, 19
    x = rng.standard_normal((seq, batch, inp)).astype(np.float32)
    w = (rng.standard_normal((1, gates * hid, inp)) * 0.4).astype(np.float32)
    r = (rng.standard_normal((1, gates * hid, hid)) * 0.3).astype(np.float32)
    b = (rng.standard_normal((1, 2 * gates * hid)) * 0.2).astype(np.float32)
    lens = np.full(batch, seq, np.int32)
    h0 = rng.standard_normal((1, batch, hid)).astype(np.float32)
    inputs = [("x", np.float32, x.shape), ("w", np.float32, w.shape), ("r", np.float32, r.shape),
              ("b", np.float32, b.shape), ("l", np.int32, lens.shape), ("h0", np.float32, h0.shape)]
    feeds = [x, w, r, b, lens, h0]
    outputs = [("y", np.float32, None), ("yh", np.float32, None)]
    if op == "LSTM":
        c0 = rng.standard_normal((1, batch, hid)).astype(np.float32)
        p = (rng.standard_normal((1, 3 * hid)) * 0.5).astype(np.float32)
        inputs += [("c0", np.float32, c0.shape), ("p", np.float32, p.shape)]
        feeds += [c0, p]
        outputs.append(("yc", np.float32, None))
    m = _model(op, inputs, outputs, 14, hidden_size=hid, **attrs)
    want = _recurrent_equations(op, feeds, attrs, np.float32)
    check_against_reference(session, m, feeds, rtol=1e-4, atol=1e-5, want=want)


_ACTIVATIONS = {"Sigmoid": lambda v: 1 / (1 + np.exp(-v)), "Tanh": np.tanh, "Relu": lambda v: np.maximum(v, 0),
                "HardSigmoid": lambda v: np.clip(0.2 * v + 0.5, 0, 1), "Softsign": lambda v: v / (1 + np.abs(v))}


def _recurrent_equations(op, feeds, attrs, dtype):
    """RNN / GRU / LSTM outputs (layout 0) from the operator's equations in the ONNX spec, in float64."""
    x, w, r, b, lens, h0 = (f if f.dtype == np.int32 else np.asarray(f, np.float64) for f in feeds[:6])
    c0, p = (np.asarray(f, np.float64) for f in feeds[6:8]) if op == "LSTM" else (None, None)
    seq, batch, _ = x.shape
    dirs, hid = h0.shape[0], h0.shape[2]
    y = np.zeros((seq, dirs, batch, hid))
    yh, yc = np.zeros((dirs, batch, hid)), np.zeros((dirs, batch, hid))
    with np.errstate(over="ignore"):  # exp of the saturating inputs
        _recurrent_directions(op, x, w, r, b, lens, h0, c0, p, attrs, y, yh, yc)
    return [a.astype(dtype) for a in ([y, yh, yc] if op == "LSTM" else [y, yh])]


def _recurrent_directions(op, x, w, r, b, lens, h0, c0, p, attrs, y, yh, yc):
    seq, batch, _ = x.shape
    dirs, hid = h0.shape[0], h0.shape[2]
    per = {"RNN": 1, "GRU": 2, "LSTM": 3}[op]
    names = attrs.get("activations", (["Tanh"] if op == "RNN" else ["Sigmoid", "Tanh", "Tanh"][:per]) * dirs)
    acts = [_ACTIVATIONS[n] for n in names]
    clip = attrs.get("clip")
    cl = (lambda v: np.clip(v, -clip, clip)) if clip is not None else (lambda v: v)
    for d in range(dirs):
        f, g, hfn = (acts[d * per:(d + 1) * per] * 3)[:3]
        rev = d == 1 or attrs.get("direction") == "reverse"
        wb, rb = b[d, :b.shape[1] // 2], b[d, b.shape[1] // 2:]
        for n in range(batch):
            h, c = h0[d, n].copy(), (c0[d, n].copy() if op == "LSTM" else None)
            steps = range(lens[n] - 1, -1, -1) if rev else range(lens[n])
            for t in steps:
                xw, hr = w[d] @ x[t, n] + wb, r[d] @ h + rb
                if op == "RNN":
                    h = f(cl(xw + hr))
                elif op == "GRU":
                    z, rg = f(cl(xw[:hid] + hr[:hid])), f(cl(xw[hid:2 * hid] + hr[hid:2 * hid]))
                    if attrs.get("linear_before_reset"):
                        hh = g(cl(xw[2 * hid:] + rg * hr[2 * hid:]))
                    else:
                        hh = g(cl(xw[2 * hid:] + r[d, 2 * hid:] @ (rg * h) + rb[2 * hid:]))
                    h = (1 - z) * hh + z * h
                else:
                    pre = xw + hr
                    i = f(cl(pre[:hid] + p[d, :hid] * c))
                    fg = 1 - i if attrs.get("input_forget") else f(cl(pre[2 * hid:3 * hid] + p[d, 2 * hid:] * c))
                    c = fg * c + i * g(cl(pre[3 * hid:]))
                    h = f(cl(pre[hid:2 * hid] + p[d, hid:2 * hid] * c)) * hfn(c)
                y[t, d, n] = h
            yh[d, n] = h
            if op == "LSTM":
                yc[d, n] = c


def test_refusals_name_node_op_and_reason(session):
    m = _model("Resize", [("x", TensorProto.STRING, [1, 1, 2, 2]), ("", None, None), ("s", np.float32, [4])],
               [("y", TensorProto.STRING, None)], 19)
    with pytest.raises(ga.GeError, match="(?i)string"):
        session.add_graph(fresh_graph_id(), ga.Graph.from_onnx(m))
    m = _model("Resize", [("x", np.float32, [1, 1, 2, 2]), ("", None, None), ("s", np.float32, [4])],
               [("y", np.float32, None)], 19, mode="bogus")
    with pytest.raises(ga.GeError, match=r"op Resize\): attribute 'mode' has unsupported value 'bogus'"):
        session.add_graph(fresh_graph_id(), ga.Graph.from_onnx(m))
    # The output is declared float so that the node itself (not the graph's declarations) must refuse int4.
    m = _model("QuantizeLinear", [("x", np.float32, [3]), ("s", np.float32, [])], [("y", np.float32, None)], 21,
               output_dtype=TensorProto.INT4)
    gid = fresh_graph_id()
    with pytest.raises(ga.GeError, match=r"op QuantizeLinear\): output_dtype INT4 is not supported"):
        session.add_graph(gid, ga.Graph.from_onnx(m))
        session.run_graph(gid, [np.zeros(3, np.float32), np.asarray(np.float32(1))])


# ---------------------------------------------------------------------------------------------------------------
# Random operators: shapes, dtypes, distributions, seeds, never folded


def _random_model(op, opset=15, inputs=(), **attrs):
    return _model(op, list(inputs), [("y", attrs.pop("out_dtype", np.float32), None)], opset, **attrs)


def test_random_normal_and_uniform_distributions(session):
    m = _random_model("RandomNormal", shape=[200, 100], mean=3.0, scale=2.0, seed=1.0)
    (y,) = _run(session, m, [])
    assert y.shape == (200, 100) and y.dtype == np.float32
    assert abs(y.mean() - 3.0) < 0.05 and abs(y.std() - 2.0) < 0.05
    m = _random_model("RandomUniform", shape=[20000], low=-1.0, high=5.0, dtype=TensorProto.DOUBLE,
                      out_dtype=np.float64)
    (u,) = _run(session, m, [])
    assert u.dtype == np.float64 and u.min() >= -1.0 and u.max() < 5.0 and abs(u.mean() - 2.0) < 0.05


def test_random_seed_reproducible_and_runs_differ(session):
    m = _random_model("RandomUniform", shape=[64], seed=7.0)
    gid = fresh_graph_id()
    session.add_graph(gid, ga.Graph.from_onnx(m))
    first = session.run_graph(gid, [])[0].numpy().copy()
    second = session.run_graph(gid, [])[0].numpy().copy()
    session.remove_graph(gid)
    assert not np.array_equal(first, second)  # not folded into a constant
    (again,) = _run(session, m, [])
    np.testing.assert_array_equal(again, first)  # same seed, same first draw


def test_random_like_bernoulli_multinomial(session):
    x = np.zeros((3, 5), np.float16)
    m = _random_model("RandomNormalLike", inputs=[("x", np.float16, x.shape)], out_dtype=np.float16)
    (y,) = _run(session, m, [x])
    assert y.shape == (3, 5) and y.dtype == np.float16
    p = np.tile(np.array([0.0, 0.25, 1.0], np.float32), (4000, 1))
    m = _random_model("Bernoulli", inputs=[("p", np.float32, p.shape)], seed=3.0)
    (b,) = _run(session, m, [p])
    assert set(np.unique(b)) <= {0.0, 1.0}
    assert b[:, 0].sum() == 0 and b[:, 2].sum() == 4000 and abs(b[:, 1].mean() - 0.25) < 0.03
    logits = np.log(np.array([[0.1, 0.6, 0.3]], np.float32))
    m = _random_model("Multinomial", inputs=[("l", np.float32, logits.shape)], sample_size=20000,
                      dtype=TensorProto.INT64, out_dtype=np.int64)
    (s,) = _run(session, m, [logits])
    assert s.shape == (1, 20000) and s.dtype == np.int64
    np.testing.assert_allclose(np.bincount(s[0], minlength=3) / 20000, [0.1, 0.6, 0.3], atol=0.02)


# ---------------------------------------------------------------------------------------------------------------
# Odd shapes and attributes: every case either runs or is refused with a GeError, in a subprocess (a crash must fail
# the test, not the test run).

_ODD_CASES = r"""
import numpy as np, itertools, sys
import geasync as ga
from onnx import helper, TensorProto
s = ga.Session(); gid = [0]
def run(op, ins, outs, opset, **attrs):
    def vi(n, t, sh): return helper.make_tensor_value_info(n, t, sh)
    node = helper.make_node(op, [i[0] for i in ins], [o for o in outs], **attrs)
    g = helper.make_graph([node], "f", [vi(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in ins if n],
                          [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs if o])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    gid[0] += 1
    try:
        s.add_graph(gid[0], ga.Graph.from_onnx(m))
        s.run_graph(gid[0], [np.require(a, requirements="C") for n, a in ins if n])
        s.remove_graph(gid[0]); return "ok"
    except ga.GeError as e:
        return "err"
    except Exception as e:
        return "pyerr " + type(e).__name__ + str(e)[:80]
f32 = np.float32
res = []
for shp in [(0, 3, 4, 4), (1, 1, 1, 1), (1, 2, 0, 3)]:
    x = np.ones(shp, f32)
    for mode in ["nearest", "linear", "cubic"]:
        for sc in [[1, 1, 0.01, 100.0], [1, 1, 1e-9, 1], [1, 1, -1, 2], [1, 1, np.nan, 2], [1, 1, 3, 3]]:
            res.append(run("Resize", [("x", x), ("", None), ("s", np.array(sc, f32))], ["y"], 19, mode=mode,
                           antialias=int(mode != "nearest")))
        res.append(run("Resize", [("x", x), ("r", np.array([0, 0, -1e30, 2, 1, 1, 1e30, -5], f32)),
                                  ("s", np.array([1, 1, 2, 2], f32))], ["y"], 19, mode=mode,
                       coordinate_transformation_mode="tf_crop_and_resize"))
        res.append(run("Resize", [("x", x), ("", None), ("", None), ("z", np.array([0, 0, 0, 0], np.int64))], ["y"],
                       19, mode=mode))
        res.append(run("Resize", [("x", x), ("", None), ("", None), ("z", np.array([1, 1, -3, 2], np.int64))], ["y"],
                       19, mode=mode))
for k in [-1, 0, 5, 100]:
    res.append(run("TopK", [("x", np.ones((3, 5), f32)), ("k", np.array([k], np.int64))], ["v", "i"], 11))
    res.append(run("TopK", [("x", np.ones((0, 5), f32)), ("k", np.array([k], np.int64))], ["v", "i"], 11, axis=0))
res.append(run("QuantizeLinear", [("x", np.ones((2, 3), f32)), ("s", np.ones(5, f32))], ["y"], 13))
res.append(run("QuantizeLinear", [("x", np.ones((2, 3), f32)), ("s", np.zeros((), f32))], ["y"], 13))
res.append(run("QuantizeLinear", [("x", np.ones((2, 3), f32)), ("s", np.ones((2, 5), f32))], ["y"], 21, block_size=1))
res.append(run("DequantizeLinear", [("x", np.ones((2, 3), np.uint8)), ("s", np.ones(3, f32)),
                                    ("z", np.ones(2, np.uint8))], ["y"], 13))
res.append(run("DynamicQuantizeLinear", [("x", np.zeros((0,), f32))], ["y", "s", "z"], 11))
res.append(run("DynamicQuantizeLinear", [("x", np.array([np.nan, np.inf, -np.inf], f32))], ["y", "s", "z"], 11))
res.append(run("MatMulInteger", [("a", np.ones((2, 3), np.uint8)), ("b", np.ones((4, 5), np.uint8))], ["y"], 10))
res.append(run("MatMulInteger", [("a", np.ones((0, 3), np.uint8)), ("b", np.ones((3, 0), np.uint8))], ["y"], 10))
res.append(run("MatMulInteger", [("a", np.ones((3,), np.uint8)), ("b", np.ones((3,), np.uint8))], ["y"], 10))
res.append(run("ConvInteger", [("x", np.ones((1, 1, 2, 2), np.uint8)), ("w", np.ones((1, 1, 3, 3), np.uint8))], ["y"],
               10))
res.append(run("NonMaxSuppression", [("b", np.zeros((1, 0, 4), f32)), ("s", np.zeros((1, 1, 0), f32))], ["y"], 11))
res.append(run("NonMaxSuppression", [("b", np.full((1, 3, 4), np.nan, f32)), ("s", np.ones((1, 2, 3), f32)),
                                     ("m", np.array([-5], np.int64))], ["y"], 11))
res.append(run("NonMaxSuppression", [("b", np.zeros((1, 3, 4), f32)), ("s", np.ones((2, 2, 3), f32)),
                                     ("m", np.array([5], np.int64))], ["y"], 11))
res.append(run("RoiAlign", [("x", np.ones((1, 1, 4, 4), f32)), ("r", np.array([[0, 0, 1e30, 1e30]], f32)),
                            ("b", np.array([0], np.int64))], ["y"], 16))
res.append(run("RoiAlign", [("x", np.ones((1, 1, 4, 4), f32)), ("r", np.array([[0, 0, 2, 2]], f32)),
                            ("b", np.array([7], np.int64))], ["y"], 16))
res.append(run("RoiAlign", [("x", np.ones((1, 1, 4, 4), f32)), ("r", np.full((1, 4), np.nan, f32)),
                            ("b", np.array([0], np.int64))], ["y"], 16))
res.append(run("RoiAlign", [("x", np.ones((1, 1, 0, 4), f32)), ("r", np.zeros((1, 4), f32)),
                            ("b", np.array([0], np.int64))], ["y"], 16))
for eq in ["ij,jk", "i,j->ij", "...,...", "ij->", "a", "ii->i", "ab,ab->ba", "i->ii", "ij,jk->zz", "->", ",", "i$"]:
    res.append(run("Einsum", [("a", np.ones((2, 3), f32)), ("b", np.ones((3, 2), f32))], ["y"], 12, equation=eq))
    res.append(run("Einsum", [("a", np.ones((3, 3), f32))], ["y"], 12, equation=eq))
for op, g in [("RNN", 1), ("GRU", 3), ("LSTM", 4)]:
    res.append(run(op, [("x", np.ones((0, 2, 3), f32)), ("w", np.ones((1, g * 4, 3), f32)),
                        ("r", np.ones((1, g * 4, 4), f32))], ["y", "h"], 14, hidden_size=4))
    res.append(run(op, [("x", np.ones((2, 2, 3), f32)), ("w", np.ones((1, g * 4, 3), f32)),
                        ("r", np.ones((1, g * 4, 4), f32)), ("", None), ("l", np.array([5, -1], np.int32))], ["y"], 14,
                   hidden_size=4))
    res.append(run(op, [("x", np.ones((2, 2, 3), f32)), ("w", np.ones((1, g * 4, 3), f32)),
                        ("r", np.ones((1, g * 4, 4), f32))], ["y"], 14, hidden_size=5))
    res.append(run(op, [("x", np.ones((2, 2, 3), f32)), ("w", np.ones((2, g * 4, 3), f32)),
                        ("r", np.ones((2, g * 4, 4), f32))], ["", "h"], 14, hidden_size=4, direction="bidirectional",
                   activations=["Foo"] * 6))
res.append(run("Multinomial", [("x", np.ones((2, 0), f32))], ["y"], 15, sample_size=3))
res.append(run("RandomNormal", [], ["y"], 15, shape=[-1, 2]))
bad = [r for r in res if r.startswith("pyerr")]
assert not bad, bad
print("cases", len(res), "refused", res.count("err"))
"""


def test_odd_inputs_never_crash():
    import os
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-W", "ignore", "-c", _ODD_CASES], capture_output=True, text=True, timeout=300,
                       cwd=os.path.dirname(os.path.abspath(__file__)))  # the installed geasync, not the source tree
    assert p.returncode == 0, p.stderr[-2000:]
    assert "refused" in p.stdout
    cases, refused = int(p.stdout.split()[1]), int(p.stdout.split()[3])
    assert cases > 100 and 0 < refused < cases
