"""Pooling at stride 1: AveragePool (every path sums each window in float32 in window order, so the general loop's
bits on every plane, whatever its span of magnitudes), MaxPool 2x2 to 5x5 on AVX-512 with the plane read in place,
separable, on planes without NaN (others: the paths with the NaN rules). Checked bit for bit against the
general loop's arithmetic and against onnx.reference, on rows of any width (one output block's tail, whole blocks,
several blocks, the longer rows the whole-plane kernels do not take) and on the AVX2 / baseline fallbacks."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx_cases import rerun_file_with_instruction_set  # noqa: E402
from test_ops_pool_small import (  # noqa: E402
    EDGE, _attrs, _average_oracle, _max_oracle, _model, _reference, _same_bits, _twin)
from test_ops_pool_stride2 import _span_plane  # noqa: E402

RNG = np.random.default_rng(3131)

# Widths 1..33 around the output blocks (8 doubles / 16 floats), 65 / 128 / 130: rows longer than the 64 the
# whole-plane grid takes; heights 1..3 (windows mostly in the pads) and taller.
_SHAPES = [(1, 2, 1, 1), (1, 2, 1, 7), (1, 2, 2, 17), (1, 3, 3, 33), (1, 1, 3, 2), (1, 2, 9, 3), (2, 1, 2, 65),
           (1, 2, 6, 128), (1, 1, 4, 130), (1, 2, 17, 7), (1, 1, 11, 48)]
# (kernel, pads top, left, bottom, right): symmetric, none, one-sided, up to kernel - 1.
_AVG = [((3, 3), (1, 1, 1, 1)), ((3, 3), (0, 0, 0, 0)), ((2, 2), (0, 0, 0, 0)), ((2, 2), (1, 0, 0, 1)),
        ((3, 3), (2, 0, 1, 2)), ((4, 4), (1, 2, 2, 1)), ((4, 4), (3, 3, 0, 0)), ((4, 4), (0, 0, 0, 0))]
_SQUARE5 = [((5, 5), (2, 2, 2, 2)), ((5, 5), (0, 4, 3, 1)), ((5, 5), (0, 0, 0, 0))]
_MAX = _AVG + _SQUARE5
# Other windows up to 9 columns wide (a running sum down the rows), and wider ones (the other paths).
_AVG += _SQUARE5 + [((3, 5), (1, 2, 1, 2)), ((1, 3), (0, 1, 0, 1)), ((3, 1), (1, 0, 1, 0)), ((7, 7), (3, 3, 3, 3)),
                    ((2, 9), (1, 4, 0, 4)), ((9, 2), (0, 0, 0, 0)), ((2, 3), (0, 2, 1, 0)), ((3, 10), (1, 5, 1, 4))]


def _fits(shape, kernel, pads):
    return shape[2] + pads[0] + pads[2] >= kernel[0] and shape[3] + pads[1] + pads[3] >= kernel[1]


def _average(x, kernel, pads, count_pad, loose=()):
    """The general loop's bits, except on the planes (n, c) in loose: there its values to the rounding of float64
    sums in another order (rows longer than 64 on AVX2 and on planes the separable sums do not take add column sums
    first), NaN where it has NaN."""
    m = _model("AveragePool", x, **_attrs(kernel, (1, 1), pads, count_include_pad=count_pad))
    (got,) = _twin(m, x)
    assert got.shape == _reference(m, np.zeros_like(x)).shape
    want = _average_oracle(x, got.shape[2:], kernel, (1, 1), pads, count_pad)
    for n, c in loose:
        np.testing.assert_array_equal(np.isnan(got[n, c]), np.isnan(want[n, c]))
        scale = np.abs(x[n, c][np.isfinite(x[n, c])]).max(initial=1.0)
        np.testing.assert_allclose(got[n, c], want[n, c], rtol=1e-6, atol=2.0 ** -40 * scale)
        got[n, c], want[n, c] = 0, 0
    _same_bits(got, want)
    return m, got


@pytest.mark.parametrize("shape", _SHAPES)
@pytest.mark.parametrize("kernel,pads", _AVG)
@pytest.mark.parametrize("count_pad", [0, 1])
def test_averagepool_in_place_bits(shape, kernel, pads, count_pad):
    if not _fits(shape, kernel, pads):
        pytest.skip("the window does not fit")
    # Planes of narrow and of wide magnitude spans and one with edge values (inf, NaN, denormals, -0.0, huge values),
    # side by side in one call: the general loop's bits on all of them.
    x = _span_plane(shape, 20, stream=shape[3] + 7 * kernel[0])
    x[0, -1] = _span_plane(shape[2:], 40, stream=shape[2])
    x[-1, 0] = np.where(RNG.random(shape[2:]) < 0.3, RNG.choice(EDGE, shape[2:]), x[-1, 0])
    m, got = _average(x, kernel, pads, count_pad)
    if not count_pad and pads[:2] == pads[2:]:
        plain = _span_plane(shape, 3, stream=shape[2] * 131 + shape[3])
        np.testing.assert_allclose(_twin(m, plain)[0], _reference(m, plain), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kernel,pads", [((3, 3), (1, 1, 1, 1)), ((2, 2), (0, 0, 0, 0)), ((4, 4), (1, 2, 2, 1)),
                                         ((5, 5), (2, 2, 2, 2)), ((7, 2), (3, 0, 3, 1))])
def test_averagepool_in_place_edge_planes(kernel, pads):
    # Per plane: -0.0 only (+0.0 out: the window-order sum starts at +0.0), +-0.0 mixed, denormals only, exact
    # cancellations, a single nonzero value, the largest magnitudes (float32 sums overflow to +-inf, or NaN where
    # both signs overflow, as the general loop's), random values over 23 to 26 binades.
    h, w = 13, 37
    planes = [np.full((h, w), -0.0), np.where(RNG.random((h, w)) < 0.5, 0.0, -0.0),
              RNG.choice(np.array([1e-45, -1e-45, 3e-39, -1e-40, 0.0], np.float32), (h, w)),
              np.tile(np.array([1.5, -1.5], np.float32), (h, (w + 1) // 2))[:, :w], np.zeros((h, w)),
              RNG.choice(np.array([3e38, -3e38, 2e38, 1e30], np.float32), (h, w)),
              _span_plane((h, w), 25, stream=1), _span_plane((h, w), 26, stream=2), _span_plane((h, w), 24, stream=3),
              _span_plane((h, w), 23, stream=4)]
    planes[4][7, 11] = 1.25
    x = np.stack(planes).astype(np.float32)[None]
    for count_pad in (0, 1):
        _, got = _average(x, kernel, pads, count_pad)
        assert not np.signbit(got[0, :2]).any()  # +0.0 from the zero planes


def _max(x, kernel, pads):
    attrs = _attrs(kernel, (1, 1), pads)
    (fast,) = _twin(_model("MaxPool", x, **attrs), x)
    exact, _ = _twin(_model("MaxPool", x, 2, **attrs), x)  # with Indices: the general loop
    assert fast.shape == exact.shape
    return attrs, fast, exact


@pytest.mark.parametrize("shape", _SHAPES)
@pytest.mark.parametrize("kernel,pads", _MAX)
@pytest.mark.parametrize("edges", ["none", "zeros_inf", "nan"])
def test_maxpool_in_place_bits(shape, kernel, pads, edges):
    if not _fits(shape, kernel, pads):
        pytest.skip("the window does not fit")
    x = (RNG.standard_normal(shape) * 10).astype(np.float32)
    if edges != "none":  # +-inf, +-0.0 (ties: the earliest tap's zero), denormals, huge values
        x = np.where(RNG.random(shape) < 0.4, RNG.choice(EDGE[1:], shape), x).astype(np.float32)
    if edges == "nan":  # NaN in the first plane only: the other planes still take the separable maxima
        x[0, 0] = np.where(RNG.random(shape[2:]) < 0.2, np.nan, x[0, 0])
    attrs, fast, exact = _max(x, kernel, pads)
    _same_bits(fast, _max_oracle(x, fast.shape[2:], kernel, (1, 1), pads, keep_first_nan=False))  # NaN skipped
    if edges != "nan":
        _same_bits(fast, exact)
        if pads[:2] == pads[2:]:  # onnx.reference reads asymmetric pads at stride 1 wrongly
            np.testing.assert_array_equal(fast, _reference(_model("MaxPool", x, **attrs), x))


def test_maxpool_in_place_signed_zero_ties_and_infinities():
    # Windows of zeros of both signs: the first tap's zero in window order (row, then column); -inf only; planes of
    # -inf next to pads (which are -inf too).
    x = RNG.choice(np.array([0.0, -0.0], np.float32), (1, 3, 9, 35))
    x[0, 1] = -np.inf
    x[0, 2] = np.where(RNG.random((9, 35)) < 0.8, -np.inf, -0.0)
    for kernel, pads in [((3, 3), (1, 1, 1, 1)), ((2, 2), (0, 0, 0, 0)), ((5, 5), (2, 1, 2, 3))]:
        _, fast, exact = _max(x, kernel, pads)
        _same_bits(fast, exact)
        _same_bits(fast, _max_oracle(x, fast.shape[2:], kernel, (1, 1), pads, keep_first_nan=True))


@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_fallback_instruction_sets_pass_the_same_checks(isa):
    rerun_file_with_instruction_set(__file__, isa)
