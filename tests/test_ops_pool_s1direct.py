"""AveragePool at stride 1 on float32 (on AVX-512 the plane read in place, 16 outputs per block; elsewhere the
whole-plane grid or the general loop): every window's valid taps summed in float32 in window order from +0.0, then
one division by the count. Checked bit for bit against that arithmetic in numpy and against the twin's general loop
(a 3-D pool with a depth-1 window over a depth > 1 input takes it), against onnx.reference at float32 tolerance, and
on the AVX2 / baseline fallbacks. Shapes: odd widths, widths around multiples of 16, tiny maps, windows larger than
the map (pads), 1-D pools, batches and channel counts; NaN and inf propagate."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx_cases import rerun_file_with_instruction_set  # noqa: E402
from test_ops_pool_small import EDGE, _attrs, _average_oracle, _model, _reference, _same_bits, _twin  # noqa: E402

RNG = np.random.default_rng(5555)


def _edges(x, frac):
    x = x.copy()
    k = max(1, x.size // frac)
    x.flat[RNG.choice(x.size, k, replace=False)] = RNG.choice(EDGE, k)
    return x


def _fits(hw, kernel, pads):
    return hw[0] + pads[0] + pads[2] >= kernel[0] and hw[1] + pads[1] + pads[3] >= kernel[1]


def _model_nd(x, **attrs):
    node = helper.make_node("AveragePool", ["x"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _general_loop(x, kernel, pads, ceil, count_pad):
    """The twin's general loop on the same planes: x as depth slices of one 3-D input under a depth-1 window."""
    n, c, h, w = x.shape
    x3 = np.ascontiguousarray(x.reshape(1, n * c, 1, h, w).repeat(2, axis=2))  # depth 2: not a single plane
    m = _model_nd(x3, kernel_shape=[1, *kernel], strides=[1, 1, 1], pads=[0, pads[0], pads[1], 0, pads[2], pads[3]],
                  ceil_mode=ceil, count_include_pad=count_pad)
    (y3,) = _twin(m, x3)
    assert np.array_equal(y3[:, :, 0], y3[:, :, 1], equal_nan=True)
    return y3[0, :, 0].reshape(n, c, *y3.shape[3:])


# Widths: tiny, odd, one short of / at / one past multiples of 16, long; heights likewise.
_SHAPES = [(1, 1, 1, 1), (1, 2, 1, 9), (1, 3, 5, 1), (2, 3, 7, 7), (1, 4, 3, 15), (1, 2, 9, 16), (1, 2, 6, 17),
           (1, 1, 4, 31), (1, 3, 11, 33), (3, 5, 13, 47), (1, 2, 16, 64), (1, 1, 5, 65), (2, 1, 21, 100),
           (1, 1, 3, 130)]
# (kernel, pads, ceil): 2..7 square windows, pads from 0 to kernel - 1, asymmetric pads, non-square windows.
_WINDOWS = [((2, 2), (0, 0, 0, 0), 0), ((2, 2), (1, 1, 0, 0), 0), ((2, 2), (0, 1, 1, 0), 1),
            ((3, 3), (1, 1, 1, 1), 0), ((3, 3), (0, 0, 0, 0), 1), ((3, 3), (2, 0, 1, 2), 0),
            ((4, 4), (1, 2, 2, 1), 0), ((4, 4), (3, 3, 3, 3), 1), ((5, 5), (2, 2, 2, 2), 0), ((5, 5), (0, 4, 4, 0), 0),
            ((6, 6), (3, 2, 2, 3), 0), ((7, 7), (3, 3, 3, 3), 0), ((7, 7), (6, 6, 6, 6), 0),
            ((3, 5), (1, 2, 1, 2), 0), ((1, 4), (0, 1, 0, 2), 0), ((5, 1), (2, 0, 2, 0), 1), ((8, 8), (4, 4, 3, 3), 0),
            ((2, 9), (1, 4, 0, 4), 0)]


@pytest.mark.parametrize("shape", _SHAPES)
@pytest.mark.parametrize("kernel,pads,ceil", _WINDOWS)
@pytest.mark.parametrize("count_pad", [0, 1])
def test_stride1_float32_window_order_bits(shape, kernel, pads, ceil, count_pad):
    if not _fits(shape[2:], kernel, pads):
        pytest.skip("the window does not fit")
    x = _edges(RNG.standard_normal(shape).astype(np.float32) * 4, 25)
    m = _model("AveragePool", x, **_attrs(kernel, (1, 1), pads, ceil, count_include_pad=count_pad))
    (got,) = _twin(m, x)
    want = _average_oracle(x, got.shape[2:], kernel, (1, 1), pads, count_pad)
    _same_bits(got, want)
    _same_bits(got, _general_loop(x, kernel, pads, ceil, count_pad))
    xf = RNG.standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(_twin(m, xf)[0], _reference(m, xf), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("length", [1, 5, 16, 17, 40, 129])
@pytest.mark.parametrize("k,pads", [(2, (0, 1)), (3, (1, 1)), (5, (2, 2)), (7, (0, 6)), (4, (3, 0))])
@pytest.mark.parametrize("count_pad", [0, 1])
def test_stride1_1d(length, k, pads, count_pad):
    if length + pads[0] + pads[1] < k:
        pytest.skip("the window does not fit")
    x = _edges(RNG.standard_normal((2, 3, length)).astype(np.float32), 20)
    m = _model_nd(x, kernel_shape=[k], pads=list(pads), count_include_pad=count_pad)
    (got,) = _twin(m, x)
    want = _average_oracle(x[:, :, None, :], (1, got.shape[2]), (1, k), (1, 1), (0, pads[0], 0, pads[1]), count_pad)
    _same_bits(got, want[:, :, 0])
    xf = RNG.standard_normal(x.shape).astype(np.float32)
    np.testing.assert_allclose(_twin(m, xf)[0], _reference(m, xf), rtol=2e-6, atol=2e-6)


def test_stride1_3d_against_reference():
    x = RNG.standard_normal((1, 3, 5, 9, 18)).astype(np.float32)
    for count_pad in (0, 1):
        m = _model_nd(x, kernel_shape=[3, 3, 3], pads=[1] * 6, count_include_pad=count_pad)
        np.testing.assert_allclose(_twin(m, x)[0], _reference(m, x), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("n,c", [(1, 1), (2, 3), (4, 7), (1, 33)])
def test_stride1_batches_and_channels(n, c):
    # every plane its own: distinct scales per plane, so a plane mixed into another's outputs shows
    x = RNG.standard_normal((n, c, 19, 37)).astype(np.float32) * np.arange(1, n * c + 1, dtype=np.float32).reshape(
        n, c, 1, 1)
    for count_pad in (0, 1):
        m = _model("AveragePool", x, **_attrs((3, 3), (1, 1), (1, 1, 1, 1), count_include_pad=count_pad))
        (got,) = _twin(m, x)
        _same_bits(got, _average_oracle(x, got.shape[2:], (3, 3), (1, 1), (1, 1, 1, 1), count_pad))


def test_stride1_nan_inf_propagation():
    # NaN, +inf and -inf taps: exactly the outputs whose windows hold them are NaN / inf (inf + -inf: NaN); a plane
    # of -0.0 averages to +0.0 (the sum starts at +0.0); 3e38 sums overflow to inf in window order.
    h, w = 12, 35
    planes = [RNG.standard_normal((h, w)), RNG.standard_normal((h, w)), np.full((h, w), -0.0), np.full((h, w), 3e38),
              np.where(RNG.random((h, w)) < 0.5, np.inf, -np.inf)]
    planes[0][3, 17] = np.nan
    planes[0][0, 0] = np.nan
    planes[1][11, 34] = np.inf
    planes[1][5, 2] = -np.inf
    x = np.stack(planes).astype(np.float32)[None]
    for count_pad in (0, 1):
        m = _model("AveragePool", x, **_attrs((3, 3), (1, 1), (1, 1, 1, 1), count_include_pad=count_pad))
        (got,) = _twin(m, x)
        _same_bits(got, _average_oracle(x, got.shape[2:], (3, 3), (1, 1), (1, 1, 1, 1), count_pad))
        nan = np.zeros((h, w), bool)
        nan[2:5, 16:19] = True
        nan[0:2, 0:2] = True
        np.testing.assert_array_equal(np.isnan(got[0, 0]), nan)
        inf = np.zeros((h, w), bool)
        inf[10:12, 33:35] = True
        np.testing.assert_array_equal(np.isposinf(got[0, 1]), inf)
        ninf = np.zeros((h, w), bool)
        ninf[4:7, 1:4] = True
        np.testing.assert_array_equal(np.isneginf(got[0, 1]), ninf)
        assert (got[0, 2] == 0).all() and not np.signbit(got[0, 2]).any()
        assert np.isposinf(got[0, 3]).all()


@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_fallback_instruction_sets_pass_the_same_checks(isa):
    rerun_file_with_instruction_set(__file__, isa)
