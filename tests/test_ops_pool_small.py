"""Pooling on short rows (the twin's whole-plane kernels: AveragePool at any stride, MaxPool at stride 1, rows up to
64 wide) and their fallbacks (longer rows, NaN planes, Indices): against onnx.reference, a float32 window-order
oracle (the general loop's arithmetic) and the general loop's bits."""
import warnings

import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from onnx_cases import rerun_file_with_instruction_set  # noqa: E402

import geasync as ga  # noqa: E402

RNG = np.random.default_rng(1212)
EDGE = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 3e38, -3e38, 1e-45], np.float32)


def _model(op, x, n_out=1, **attrs):
    node = helper.make_node(op, ["x"], [f"y{i}" for i in range(n_out)], **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info(f"y{i}", TensorProto.UNDEFINED, None) for i in range(n_out)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _twin(model, x):
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        return [t.numpy() for t in s.run_graph(1, [x])]


def _reference(model, x):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ReferenceEvaluator(model).run(None, {"x": x})[0]


def _with_edges(x, frac, edge=EDGE):
    x = x.copy()
    k = max(1, x.size // frac)
    x.flat[RNG.choice(x.size, k, replace=False)] = RNG.choice(edge, k)
    return x


def _windows(x, out_hw, kernel, strides, pads, fill):
    """Per tap (in window order): the tapped values for every output (fill outside the input), whether the tap is
    inside the input, and whether it is inside input + pads."""
    n, c, h, w = x.shape
    oh, ow = out_hw
    pt, pl, pb, pr = pads
    kh, kw = kernel
    sh, sw = strides
    eh, ew = (oh - 1) * sh + kh, (ow - 1) * sw + kw  # the windows' extent from the first pad row / column
    big = np.full((n, c, max(eh, pt + h), max(ew, pl + w)), fill, np.float64)
    big[:, :, pt:pt + h, pl:pl + w] = x
    inside = np.zeros(big.shape[2:], bool)
    inside[pt:pt + h, pl:pl + w] = True
    padded = np.zeros(big.shape[2:], bool)
    padded[:pt + h + pb, :pl + w + pr] = True
    for i in range(kh):
        for j in range(kw):
            rs, cs = slice(i, i + (oh - 1) * sh + 1, sh), slice(j, j + (ow - 1) * sw + 1, sw)
            yield big[:, :, rs, cs], inside[rs, cs], padded[rs, cs]


def _average_oracle(x, out_hw, kernel, strides, pads, count_pad):
    """The general loop: each window's valid taps added in float32 in window order from +0.0 (a tap outside adds
    +0.0, which leaves the sum unchanged), then one float32 division by the count (0 when nothing is counted: 0)."""
    acc = np.zeros(x.shape[:2] + tuple(out_hw), np.float32)
    count = np.zeros(tuple(out_hw), np.int64)
    with np.errstate(all="ignore"):
        for v, inside, padded in _windows(x, out_hw, kernel, strides, pads, 0.0):
            acc += v.astype(np.float32)
            count += padded if count_pad else inside
        return np.where(count > 0, acc / np.maximum(count, 1).astype(np.float32), np.float32(0)).astype(np.float32)


def _max_oracle(x, out_hw, kernel, strides, pads, keep_first_nan):
    """The first valid tap, then a later one where it is larger (keep_first_nan: onnx.reference's rule at strides
    other than 1), or from -inf (NaN taps skipped, its rule at stride 1, pads or not)."""
    m = np.full(x.shape[:2] + tuple(out_hw), -np.inf, np.float32)
    started = np.zeros(m.shape, bool) | (not keep_first_nan)
    for v, inside, _ in _windows(x, out_hw, kernel, strides, pads, np.nan):
        v = v.astype(np.float32)
        take = inside & (~started | (v > m))
        m = np.where(take, v, m)
        started |= inside
    return m


def _same_bits(got, want):
    """Bit for bit (signed zeros too), NaN for NaN (its sign and payload are not specified)."""
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32))


def _attrs(kernel, strides, pads, ceil=0, **extra):
    return dict(kernel_shape=list(kernel), strides=list(strides), pads=list(pads), ceil_mode=ceil, **extra)


_SHAPES = [(1, 3, 7, 7), (2, 5, 14, 14), (1, 9, 6, 9), (1, 2, 1, 17), (1, 2, 17, 1), (1, 1, 1, 1), (1, 2, 28, 28),
           (1, 1, 5, 64), (1, 2, 4, 65), (1, 1, 3, 130)]
_AVG = [((2, 2), (2, 2), (0, 0, 0, 0), 0), ((3, 3), (2, 2), (0, 0, 0, 0), 0), ((3, 3), (2, 2), (1, 1, 1, 1), 0),
        ((3, 3), (2, 2), (1, 1, 1, 1), 1), ((2, 2), (2, 2), (0, 0, 0, 0), 1), ((3, 2), (1, 2), (1, 0, 0, 1), 0),
        ((2, 3), (2, 1), (0, 2, 1, 0), 1), ((3, 3), (3, 3), (1, 2, 2, 1), 1), ((1, 1), (2, 2), (0, 0, 0, 0), 0),
        ((5, 4), (2, 3), (2, 1, 0, 3), 0), ((3, 3), (1, 1), (1, 1, 1, 1), 0), ((3, 1), (2, 2), (0, 0, 1, 0), 1)]


def _fits(shape, kernel, pads):
    return shape[2] + pads[0] + pads[2] >= kernel[0] and shape[3] + pads[1] + pads[3] >= kernel[1]


@pytest.mark.parametrize("shape", _SHAPES)
@pytest.mark.parametrize("kernel,strides,pads,ceil", _AVG)
@pytest.mark.parametrize("count_pad", [0, 1])
def test_averagepool_small_planes_bits(shape, kernel, strides, pads, ceil, count_pad):
    if not _fits(shape, kernel, pads):
        pytest.skip("the window does not fit")
    x = _with_edges(RNG.standard_normal(shape).astype(np.float32) * 4, 3)
    if shape[3] > 64:  # longer rows may add column sums first (another order): no huge values that cancel there
        x[np.isfinite(x) & (np.abs(x) > 1e3)] = 0.5
    m = _model("AveragePool", x, **_attrs(kernel, strides, pads, ceil, count_include_pad=count_pad))
    (got,) = _twin(m, x)
    want_shape = _reference(m, np.zeros_like(x)).shape
    assert got.shape == want_shape
    want = _average_oracle(x, got.shape[2:], kernel, strides, pads, count_pad)
    _same_bits(got, want)


@pytest.mark.parametrize("shape", [(1, 3, 7, 7), (2, 5, 14, 14), (1, 4, 9, 6), (1, 64, 28, 28)])
@pytest.mark.parametrize("kernel,strides,pads", [((2, 2), (2, 2), (0, 0, 0, 0)), ((3, 3), (2, 2), (1, 1, 1, 1)),
                                                 ((3, 3), (2, 2), (0, 0, 0, 0)), ((3, 3), (1, 1), (1, 1, 1, 1))])
def test_averagepool_small_planes_reference(shape, kernel, strides, pads):
    x = RNG.standard_normal(shape).astype(np.float32)
    m = _model("AveragePool", x, **_attrs(kernel, strides, pads))
    np.testing.assert_allclose(_twin(m, x)[0], _reference(m, x), rtol=1e-6, atol=1e-7)


_MAX = [((3, 3), (1, 1), (1, 1, 1, 1), 0), ((3, 3), (1, 1), (0, 0, 0, 0), 0), ((2, 2), (1, 1), (0, 0, 0, 0), 0),
        ((3, 3), (1, 1), (1, 1, 1, 1), 1), ((2, 4), (1, 1), (0, 2, 1, 1), 0), ((4, 1), (1, 1), (2, 0, 1, 0), 0),
        ((1, 3), (1, 1), (0, 0, 0, 0), 0), ((5, 5), (1, 1), (2, 2, 2, 2), 0),
        # stride 2: the row kernels (not the whole-plane one)
        ((2, 2), (2, 2), (0, 0, 0, 0), 0), ((3, 3), (2, 2), (1, 1, 1, 1), 0), ((3, 3), (2, 2), (0, 1, 1, 0), 1)]


@pytest.mark.parametrize("shape", _SHAPES)
@pytest.mark.parametrize("kernel,strides,pads,ceil", _MAX)
@pytest.mark.parametrize("edges", ["none", "zeros_inf", "nan"])
def test_maxpool_small_planes_bits(shape, kernel, strides, pads, ceil, edges):
    """Without NaN: the general loop's bits (Indices output), signed zeros included, and onnx.reference's values.
    With NaN in some planes: those planes by the other paths, which keep onnx.reference's rules (a NaN first tap
    kept, except at stride 1, where NaN taps are skipped)."""
    if not _fits(shape, kernel, pads):
        pytest.skip("the window does not fit")
    x = (RNG.standard_normal(shape) * 10).astype(np.float32)
    if edges == "zeros_inf":
        x = _with_edges(x, 2, EDGE[1:])
    elif edges == "nan":
        x = _with_edges(x, 2, EDGE[1:])
        x[0, ::2] = _with_edges(x[0, ::2], 4)  # NaN in every other plane of the first image only
    attrs = _attrs(kernel, strides, pads, ceil)
    (fast,) = _twin(_model("MaxPool", x, **attrs), x)
    exact, _ = _twin(_model("MaxPool", x, 2, **attrs), x)
    assert fast.shape == exact.shape
    want = _max_oracle(x, fast.shape[2:], kernel, strides, pads, keep_first_nan=strides != (1, 1))
    _same_bits(fast, want)
    if edges != "nan":
        _same_bits(fast, exact)
        if not ceil and pads[:2] == pads[2:]:  # onnx.reference reads asymmetric pads at stride 1 wrongly
            np.testing.assert_array_equal(fast, _reference(_model("MaxPool", x, **attrs), x))


@pytest.mark.parametrize("strides", [(1, 1), (2, 2)])
def test_maxpool_nan_first_tap_in_padded_windows(strides):
    # A NaN as the first valid tap of a window that starts in the pads (kept at stride 2, skipped at stride 1, as
    # onnx.reference does); NaN only as later taps (skipped).
    x = np.full((1, 2, 5, 5), 1.0, np.float32)
    x[0, 0, 0, 0] = np.nan
    x[0, 1, :, 4] = np.nan
    attrs = _attrs((3, 3), strides, (1, 1, 1, 1))
    (fast,) = _twin(_model("MaxPool", x, **attrs), x)
    exact, _ = _twin(_model("MaxPool", x, 2, **attrs), x)
    _same_bits(fast, exact)
    assert np.isnan(fast[0, 0, 0, 0]) == (strides != (1, 1)) and not np.isnan(fast[0, 1]).any()
    np.testing.assert_array_equal(fast, _reference(_model("MaxPool", x, **attrs), x))


@pytest.mark.parametrize("n,c", [(1, 1), (3, 7), (2, 33)])
def test_averagepool_batches_and_odd_channel_counts(n, c):
    x = _with_edges(RNG.standard_normal((n, c, 9, 11)).astype(np.float32), 5)
    for kernel, strides, pads in [((3, 3), (2, 2), (1, 1, 1, 1)), ((2, 2), (2, 2), (0, 1, 0, 1))]:
        m = _model("AveragePool", x, **_attrs(kernel, strides, pads, 1))
        (got,) = _twin(m, x)
        want = _average_oracle(x, got.shape[2:], kernel, strides, pads, 0)
        _same_bits(got, want)


@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_fallback_instruction_sets_pass_the_same_checks(isa):
    rerun_file_with_instruction_set(__file__, isa)
