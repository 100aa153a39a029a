"""Cast float64 -> int32 (AVX-512's cvttpd2dq, 8 a step, then the element loop for the tail) against its rule:
truncation toward zero, INT32_MIN for NaN, infinities and values whose truncation does not fit (numpy's x86
result), at lengths that leave every tail length; also under the AVX2 and baseline instruction sets."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from onnx_cases import rerun_file_with_instruction_set, run_twin  # noqa: E402

RNG = np.random.default_rng(5302)


def _want(x):
    out = np.full(x.shape, np.iinfo(np.int32).min, np.int32)
    t = np.trunc(x)
    ok = np.isfinite(x) & (t >= -2147483648.0) & (t <= 2147483647.0)
    out[ok] = t[ok].astype(np.int32)
    return out


@pytest.mark.parametrize("n", [1, 7, 8, 9, 15, 16, 17, 63, 1000, 4099])
def test_float64_to_int32(n):
    x = RNG.standard_normal(n) * 1e5
    edges = np.array([np.nan, np.inf, -np.inf, -0.0, 0.5, -0.5, -0.99, 2147483647.0, 2147483647.9, 2147483648.0,
                      -2147483648.0, -2147483648.9, -2147483649.0, 1e300, -1e300, 5e-324])
    k = min(n, len(edges))
    x[RNG.choice(n, size=k, replace=False)] = edges[:k]
    graph = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.INT32)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [n])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [n])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    (got,) = run_twin(model, {"x": x})
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, _want(x))


@pytest.mark.parametrize("isa", ["avx2", "baseline"])
def test_fallback_instruction_sets(isa):
    rerun_file_with_instruction_set(__file__, isa)
