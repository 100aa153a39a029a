"""float32 CumSum over a leading or middle axis with few columns (the running sums kept in registers down the rows
for 8-64 columns, multiples of 8) against onnx.reference: exclusive / reverse, column counts around the vector
widths, NaN / inf / signed zeros in the data."""
import warnings

import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from onnx_cases import rerun_file_with_instruction_set, run_twin  # noqa: E402

RNG = np.random.default_rng(5303)


@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("inner", [3, 8, 16, 24, 32, 40, 64, 72])
@pytest.mark.parametrize("n", [1, 2, 7])
def test_cumsum_few_columns(n, inner, exclusive, reverse):
    x = RNG.standard_normal((3, n, inner)).astype(np.float32)
    x[1, 0, 0] = np.nan
    x[2, -1, inner - 1] = np.inf
    x[0, :, inner // 2] = -0.0
    graph = helper.make_graph([helper.make_node("CumSum", ["x", "a"], ["y"], exclusive=exclusive, reverse=reverse)],
                              "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)],
                              initializer=[helper.make_tensor("a", TensorProto.INT64, [], [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    (got,) = run_twin(model, {"x": x})
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = np.asarray(ReferenceEvaluator(model).run(None, {"x": x})[0])
    np.testing.assert_array_equal(got, want)  # the same float32 additions in the same order
    assert np.array_equal(np.signbit(got[0, :, inner // 2]), np.signbit(want[0, :, inner // 2]))


@pytest.mark.parametrize("isa", ["avx2", "baseline"])
def test_fallback_instruction_sets(isa):
    rerun_file_with_instruction_set(__file__, isa)
