"""Strided pools without pads (kernel == column stride 2..4, 2x2 stride 2 with ceil-mode overhang): the AVX-512
kernel works on four blocks of 8 outputs at once, a group running across output rows and planes, and a ceil-mode
last row reading fewer window rows than its neighbours in the group. Bit for bit against the general loop's
arithmetic (AveragePool: float32 sums in window order from +0.0, one division; MaxPool: the first tap, then a later
one where it is larger) and against onnx.reference, on the benchmark's shapes and odd ones."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from test_ops_pool_small import (  # noqa: E402
    EDGE, _attrs, _average_oracle, _max_oracle, _model, _reference, _same_bits, _twin)

RNG = np.random.default_rng(5301)

# (shape, kernel, strides, ceil): bench_ops.py's rows, then planes whose block count is not a multiple of 4 (groups
# spanning planes), ceil-mode overhang in rows and columns, a single plane of a single block.
_CASES = [((4, 16, 28, 28), (3, 3), (3, 3), 0), ((4, 16, 28, 28), (4, 3), (4, 3), 0),
          ((1, 64, 57, 55), (3, 3), (3, 3), 0), ((3, 32, 32, 30), (4, 3), (4, 3), 0),
          ((1, 8, 112, 111), (2, 2), (2, 2), 1), ((3, 5, 10, 11), (3, 3), (3, 3), 1),
          ((2, 3, 9, 17), (2, 2), (2, 2), 1), ((1, 7, 13, 50), (4, 4), (4, 4), 1), ((1, 1, 3, 3), (3, 3), (3, 3), 0),
          ((5, 1, 7, 25), (2, 3), (2, 3), 1), ((2, 9, 11, 35), (3, 4), (3, 4), 1)]


def _edges(x, frac, edge):
    x = x.copy()
    k = max(1, x.size // frac)
    x.flat[RNG.choice(x.size, k, replace=False)] = RNG.choice(edge, k)
    return x


@pytest.mark.parametrize("shape,kernel,strides,ceil", _CASES)
@pytest.mark.parametrize("count_pad", [0, 1])
def test_averagepool_strided_blocks(shape, kernel, strides, ceil, count_pad):
    x = _edges(RNG.standard_normal(shape).astype(np.float32) * 4, 50, EDGE)
    m = _model("AveragePool", x, **_attrs(kernel, strides, (0, 0, 0, 0), ceil, count_include_pad=count_pad))
    (got,) = _twin(m, x)
    _same_bits(got, _average_oracle(x, got.shape[2:], kernel, strides, (0, 0, 0, 0), count_pad))
    if ceil:
        return  # onnx.reference's AveragePool disagrees with the general loop on every output under ceil-mode overhang
    xf = RNG.standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(_twin(m, xf)[0], _reference(m, xf), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape,kernel,strides,ceil", _CASES)
@pytest.mark.parametrize("edges", ["none", "nan"])
def test_maxpool_strided_blocks(shape, kernel, strides, ceil, edges):
    x = _edges((RNG.standard_normal(shape) * 10).astype(np.float32), 20, EDGE[1:])  # +-0, +-inf, denormals
    if edges == "nan":
        x = _edges(x, 30, EDGE[:1])
    attrs = _attrs(kernel, strides, (0, 0, 0, 0), ceil)
    (fast,) = _twin(_model("MaxPool", x, **attrs), x)
    _same_bits(fast, _max_oracle(x, fast.shape[2:], kernel, strides, (0, 0, 0, 0), keep_first_nan=True))
    if edges == "none":
        np.testing.assert_array_equal(fast, _reference(_model("MaxPool", x, **attrs), x))
