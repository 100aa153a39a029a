"""Big values computed from constants alone (a ConstantOfShape, Expand or Tile of a small constant: weights of models
saved without their values) are folded at compile when they only reach weight operands (Conv / MatMul weights,
normalisation parameters, maybe through Cast / Reshape / Transpose) and the memory limit leaves room, so those ops
get packed weights; other uses keep the run-time fill. Results stay those of onnx.reference. Also: the ONNX "light"
model-zoo networks shipped with the onnx package run and match their expected outputs."""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import geasync as ga

pytestmark = pytest.mark.timeout(300, method="thread")

MB = 1 << 20


def tiled_conv_model(out_name: str = "y") -> tuple[bytes, np.ndarray]:
    """Conv whose 4.7 MB weights are a Tile (x16) of a 295 KB random initializer (more than 8x its input)."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal((32, 256, 3, 3)).astype(np.float32) * 0.05
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256, 9, 9])
    y = helper.make_tensor_value_info(out_name, TensorProto.FLOAT, None)
    nodes = [helper.make_node("Tile", ["w", "reps"], ["wt"]),
             helper.make_node("Conv", ["x", "wt"], [out_name], pads=[1, 1, 1, 1])]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([16, 1, 1, 1], np.int64), "reps")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 13)])
    return model.SerializeToString(), rng.standard_normal((1, 256, 9, 9)).astype(np.float32)


def reference(model: bytes, feeds: dict) -> list:
    return ReferenceEvaluator(onnx.load_from_string(model)).run(None, feeds)


def test_big_constant_weights_are_folded_and_correct():
    model, x = tiled_conv_model()
    (want,) = reference(model, {"x": x})
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        s.compile_graph(1)
        assert s.get_compiled_graph_summary(1).const_memory_size >= 4 * MB  # the tiled weights live with the plan
        for _ in range(2):
            (got,) = s.run_graph(1, [x])
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)


def test_memory_limit_without_room_leaves_the_value_to_run_time():
    model, x = tiled_conv_model()
    (want,) = reference(model, {"x": x})
    # folded constants are kept within a quarter of the limit: 4 MB here, so the 4.7 MB weights are made by each run
    with ga.Session({"geasync.max_memory_bytes": str(16 * MB)}) as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        s.compile_graph(1)
        assert s.get_compiled_graph_summary(1).const_memory_size < MB
        (got,) = s.run_graph(1, [x])
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("path", ["direct", "cast_reshape", "matmul"])
def test_weights_filled_by_constant_of_shape_through_cast_and_reshape(path):
    rng = np.random.default_rng(5)
    fill = numpy_helper.from_array(np.array([0.02], np.float16 if path == "cast_reshape" else np.float32))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 512] if path == "matmul" else [1, 512, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    inits = [numpy_helper.from_array(np.array([2048 * 512] if path == "cast_reshape" else [512, 1024], np.int64),
                                     "shape"),
             numpy_helper.from_array(np.array([-1, 512, 1, 1], np.int64), "wshape")]
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["w0"], value=fill)]
    if path == "cast_reshape":
        nodes += [helper.make_node("Cast", ["w0"], ["w1"], to=TensorProto.FLOAT),
                  helper.make_node("Reshape", ["w1", "wshape"], ["w"])]
    elif path == "direct":
        nodes += [helper.make_node("Reshape", ["w0", "wshape"], ["w"])]
    nodes += [helper.make_node("MatMul", ["x", "w0"], ["y"]) if path == "matmul"
              else helper.make_node("Conv", ["x", "w"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    xv = rng.standard_normal((2, 512) if path == "matmul" else (1, 512, 4, 4)).astype(np.float32)
    (want,) = reference(model, {"x": xv})
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        s.compile_graph(1)
        assert s.get_compiled_graph_summary(1).const_memory_size >= 2 * MB
        (got,) = s.run_graph(1, [xv])
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-3, atol=1e-3)


def test_big_constant_graph_output_is_not_folded():
    # a filled output is written in place by each run, not kept with the plan and copied out
    shape = np.array([1024, 1024], np.int64)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    outs = [helper.make_tensor_value_info("z", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["z"],
                              value=numpy_helper.from_array(np.array([2.5], np.float32))),
             helper.make_node("Neg", ["x"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], outs, [numpy_helper.from_array(shape, "shape")]),
                              opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        s.compile_graph(1)
        assert s.get_compiled_graph_summary(1).const_memory_size < MB
        z, y = s.run_graph(1, [np.ones(4, np.float32)])
        np.testing.assert_array_equal(z.numpy(), np.full((1024, 1024), 2.5, np.float32))
        np.testing.assert_array_equal(y.numpy(), -np.ones(4, np.float32))


def test_expanded_mask_added_to_input_in_a_dynamic_graph():
    # not a weight: the 2 MB mask is expanded by each run (plans of two batch sizes)
    rng = np.random.default_rng(3)
    row = rng.standard_normal((1, 1, 512)).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 1024, 512])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Expand", ["row", "shape"], ["mask"]),
             helper.make_node("Add", ["x", "mask"], ["y"])]
    inits = [numpy_helper.from_array(row, "row"), numpy_helper.from_array(np.array([1, 1024, 512], np.int64), "shape")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        for n in (1, 3, 1):
            xv = rng.standard_normal((n, 1024, 512)).astype(np.float32)
            (got,) = s.run_graph(1, [xv])
            np.testing.assert_array_equal(got.numpy(), xv + row)


LIGHT = sorted(glob.glob(os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "*.onnx")))
# the three with 60-550 MB of weights are left to the benchmark
SMALL_LIGHT = [p for p in LIGHT if not any(big in p for big in ("vgg19", "alexnet", "zfnet512"))]


@pytest.mark.skipif(not SMALL_LIGHT, reason="this onnx package ships no light models")
@pytest.mark.parametrize("path", SMALL_LIGHT, ids=lambda p: os.path.basename(p)[len("light_"):-len(".onnx")])
def test_light_model_zoo_networks_match_their_expected_outputs(path):
    # onnx's backend test runner feeds these arange(n) / n and compares with <model>_output_0.pb
    model = onnx.load(path)
    inits = {t.name for t in model.graph.initializer}
    (data,) = [i for i in model.graph.input if i.name not in inits]
    shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in data.type.tensor_type.shape.dim)
    n = int(np.prod(shape))
    feed = (np.arange(n).reshape(shape) / n).astype(np.float32)
    want = numpy_helper.to_array(onnx.load_tensor(path[:-len(".onnx")] + "_output_0.pb"))
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model.SerializeToString()))
        got = s.run_graph(1, {data.name: feed})[0].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-5)
