"""Cases from the "sweep 7" benchmark family (benchmarks/bench_ops.py): Cast float32 -> int64 / uint32 in AVX-512
lanes (16 an iteration, the rest one at a time), checked bit for bit against onnx.reference (numpy's x86 astype:
truncation toward zero, NaN / +-inf / out-of-range give INT64_MIN, uint32 the low 32 bits of the 64-bit value) at
lengths around the vector width, with every special value in every lane position."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from conftest import make_model  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from onnx_cases import check_twin, run_twin  # noqa: E402

RNG = np.random.default_rng(5151)


def _check(model, x):
    with np.errstate(invalid="ignore"):  # the reference's astype warns on NaN / out-of-range values
        return check_twin(model, {"x": x})

_SPECIAL = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 0.99999994, -0.99999994, 1.5, -1.5,
                     2.0**31, -(2.0**31), 2.0**31 - 128, 2.0**32, 2.0**32 + 512, -1.0, -(2.0**32), 2.0**62,
                     2.0**63, -(2.0**63), 2.0**63 - 2.0**39, -(2.0**64), 2.0**64, 3.4e38, -3.4e38, 1e-40, -1e-40,
                     123456.7, -7654321.5, 16777217.0], np.float32)


def _cast_model(shape, to):
    return make_model([helper.make_node("Cast", ["x"], ["y"], to=to)], [("x", TensorProto.FLOAT, list(shape))],
                      [("y", to, None)])


@pytest.mark.parametrize("to", [TensorProto.INT64, TensorProto.UINT32])
@pytest.mark.parametrize("n", [0, 1, 7, 8, 15, 16, 17, 31, 32, 33, 100, 1000])
def test_cast_float_to_wide_int(to, n):
    if to == TensorProto.INT64:
        x = (RNG.standard_normal(n) * RNG.choice([1.0, 1e3, 1e9, 1e19], n)).astype(np.float32)
    else:  # where every numpy agrees on uint32: out of range, numpy 2's result differs from the twin's documented rule
        x = RNG.uniform(-(2.0**31), 2.0**32, n).astype(np.float32)
    _check(_cast_model(x.shape, to), x)


@pytest.mark.parametrize("to", [TensorProto.INT64, TensorProto.UINT32])
@pytest.mark.parametrize("shift", [0, 5, 16])
def test_cast_float_to_wide_int_special_values(to, shift):
    # each special value at several lane positions: rotated by `shift` inside blocks of 16 and the one-at-a-time tail
    x = np.roll(np.tile(_SPECIAL, 3)[:77], shift).reshape(7, 11)
    model = _cast_model(x.shape, to)
    got = _check(model, x)[0] if to == TensorProto.INT64 else run_twin(model, {"x": x})[0]
    with np.errstate(invalid="ignore"):  # numpy (x86): the integer indefinite, INT64_MIN
        want = x.astype(np.int64)
    # uint32: the low 32 bits of the 64-bit truncation (ops_cast.cc's StoreFloat), the rule of every path
    np.testing.assert_array_equal(got, want if to == TensorProto.INT64 else want.astype(np.uint32))


# ---- GatherND with scalar slices (indices [..., k] with k = the data's rank after batch_dims) ----

def _gather_nd_model(x, idx, batch_dims=0):
    t = helper.np_dtype_to_tensor_dtype(x.dtype)
    return make_model([helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=batch_dims)],
                      [("x", t, list(x.shape)), ("i", TensorProto.INT64, list(idx.shape))], [("y", t, None)])


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.float16, np.int64, np.float64])
@pytest.mark.parametrize("shape,ishape", [((5,), (7, 1)), ((6, 7), (33, 2)), ((6, 7), (3, 4, 2)), ((2, 3, 4), (17, 3)),
                                          ((2, 3, 2, 3), (9, 4)), ((1, 1), (1, 2)), ((4, 5), (0, 2))])
def test_gather_nd_scalar_slices(dtype, shape, ishape):
    x = (RNG.standard_normal(shape) * 20).astype(dtype)
    dims = np.array(shape[:ishape[-1]])
    idx = RNG.integers(-dims, dims, ishape).astype(np.int64)  # negative indices too
    got = check_twin(_gather_nd_model(x, idx), {"x": x, "i": idx})[0]
    assert got.dtype == x.dtype


def test_gather_nd_scalar_slices_batch_dims():
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    idx = RNG.integers(-4, 4, (3, 6, 2)) % np.array([4, 5])
    check_twin(_gather_nd_model(x, idx.astype(np.int64), batch_dims=1), {"x": x, "i": idx.astype(np.int64)})


@pytest.mark.parametrize("bad", [5, -6, 2**62, -(2**63)])
def test_gather_nd_scalar_slices_index_out_of_range(bad):
    import geasync as ga

    x = RNG.standard_normal((4, 5)).astype(np.float32)
    idx = np.array([[1, 2], [3, bad]], np.int64)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(_gather_nd_model(x, idx)))
        with pytest.raises(Exception, match="out of range"):
            s.run_graph(1, [x, idx])


# ---- Transpose NHWC -> NCHW of 3 channels (4-byte elements: 16 pixels a step, then one at a time) ----

@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint32])
@pytest.mark.parametrize("n,h,w", [(1, 1, 1), (1, 3, 5), (1, 4, 4), (1, 1, 17), (2, 5, 7), (1, 33, 31), (3, 1, 16),
                                   (1, 0, 4)])
def test_transpose_nhwc_3_channels(dtype, n, h, w):
    x = (RNG.standard_normal((n, h, w, 3)) * 1000).astype(dtype)
    model = make_model([helper.make_node("Transpose", ["x"], ["y"], perm=[0, 3, 1, 2])],
                       [("x", helper.np_dtype_to_tensor_dtype(x.dtype), list(x.shape))],
                       [("y", helper.np_dtype_to_tensor_dtype(x.dtype), None)])
    got = check_twin(model, {"x": x})[0]
    np.testing.assert_array_equal(got, x.transpose(0, 3, 1, 2))


def test_transpose_nhwc_3_channels_keeps_nan_payloads():
    bits = RNG.integers(0, 2**32, (1, 6, 7, 3), dtype=np.uint64).astype(np.uint32)
    bits[0, 0, :, 0] = 0x7FC00001  # NaNs with payloads, -0.0
    bits[0, 1, :, 2] = 0x80000000
    x = bits.view(np.float32)
    model = make_model([helper.make_node("Transpose", ["x"], ["y"], perm=[0, 3, 1, 2])],
                       [("x", TensorProto.FLOAT, list(x.shape))], [("y", TensorProto.FLOAT, None)])
    got = run_twin(model, {"x": x})[0]
    np.testing.assert_array_equal(got.view(np.uint32), bits.transpose(0, 3, 1, 2))
