"""bfloat16 through the public API: numpy has none, ml_dtypes' is what graphs declare, runs take and return, and
errors name; without ml_dtypes a bfloat16 output says what to install."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper

import geasync as ga

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)


def _bf16_mlp() -> bytes:
    """x (N, 8) bfloat16 -> MatMul with a bfloat16 weight -> Relu -> y (N, 4) bfloat16, plus a float32 copy of y."""
    w = helper.make_tensor("w", TensorProto.BFLOAT16, [8, 4], vals=np.linspace(-1, 1, 32).astype(BF16).tobytes(),
                           raw=True)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"]),
         helper.make_node("Cast", ["y"], ["y32"], to=TensorProto.FLOAT)],
        "bf16", [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, ["N", 8])],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, ["N", 4]),
         helper.make_tensor_value_info("y32", TensorProto.FLOAT, ["N", 4])], initializer=[w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]).SerializeToString()


def _expected(x: np.ndarray) -> np.ndarray:
    w = np.linspace(-1, 1, 32).astype(BF16).astype(np.float32).reshape(8, 4)
    return np.maximum(x.astype(np.float32) @ w, 0)


def test_declared_bfloat16_is_ml_dtypes_bfloat16():
    g = ga.Graph.from_onnx(_bf16_mlp())
    assert g.inputs[0].dtype == BF16
    assert [o.dtype for o in g.outputs] == [BF16, np.dtype(np.float32)]
    with ga.Session() as s:
        s.add_graph(1, g)
        assert s.graph_inputs(1)[0].dtype == BF16


def test_bfloat16_in_and_out_of_a_run():
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(BF16)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(_bf16_mlp()))
        y, y32 = s.run_graph(1, {"x": x})
        assert y.dtype == BF16 and y.shape == (3, 4)
        got = np.asarray(y)
        assert got.dtype == BF16
        # MatMul accumulates in float32 and rounds once to bfloat16 (8 bits of mantissa)
        np.testing.assert_allclose(got.astype(np.float32), _expected(x), rtol=2 ** -7, atol=1e-6)
        np.testing.assert_array_equal(np.asarray(y32), got.astype(np.float32))
        assert ga.Tensor.from_numpy(x).dtype == BF16


def test_bfloat16_mismatch_names_the_dtype_to_convert_to():
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(_bf16_mlp()))
        with pytest.raises(ga.InputTypeError, match=r"input 0 \('x'\).*astype\(ml_dtypes\.bfloat16\)"):
            s.run_graph(1, [np.zeros((2, 8), np.float32)])
        with pytest.raises(TypeError, match=r"dtype=ml_dtypes\.bfloat16"):
            s.run_graph(1, [[0.0] * 8])


def test_unsupported_dtypes_still_list_bfloat16_as_the_way_to_feed_it():
    with pytest.raises(TypeError, match=r"complex64 has no GE equivalent.*bfloat16 as ml_dtypes\.bfloat16"):
        ga.Tensor.from_numpy(np.zeros(3, np.complex64))


@pytest.mark.anyio
async def test_bfloat16_through_run_graph_async_and_a_batcher():
    rng = np.random.default_rng(1)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(_bf16_mlp()))
        s.add_graph(2, ga.Graph.from_onnx(_bf16_mlp()))
        x = rng.standard_normal((2, 8)).astype(BF16)
        y, _ = await s.run_graph_async(1, [x])
        np.testing.assert_allclose(np.asarray(y).astype(np.float32), _expected(x), rtol=2 ** -7, atol=1e-6)
        async with ga.Batcher(s, 2, max_batch_size=8) as batcher:
            rows = [rng.standard_normal((1, 8)).astype(BF16) for _ in range(3)]
            for row in rows:
                (yb, _) = await batcher.run([row])
                assert np.asarray(yb).dtype == BF16
                np.testing.assert_allclose(np.asarray(yb).astype(np.float32), _expected(row), rtol=2 ** -7,
                                           atol=1e-6)


def test_a_bfloat16_output_without_ml_dtypes_says_what_to_install(tmp_path):
    graph = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.BFLOAT16)], "to_bf16",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [2])])
    model = tmp_path / "to_bf16.onnx"
    model.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]).SerializeToString())
    code = f"""
import sys
sys.modules["ml_dtypes"] = None  # as if it were not installed: importing it raises ImportError
import numpy as np, geasync as ga
g = ga.Graph.from_onnx({str(model)!r})
assert g.outputs[0].dtype is None, g.outputs
with ga.Session() as s:
    s.add_graph(1, g)
    try:
        s.run_graph(1, [np.ones(2, np.float32)])
    except ga.GeError as e:
        print("ERR", e)
    else:
        print("no error")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ERR") and "pip install ml_dtypes" in out.stdout, out.stdout
