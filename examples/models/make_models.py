"""Regenerates the example models in this folder with onnx.helper (needs the onnx package).

    python examples/models/make_models.py

mlp.onnx: a 784-256-10 MLP classifier (Gemm -> Relu -> MatMul + Add -> Softmax) with a symbolic batch dim "N"
and fixed-seed weights, so the file is reproducible byte for byte.
"""

from __future__ import annotations

import pathlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = pathlib.Path(__file__).resolve().parent


def make_mlp(seed: int = 0, d_in: int = 784, d_hidden: int = 256, d_out: int = 10) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((d_in, d_hidden)) / np.sqrt(d_in)).astype(np.float32)
    b1 = (rng.standard_normal(d_hidden) * 0.01).astype(np.float32)
    w2 = (rng.standard_normal((d_hidden, d_out)) / np.sqrt(d_hidden)).astype(np.float32)
    b2 = (rng.standard_normal(d_out) * 0.01).astype(np.float32)
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="fc1"),
        helper.make_node("Relu", ["h"], ["a"], name="relu1"),
        helper.make_node("MatMul", ["a", "w2"], ["z0"], name="fc2"),
        helper.make_node("Add", ["z0", "b2"], ["z"], name="fc2_bias"),
        helper.make_node("Softmax", ["z"], ["probs"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", d_in])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", d_out])],
        initializer=[numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="geasync-examples")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


if __name__ == "__main__":
    path = HERE / "mlp.onnx"
    path.write_bytes(make_mlp().SerializeToString())
    print(f"wrote {path} ({path.stat().st_size} bytes)")
