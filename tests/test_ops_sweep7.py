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
