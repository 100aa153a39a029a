"""Kernels of the operator-breadth work (reductions, logic/bitwise, Mod, index ops, Pad/Tile, CumSum, Trilu) checked
against ``onnx.reference`` on random inputs beyond the ONNX node cases, including edge values (NaN, +-inf,
denormals, large magnitudes) and empty tensors."""

from __future__ import annotations

import numpy as np
import pytest

import geasync as ga

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnx_cases import rerun_file_with_instruction_set  # noqa: E402

_TYPES = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.int32: TensorProto.INT32,
          np.int64: TensorProto.INT64, np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8,
          np.bool_: TensorProto.BOOL}

_EDGE = np.array([np.nan, np.inf, -np.inf, 1e-40, -1e-40, 3e38, -3e38, 0.0, -0.0, 1.0], np.float32)


def _model(op, inputs, n_out=1, opset=21, **attrs):
    node = helper.make_node(op, [f"x{i}" for i in range(len(inputs))], [f"y{i}" for i in range(n_out)], **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(f"x{i}", _TYPES[a.dtype.type], a.shape) for i, a in enumerate(inputs)],
        [helper.make_tensor_value_info(f"y{i}", TensorProto.UNDEFINED, None) for i in range(n_out)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(op, inputs, n_out=1, opset=21, **attrs):
    model = _model(op, inputs, n_out, opset, **attrs)
    expected = ReferenceEvaluator(model).run(None, {f"x{i}": a for i, a in enumerate(inputs)})
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        got = [t.numpy() for t in s.run_graph(1, list(inputs))]
    for g, e in zip(got, expected, strict=True):
        e = np.asarray(e)
        if op.startswith("Reduce") and g.dtype == inputs[0].dtype and e.dtype != g.dtype:
            e = e.astype(g.dtype)  # the reference widens some integer reductions; ONNX keeps the input type
        assert g.dtype == e.dtype and g.shape == e.shape, (op, g.dtype, e.dtype, g.shape, e.shape)
        if np.issubdtype(e.dtype, np.floating):
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6, equal_nan=True)
        else:
            np.testing.assert_array_equal(g, e)


RNG = np.random.default_rng(14)


@pytest.mark.parametrize("op", ["ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
                                "ReduceLogSumExp", "ReduceMax", "ReduceSum", "ReduceMean"])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reductions_random(op, keepdims):
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    if op == "ReduceLogSum":
        x = np.abs(x) + 0.1
    _check(op, [x, np.array([1, -1], np.int64)], keepdims=keepdims)


@pytest.mark.parametrize("op", ["ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
                                "ReduceLogSumExp", "ReduceMax", "ReduceSum", "ReduceMean"])
@pytest.mark.parametrize("shape,axes", [((7, 33), [0]), ((1030, 5), [0]), ((2, 9, 17), [1]), ((5, 3, 10), [0, 1]),
                                        ((4, 6, 3, 8), [0, 2]), ((6, 1, 4), [0])])
def test_reductions_over_leading_axes(op, shape, axes):
    """Reduced axes above a kept contiguous one (column sums, several rows per pass): edge values in some columns."""
    rng = np.random.default_rng(sum(shape) + len(op))
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    flat = x.reshape(-1, shape[-1])
    flat[0, 0] = np.nan
    flat[-1, 1 % shape[-1]] = np.inf
    flat[1 % len(flat), 2 % shape[-1]], flat[-1, 2 % shape[-1]] = np.inf, -np.inf
    flat[:, 3 % shape[-1]] = 1e-40  # denormal terms: not flushed
    flat[0, 4 % shape[-1]] = 1e15
    if op == "ReduceLogSum":
        x = np.abs(x)
    with np.errstate(all="ignore"):
        _check(op, [x, np.array(axes, np.int64)], keepdims=int(len(axes) == 1))


@pytest.mark.parametrize("op", ["ReduceMin", "ReduceMax", "ReduceSum", "ReduceL1", "ReduceSumSquare", "ReduceProd"])
def test_reductions_int(op):
    x = RNG.integers(-5, 6, (4, 6)).astype(np.int32)
    _check(op, [x, np.array([0], np.int64)])


@pytest.mark.parametrize("op", ["ReduceMin", "ReduceMax", "ReduceSum", "ReduceL1"])
def test_reductions_edge_values(op):
    with np.errstate(all="ignore"):
        _check(op, [_EDGE.reshape(2, 5), np.array([1], np.int64)])


def test_reduce_logsumexp_large_magnitudes_stay_finite():
    # exp(100) overflows float32, not the max-shifted sum; the reference overflows too, so compare with the math.
    x = np.array([[100.0, 100.0], [-1e4, 0.0]], np.float32)
    model = _model("ReduceLogSumExp", [x, np.array([1], np.int64)])
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        (y,) = s.run_graph(1, [x, np.array([1], np.int64)])
    np.testing.assert_allclose(y.numpy().ravel(), [100.0 + np.log(2.0), 0.0], rtol=1e-6)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceProd", "ReduceMin", "ReduceL2", "ReduceLogSumExp"])
def test_reductions_empty(op):
    _check(op, [np.zeros((0, 3), np.float32), np.array([0], np.int64)])


@pytest.mark.parametrize("bounds", [(-0.5, 2.0), (None, 1.0), (-1.0, None), (None, None), (3.0, -3.0), (-np.inf, 0.0)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("n", [1, 7, 1000])
def test_clip_bounds_and_edge_values(bounds, dtype, n):
    """Clip in one min/max pass (vectorised for float32): NaN passes through, infinities and denormals are clipped
    like any value, min > max gives max (the reference's order), absent bounds leave that side open."""
    if dtype is np.int32:  # no infinities: the type's lowest value instead
        bounds = tuple(b if b is None or np.isfinite(b) else np.iinfo(np.int32).min for b in bounds)
    x = (RNG.standard_normal(n) * 3).astype(dtype)
    if dtype is not np.int32:
        x[: min(n, len(_EDGE))] = _EDGE[: min(n, len(_EDGE))].astype(dtype)
    names, feeds = ["x0"], [x]
    for i, b in enumerate(bounds):
        if b is None:
            names.append("")
        else:
            names.append(f"x{i + 1}")
            feeds.append(np.array(b, dtype))
    while names[-1] == "":
        names.pop()
    node = helper.make_node("Clip", names, ["y0"])
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(nm, _TYPES[dtype], a.shape) for nm, a in zip(
            [nm for nm in names if nm], feeds, strict=True)],
        [helper.make_tensor_value_info("y0", _TYPES[dtype], x.shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    expected = ReferenceEvaluator(model).run(None, dict(zip([nm for nm in names if nm], feeds, strict=True)))[0]
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        got = s.run_graph(1, feeds)[0].numpy()
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("op", ["GreaterOrEqual", "LessOrEqual"])
def test_compare_with_nan_and_broadcast(op):
    a = np.concatenate([_EDGE, RNG.standard_normal(2).astype(np.float32)]).reshape(3, 4)
    _check(op, [a, np.array([0.0, np.nan, 1.0, -np.inf], np.float32)])


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8])
def test_mod_int_signs_and_zero_divisor(fmod, dtype):
    a = RNG.integers(-20, 21, (5, 6)).astype(dtype)
    b = RNG.integers(-7, 8, (6,)).astype(dtype)
    b[b == 0] = 3  # the reference divides by zero with a warning; the twin's x mod 0 = 0 is tested below
    _check("Mod", [a, b], fmod=fmod)
    model = _model("Mod", [a, b], fmod=fmod)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        (y,) = s.run_graph(1, [a, np.zeros_like(b)])
    assert not y.numpy().any()


def test_mod_float_fmod():
    a = np.array([5.5, -5.5, np.inf, 1e-40, 3e38], np.float32)
    b = np.array([2.0, 2.0, 2.0, 3.0, -7.0], np.float32)
    with np.errstate(all="ignore"):
        _check("Mod", [a, b], fmod=1)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift_signed_and_out_of_range(direction):
    a = np.array([-128, -1, 1, 127, 64, -64], np.int8)
    b = np.array([1, 7, 8, -1, 3, 9], np.int8)
    _check("BitShift", [a, b], opset=26, direction=direction)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_with_ties_and_nan(op, last):
    x = RNG.integers(0, 3, (4, 5)).astype(np.float32)
    x[1, 2] = np.nan
    _check(op, [x], axis=1, keepdims=0, select_last_index=last)


def test_gather_scatter_elements_negative_indices():
    data = RNG.standard_normal((3, 4)).astype(np.float32)
    idx = RNG.integers(-4, 4, (3, 2)).astype(np.int64)
    _check("GatherElements", [data, idx], axis=1)
    upd = RNG.standard_normal((3, 2)).astype(np.float32)
    _check("ScatterElements", [data, idx, upd], axis=1, reduction="add")


def test_gather_scatter_nd():
    data = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    idx = np.array([[[0, 1], [1, 2]], [[1, 0], [0, -1]]], np.int64)
    _check("GatherND", [data, idx])
    _check("ScatterND", [data, idx[0], RNG.standard_normal((2, 4)).astype(np.float32)], reduction="max")


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [[2, 0, 1, 3], [5, 1, 0, 7]])  # the second pads past the data in reflect/wrap
def test_pad_modes(mode, pads):
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    _check("Pad", [x, np.array(pads, np.int64)], mode=mode)


def test_pad_negative_pads_crop():
    # onnx.reference rejects negative pads; ONNX defines them as cropping.
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    pads = np.array([1, -1, 0, -2], np.int64)
    model = _model("Pad", [x, pads])
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        (y,) = s.run_graph(1, [x, pads])
    np.testing.assert_array_equal(y.numpy(), np.pad(x, [(1, 0), (0, 0)])[:, 1:-2])


def test_tile_and_empty():
    _check("Tile", [RNG.standard_normal((2, 3)).astype(np.float32), np.array([2, 3], np.int64)])
    _check("Tile", [np.zeros((0, 3), np.float32), np.array([2, 1], np.int64)])


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum(exclusive, reverse):
    _check("CumSum", [RNG.standard_normal((3, 5)).astype(np.float64), np.array(1, np.int32)],
           exclusive=exclusive, reverse=reverse)


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [-7, -1, 0, 2, 9])
def test_trilu(upper, k):
    _check("Trilu", [RNG.integers(1, 9, (2, 4, 5)).astype(np.int64), np.array(k, np.int64)], upper=upper)


def _row_cases():
    """float32 rows along the last axis for the vectorised Max / Min / ArgMax / ArgMin: lengths around the vector
    widths, each row random with edge values (NaN, +-inf, signed zeros, denormals, large magnitudes) sprinkled."""
    for n in (1, 7, 8, 9, 31, 32, 33, 100, 1000):
        x = (RNG.standard_normal((12, n)) * 10).astype(np.float32)
        x[1] = RNG.choice(_EDGE[1:], n)                 # edge values, no NaN
        x[2] = RNG.choice(_EDGE, n)                     # edge values with NaN
        x[3] = RNG.choice([0.0, -0.0], n)               # all zeros: which sign comes first decides
        x[4] = -np.abs(x[4])
        x[4, n // 2] = -0.0                             # the maximum is -0 among negatives
        x[5] = np.abs(x[5])
        x[5, n // 3] = 0.0                              # the minimum is +0 among positives
        x[6] = -np.inf
        x[7] = np.inf
        x[8, n - 1] = np.nan                            # NaN only in the scalar tail
        x[9] = RNG.choice([1e-40, -1e-40, 2e-45], n)    # denormals
        x[10] = np.round(x[10])                         # ties
        yield x


def _ordered_fold(x, op):
    """The result of folding each row left to right (the first NaN wins, the first of equal values stays)."""
    out = np.empty(x.shape[0], np.float32)
    for i, row in enumerate(x):
        best = np.float32(-np.inf if op == "ReduceMax" else np.inf)
        for v in row:
            if best != best:
                break
            if v != v or (v > best if op == "ReduceMax" else v < best):
                best = v
        out[i] = best
    return out


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_reduce_max_min_last_axis_rows(op):
    for x in _row_cases():
        _check(op, [x, np.array([-1], np.int64)], keepdims=0, opset=18)
        with ga.Session() as s:
            s.add_graph(1, ga.Graph.from_onnx(_model(op, [x, np.array([-1], np.int64)], keepdims=0, opset=18)))
            (y,) = s.run_graph(1, [x, np.array([-1], np.int64)])
        # Signed zeros are equal to allclose: compare the bits with the ordered fold.
        np.testing.assert_array_equal(y.numpy().view(np.uint32), _ordered_fold(x, op).view(np.uint32))


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_reduce_max_min_runs_folded_into_one_output(op):
    # Axes {0, 2}: each output folds several contiguous runs, NaN in some of them.
    x = (RNG.standard_normal((3, 4, 37)) * 5).astype(np.float32)
    x[1, 2, 5] = np.nan
    x[2, 3] = 0.0
    _check(op, [x, np.array([0, 2], np.int64)], keepdims=1, opset=18)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_last_axis_rows(op, last):
    for x in _row_cases():
        _check(op, [x], axis=-1, keepdims=1, select_last_index=last)


# 2-D pools whose interior columns take the row-wise path (every pad combination that reaches it, strides 1-3,
# ceil_mode) and ones that do not (dilations; no interior column: the window is wider than the input).
_POOLS = [
    dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 1, 1, 0]),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 0, 1], ceil_mode=1),
    dict(kernel_shape=[2, 2], strides=[2, 2]),
    dict(kernel_shape=[2, 3], strides=[1, 3], pads=[0, 2, 1, 2]),
    dict(kernel_shape=[5, 5], pads=[2, 2, 2, 2]),
    dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"),
    dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], dilations=[2, 2]),
    dict(kernel_shape=[4, 9], pads=[1, 1, 1, 1]),
]


def _pool_input(shape):
    x = (RNG.standard_normal(shape) * 100).astype(np.float32)
    x.flat[RNG.choice(x.size, x.size // 5, replace=False)] = RNG.choice(_EDGE[1:], x.size // 5)  # no NaN: below
    return x


@pytest.mark.parametrize("attrs", _POOLS)
@pytest.mark.parametrize("shape", [(2, 3, 9, 11), (1, 2, 16, 33), (1, 1, 7, 7), (1, 2, 5, 150)])
def test_maxpool_interior_rows(attrs, shape):
    _check("MaxPool", [_pool_input(shape)], opset=18, **attrs)


@pytest.mark.parametrize("attrs", _POOLS)
@pytest.mark.parametrize("count_pad", [0, 1])
@pytest.mark.parametrize("shape", [(2, 3, 9, 11), (1, 2, 16, 33), (1, 2, 5, 83)])  # 83: blocks of 32, 8 and a tail
def test_averagepool_interior_rows(attrs, count_pad, shape):
    x = (RNG.standard_normal(shape) * 100).astype(np.float32)
    x[0, 0, 1, :4] = [1e-40, 3e37, -1e-45, 1e30]  # no cancellation: the reference sums in float32
    opset = 19 if "dilations" in attrs else 18  # dilations on AveragePool since opset 19
    model = _model("AveragePool", [x], 1, opset, count_include_pad=count_pad, **attrs)
    # The reference sums in the input's type: give it float64 so that its own rounding does not count.
    want = ReferenceEvaluator(_model("AveragePool", [x.astype(np.float64)], 1, opset, count_include_pad=count_pad,
                                     **attrs)).run(None, {"x0": x.astype(np.float64)})[0]
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        (got,) = s.run_graph(1, [x])
    assert got.numpy().dtype == np.float32 and got.numpy().shape == want.shape
    # The twin sums in float32 (window order): near-cancelling windows of values ~100 differ by its rounding.
    np.testing.assert_allclose(got.numpy(), want.astype(np.float32), rtol=1e-6, atol=1e-4)


@pytest.mark.parametrize("attrs", [dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                                   dict(kernel_shape=[2, 5], pads=[0, 2, 1, 1]),
                                   dict(kernel_shape=[3, 1], pads=[1, 0, 1, 0]), dict(kernel_shape=[2, 2])])
@pytest.mark.parametrize("count_pad", [0, 1])
def test_averagepool_stride1_column_sums(attrs, count_pad):
    # Stride 1: every row tail, border columns, +-inf and denormals, against the reference in float64 (the twin's
    # float32 window-order sums: to their rounding). No NaN (the reference skips NaN taps) and no +-3e38 (float32
    # sums overflow there: test_ops_pool_f32sums.py checks those bit for bit).
    edge = _EDGE[[1, 2, 3, 4, 7, 8, 9]]
    for width in (1, 5, 8, 13, 24, 31):
        pads = attrs.get("pads", [0, 0, 0, 0])
        if width + pads[1] + pads[3] < attrs["kernel_shape"][1]:
            continue
        x = (RNG.standard_normal((1, 2, 6, width)) * 100).astype(np.float32)
        x.flat[RNG.choice(x.size, x.size // 4, replace=False)] = RNG.choice(edge, x.size // 4)
        model = _model("AveragePool", [x], 1, 18, count_include_pad=count_pad, **attrs)
        with np.errstate(invalid="ignore"):  # inf - inf in a window
            want = ReferenceEvaluator(_model("AveragePool", [x.astype(np.float64)], 1, 18,
                                             count_include_pad=count_pad, **attrs)).run(
                                                 None, {"x0": x.astype(np.float64)})[0]
        with ga.Session() as s:
            s.add_graph(1, ga.Graph.from_onnx(model))
            (got,) = s.run_graph(1, [x])
        np.testing.assert_allclose(got.numpy(), want.astype(np.float32), rtol=1e-6, atol=1e-4, equal_nan=True)


@pytest.mark.parametrize("attrs", [a for a in _POOLS[:8] if "pads" in a or "auto_pad" in a])
@pytest.mark.parametrize("shape", [(2, 3, 12, 17), (1, 2, 6, 150)])  # 150: stride 2 blocks of 32 and 8 outputs
def test_maxpool_interior_rows_same_bits_as_exact_loop_with_nan(attrs, shape):
    # With an Indices output MaxPool takes the general loop: Y must be the same bits (NaN, signed zeros, inf).
    x = (RNG.standard_normal(shape) * 10).astype(np.float32)
    x.flat[RNG.choice(x.size, x.size // 4, replace=False)] = RNG.choice(_EDGE, x.size // 4)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(_model("MaxPool", [x], 1, 18, **attrs)))
        s.add_graph(2, ga.Graph.from_onnx(_model("MaxPool", [x], 2, 18, **attrs)))
        (fast,) = s.run_graph(1, [x])
        exact, _ = s.run_graph(2, [x])
    np.testing.assert_array_equal(fast.numpy().view(np.uint32), exact.numpy().view(np.uint32))


@pytest.mark.parametrize("attrs", [dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                                   dict(kernel_shape=[3, 3], strides=[2, 2]),
                                   dict(kernel_shape=[2, 5], strides=[2, 2], pads=[0, 2, 1, 2])])
@pytest.mark.parametrize("width", range(14, 32))  # every output-row tail past the 8-wide blocks, masked loads
def test_maxpool_stride2_row_tails(attrs, width):
    # Against the reference without NaN, and the same bits as the general loop (Indices output) with edge values.
    x = _pool_input((1, 2, 7, width))
    _check("MaxPool", [x], opset=18, **attrs)
    x.flat[RNG.choice(x.size, x.size // 4, replace=False)] = RNG.choice(_EDGE, x.size // 4)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(_model("MaxPool", [x], 1, 18, **attrs)))
        s.add_graph(2, ga.Graph.from_onnx(_model("MaxPool", [x], 2, 18, **attrs)))
        (fast,) = s.run_graph(1, [x])
        exact, _ = s.run_graph(2, [x])
    np.testing.assert_array_equal(fast.numpy().view(np.uint32), exact.numpy().view(np.uint32))


@pytest.mark.parametrize("shape", [(2, 3, 1, 1), (1, 4, 5, 7), (2, 2, 16, 16), (1, 3, 33, 31), (2, 2, 3, 4, 5)])
def test_global_average_pool_plane_sums(shape):
    x = (RNG.standard_normal(shape) * 100).astype(np.float32)
    x.reshape(-1)[:4] = [1e-40, 3e37, -1e-45, 1e30]
    want = x.astype(np.float64).mean(axis=tuple(range(2, len(shape))), keepdims=True).astype(np.float32)
    _check("GlobalAveragePool", [x])
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(_model("GlobalAveragePool", [x])))
        (got,) = s.run_graph(1, [x])
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=0)


def test_global_average_pool_nan_and_inf():
    x = RNG.standard_normal((1, 4, 9, 9)).astype(np.float32)
    x[0, 0, 3, 3] = np.nan
    x[0, 1, 8, 8] = np.inf
    x[0, 2, 0, 0], x[0, 2, 1, 1] = np.inf, -np.inf
    with np.errstate(invalid="ignore"):  # the reference's inf - inf
        _check("GlobalAveragePool", [x])


@pytest.mark.parametrize("shape", [(2, 3, 1, 1), (1, 4, 5, 7), (2, 2, 16, 16), (1, 3, 33, 31), (2, 2, 3, 4, 5)])
def test_global_max_pool_rows(shape):
    """Vectorised plane maxima (every row tail); planes with a NaN, only -inf, or a zero maximum keep the loop."""
    x = (RNG.standard_normal(shape) * 100).astype(np.float32)
    planes = x.reshape(shape[0] * shape[1], -1)
    planes[0, -1] = 3e38
    if planes.shape[0] >= 4:
        planes[1, planes.shape[1] // 2] = np.nan
        planes[2] = -np.inf
        planes[3] = -np.abs(planes[3])
        planes[3, 0] = -0.0
    if len(shape) == 4:  # onnx.reference keeps one spatial dim of a 3-D GlobalMaxPool: numpy alone checks those
        _check("GlobalMaxPool", [x])
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(_model("GlobalMaxPool", [x])))
        (got,) = s.run_graph(1, [x])
    np.testing.assert_array_equal(got.numpy().reshape(-1), planes.max(axis=1))


# Pad / Tile rows copied as whole stretches (memcpy / fill) when the last dim's map has long runs.
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.int64])
@pytest.mark.parametrize("pads", [[0, 0, 1, 1, 0, 0, 1, 1], [0, 1, 0, 3, 1, 0, 2, 9], [0, 0, 0, 0, 0, 0, 0, 0],
                                  [1, 0, 2, 40, 0, 2, 0, 1]])
def test_pad_constant_rows(dtype, pads):
    x = (RNG.standard_normal((2, 3, 7, 33)) * 50).astype(dtype)
    _check("Pad", [x, np.array(pads, np.int64), np.array(7, dtype)], mode="constant")


@pytest.mark.parametrize("mode", ["constant", "edge"])
def test_pad_rows_with_crop_and_edge_values(mode):
    x = RNG.choice(_EDGE, (3, 40)).astype(np.float32)
    pads = np.array([1, -3, 0, 5], np.int64)
    model = _model("Pad", [x, pads], mode=mode)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        (y,) = s.run_graph(1, [x, pads])
    want = np.pad(x[:, 3:], [(1, 0), (0, 5)], mode=mode)
    np.testing.assert_array_equal(y.numpy().view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.float64])
@pytest.mark.parametrize("repeats", [[2, 1], [1, 3], [3, 2], [1, 1]])
def test_tile_rows(dtype, repeats):
    x = (RNG.standard_normal((5, 37)) * 50).astype(dtype)
    _check("Tile", [x, np.array(repeats, np.int64)])
    _check("Tile", [x[:, :1], np.array(repeats, np.int64)])  # one-element rows: the per-element lookup


# Trailing dims copied whole fold into the dim before them: a Tile or Pad of outer dims copies long runs across
# rows (and the fill of padded outer rows), up to 65,536 output elements a folded row.
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.float64])
@pytest.mark.parametrize("shape, repeats", [((3, 4, 5), [2, 1, 1]), ((2, 3, 5), [1, 3, 1]), ((2, 3, 5), [2, 2, 1]),
                                            ((300, 260), [2, 1]), ((1, 70000), [3, 1]), ((4, 1, 1), [1, 2, 1])])
def test_tile_outer_dims_copy_whole_rows(dtype, shape, repeats):
    x = (RNG.standard_normal(shape) * 50).astype(dtype)
    _check("Tile", [x, np.array(repeats, np.int64)])


@pytest.mark.parametrize("pads", [[1, 0, 0, 0, 2, 0], [0, 2, 0, 1, 3, 0], [2, 0, 0, 0, 0, 0], [0, 0, 0, 1, 0, 0]])
def test_pad_outer_dims_copy_whole_rows(pads):
    x = (RNG.standard_normal((3, 4, 21)) * 50).astype(np.float32)
    _check("Pad", [x, np.array(pads, np.int64), np.array(-3.5, np.float32)], mode="constant")
    _check("Pad", [x, np.array(pads, np.int64)], mode="edge")


@pytest.mark.parametrize("op", ["Max", "Min"])
@pytest.mark.parametrize("n", [1, 7, 64, 1001])
def test_binary_max_min_edge_values(op, n):
    a = RNG.choice(_EDGE, n).astype(np.float32)
    b = RNG.choice(_EDGE, n).astype(np.float32)
    a[: n // 2] = (RNG.standard_normal(n // 2) * 10).astype(np.float32)
    _check(op, [a, b])
    _check(op, [a, b[:1]])  # broadcast scalar
    # NaN comes from the first operand that has it; among equal values (signed zeros) the first operand is kept.
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(_model(op, [a, b])))
        (y,) = s.run_graph(1, [a, b])
    pick = np.greater if op == "Max" else np.less
    want = np.where(np.isnan(a), a, np.where(np.isnan(b), b, np.where(pick(b, a), b, a)))
    np.testing.assert_array_equal(y.numpy().view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum_cumprod_over_every_axis(axis, exclusive, reverse):
    """Leading and middle axes run a whole inner row of running totals at once; rows of odd lengths hit every
    vector remainder, edge values (NaN, +-inf, denormals, a large magnitude) go through the same sums. (float32
    totals are float32 like the reference's, other floating types keep theirs in double.)"""
    x = (RNG.standard_normal((3, 7, 13)) * 4).astype(np.float32)
    x[1, 2] = [np.nan, np.inf, -np.inf, 1e-40, -1e-40, 0.0, -0.0, 1.0, 1e30, -2.5, 3.0, 1e-40, 7.0]
    x[2, :, 5] = [1e-40, -np.inf, 2.0, np.nan, -0.0, 1e30, 0.5]
    for op in ("CumSum", "CumProd"):
        with np.errstate(over="ignore", invalid="ignore"):  # the reference's numpy overflows to inf as we do
            _check(op, [x, np.array(axis, np.int64)], exclusive=exclusive, reverse=reverse)
    _check("CumSum", [np.zeros((0, 5, 3), np.float32), np.array(axis, np.int64)])
    _check("CumSum", [RNG.integers(-9, 9, (4, 33)).astype(np.int32), np.array(0 if axis == 2 else axis, np.int32)],
           exclusive=exclusive, reverse=reverse)


@pytest.mark.parametrize("n", [1, 15, 16, 17, 1001])
def test_isnan_isinf_float32_bits(n):
    """The float32 loops test bit patterns: NaNs with any payload and sign, both infinities, denormals, FLT_MAX."""
    bits = RNG.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    bits[::3] = RNG.choice(np.array([0x7f800000, 0xff800000, 0x7f800001, 0xffc00000, 0x7fffffff, 0x00000001,
                                     0x7f7fffff, 0x80000000], np.uint32), len(bits[::3]))
    x = bits.view(np.float32)
    _check("IsNaN", [x])
    for pos, neg in ((1, 1), (1, 0), (0, 1), (0, 0)):
        _check("IsInf", [x], detect_positive=pos, detect_negative=neg)


@pytest.mark.parametrize("op", ["ReduceProd", "ReduceMax", "ReduceMin", "ReduceL1"])
@pytest.mark.parametrize("n", [1, 7, 8, 9, 33])
@pytest.mark.parametrize("axes", [[-1], [1], None])
def test_laned_reductions_with_edge_values(op, n, axes):
    """Products through lanes and the select-based Max/Min, at run lengths leaving every lane remainder, with NaN,
    +-inf, signed zeros and denormals in some rows."""
    x = RNG.uniform(0.5, 1.5, (4, 3, n)).astype(np.float32)
    x[1, 1] = RNG.choice(_EDGE[1:], n)  # no NaN
    x[2, 0] = RNG.choice(_EDGE, n)
    x[3, 2, :] = -0.0
    if op == "ReduceProd":
        # Products are kept in double, the reference's in float32: a partial product that overflows or underflows
        # float32 only to be undone (or met by an inf) later would compare the accumulators, not the kernel.
        x[np.abs(x) > 1e30] = np.copysign(np.float32(2.0), x[np.abs(x) > 1e30])
        tiny = (x != 0) & (np.abs(x) < 1e-30)
        x[tiny] = np.copysign(np.float32(0.5), x[tiny])
    inputs = [x] if axes is None else [x, np.array(axes, np.int64)]
    with np.errstate(over="ignore", invalid="ignore"):
        _check(op, inputs, keepdims=1)


@pytest.mark.parametrize("k", [-40, -3, 0, 5, 40])
def test_trilu_float_rows(k):
    x = RNG.standard_normal((2, 13, 37)).astype(np.float32)
    x[0, 3] = RNG.choice(_EDGE, 37)
    for upper in (0, 1):
        _check("Trilu", [x, np.array(k, np.int64)], upper=upper)


@pytest.mark.parametrize("op", ["Sum", "Mean"])
def test_sum_mean_assign_first_input(op):
    """The first input is assigned, not added to 0: a lone -0 stays -0 like the reference; broadcasting inputs
    and edge values."""
    a = RNG.choice(_EDGE, (5, 17)).astype(np.float32)
    b = RNG.standard_normal(17).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        _check(op, [a])
        _check(op, [a, b])
        _check(op, [a, b, a])  # (the reference's Mean cannot take a broadcasting first input)
    z = np.full((3, 9), -0.0, np.float32)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(_model(op, [z])))
        assert np.signbit(s.run_graph(1, [z])[0].numpy()).all()


@pytest.mark.parametrize("n", [1, 7, 8, 9, 100003])
def test_range_float_counts(n):
    _check("Range", [np.array(-3.25, np.float32), np.array(-3.25 + 0.5 * n, np.float32), np.array(0.5, np.float32)])


@pytest.mark.parametrize("axis", [0, 1, 2])  # (the reference rejects a negative axis here)
@pytest.mark.parametrize("axis_len", [1, 4, 9])
def test_gather_elements_same_shape_outside_axis(axis, axis_len):
    """Indices with data's shape outside the axis (any length along it), negative indices, and an index out of
    range failing the run with a message."""
    x = RNG.standard_normal((3, 5, 7)).astype(np.float32)
    shape = list(x.shape)
    shape[axis] = axis_len
    n = x.shape[axis]
    idx = RNG.integers(-n, n, shape).astype(np.int64)
    _check("GatherElements", [x, idx], axis=axis)
    _check("GatherElements", [x.astype(np.float64), idx.astype(np.int32)], axis=axis)
    bad = idx.copy()
    bad.flat[-1] = n
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(_model("GatherElements", [x, bad], axis=axis)))
        with pytest.raises(ga.GeError, match="out of range"):
            s.run_graph(1, [x, bad])


# ---- the fallback instruction sets run the same checks ----

@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_fallback_instruction_sets_pass_the_same_checks(isa):
    rerun_file_with_instruction_set(__file__, isa)


# ---- int64 extremes in shape and index arithmetic ----

_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


def _twin_run(model, inputs):
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        return [t.numpy() for t in s.run_graph(1, list(inputs))]


@pytest.mark.parametrize("k", [_I64_MIN, _I64_MIN + 1, -(2**62), 2**62, _I64_MAX - 1, _I64_MAX])
@pytest.mark.parametrize("upper", [0, 1])
def test_trilu_extreme_k(k, upper):
    """i + k wrapped around: lower with k = 2^63 - 1 zeroed everything, upper kept most of the matrix."""
    x = RNG.integers(1, 9, (2, 4, 5)).astype(np.int64)
    (got,) = _twin_run(_model("Trilu", [x, np.array(k, np.int64)], upper=upper), [x, np.array(k, np.int64)])
    keep = k < 0 if upper else k >= 0  # every |k| here is beyond the matrix: all or nothing
    np.testing.assert_array_equal(got, x if keep else np.zeros_like(x))


@pytest.mark.parametrize("starts,ends,steps", [([3], [_I64_MIN], [_I64_MIN]), ([_I64_MAX], [_I64_MIN], [_I64_MIN]),
                                               ([1], [_I64_MAX], [_I64_MAX]), ([0], [_I64_MAX], [2**62]),
                                               ([-1], [_I64_MIN], [-(2**62)]), ([_I64_MIN], [_I64_MAX], [3])])
def test_slice_extreme_steps(starts, ends, steps):
    """The element count (end - start + step - 1) / step overflowed: a step of -2^63 gave no elements (numpy and
    onnxruntime: one), a step of 2^63 - 1 failed with "shape ... cannot be determined at compile time"."""
    x = np.arange(7, dtype=np.float32)
    ins = [x] + [np.array(v, np.int64) for v in (starts, ends, [0], steps)]
    (got,) = _twin_run(_model("Slice", ins, opset=13), ins)
    np.testing.assert_array_equal(got, x[slice(starts[0], ends[0], steps[0])])


@pytest.mark.parametrize("pads,needle", [([_I64_MIN, _I64_MIN], "below zero"), ([-(2**62), -(2**62)], "below zero"),
                                         ([2**62, 2**62], "more than 2\\^40"), ([_I64_MAX, 1], "more than 2\\^40")])
def test_pad_amounts_whose_sum_overflows_are_refused(pads, needle):
    """dim + begin + end wrapped around: pads of -2^63 on both sides of a dim of 4 gave 4 zeros, and pads of 2^62
    said they cropped the dim below zero."""
    x = np.arange(4, dtype=np.float32)
    model = _model("Pad", [x, np.array(pads, np.int64)])
    with pytest.raises(ga.GeError, match=r"\(op Pad\): .*" + needle):
        _twin_run(model, [x, np.array(pads, np.int64)])


@pytest.mark.parametrize("depth", [np.nan, np.inf, 1e30, -3.0])
def test_onehot_depth_that_is_no_count_is_refused(depth):
    """A float depth was converted to int64 unchecked (undefined for NaN and 1e30; it read as -2^63)."""
    idx, d, vals = np.array([1, 2], np.int64), np.array(depth, np.float32), np.array([0, 1], np.float32)
    with pytest.raises(ga.GeError, match=r"\(op OneHot\): input 'depth' is .* from 0 to 2\^40"):
        _twin_run(_model("OneHot", [idx, d, vals]), [idx, d, vals])


def test_onehot_float_indices_out_of_any_class():
    idx = np.array([1.0, np.nan, 1e30, -1e30, -1.0, 2.9], np.float32)
    d, vals = np.array(3, np.int64), np.array([0, 5], np.float32)
    (got,) = _twin_run(_model("OneHot", [idx, d, vals]), [idx, d, vals])
    want = np.zeros((6, 3), np.float32)
    want[0, 1] = want[4, 2] = want[5, 2] = 5
    np.testing.assert_array_equal(got, want)
