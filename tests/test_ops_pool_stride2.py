"""AveragePool's AVX-512 whole-plane paths: at stride 2 the plane read in place (blocks of 8 outputs, four at a time,
masked loads at the row ends and pads, a zero row for tap rows in the pads), otherwise 16-float blocks over the
padded grid. Checked bit for bit against the general loop's arithmetic (float32 sums in window order from +0.0, one
division) and against onnx.reference, on the CPU's best instruction set and on the AVX2 / baseline fallbacks."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx_cases import rerun_file_with_instruction_set  # noqa: E402
from test_ops_pool_small import EDGE, _attrs, _average_oracle, _model, _reference, _same_bits, _twin  # noqa: E402

RNG = np.random.default_rng(2026)


def _edges(x, frac):
    x = x.copy()
    k = max(1, x.size // frac)
    x.flat[RNG.choice(x.size, k, replace=False)] = RNG.choice(EDGE, k)
    return x


def _check(x, kernel, strides, pads, ceil=0, count_pad=0):
    m = _model("AveragePool", x, **_attrs(kernel, strides, pads, ceil, count_include_pad=count_pad))
    (got,) = _twin(m, x)
    assert got.shape == _reference(m, np.zeros_like(x)).shape
    _same_bits(got, _average_oracle(x, got.shape[2:], kernel, strides, pads, count_pad))
    return m, got


# Widths around the 8-output blocks (OW 1..33: one block's tail, whole blocks, several blocks per row), heights
# that give 1..4+ blocks in the last group of four, up to the 64-wide rows the whole-plane kernels take.
_SHAPES = [(1, 1, 2, 2), (1, 3, 3, 5), (1, 2, 7, 7), (2, 3, 14, 14), (1, 2, 16, 16), (1, 5, 9, 17), (1, 1, 5, 18),
           (1, 2, 11, 31), (1, 1, 6, 33), (1, 2, 4, 48), (1, 1, 3, 64), (1, 2, 28, 28)]
_WINDOWS = [((2, 2), (2, 2), (0, 0, 0, 0), 0), ((3, 3), (2, 2), (1, 1, 1, 1), 0), ((3, 3), (2, 2), (0, 0, 0, 0), 1),
            ((3, 3), (2, 2), (1, 1, 1, 1), 1), ((2, 2), (2, 2), (1, 1, 1, 1), 1), ((3, 3), (2, 2), (2, 0, 0, 2), 0),
            ((1, 1), (2, 2), (0, 0, 0, 0), 0), ((5, 5), (2, 2), (2, 2, 2, 2), 0), ((2, 5), (3, 2), (0, 3, 1, 2), 1),
            ((4, 3), (1, 2), (1, 0, 2, 1), 0), ((3, 4), (2, 2), (0, 2, 0, 1), 1), ((3, 3), (2, 1), (1, 1, 1, 1), 0),
            ((3, 3), (1, 1), (1, 1, 1, 1), 0), ((2, 3), (1, 1), (0, 2, 1, 0), 1)]


def _fits(shape, kernel, pads):
    return shape[2] + pads[0] + pads[2] >= kernel[0] and shape[3] + pads[1] + pads[3] >= kernel[1]


@pytest.mark.parametrize("shape", _SHAPES)
@pytest.mark.parametrize("kernel,strides,pads,ceil", _WINDOWS)
@pytest.mark.parametrize("count_pad", [0, 1])
def test_averagepool_whole_plane_bits(shape, kernel, strides, pads, ceil, count_pad):
    if not _fits(shape, kernel, pads):
        pytest.skip("the window does not fit")
    x = _edges(RNG.standard_normal(shape).astype(np.float32) * 4, 3)
    _check(x, kernel, strides, pads, ceil, count_pad)


@pytest.mark.parametrize("shape", [(1, 3, 7, 7), (1, 8, 14, 14), (1, 2, 28, 28), (1, 1, 17, 33), (1, 1, 64, 64)])
@pytest.mark.parametrize("kernel,strides,pads", [((2, 2), (2, 2), (0, 0, 0, 0)), ((3, 3), (2, 2), (1, 1, 1, 1)),
                                                 ((3, 3), (1, 1), (1, 1, 1, 1)), ((5, 3), (2, 2), (2, 1, 2, 1))])
def test_averagepool_whole_plane_reference(shape, kernel, strides, pads):
    x = (RNG.standard_normal(shape) * 3).astype(np.float32)
    m = _model("AveragePool", x, **_attrs(kernel, strides, pads))
    # onnx.reference sums in float32: near-cancelling windows differ from the float64 sums by its rounding
    np.testing.assert_allclose(_twin(m, x)[0], _reference(m, x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kernel,pads", [((2, 2), (0, 0, 0, 0)), ((3, 3), (1, 1, 1, 1)), ((3, 3), (0, 1, 1, 0))])
def test_averagepool_stride2_edge_values(kernel, pads):
    # Signed zeros (a window of -0.0 averages to +0.0: the sum starts at +0.0), denormals, huge values whose float64
    # sum does not overflow, +-inf (inf - inf: NaN) and NaN, in whole planes and at the row ends / block tails.
    planes = [np.full((9, 19), -0.0), np.full((9, 19), 1e-45), np.full((9, 19), 3e38), np.full((9, 19), -3e38),
              RNG.choice(EDGE, (9, 19)), RNG.choice(np.array([3e38, -3e38, 1e-40, -0.0, 1.0], np.float32), (9, 19))]
    planes.append(np.where(RNG.random((9, 19)) < 0.5, np.inf, -np.inf))
    x = np.stack(planes)[None].astype(np.float32)
    for count_pad in (0, 1):
        _, got = _check(x, kernel, (2, 2), pads, 0, count_pad)
        assert not np.signbit(got[0, 0]).any()  # +0.0 from the -0.0 plane


def test_averagepool_stride2_many_planes_and_batches():
    # Block counts per call that are and are not multiples of four (the groups of four blocks run across rows and
    # planes' ends), with NaN only in some planes.
    for n, c, h, w in [(2, 37, 7, 7), (3, 5, 9, 11), (1, 129, 5, 6)]:
        x = RNG.standard_normal((n, c, h, w)).astype(np.float32)
        x[:, ::7] = _edges(x[:, ::7], 4)
        for kernel, pads in [((2, 2), (0, 0, 0, 0)), ((3, 3), (1, 1, 1, 1)), ((3, 2), (1, 0, 1, 1))]:
            for ceil in (0, 1):
                _check(x, kernel, (2, 2), pads, ceil, 0)


# ---- stride 1, 2x2 / 3x3 windows, one plane per grid: planes of narrow and wide magnitude spans ----

def _span_plane(shape, span, stream):
    """Full-mantissa values of both signs whose magnitudes span `span` binades (2^-12 .. 2^(span - 12)), the
    extremes included."""
    rng = np.random.default_rng(stream)
    e = rng.integers(-12, -12 + span, shape, endpoint=False)
    x = (rng.uniform(1.0, 2.0, shape) * np.exp2(e) * rng.choice([-1.0, 1.0], shape)).astype(np.float32)
    x.flat[0], x.flat[-1] = np.float32(2.0 ** -12), np.float32(-(2.0 ** (span - 12)) * 1.9999999)
    return x


_SEP_SHAPES = [(1, 1, 64, 64), (1, 3, 28, 28), (1, 1, 7, 7), (2, 1, 5, 18), (1, 2, 40, 61), (1, 1, 33, 9),
               (1, 1, 30, 64)]
_SEP_WINDOWS = [((3, 3), (1, 1, 1, 1)), ((3, 3), (0, 0, 0, 0)), ((2, 2), (0, 0, 0, 0)), ((2, 2), (1, 1, 1, 1)),
                ((3, 3), (0, 1, 1, 0)), ((2, 2), (1, 0, 0, 1)), ((3, 3), (1, 0, 1, 0))]


@pytest.mark.parametrize("shape", _SEP_SHAPES)
@pytest.mark.parametrize("kernel,pads", _SEP_WINDOWS)
@pytest.mark.parametrize("count_pad", [0, 1])
@pytest.mark.parametrize("span", [3, 25, 26, 40])
def test_averagepool_stride1_separable_bits(shape, kernel, pads, count_pad, span):
    # Every span takes the window order's float32 sums (no separable path: in float32 it would change the bits).
    x = _span_plane(shape, span, stream=span + shape[3])
    _check(x, kernel, (1, 1), pads, 0, count_pad)


@pytest.mark.parametrize("kernel,pads", [((3, 3), (1, 1, 1, 1)), ((2, 2), (0, 0, 0, 0))])
def test_averagepool_stride1_cancelling_planes_keep_window_order(kernel, pads):
    # +-2^31 next to values near 1: windows where the large ones cancel keep only the small ones' sum, whose bits
    # below 2^-21 depend on the order of the additions (a row sum -2^31 + s rounds s, the window order may not).
    # Every path takes the window order.
    shape = (1, 2, 40, 48)
    big = RNG.choice(np.array([2.0 ** 31, -(2.0 ** 31)]), shape)
    x = np.where(RNG.random(shape) < 0.5, big, RNG.uniform(0.5, 2.0, shape)).astype(np.float32)
    for count_pad in (0, 1):
        _check(x, kernel, (1, 1), pads, 0, count_pad)


def test_averagepool_stride1_separable_edge_planes():
    # Per plane: -0.0 only (+0.0 out: the window-order sum starts at +0.0), zeros mixed with -0.0, denormals only,
    # denormals with values up to 2^-100, the largest magnitudes (float32 sums overflow to +-inf, NaN
    # where both signs do, as the general loop's), one NaN, one
    # inf, +-inf, exact cancellations (x and -x side by side), a single nonzero value.
    h, w = 20, 23
    planes = [np.full((h, w), -0.0), np.where(RNG.random((h, w)) < 0.5, 0.0, -0.0),
              RNG.choice(np.array([1e-45, -1e-45, 3e-39, -1e-40, 0.0], np.float32), (h, w)),
              RNG.choice(np.array([1e-40, 7e-31, -1e-31, -0.0], np.float32), (h, w)),
              RNG.choice(np.array([3e38, -3e38, 2e38, 1e30], np.float32), (h, w)),
              RNG.standard_normal((h, w)), RNG.standard_normal((h, w)), RNG.standard_normal((h, w)),
              np.tile(np.array([1.5, -1.5], np.float32), (h, (w + 1) // 2))[:, :w], np.zeros((h, w))]
    planes[5][3, 4] = np.nan
    planes[6][h - 1, w - 1] = np.inf
    planes[7][0, 0], planes[7][5, 5] = np.inf, -np.inf
    planes[9][7, 11] = 1.25
    x = np.stack(planes).astype(np.float32)[:, None]  # one plane per batch item: grids of one plane
    for kernel, pads in [((3, 3), (1, 1, 1, 1)), ((2, 2), (0, 0, 0, 0)), ((3, 3), (0, 1, 1, 0))]:
        for count_pad in (0, 1):
            _, got = _check(x, kernel, (1, 1), pads, 0, count_pad)
            assert not np.signbit(got[0]).any() and not np.signbit(got[1]).any()  # +0.0 from the zero planes


@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_fallback_instruction_sets_pass_the_same_checks(isa):
    rerun_file_with_instruction_set(__file__, isa)
