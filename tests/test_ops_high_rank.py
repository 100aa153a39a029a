"""Tensors of rank 7 to 10 through shape inference, broadcasting and the movement, reduction and matmul kernels,
against onnx.reference, at several input shapes per graph. The twin keeps up to six dims of a shape inline and moves
to the heap beyond: these graphs cross that line in both directions (Unsqueeze up, Squeeze / Reshape / ReduceSum
down, Concat and broadcasts at rank 8)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnx_cases import check_runs, graph_model, value_info

F = TensorProto.FLOAT
RNG = np.random.default_rng(7)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def i64(name, values):
    return helper.make_tensor(name, TensorProto.INT64, [len(values)], values)


def test_unsqueeze_to_rank_9_broadcast_and_reduce_back():
    # x: [a, b, c] -> Unsqueeze to rank 9 -> Add a rank-9 broadcast operand -> ReduceSum over 5 axes -> rank 4
    nodes = [
        helper.make_node("Unsqueeze", ["x", "ax"], ["u"]),
        helper.make_node("Add", ["u", "y"], ["s"]),
        helper.make_node("ReduceSum", ["s", "red"], ["r"], keepdims=0),
        helper.make_node("Relu", ["r"], ["out"]),
    ]
    model = graph_model(nodes, [value_info("x", F, ["a", "b", "c"]), value_info("y", F, [None] * 9)],
                        [value_info("out", F, None)], opset=18,
                        initializers=[i64("ax", [0, 2, 4, 5, 7, 8]), i64("red", [0, 1, 3, 5, 8])])
    check_runs(model, [
        [rand(2, 3, 4), rand(1, 2, 3, 1, 1, 1, 4, 1, 2)],
        [rand(3, 1, 5), rand(2, 1, 1, 2, 1, 1, 5, 3, 1)],
        [rand(1, 1, 1), rand(1, 1, 1, 1, 1, 1, 1, 1, 1)],
    ])


def test_transpose_concat_slice_at_rank_8():
    perm = [7, 0, 6, 1, 5, 2, 4, 3]
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=perm),
        helper.make_node("Concat", ["t", "t"], ["c"], axis=5),
        helper.make_node("Slice", ["c", "starts", "ends", "axes"], ["sl"]),
        helper.make_node("Neg", ["sl"], ["out"]),
    ]
    model = graph_model(nodes, [value_info("x", F, [None] * 8)], [value_info("out", F, None)], opset=18,
                        initializers=[i64("starts", [1, 0]), i64("ends", [1000, -1]), i64("axes", [5, 0])])
    check_runs(model, [[rand(2, 1, 3, 2, 1, 2, 3, 2)], [rand(1, 2, 2, 1, 3, 1, 2, 3)]])


def test_reshape_between_rank_10_and_rank_3_and_expand():
    nodes = [
        helper.make_node("Reshape", ["x", "to10"], ["r10"]),
        helper.make_node("Expand", ["r10", "big"], ["e"]),
        helper.make_node("Reshape", ["e", "to3"], ["r3"]),
        helper.make_node("Squeeze", ["r10", "sq"], ["s"]),
        helper.make_node("Shape", ["e"], ["shape"]),
    ]
    model = graph_model(nodes, [value_info("x", F, [6, "n"])],
                        [value_info("r3", F, None), value_info("s", F, None),
                         value_info("shape", TensorProto.INT64, None)], opset=18,
                        initializers=[i64("to10", [1, 2, 1, 3, 1, 1, -1, 1, 1, 1]),
                                      i64("big", [2, 1, 2, 1, 1, 1, 1, 1, 1, 1]),
                                      i64("to3", [4, 3, -1]), i64("sq", [0, 2, 4, 5, 7, 8, 9])])
    check_runs(model, [[rand(6, 4)], [rand(6, 1)], [rand(6, 9)]])


@pytest.mark.parametrize("op", ["MatMul", "Mul", "Where"])
def test_batched_ops_with_seven_batch_dims(op):
    if op == "MatMul":
        nodes = [helper.make_node("MatMul", ["a", "b"], ["out"])]
        inputs = [value_info("a", F, [None] * 9), value_info("b", F, [None] * 9)]
        feeds = [[rand(2, 1, 2, 1, 1, 2, 1, 3, 4), rand(1, 3, 1, 1, 2, 1, 1, 4, 5)],
                 [rand(1, 1, 1, 1, 1, 1, 2, 2, 3), rand(1, 1, 1, 1, 1, 1, 1, 3, 2)]]
    elif op == "Mul":
        nodes = [helper.make_node("Mul", ["a", "b"], ["out"])]
        inputs = [value_info("a", F, [None] * 8), value_info("b", F, [None] * 7)]
        feeds = [[rand(2, 1, 3, 1, 2, 1, 2, 1), rand(4, 1, 5, 1, 3, 1, 2)],
                 [rand(1, 2, 1, 2, 1, 2, 1, 2), rand(2, 1, 2, 1, 2, 1, 2)]]
    else:
        nodes = [helper.make_node("Where", ["c", "a", "b"], ["out"])]
        inputs = [value_info("c", TensorProto.BOOL, [None] * 8), value_info("a", F, [None] * 8),
                  value_info("b", F, [None] * 3)]
        feeds = [[RNG.random((2, 1, 2, 1, 2, 1, 2, 1)) > 0.5, rand(1, 2, 1, 2, 1, 2, 1, 3), rand(1, 1, 3)]]
    model = graph_model(nodes, inputs, [value_info("out", F, None)], opset=18)
    check_runs(model, feeds)
