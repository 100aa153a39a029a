"""MaxPool's NaN rule on every path (2-D row / separable / whole-plane / strided / 2x2 / dilated kernels, 1-D,
3-D, the Indices output's general loop; float32, float64, float16), as onnx.reference has it: with every stride
and dilation 1 (its CommonPool) a NaN tap is skipped, pads or not; otherwise (its _max_pool loop) a window's first
valid tap is kept, NaN too, and a later tap taken only where it is larger. A window of NaN only (which
onnx.reference's stride-1 pool cannot reduce: it raises) gives -inf at stride 1, as a window wholly in the pads.
Checked against a window-order oracle everywhere, and against onnx.reference where it computes (its stride-1 pool
pads 2-D inputs only, and its stride-1 Indices are not flat input positions)."""
import itertools
import warnings

import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from onnx_cases import rerun_file_with_instruction_set, run_twin  # noqa: E402

RNG = np.random.default_rng(5150)


def _model(x, n_out, attrs):
    t = helper.np_dtype_to_tensor_dtype(x.dtype)
    outs = ["y", "i"][:n_out]
    node = helper.make_node("MaxPool", ["x"], outs, **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", t, x.shape)],
                              [helper.make_tensor_value_info(o, t if o == "y" else TensorProto.INT64, None)
                               for o in outs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _oracle(x, kernel, strides, pads, dilations, ceil):
    """Values and flat Indices by the rule above, the taps of each window in row-major order."""
    nsp = len(kernel)
    sp = x.shape[2:]
    pb, pe = pads[:nsp], pads[nsp:]
    out = []
    for i in range(nsp):
        ext = (kernel[i] - 1) * dilations[i] + 1
        span = sp[i] + pb[i] + pe[i] - ext
        o = (-(-span // strides[i]) if ceil else span // strides[i]) + 1
        if ceil and (o - 1) * strides[i] >= sp[i] + pb[i]:  # the last window starts in the end pads
            o -= 1
        out.append(o)
    skip_nan = all(s == 1 for s in strides) and all(d == 1 for d in dilations)
    nc = x.shape[0] * x.shape[1]
    xs = x.reshape(nc, -1).astype(np.float64)
    m = np.full((nc, *out), -np.inf)
    idx = np.full((nc, *out), -1, np.int64)
    grids = np.meshgrid(*[np.arange(o) for o in out], indexing="ij")
    for taps in itertools.product(*[range(k) for k in kernel]):
        pos = [grids[i] * strides[i] - pb[i] + taps[i] * dilations[i] for i in range(nsp)]
        inside = np.ones(out, bool)
        for i in range(nsp):
            inside &= (pos[i] >= 0) & (pos[i] < sp[i])
        flat = np.ravel_multi_index([np.clip(p, 0, s - 1) for p, s in zip(pos, sp, strict=True)], sp)
        v = xs[:, flat]
        if skip_nan:
            take = inside & ~np.isnan(v) & ((idx < 0) | (v > m))
        else:
            take = inside & ((idx < 0) | (v > m))
        m = np.where(take, v, m)
        idx = np.where(take, flat, idx)
    idx = np.where(idx < 0, 0, idx) + (np.arange(nc) * int(np.prod(sp))).reshape(-1, *[1] * nsp)
    shape = x.shape[:2] + tuple(out)
    return m.astype(x.dtype).reshape(shape), idx.reshape(shape)


def _with_nans(shape, dtype, kernel):
    """Channel 0: NaN first (the origin: first tap of the windows there, pads or not) and last (the far corner),
    channel 1: a kernel-sized block of NaN (windows of NaN only) and one NaN after it, channel 2: scattered NaN,
    channel 3: none (it takes the NaN-free kernels next to the others)."""
    x = (RNG.standard_normal(shape) * 10).astype(dtype)
    nsp = len(shape) - 2
    x[(0, 0) + (0,) * nsp] = np.nan
    x[(0, 0) + (-1,) * nsp] = np.nan
    x[(0, 1) + tuple(slice(1, 1 + k) for k in kernel)] = np.nan
    x[(0, 1) + tuple(min(k + 2, s - 1) for k, s in zip(kernel, shape[2:], strict=True))] = np.nan
    x[0, 2] = np.where(RNG.random(shape[2:]) < 0.2, np.nan, x[0, 2])
    return x


def _check(x, kernel, strides, pads, dilations=None, ceil=0):
    nsp = len(kernel)
    dilations = dilations or [1] * nsp
    attrs = dict(kernel_shape=list(kernel), strides=list(strides), pads=list(pads), dilations=list(dilations),
                 ceil_mode=ceil)
    want, want_i = _oracle(x, kernel, strides, pads, dilations, ceil)
    for n_out in (1, 2):
        got = run_twin(_model(x, n_out, attrs), {"x": x})
        assert got[0].shape == want.shape and got[0].dtype == want.dtype, (got[0].shape, want.shape)
        np.testing.assert_array_equal(np.isnan(got[0]), np.isnan(want))
        np.testing.assert_array_equal(got[0], want)
        if n_out == 2:
            np.testing.assert_array_equal(got[1], want_i)
    # onnx.reference where it computes: not a window of NaN only at stride 1 (it raises), and at stride 1 only
    # 2-D symmetric pads (others it reads as another window); its stride-1 Indices are not input positions
    stride1 = all(s == 1 for s in strides) and all(d == 1 for d in dilations)
    if stride1 and (not np.isfinite(want).all() or (any(pads) and (nsp != 2 or pads[:2] != pads[2:]))):
        return
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = ReferenceEvaluator(_model(x, 2, attrs)).run(None, {"x": x})
    np.testing.assert_array_equal(ref[0], want)
    if not stride1:
        np.testing.assert_array_equal(ref[1], want_i)


_2D = [  # kernel, strides, pads, dilations, ceil: the paths they take on float32 planes
    ((3, 3), (1, 1), (1, 1, 1, 1), None, 0),  # stride 1 with pads: the separable rows (the xfail that was)
    ((3, 3), (1, 1), (0, 0, 0, 0), None, 0),  # stride 1 without pads: the running max from -inf
    ((2, 2), (1, 1), (0, 1, 1, 0), None, 0),
    ((5, 3), (1, 1), (2, 0, 2, 1), None, 0),
    ((2, 2), (2, 2), (0, 0, 0, 0), None, 0),  # the 2x2 stride-2 kernels
    ((3, 3), (2, 2), (1, 1, 1, 1), None, 0),  # the row kernels at stride 2
    ((3, 3), (2, 2), (0, 1, 1, 0), None, 1),
    ((3, 3), (3, 3), (0, 0, 0, 0), None, 0),  # the strided AVX-512 kernel
    ((3, 3), (1, 2), (1, 1, 1, 1), None, 0),  # a stride of 1 on one axis only: the first-tap rule
    ((3, 3), (1, 1), (2, 2, 2, 2), (2, 2), 0),  # dilated (the first-tap rule at stride 1 too)
    ((2, 3), (2, 1), (1, 0, 0, 1), (1, 2), 0),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("hw", [(7, 9), (12, 70)])  # whole-plane grids (rows up to 64) and longer rows
@pytest.mark.parametrize("kernel,strides,pads,dilations,ceil", _2D)
def test_maxpool_nan_2d(kernel, strides, pads, dilations, ceil, hw, dtype):
    _check(_with_nans((2, 4, *hw), dtype, kernel), kernel, strides, pads, dilations, ceil)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("shape", [(1, 4, 6, 6), (1, 4, 3, 40), (1, 4, 3, 4, 5), (1, 4, 30)])
def test_maxpool_nan_whole_map(shape, stride, dtype):
    """kernel_shape == the spatial dims (one output per plane)."""
    kernel = shape[2:]
    _check(_with_nans(shape, dtype, [1] * len(kernel)), kernel, [stride] * len(kernel), [0] * 2 * len(kernel))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("kernel,strides,pads,dilations", [
    ((3,), (1,), (1, 1), None), ((3,), (1,), (0, 0), None), ((4,), (1,), (0, 2), None), ((3,), (2,), (1, 1), None),
    ((3,), (1,), (2, 2), (2,)), ((2,), (3,), (0, 1), None)])
def test_maxpool_nan_1d(kernel, strides, pads, dilations, dtype):
    _check(_with_nans((2, 4, 37), dtype, kernel), kernel, strides, pads, dilations)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kernel,strides,pads", [
    ((2, 3, 3), (1, 1, 1), (1, 1, 1, 1, 1, 1)), ((2, 2, 2), (1, 1, 1), (0, 0, 0, 0, 0, 0)),
    ((3, 2, 3), (1, 1, 1), (0, 1, 2, 2, 0, 1)), ((2, 3, 3), (2, 2, 2), (1, 1, 1, 1, 1, 1)),
    ((2, 2, 3), (1, 2, 1), (0, 0, 1, 0, 0, 1))])
def test_maxpool_nan_3d(kernel, strides, pads, dtype):
    _check(_with_nans((1, 4, 5, 6, 9), dtype, kernel), kernel, strides, pads)


def test_maxpool_stride1_pads_nan_rule():
    """The case the suite had as an open xfail: 2-D, stride 1, pads, scattered NaN (first taps among them)."""
    x = RNG.standard_normal((1, 2, 16, 16)).astype(np.float32)
    x.reshape(-1)[::13] = np.nan
    attrs = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    got = run_twin(_model(x, 1, attrs), {"x": x})[0]
    want = ReferenceEvaluator(_model(x, 1, attrs)).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_fallback_instruction_sets(isa):
    rerun_file_with_instruction_set(__file__, isa, "float32")
