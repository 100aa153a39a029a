"""Strided 2-D pools whose blocks pair up two to an AVX-512 register (outputs whose windows lie in 16 columns: a
row's last few outputs at column strides 3 and 4, every block of 2x2 stride 2), pairs spanning output rows and
planes, ceil-mode rows reading fewer window rows, odd counts of half blocks; and the channel norms' moment sums
(InstanceNormalization / GroupNormalization) on lengths around the 16- and 32-float blocks. Pools bit for bit
against the general loop's arithmetic and against onnx.reference; norms against the float64 formula, their bits
the same on every instruction set. The last test reruns the file with the fallback instruction sets."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx_cases import rerun_file_with_instruction_set, script_output_per_instruction_set  # noqa: E402
from test_ops_pool_small import (  # noqa: E402
    EDGE, _attrs, _average_oracle, _max_oracle, _model, _reference, _same_bits, _twin)
from test_ops_pool_strided_blocks import _edges  # noqa: E402
from test_vmath import _channel_norm64, _channel_norm_model, _run_model  # noqa: E402

RNG = np.random.default_rng(5757)

# (shape, kernel, strides, ceil): half blocks at the end of every row (W = 28: 9 outputs at stride 3, one half
# block per row), rows of one half block only (pairs across rows and planes), an odd count of half blocks in all
# (the last one alone), 2x2 stride 2 (every block a half block) on odd widths, ceil-mode overhang in both axes.
_CASES = [((2, 5, 28, 28), (3, 3), (3, 3), 0), ((1, 3, 28, 29), (4, 3), (4, 3), 0),
          ((3, 1, 9, 9), (3, 3), (3, 3), 0), ((1, 3, 9, 9), (3, 3), (3, 3), 0),
          ((1, 1, 10, 14), (3, 3), (3, 3), 1), ((2, 3, 13, 31), (2, 2), (2, 2), 1),
          ((1, 2, 7, 16), (2, 2), (2, 2), 0), ((1, 3, 11, 40), (4, 4), (4, 4), 1),
          ((2, 2, 8, 29), (2, 3), (2, 3), 1), ((1, 1, 4, 4), (2, 2), (2, 2), 0), ((1, 1, 3, 5), (3, 4), (3, 4), 1)]


@pytest.mark.parametrize("shape,kernel,strides,ceil", _CASES)
@pytest.mark.parametrize("count_pad", [0, 1])
def test_averagepool_half_block_pairs(shape, kernel, strides, ceil, count_pad):
    x = _edges(RNG.standard_normal(shape).astype(np.float32) * 4, 40, EDGE)
    m = _model("AveragePool", x, **_attrs(kernel, strides, (0, 0, 0, 0), ceil, count_include_pad=count_pad))
    (got,) = _twin(m, x)
    _same_bits(got, _average_oracle(x, got.shape[2:], kernel, strides, (0, 0, 0, 0), count_pad))
    if ceil:
        return  # onnx.reference's AveragePool differs from the general loop under ceil-mode overhang
    xf = RNG.standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(_twin(m, xf)[0], _reference(m, xf), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape,kernel,strides,ceil", _CASES)
@pytest.mark.parametrize("edges", ["none", "nan"])
def test_maxpool_half_block_pairs(shape, kernel, strides, ceil, edges):
    x = _edges((RNG.standard_normal(shape) * 10).astype(np.float32), 15, EDGE[1:])  # +-0, +-inf, denormals
    if edges == "nan":
        x = _edges(x, 25, EDGE[:1])
    model = _model("MaxPool", x, **_attrs(kernel, strides, (0, 0, 0, 0), ceil))
    (got,) = _twin(model, x)
    _same_bits(got, _max_oracle(x, got.shape[2:], kernel, strides, (0, 0, 0, 0), keep_first_nan=True))
    if edges == "none":
        np.testing.assert_array_equal(got, _reference(model, x))


def test_maxpool_half_blocks_signed_zero_ties():
    """Windows of +0 and -0 only: the first tap in window order wins (v > m ? v : m keeps the earlier of equals)."""
    x = RNG.choice(np.array([0.0, -0.0], np.float32), (2, 3, 9, 28))
    model = _model("MaxPool", x, **_attrs((3, 3), (3, 3), (0, 0, 0, 0)))
    (got,) = _twin(model, x)
    want = _max_oracle(x, got.shape[2:], (3, 3), (3, 3), (0, 0, 0, 0), keep_first_nan=True)
    _same_bits(got, want)
    assert np.signbit(got).any() and (~np.signbit(got)).any()


# Spatial lengths around the moment loop's blocks (32 floats, then 16, then a scalar tail).
@pytest.mark.parametrize("length", [15, 16, 31, 32, 33, 47, 48, 63, 64, 65, 95, 1000])
def test_instance_norm_moment_blocks(length):
    x = (RNG.standard_normal((2, 3, length)) * 3 + 40).astype(np.float32)
    x.reshape(-1)[::11] *= -1e3
    model = _channel_norm_model("InstanceNormalization", x.shape, 17)
    (got,) = _run_model(model, {"x": x})
    inits = {i.name: np.frombuffer(i.raw_data, np.float32) for i in model.graph.initializer}
    want = _channel_norm64(x, inits["s"], inits["b"], 3, 1e-5, False)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("shape,groups", [((1, 4, 9, 9), 2), ((2, 6, 5, 7), 3), ((1, 8, 16, 4), 4)])
def test_group_norm_moment_blocks(shape, groups):
    x = (RNG.standard_normal(shape) * 2 - 7).astype(np.float32)
    model = _channel_norm_model("GroupNormalization", x.shape, 21, num_groups=groups)
    (got,) = _run_model(model, {"x": x})
    inits = {i.name: np.frombuffer(i.raw_data, np.float32) for i in model.graph.initializer}
    want = _channel_norm64(x, inits["s"], inits["b"], groups, 1e-5, False)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5)


_NORM_BITS = """
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from test_vmath import _channel_norm_model, _run_model
out = []
for shape in [(1, 3, 31), (2, 2, 48), (1, 2, 65), (1, 2, 1003)]:
    x = (np.random.default_rng(57).standard_normal(shape) * 5 + 30).astype(np.float32)
    x.reshape(-1)[::5] *= 1e3
    out.append(_run_model(_channel_norm_model("InstanceNormalization", shape, 17), {"x": x})[0].tobytes().hex())
print("|".join(out))
"""


def test_instance_norm_bits_on_every_instruction_set():
    outs = script_output_per_instruction_set(_NORM_BITS, __file__)
    assert outs["avx512"] == outs["avx2"] == outs["baseline"]


@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_fallback_instruction_sets_pass_the_same_checks(isa):
    rerun_file_with_instruction_set(__file__, isa, select="not bits_on_every")


# Dilated MaxPool at column stride 1 (AVX-512): separable without NaN (each input row's maxima over the tap columns,
# then the tap rows' in order), NaN planes by the window loop; the bits of the general loop (the Indices form).
_DILATED = [dict(kernel_shape=[3, 3], dilations=[2, 2], pads=[2, 2, 2, 2]),
            dict(kernel_shape=[3, 3], dilations=[2, 2]),
            dict(kernel_shape=[4, 3], dilations=[3, 2], pads=[2, 1, 3, 2], strides=[2, 1], ceil_mode=1),
            dict(kernel_shape=[2, 5], dilations=[5, 1], pads=[0, 2, 4, 2]),
            dict(kernel_shape=[5, 2], dilations=[1, 3], strides=[3, 1], pads=[4, 0, 0, 3])]


@pytest.mark.parametrize("attrs", _DILATED, ids=lambda a: str(sorted(a.items())))
@pytest.mark.parametrize("shape", [(2, 3, 9, 17), (1, 2, 14, 40), (1, 1, 5, 5)])
def test_dilated_maxpool_separable_rows(attrs, shape):
    x = np.round(RNG.standard_normal(shape) * 3).astype(np.float32)  # ties, +-0
    x.reshape(-1)[::5] *= -1.0
    x.reshape(-1)[::13] = -np.inf
    x = _edges(x, 30, EDGE[1:])
    xn = _edges(x, 40, EDGE[:1])  # planes with NaN: the window loop
    for xx in (x, xn):
        (fast,) = _twin(_model("MaxPool", xx, **attrs), xx)
        general = _twin(_model("MaxPool", xx, n_out=2, **attrs), xx)[0]  # Indices: the general loop
        np.testing.assert_array_equal(fast.view(np.int32), general.view(np.int32))
    want = _reference(_model("MaxPool", x, **attrs), x)
    np.testing.assert_array_equal(_twin(_model("MaxPool", x, **attrs), x)[0], want)


# AveragePool at stride 1 (AVX-512, in place): rows whose blocks are all masked (17..48 wide with pads), square
# windows: the masked blocks four output rows at a time under one set of masks, a row count not a multiple of 4.
@pytest.mark.parametrize("shape,k,pads", [((1, 5, 28, 28), 3, (1, 1, 1, 1)), ((2, 3, 14, 30), 3, (1, 0, 1, 2)),
                                          ((1, 2, 7, 45), 2, (0, 1, 1, 0)), ((1, 2, 19, 33), 5, (2, 2, 2, 2)),
                                          ((1, 1, 6, 18), 7, (3, 3, 3, 3))])
@pytest.mark.parametrize("count_pad", [0, 1])
def test_averagepool_stride1_masked_rows(shape, k, pads, count_pad):
    x = _edges(RNG.standard_normal(shape).astype(np.float32) * 4, 40, EDGE)
    m = _model("AveragePool", x, **_attrs((k, k), (1, 1), pads, count_include_pad=count_pad))
    (got,) = _twin(m, x)
    _same_bits(got, _average_oracle(x, got.shape[2:], (k, k), (1, 1), pads, count_pad))
    xf = RNG.standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(_twin(m, xf)[0], _reference(m, xf), rtol=1e-6, atol=1e-6)
