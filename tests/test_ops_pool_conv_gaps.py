"""Pooling and small-conv shapes that measured well behind onnxruntime (benchmarks/bench_ops.py, "pooling gaps"):
windows side by side along the row (kernel == column stride 3..8, e.g. 3x3 stride 3 and 4x3 stride (4, 3)), which
the twin reads as whole registers and picks apart by permutes. Checked bit for bit against the general loop's
arithmetic (AveragePool: float32 sums in window order from +0.0, one division; MaxPool: the first valid tap, then a
later one where it is larger, and the Indices path's values), and against onnx.reference, on the CPU's best
instruction set and on the AVX2 / baseline fallbacks."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx_cases import rerun_file_with_instruction_set  # noqa: E402
from test_ops_pool_small import (  # noqa: E402
    EDGE, _attrs, _average_oracle, _max_oracle, _model, _reference, _same_bits, _twin)

RNG = np.random.default_rng(3103)


def _edges(x, frac, edge=EDGE):
    x = x.copy()
    k = max(1, x.size // frac)
    x.flat[RNG.choice(x.size, k, replace=False)] = RNG.choice(edge, k)
    return x


# Odd sizes (row tails of 1..7 outputs, partial last windows dropped or, with ceil_mode, read past the row's end),
# batches, 1..64 channels, rows of 1..9 blocks of 8 outputs.
_SHAPES = [(1, 3, 9, 9), (2, 5, 14, 14), (1, 4, 21, 21), (1, 2, 13, 57), (4, 3, 7, 7), (1, 1, 8, 200),
           (1, 64, 12, 12), (1, 2, 30, 23)]
# (kernel, strides, pads, ceil): kernel == column stride, with and without pads / ceil-mode overhang, and a row
# stride other than the column's.
_WINDOWS = [((3, 3), (3, 3), (0, 0, 0, 0), 0), ((4, 3), (4, 3), (0, 0, 0, 0), 0), ((3, 3), (3, 3), (1, 1, 1, 1), 0),
            ((3, 3), (3, 3), (0, 0, 0, 0), 1), ((5, 5), (5, 5), (2, 1, 0, 2), 1), ((4, 4), (4, 4), (0, 0, 0, 0), 0),
            ((2, 6), (1, 6), (0, 0, 0, 0), 1), ((7, 7), (7, 7), (0, 3, 0, 3), 0), ((1, 8), (2, 8), (0, 0, 0, 0), 0),
            ((3, 4), (2, 4), (1, 2, 1, 2), 1)]


def _fits(shape, kernel, pads):
    return shape[2] + pads[0] + pads[2] >= kernel[0] and shape[3] + pads[1] + pads[3] >= kernel[1]


@pytest.mark.parametrize("shape", _SHAPES)
@pytest.mark.parametrize("kernel,strides,pads,ceil", _WINDOWS)
@pytest.mark.parametrize("count_pad", [0, 1])
def test_averagepool_side_by_side_bits(shape, kernel, strides, pads, ceil, count_pad):
    if not _fits(shape, kernel, pads):
        pytest.skip("the window does not fit")
    x = _edges(RNG.standard_normal(shape).astype(np.float32) * 4, 3)
    m = _model("AveragePool", x, **_attrs(kernel, strides, pads, ceil, count_include_pad=count_pad))
    (got,) = _twin(m, x)
    assert got.shape == _reference(m, np.zeros_like(x)).shape
    _same_bits(got, _average_oracle(x, got.shape[2:], kernel, strides, pads, count_pad))


@pytest.mark.parametrize("shape", _SHAPES)
@pytest.mark.parametrize("kernel,strides,pads,ceil", _WINDOWS)
@pytest.mark.parametrize("edges", ["none", "nan"])
def test_maxpool_side_by_side_bits(shape, kernel, strides, pads, ceil, edges):
    if not _fits(shape, kernel, pads):
        pytest.skip("the window does not fit")
    x = _edges((RNG.standard_normal(shape) * 10).astype(np.float32), 2, EDGE[1:])  # +-0, +-inf, denormals
    if edges == "nan":
        x = _edges(x, 5)
    attrs = _attrs(kernel, strides, pads, ceil)
    (fast,) = _twin(_model("MaxPool", x, **attrs), x)
    _same_bits(fast, _max_oracle(x, fast.shape[2:], kernel, strides, pads, keep_first_nan=True))
    if edges == "none":
        exact, _ = _twin(_model("MaxPool", x, 2, **attrs), x)  # the Indices path: the general loop
        _same_bits(fast, exact)


@pytest.mark.parametrize("shape", [(1, 3, 56, 56), (4, 16, 28, 28), (1, 64, 21, 21), (1, 16, 57, 55)])
@pytest.mark.parametrize("kernel,pads,ceil", [((3, 3), (0, 0, 0, 0), 0), ((4, 3), (0, 0, 0, 0), 0),
                                              ((3, 3), (1, 1, 1, 1), 1)])
def test_side_by_side_reference(shape, kernel, pads, ceil):
    x = (RNG.standard_normal(shape) * 3).astype(np.float32)
    for op in ("AveragePool", "MaxPool"):
        m = _model(op, x, **_attrs(kernel, kernel, pads, ceil))
        # onnx.reference sums in float32 in its own order: that rounding sets the tolerance
        np.testing.assert_allclose(_twin(m, x)[0], _reference(m, x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("isa", ["avx2", "baseline"])
def test_fallback_instruction_sets(isa):
    rerun_file_with_instruction_set(__file__, isa)
