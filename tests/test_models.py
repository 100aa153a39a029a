"""Three real models built with onnx.helper and run by the twin, checked against ``onnx.reference``:

- mlp: 784-512-256-10 (Gemm + Relu twice, Gemm, Softmax);
- cnn: two blocks of Conv 3x3 (pad 1) + BatchNormalization + Relu + MaxPool 2x2 on a 3x32x32 image, then
  Flatten + Gemm (10 classes);
- transformer: one pre-norm encoder block (d_model 128, 4 heads, sequence 32): LayerNormalization, Q/K/V
  projections, multi-head attention with Reshape/Transpose/MatMul/Softmax, output projection and residual, then
  LayerNormalization and a GELU MLP (512) with residual.

All three have a symbolic batch dim "N". The builders are shared with benchmarks/bench_models.py.

Tolerances (float32; the twin's GEMMs are OpenBLAS, onnx.reference uses numpy): |twin - ref| <= ATOL + RTOL * |ref|
with RTOL = 1e-4 and ATOL = 1e-4 * max|ref| (the scale of the output), see MODEL_TOLERANCES.
"""

from __future__ import annotations

import numpy as np
import pytest

import geasync as ga

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

MODEL_TOLERANCES = {"rtol": 1e-4, "atol_scale": 1e-4}


def _finish(nodes, name, inputs, outputs, inits, opset):
    graph = helper.make_graph(nodes, name, inputs, outputs,
                              initializer=[numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="geasync-tests")
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def make_mlp(seed: int = 0, dims=(784, 512, 256, 10)) -> "onnx.ModelProto":
    rng = np.random.default_rng(seed)
    inits, nodes, x = {}, [], "x"
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
        inits[f"w{i}"] = (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)
        inits[f"b{i}"] = (rng.standard_normal(b) * 0.1).astype(np.float32)
        nodes.append(helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], [f"h{i}"], name=f"fc{i}"))
        x = f"h{i}"
        if i < len(dims) - 2:
            nodes.append(helper.make_node("Relu", [x], [f"a{i}"], name=f"relu{i}"))
            x = f"a{i}"
    nodes.append(helper.make_node("Softmax", [x], ["probs"], name="softmax", axis=-1))
    return _finish(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", dims[0]])],
                   [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", dims[-1]])], inits, 17)


def make_cnn(seed: int = 0, channels=(3, 16, 32), image: int = 32, classes: int = 10) -> "onnx.ModelProto":
    rng = np.random.default_rng(seed)
    inits, nodes, x, size = {}, [], "x", image
    for i, (cin, cout) in enumerate(zip(channels[:-1], channels[1:], strict=True)):
        inits[f"conv{i}_w"] = (rng.standard_normal((cout, cin, 3, 3)) / np.sqrt(cin * 9)).astype(np.float32)
        inits[f"conv{i}_b"] = (rng.standard_normal(cout) * 0.1).astype(np.float32)
        inits[f"bn{i}_scale"] = rng.uniform(0.5, 1.5, cout).astype(np.float32)
        inits[f"bn{i}_bias"] = (rng.standard_normal(cout) * 0.1).astype(np.float32)
        inits[f"bn{i}_mean"] = (rng.standard_normal(cout) * 0.1).astype(np.float32)
        inits[f"bn{i}_var"] = rng.uniform(0.5, 1.5, cout).astype(np.float32)
        nodes += [
            helper.make_node("Conv", [x, f"conv{i}_w", f"conv{i}_b"], [f"c{i}"], name=f"conv{i}",
                             kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization", [f"c{i}"] + [f"bn{i}_{p}" for p in ("scale", "bias", "mean", "var")],
                             [f"n{i}"], name=f"bn{i}", epsilon=1e-5),
            helper.make_node("Relu", [f"n{i}"], [f"r{i}"], name=f"relu{i}"),
            helper.make_node("MaxPool", [f"r{i}"], [f"p{i}"], name=f"pool{i}", kernel_shape=[2, 2], strides=[2, 2]),
        ]
        x, size = f"p{i}", size // 2
    feat = channels[-1] * size * size
    inits["fc_w"] = (rng.standard_normal((feat, classes)) / np.sqrt(feat)).astype(np.float32)
    inits["fc_b"] = (rng.standard_normal(classes) * 0.1).astype(np.float32)
    nodes += [helper.make_node("Flatten", [x], ["flat"], name="flatten", axis=1),
              helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="classifier")]
    return _finish(nodes, "cnn",
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", channels[0], image, image])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])], inits, 17)


def make_transformer(seed: int = 0, seq: int = 32, d_model: int = 128, heads: int = 4,
                     d_ff: int = 512) -> "onnx.ModelProto":
    rng = np.random.default_rng(seed)
    dh = d_model // heads
    inits = {
        "ln1_s": rng.uniform(0.8, 1.2, d_model).astype(np.float32),
        "ln1_b": (rng.standard_normal(d_model) * 0.05).astype(np.float32),
        "ln2_s": rng.uniform(0.8, 1.2, d_model).astype(np.float32),
        "ln2_b": (rng.standard_normal(d_model) * 0.05).astype(np.float32),
        "heads_shape": np.array([0, 0, heads, dh], np.int64),
        "model_shape": np.array([0, 0, d_model], np.int64),
        "scale": np.array(1.0 / np.sqrt(dh), np.float32),
    }
    for name, (a, b) in {"wq": (d_model, d_model), "wk": (d_model, d_model), "wv": (d_model, d_model),
                         "wo": (d_model, d_model), "w1": (d_model, d_ff), "w2": (d_ff, d_model)}.items():
        inits[name] = (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)
        inits["b" + name[1:]] = (rng.standard_normal(b) * 0.05).astype(np.float32)
    n = helper.make_node
    nodes = [n("LayerNormalization", ["x", "ln1_s", "ln1_b"], ["h"], name="ln1", axis=-1, epsilon=1e-5)]
    for p in ("q", "k", "v"):
        nodes += [n("MatMul", ["h", f"w{p}"], [f"{p}0"], name=f"proj_{p}"),
                  n("Add", [f"{p}0", f"b{p}"], [f"{p}1"], name=f"proj_{p}_bias"),
                  n("Reshape", [f"{p}1", "heads_shape"], [f"{p}2"], name=f"split_heads_{p}")]
    nodes += [
        n("Transpose", ["q2"], ["q3"], name="q_bhsd", perm=[0, 2, 1, 3]),
        n("Transpose", ["k2"], ["k3"], name="k_bhds", perm=[0, 2, 3, 1]),
        n("Transpose", ["v2"], ["v3"], name="v_bhsd", perm=[0, 2, 1, 3]),
        n("MatMul", ["q3", "k3"], ["s0"], name="scores"),
        n("Mul", ["s0", "scale"], ["s1"], name="scale_scores"),
        n("Softmax", ["s1"], ["att"], name="attention", axis=-1),
        n("MatMul", ["att", "v3"], ["ctx0"], name="context"),
        n("Transpose", ["ctx0"], ["ctx1"], name="ctx_bshd", perm=[0, 2, 1, 3]),
        n("Reshape", ["ctx1", "model_shape"], ["ctx2"], name="merge_heads"),
        n("MatMul", ["ctx2", "wo"], ["o0"], name="proj_o"),
        n("Add", ["o0", "bo"], ["o1"], name="proj_o_bias"),
        n("Add", ["x", "o1"], ["r1"], name="residual1"),
        n("LayerNormalization", ["r1", "ln2_s", "ln2_b"], ["h2"], name="ln2", axis=-1, epsilon=1e-5),
        n("MatMul", ["h2", "w1"], ["f0"], name="ffn1"),
        n("Add", ["f0", "b1"], ["f1"], name="ffn1_bias"),
        n("Gelu", ["f1"], ["f2"], name="gelu"),
        n("MatMul", ["f2", "w2"], ["f3"], name="ffn2"),
        n("Add", ["f3", "b2"], ["f4"], name="ffn2_bias"),
        n("Add", ["r1", "f4"], ["y"], name="residual2"),
    ]
    return _finish(nodes, "transformer_block",
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", seq, d_model])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", seq, d_model])], inits, 20)


MODELS = {"mlp": make_mlp, "cnn": make_cnn, "transformer": make_transformer}


def model_input(name: str, model, batch: int, seed: int = 1) -> np.ndarray:
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    dims[0] = batch
    return np.random.default_rng(seed).standard_normal(dims).astype(np.float32)


def reference(model, x: np.ndarray) -> np.ndarray:
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model).run(None, {model.graph.input[0].name: x})[0]


@pytest.mark.parametrize("batch", [1, 7])
@pytest.mark.parametrize("name", list(MODELS))
def test_model_matches_onnx_reference(name, batch):
    model = MODELS[name]()
    x = model_input(name, model, batch)
    ref = reference(model, x)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        (y,) = s.run_graph(1, [x])
        out = y.numpy()
    assert out.shape == ref.shape and out.dtype == np.float32
    atol = MODEL_TOLERANCES["atol_scale"] * float(np.abs(ref).max())
    np.testing.assert_allclose(out, ref, rtol=MODEL_TOLERANCES["rtol"], atol=atol)


@pytest.mark.parametrize("name", list(MODELS))
def test_model_runs_repeatedly_with_a_planned_arena(name):
    """Several runs and batch sizes on one graph: results stay identical (the arena is reused, not reallocated)."""
    model = MODELS[name]()
    xs = {b: model_input(name, model, b, seed=b) for b in (2, 5)}
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        first = {b: s.run_graph(1, [x])[0].numpy().copy() for b, x in xs.items()}
        for _ in range(3):
            for b, x in xs.items():
                np.testing.assert_array_equal(s.run_graph(1, [x])[0].numpy(), first[b])
