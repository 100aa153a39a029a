"""Axis kernels (ArgMax / ArgMin and CumSum over any axis, Transpose of 4-D layouts, ReduceMax / Min / Sum / Mean over
middle axes, MaxPool around stride 1, GridSample) against onnx.reference: every axis of 1-D..4-D shapes with odd
and power-of-two sizes, ties, NaN / inf / -0.0 at the first, a middle and the last place along the axis, integer
dtypes; rerun under each instruction set."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx_cases import assert_close, graph_model, reference, rerun_file_with_instruction_set, run_once, value_info

from onnx import TensorProto, helper

SHAPES = [(7,), (1000,), (1, 9), (33, 1), (9, 33), (33, 9), (1000, 7), (3, 7, 33), (2, 33, 9), (4, 9, 40),
          (2, 3, 7, 9), (3, 1, 9, 33), (2, 16, 8, 8)]
AXES = [(s, a) for s in SHAPES for a in range(len(s))]


def _model(op, x, out_type=None, inputs=(), initializers=(), opset=18, **attrs):
    vis = [value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), list(x.shape))]
    vis += [value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape)) for n, a in inputs]
    names = ["x"] + [n for n, _ in inputs] + [i.name for i in initializers]
    out = out_type if out_type is not None else helper.np_dtype_to_tensor_dtype(x.dtype)
    node = helper.make_node(op, names, ["y"], **attrs)
    return graph_model([node], vis, [value_info("y", out)], opset=opset, initializers=initializers)


def _want(m, feeds):
    with np.errstate(all="ignore"):
        return reference(m, feeds)


def _exact(got, want):
    """The same shapes, dtypes and bits (NaN payloads aside: any NaN matches any NaN)."""
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        w = np.asarray(w)  # (not ascontiguousarray: that makes a 0-d array 1-d)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        if w.dtype.kind == "f":
            nan = np.isnan(w)
            np.testing.assert_array_equal(np.isnan(g), nan)
            bits = [np.ascontiguousarray(np.where(nan, 0, a)).view(np.uint8) for a in (g, w)]
            np.testing.assert_array_equal(*bits)
        else:
            np.testing.assert_array_equal(g, w)


def _with_edges(x, axis, seed):
    """Ties (small integers), then NaN / +-inf / -0.0 at the first, a middle and the last place along `axis` in a
    few columns each (a column with two NaNs tells the first from the last)."""
    rng = np.random.default_rng(seed)
    moved = np.ascontiguousarray(np.moveaxis(x, axis, -1))
    n = moved.shape[-1]
    cols = moved.reshape(-1, n)  # a view of moved
    for c in range(0, cols.shape[0], 3):
        kind = rng.integers(0, 6)
        at = [0, n // 2, n - 1][rng.integers(0, 3)]
        if kind == 0:
            cols[c, at] = np.nan
        elif kind == 1:
            cols[c, at] = np.nan
            cols[c, rng.integers(0, n)] = np.nan
        elif kind == 2:
            cols[c, at] = np.inf
        elif kind == 3:
            cols[c, at] = -np.inf
        elif kind == 4:
            cols[c] = 0.0
            cols[c, at] = -0.0
        else:
            cols[c, at] = cols[c].max()
    return np.ascontiguousarray(np.moveaxis(moved, -1, axis))


# ---- ArgMax / ArgMin ----

@pytest.mark.parametrize("shape,axis", AXES)
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_every_axis_with_ties_and_edges(session, shape, axis, op, last):
    keepdims = (len(shape) + axis + last) % 2  # both values over the axes, at half the runs
    rng = np.random.default_rng(len(shape) * 10 + axis)
    x = rng.integers(-3, 4, shape).astype(np.float32)
    x = _with_edges(x, axis, seed=axis)
    m = _model(op, x, TensorProto.INT64, axis=axis, keepdims=keepdims, select_last_index=last)
    _exact(run_once(session, m, [x]), _want(m, [x]))
    y = rng.standard_normal(shape).astype(np.float32)  # no ties: a plain extremum
    _exact(run_once(session, m, [y]), _want(m, [y]))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int32, np.int64, np.uint32, np.float16,
                                   np.float64])
@pytest.mark.parametrize("shape,axis", [((33, 9), 0), ((3, 40, 7), 1), ((2, 9, 70), 1), ((7, 1000), 1),
                                        ((130, 3), 0)])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_other_dtypes(session, dtype, shape, axis, last):
    rng = np.random.default_rng(3)
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
        x.reshape(-1)[::5] = info.min
        x.reshape(-1)[3::7] = info.max
    else:
        x = rng.integers(-3, 4, shape).astype(dtype)
        x = _with_edges(x, axis, seed=4)
    for op in ("ArgMax", "ArgMin"):
        m = _model(op, x, TensorProto.INT64, axis=axis, select_last_index=last)
        _exact(run_once(session, m, [x]), _want(m, [x]))


def test_arg_nan_first_middle_last_in_one_column_block(session):
    """Every lane of an AVX2 block sees a different NaN / inf / tie pattern, down columns of 5 rows."""
    n, cols = 5, 40
    x = np.tile(np.arange(n, dtype=np.float32)[:, None] % 2, (1, cols))
    for c in range(cols):
        a, b = c % n, (c // n) % n
        kind = c % 4
        if kind == 0:
            x[a, c] = np.nan
        elif kind == 1:
            x[a, c] = x[b, c] = np.nan
        elif kind == 2:
            x[a, c], x[b, c] = np.inf, -np.inf
        else:
            x[:, c] = -0.0 if c % 8 == 3 else 0.0
            x[a, c] = 0.0 if c % 8 == 3 else -0.0
    for op, last in itertools.product(["ArgMax", "ArgMin"], [0, 1]):
        m = _model(op, x, TensorProto.INT64, axis=0, select_last_index=last)
        _exact(run_once(session, m, [x]), _want(m, [x]))


# ---- CumSum ----

def _cum_model(op, x, axis, exclusive, reverse):
    a = helper.make_tensor("axis", TensorProto.INT64, [], [axis])
    return _model(op, x, initializers=[a], exclusive=exclusive, reverse=reverse)


@pytest.mark.parametrize("shape,axis", AXES)
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum_every_axis_is_exact(session, shape, axis, exclusive, reverse):
    """float32 running sums in float32, term after term along the axis as the reference's cumsum adds them: the
    same bits, signed zeros included (a lone -0.0 stays -0.0, the exclusive scan starts at +0.0)."""
    rng = np.random.default_rng(20 + axis)
    x = (rng.standard_normal(shape) * 100).astype(np.float32)
    x = _with_edges(x, axis, seed=axis)
    x.reshape(-1)[1::11] = -0.0
    x.reshape(-1)[5::13] = rng.choice(np.array([1e-40, -3e-39, 3e38, -3e38, 1e30], np.float32),
                                      len(x.reshape(-1)[5::13]))
    m = _cum_model("CumSum", x, axis, exclusive, reverse)
    _exact(run_once(session, m, [x]), _want(m, [x]))
    z = np.full(shape, -0.0, np.float32)  # all -0.0: the inclusive sums stay -0.0
    _exact(run_once(session, m, [z]), _want(m, [z]))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64, np.float64])
@pytest.mark.parametrize("shape,axis", [((33, 9), 0), ((3, 40, 7), 1), ((7, 1000), 1), ((2, 3, 7, 9), 2)])
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 1)])
def test_cumsum_other_dtypes(session, dtype, shape, axis, exclusive, reverse):
    """Integer sums wrap like numpy's; float64 adds in double in the same order."""
    rng = np.random.default_rng(5)
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    else:
        x = (rng.standard_normal(shape) * 1e10).astype(dtype)
        x.reshape(-1)[::7] = -0.0
    m = _cum_model("CumSum", x, axis, exclusive, reverse)
    _exact(run_once(session, m, [x]), _want(m, [x]))


# ---- Transpose: every permutation of 4-D shapes (odd, power-of-two and size-1 dims), element widths 1..8 ----

@pytest.mark.parametrize("shape", [(3, 5, 7, 9), (2, 16, 8, 32), (1, 9, 1, 33), (2, 8, 16, 16)])
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.float16, np.int64])
def test_transpose_every_4d_perm(session, shape, dtype):
    x = np.arange(np.prod(shape)).reshape(shape).astype(dtype)
    if dtype == np.float32:
        x.reshape(-1)[::7] = np.array([np.nan, -0.0, np.inf, 1e-40], np.float32)[np.arange(len(x.reshape(-1)[::7])) % 4]
    for perm in itertools.permutations(range(4)):
        m = _model("Transpose", x, perm=list(perm))
        _exact(run_once(session, m, [x]), [np.ascontiguousarray(np.transpose(x, perm))])


@pytest.mark.parametrize("shape,perm", [((33, 1000), (1, 0)), ((64, 64), (1, 0)), ((1024, 40), (1, 0)),
                                        ((2, 40, 9, 72), (0, 3, 1, 2)), ((1, 33, 17, 16), (0, 3, 1, 2)),
                                        ((2, 16, 64, 64), (0, 3, 1, 2)), ((1, 64, 64, 16), (0, 2, 3, 1)),
                                        ((4100, 21), (1, 0)), ((1, 8, 64, 64), (0, 3, 1, 2))])
def test_transpose_tiles_and_edges(session, shape, perm):
    """Larger planes: whole 8x8 blocks, their ragged edges, power-of-two strides and output rows past the 2048-column
    blocks."""
    x = np.random.default_rng(50).standard_normal(shape).astype(np.float32)
    m = _model("Transpose", x, perm=list(perm))
    want = _want(m, [x])
    _exact(run_once(session, m, [x]), want)


# ---- ReduceMax / Min / Sum / Mean over one axis (middle axes: column folds, narrow columns included) ----

@pytest.mark.parametrize("shape,axis", [sa for sa in AXES if len(sa[0]) >= 2] + [((256, 64, 4), 1), ((5, 300, 3), 1)])
@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin", "ReduceSum", "ReduceMean"])
def test_reduce_one_axis(session, shape, axis, op):
    """Max / Min pick values (NaN at any place wins; the value compare treats -0.0 and 0.0 alike, as the
    reference's own maximum does not fix which zero it keeps); Sum / Mean add in double against the reference's
    float32 pairwise sums: a tight tolerance."""
    rng = np.random.default_rng(40 + axis)
    x = rng.integers(-3, 4, shape).astype(np.float32)
    if op in ("ReduceMax", "ReduceMin"):
        x = _with_edges(x, axis, seed=axis)
    a = helper.make_tensor("axes", TensorProto.INT64, [1], [axis])
    m = _model(op, x, initializers=[a], keepdims=(len(shape) + axis) % 2)
    tol = 0 if op in ("ReduceMax", "ReduceMin") else 1e-6
    assert_close(run_once(session, m, [x]), _want(m, [x]), rtol=tol, atol=tol)


# ---- MaxPool around the 3x3 stride-1 case ----

@pytest.mark.parametrize("kernel,strides,pads,dilations", [
    ([3, 3], [1, 1], [1, 1, 1, 1], [1, 1]), ([3, 3], [1, 1], [0, 0, 0, 0], [1, 1]),
    ([3, 3], [2, 2], [1, 1, 1, 1], [1, 1]),
    ([3, 3], [1, 1], [2, 2, 2, 2], [2, 2]), ([5, 5], [1, 1], [2, 2, 2, 2], [1, 1]),
    ([2, 2], [1, 1], [0, 0, 0, 0], [1, 1])])
@pytest.mark.parametrize("shape", [(1, 1, 2, 3), (1, 3, 7, 9), (2, 2, 33, 17), (1, 2, 16, 40)])
def test_maxpool_around_stride_1(session, kernel, strides, pads, dilations, shape):
    """Without NaN: the reference's values (+-inf and -0.0 included; the value compare takes -0.0 == 0.0). With
    NaN the twin keeps its documented rule (a NaN first tap kept, later ones skipped; onnx.reference's own NaN
    result depends on the window's position): the fast paths give the same bits as the general loop that runs
    when the Indices output is asked for."""
    if any((s + p0 + p1 - d * (k - 1) - 1) < 0 for s, p0, p1, d, k in
           zip(shape[2:], pads[:2], pads[2:], dilations, kernel, strict=True)):
        pytest.skip("the window does not fit")
    rng = np.random.default_rng(60)
    x = (rng.standard_normal(shape) * 5).astype(np.float32)
    flat = x.reshape(-1)
    flat[::11] = np.array([np.inf, -np.inf, -0.0, 0.0], np.float32)[np.arange(len(flat[::11])) % 4]
    attrs = dict(kernel_shape=kernel, strides=strides, pads=pads, dilations=dilations)
    m = _model("MaxPool", x, **attrs)
    assert_close(run_once(session, m, [x]), _want(m, [x]), rtol=0, atol=0)
    if pads == [0, 0, 0, 0] and strides == [1, 1]:
        return  # unpadded stride 1 skips NaN taps like the reference (tests/test_ops_movement_pool.py)
    flat[3::13] = np.nan
    vis = [value_info("x", TensorProto.FLOAT, list(x.shape))]
    general = graph_model([helper.make_node("MaxPool", ["x"], ["y", "i"], **attrs)], vis,
                          [value_info("y", TensorProto.FLOAT), value_info("i", TensorProto.INT64)], opset=18)
    fast = run_once(session, m, [x])[0]
    np.testing.assert_array_equal(fast.view(np.uint32), run_once(session, general, [x])[0].view(np.uint32))


# ---- GridSample (2-D points take a direct tap path) ----

@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("xshape,gshape", [((1, 3, 7, 9), (1, 5, 9, 2)), ((2, 1, 2, 7), (2, 3, 1, 2))])
def test_grid_sample_2d(session, mode, padding, align, xshape, gshape):
    """Points inside, on the borders and far outside (the reference cannot take NaN points, nor reflect on a
    size-1 dim with align_corners); it works in float64 on float32 data: a tight tolerance, not exact."""
    rng = np.random.default_rng(30)
    x = rng.standard_normal(xshape).astype(np.float32)
    g = rng.uniform(-1.8, 1.8, gshape).astype(np.float32)
    flat = g.reshape(-1)
    flat[::17] = rng.choice(np.array([-1, 1, 0, 1e6, -1e6, 0.999999, -1.000001, 3.5], np.float32),
                            len(flat[::17]))
    m = _model("GridSample", x, inputs=[("g", g)], opset=20, mode=mode, padding_mode=padding, align_corners=align)
    want = _want(m, [x, g])
    got = run_once(session, m, [x, g])
    assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_fallback_instruction_sets_pass_the_same_checks(isa):
    rerun_file_with_instruction_set(__file__, isa)
