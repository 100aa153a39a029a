"""AveragePool on float32 sums each window in float32, in window order (row, then column) from +0.0, then divides once
by the count, on every path (general loop, row kernels, strided blocks, whole-plane grids, in-place stride-2 blocks,
the whole-map window, 3-D windows). Checked bit for bit against that arithmetic in numpy, against onnx.reference at
float32 tolerance, and on the AVX2 / baseline fallbacks. float64 keeps its double sums. Edge values: a float32 sum
that overflows gives +-inf (and +inf + -inf gives NaN) exactly where the window-order float32 sum does, even if the
mean would be finite; NaN and inf taps propagate."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx_cases import rerun_file_with_instruction_set  # noqa: E402
from test_ops_pool_small import EDGE, _attrs, _average_oracle, _model, _reference, _same_bits, _twin  # noqa: E402

RNG = np.random.default_rng(5454)


def _edges(x, frac):
    x = x.copy()
    k = max(1, x.size // frac)
    x.flat[RNG.choice(x.size, k, replace=False)] = RNG.choice(EDGE, k)
    return x


def _fits(shape, kernel, pads):
    return shape[2] + pads[0] + pads[2] >= kernel[0] and shape[3] + pads[1] + pads[3] >= kernel[1]


# Odd map sizes (57x55: the survey's), batches and channel counts that are not multiples of the blocks.
_SHAPES = [(1, 3, 57, 55), (2, 5, 28, 28), (3, 1, 13, 9), (1, 7, 6, 71), (1, 2, 112, 20), (2, 3, 7, 7)]
# (kernel, strides, pads, ceil): 3x3 s2 p1, 3x3 s3, 4x3 s 4x3, 2x2 s2 ceil, stride 1, asymmetric pads, the rest.
_WINDOWS = [((3, 3), (2, 2), (1, 1, 1, 1), 0), ((3, 3), (3, 3), (0, 0, 0, 0), 0), ((4, 3), (4, 3), (0, 0, 0, 0), 0),
            ((2, 2), (2, 2), (0, 0, 0, 0), 1), ((3, 3), (1, 1), (1, 1, 1, 1), 0), ((3, 3), (2, 2), (0, 1, 2, 0), 1),
            ((4, 3), (4, 3), (0, 0, 0, 0), 1), ((5, 5), (1, 1), (2, 2, 2, 2), 0), ((2, 5), (1, 3), (1, 2, 0, 2), 0)]


@pytest.mark.parametrize("shape", _SHAPES)
@pytest.mark.parametrize("kernel,strides,pads,ceil", _WINDOWS)
@pytest.mark.parametrize("count_pad", [0, 1])
def test_averagepool_float32_window_order_bits(shape, kernel, strides, pads, ceil, count_pad):
    if not _fits(shape, kernel, pads):
        pytest.skip("the window does not fit")
    x = _edges(RNG.standard_normal(shape).astype(np.float32) * 4, 40)
    m = _model("AveragePool", x, **_attrs(kernel, strides, pads, ceil, count_include_pad=count_pad))
    (got,) = _twin(m, x)
    _same_bits(got, _average_oracle(x, got.shape[2:], kernel, strides, pads, count_pad))
    if not ceil:  # (onnx.reference misplaces some ceil-mode windows)
        xf = RNG.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(_twin(m, xf)[0], _reference(m, xf), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("kernel,strides,pads", [((3, 3), (2, 2), (1, 1, 1, 1)), ((3, 3), (3, 3), (0, 0, 0, 0)),
                                                 ((3, 3), (1, 1), (1, 1, 1, 1)), ((2, 2), (2, 2), (0, 0, 0, 0))])
def test_averagepool_float32_overflow_and_specials(kernel, strides, pads):
    # Planes: all 3e38 (a window's float32 sum overflows: +inf, though the mean 3e38 is finite; the sums in double
    # gave 3e38), +-3e38 alternating (inf - 3e38 stays inf, and -inf + inf is NaN, in window order), 3e38 next to
    # -inf (-inf), a NaN, +inf next to -inf (NaN), values that cancel exactly, -0.0 only (+0.0: the sum starts at
    # +0.0).
    h, w = 11, 13
    planes = [np.full((h, w), 3e38), np.tile([3e38, -3e38], (h, (w + 1) // 2))[:, :w],
              np.where(RNG.random((h, w)) < 0.3, -np.inf, 3e38), RNG.standard_normal((h, w)),
              np.where(RNG.random((h, w)) < 0.5, np.inf, -np.inf), np.tile([1.5, -1.5], (h, (w + 1) // 2))[:, :w],
              np.full((h, w), -0.0)]
    planes[3][4, 5] = np.nan
    x = np.stack(planes).astype(np.float32)[None]
    for count_pad in (0, 1):
        m = _model("AveragePool", x, **_attrs(kernel, strides, pads, count_include_pad=count_pad))
        (got,) = _twin(m, x)
        want = _average_oracle(x, got.shape[2:], kernel, strides, pads, count_pad)
        _same_bits(got, want)
        if pads == (0, 0, 0, 0):
            assert np.isposinf(got[0, 0]).all()  # overflow, stated above
        assert not np.signbit(got[0, 6]).any()


def test_averagepool_whole_map_window():
    # kernel_shape == the map (the exporters' global pool): the plane's float32 sum in memory order, one division.
    x = _edges(RNG.standard_normal((2, 5, 9, 14)).astype(np.float32) * 3, 30)
    m = _model("AveragePool", x, kernel_shape=[9, 14])
    (got,) = _twin(m, x)
    acc = np.zeros(x.shape[:2], np.float32)
    with np.errstate(all="ignore"):
        for t in x.reshape(2, 5, -1).transpose(2, 0, 1):
            acc += t
        want = (acc / np.float32(9 * 14))[:, :, None, None]
    _same_bits(got, want)


def _model3d(x, dtype=TensorProto.FLOAT, **attrs):
    node = helper.make_node("AveragePool", ["x"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", dtype, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _oracle3d(x, k, s, acc_dtype):
    n, c, d, h, w = x.shape
    od, oh, ow = ((d - k[0]) // s[0] + 1, (h - k[1]) // s[1] + 1, (w - k[2]) // s[2] + 1)
    acc = np.zeros((n, c, od, oh, ow), acc_dtype)
    with np.errstate(all="ignore"):
        for a in range(k[0]):
            for b in range(k[1]):
                for e in range(k[2]):
                    acc += x[:, :, a:a + (od - 1) * s[0] + 1:s[0], b:b + (oh - 1) * s[1] + 1:s[1],
                             e:e + (ow - 1) * s[2] + 1:s[2]].astype(acc_dtype)
        return acc / acc_dtype(k[0] * k[1] * k[2])


@pytest.mark.parametrize("k,s", [((3, 3, 3), (2, 2, 2)), ((2, 3, 3), (1, 3, 3)), ((3, 2, 4), (1, 1, 4))])
def test_averagepool_3d_float32_and_float64(k, s):
    x = _edges(RNG.standard_normal((2, 3, 7, 9, 11)).astype(np.float32), 50)
    m = _model3d(x, kernel_shape=list(k), strides=list(s))
    (got,) = _twin(m, x)
    _same_bits(got, _oracle3d(x, k, s, np.float32))
    x64 = RNG.standard_normal(x.shape)  # float64 keeps its double sums (window order)
    (got64,) = _twin(_model3d(x64, TensorProto.DOUBLE, kernel_shape=list(k), strides=list(s)), x64)
    want64 = _oracle3d(x64, k, s, np.float64)
    np.testing.assert_array_equal(got64.view(np.uint64), want64.view(np.uint64))


@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_fallback_instruction_sets_pass_the_same_checks(isa):
    rerun_file_with_instruction_set(__file__, isa)
