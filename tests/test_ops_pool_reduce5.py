"""Pooling windows over the whole map (MaxPool / AveragePool with kernel_shape == the spatial dims, the TorchScript
exporter's global pools) against onnx.reference, the general loop's rules and its bits (the Indices output runs the
general loop)."""
import warnings

import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from onnx_cases import run_twin  # noqa: E402

RNG = np.random.default_rng(4605)


def _model(op, x, n_out=1, **attrs):
    t = helper.np_dtype_to_tensor_dtype(x.dtype)
    node = helper.make_node(op, ["x"], [f"y{i}" for i in range(n_out)], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", t, x.shape)],
                              [helper.make_tensor_value_info(f"y{i}", TensorProto.UNDEFINED, None)
                               for i in range(n_out)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _twin(model, x):
    return run_twin(model, {"x": x})


def _reference(model, x):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ReferenceEvaluator(model).run(None, {"x": x})[0]


def _same_bits(got, want):
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(got[ok].view(np.uint8), want[ok].view(np.uint8))


_WHOLE = [(1, 3, 16, 16), (2, 5, 7, 9), (1, 4, 1, 1), (1, 2, 1, 37), (1, 3, 33, 2), (1, 2, 4, 5, 6), (2, 3, 41),
          (1, 1, 64, 64)]


@pytest.mark.parametrize("shape", _WHOLE)
@pytest.mark.parametrize("stride", [1, 2, 5])
@pytest.mark.parametrize("ceil", [0, 1])
def test_maxpool_whole_map(shape, stride, ceil):
    """Without NaN: the general loop's bits (signed zeros: the first zero in window order) and onnx.reference."""
    x = (RNG.standard_normal(shape) * 10).astype(np.float32)
    flat = x.reshape(shape[0] * shape[1], -1)
    flat[0] = 0.0  # a zero maximum: +0.0 first, -0.0 later
    flat[0, 1::2] = -0.0
    if flat.shape[0] > 1:  # -0.0 first, +0.0 later
        flat[1] = np.where(np.arange(flat.shape[1]) % 3 == 0, -0.0, -1.0)
        flat[1, -1] = 0.0
    if flat.shape[0] > 2:
        flat[2] = -np.inf
    attrs = dict(kernel_shape=list(shape[2:]), strides=[stride] * (len(shape) - 2), ceil_mode=ceil)
    (got,) = _twin(_model("MaxPool", x, **attrs), x)
    exact, _ = _twin(_model("MaxPool", x, 2, **attrs), x)
    _same_bits(got, exact)
    np.testing.assert_array_equal(got, _reference(_model("MaxPool", x, **attrs), x))
    want0 = flat[0][np.argmax(flat[0])] if flat.shape[1] else 0
    assert np.signbit(got.reshape(-1)[0]) == np.signbit(want0)


@pytest.mark.parametrize("shape", [(1, 4, 16, 16), (1, 4, 3, 5), (1, 4, 1, 40), (1, 4, 3, 3, 3)])
@pytest.mark.parametrize("stride", [1, 2])
def test_maxpool_whole_map_nan(shape, stride):
    """NaN planes keep the rules of their paths (a NaN first tap kept; at stride 1 without pads NaN taps skipped):
    the results the twin gave before the whole-map path, pinned here per plane."""
    x = RNG.standard_normal(shape).astype(np.float32)
    planes = x.reshape(4, -1)
    planes[0, 0] = np.nan  # NaN as the first tap
    planes[1, -1] = np.nan  # NaN as a later tap only
    planes[2, :] = np.nan
    attrs = dict(kernel_shape=list(shape[2:]), strides=[stride] * (len(shape) - 2))
    (got,) = _twin(_model("MaxPool", x, **attrs), x)
    got = got.reshape(-1)
    skip_all = stride == 1  # from -inf, NaN taps skipped (the stride-1 paths without pads)
    if skip_all:
        assert got[0] == np.nanmax(planes[0]) and got[2] == -np.inf
    else:
        assert np.isnan(got[0]) and np.isnan(got[2])
    assert got[1] == np.max(planes[1, :-1])
    assert got[3] == np.max(planes[3])


@pytest.mark.parametrize("shape", _WHOLE)
@pytest.mark.parametrize("stride", [1, 3])
@pytest.mark.parametrize("count_pad", [0, 1])
def test_averagepool_whole_map(shape, stride, count_pad):
    x = RNG.standard_normal(shape).astype(np.float32)
    attrs = dict(kernel_shape=list(shape[2:]), strides=[stride] * (len(shape) - 2), count_include_pad=count_pad)
    (got,) = _twin(_model("AveragePool", x, **attrs), x)
    flat = x.reshape(shape[0], shape[1], -1)
    acc = np.zeros(flat.shape[:2], np.float32)
    for t in flat.transpose(2, 0, 1):  # the window order's float32 sum (memory order), then one division
        acc += t
    want = (acc / np.float32(flat.shape[2])).reshape(got.shape)
    _same_bits(got, want)
    np.testing.assert_allclose(got, _reference(_model("AveragePool", x, **attrs), x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("pads", [[1, 0, 0, 0], [0, 0, 1, 1]])
@pytest.mark.parametrize("count_pad", [0, 1])
def test_window_as_map_with_pads_and_ceil(pads, count_pad):
    """A window the size of the map but with pads (several outputs, not the whole-map path): onnx.reference."""
    x = RNG.standard_normal((1, 3, 6, 5)).astype(np.float32)
    for op, extra in (("MaxPool", {}), ("AveragePool", dict(count_include_pad=count_pad))):
        for ceil in (0, 1):
            m = _model(op, x, kernel_shape=[6, 5], strides=[2, 2], pads=pads, ceil_mode=ceil, **extra)
            np.testing.assert_allclose(_twin(m, x)[0], _reference(m, x), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int8, np.uint8])
def test_maxpool_whole_map_other_types(dtype):
    x = (RNG.standard_normal((2, 3, 5, 7)) * 20).astype(dtype)
    m = _model("MaxPool", x, kernel_shape=[5, 7])
    want = x.reshape(2, 3, -1).max(axis=2).reshape(2, 3, 1, 1)
    np.testing.assert_array_equal(_twin(m, x)[0], want)
    if x.dtype.kind == "f":  # onnx.reference pads integer inputs with NaN (fails)
        np.testing.assert_array_equal(_twin(m, x)[0], _reference(m, x))


@pytest.mark.parametrize("shape", [(1, 3, 9, 9), (2, 2, 28, 28), (1, 2, 57, 55), (1, 1, 7, 100), (1, 2, 3, 4)])
@pytest.mark.parametrize("kernel,strides", [((3, 3), (3, 3)), ((4, 3), (4, 3)), ((2, 2), (2, 2)), ((3, 3), (2, 2)),
                                            ((2, 4), (3, 4)), ((1, 3), (1, 3))])
@pytest.mark.parametrize("ceil", [0, 1])
@pytest.mark.parametrize("count_pad", [0, 1])
def test_strided_pools_without_pads(shape, kernel, strides, ceil, count_pad):
    """Column strides 2..4 without pads (StridedPoolAvx512 on AVX-512), ceil-mode windows past the map included:
    AveragePool as onnx.reference and as the window-order float32 sums (the general loop's); MaxPool the general
    loop's bits (Indices output) and onnx.reference."""
    if shape[2] < kernel[0] or shape[3] < kernel[1]:
        pytest.skip("the window does not fit")
    x = RNG.standard_normal(shape).astype(np.float32)
    attrs = dict(kernel_shape=list(kernel), strides=list(strides), ceil_mode=ceil)
    m = _model("AveragePool", x, count_include_pad=count_pad, **attrs)
    (got,) = _twin(m, x)
    if not ceil:  # onnx.reference misplaces ceil-mode windows of these pools (its values differ from the first)
        np.testing.assert_allclose(got, _reference(m, x), rtol=1e-5, atol=1e-6)
    if not (ceil and count_pad):  # each window's valid taps, summed in float32 in window order, over their count
        want = np.zeros(got.shape, np.float32)
        for i in range(got.shape[2]):
            for j in range(got.shape[3]):
                w = x[:, :, i * strides[0]:i * strides[0] + kernel[0], j * strides[1]:j * strides[1] + kernel[1]]
                acc = np.zeros(w.shape[:2], np.float32)
                for t in w.reshape(w.shape[0], w.shape[1], -1).transpose(2, 0, 1):  # row, then column
                    acc += t
                want[:, :, i, j] = acc / np.float32(w.shape[2] * w.shape[3])
        _same_bits(got, want)
    if count_pad:
        return
    xm = x.copy()
    xm[0, 0, 0, :] = np.nan  # NaN first taps (kept at these strides) and later ones (skipped)
    xm[0, -1, :, 1] = -0.0
    (fast,) = _twin(_model("MaxPool", xm, **attrs), xm)
    exact, _ = _twin(_model("MaxPool", xm, 2, **attrs), xm)
    _same_bits(fast, exact)
    if not ceil:
        np.testing.assert_array_equal(fast[:, 1:], _reference(_model("MaxPool", xm, **attrs), xm)[:, 1:])
