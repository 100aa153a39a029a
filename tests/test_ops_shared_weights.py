"""A graph with dynamic dims gets a plan per input shape (a decoder: one per prompt length and per past length).
What the twin derives from a weight when it builds a plan (MatMul / Gemm panels, Conv's packed blocks and Winograd
filter, float16 weights widened to float32) is shared by all of the graph's plans: a new shape neither packs the
weights again nor holds another copy of them. Checked by memory (the process's resident set) and by results, across
more shapes than the plan cache keeps, so plans are dropped while others still share their weights."""

from __future__ import annotations

import os

import numpy as np
import pytest

import geasync as ga
from conftest import TensorProto, helper, make_model

F = TensorProto.FLOAT


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def mlp(d: int, h: int, dtype=np.float32):
    """x [B, T, d] -> MatMul [d, h] -> Relu -> MatMul [h, d]: two weights of d * h elements."""
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((d, h)) / np.sqrt(d)).astype(dtype)
    w2 = (rng.standard_normal((h, d)) / np.sqrt(h)).astype(dtype)
    t = TensorProto.FLOAT16 if dtype == np.float16 else F
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    model = make_model(nodes, [("x", t, ["B", "T", d])], [("y", t, ["B", "T", d])],
                       initializers=[("w1", w1), ("w2", w2)], opset=17)
    return model, w1, w2


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads /proc/self/statm")
def test_new_shapes_do_not_copy_the_weights():
    d, h = 1024, 4096  # 32 MB of float32 weights
    model, w1, w2 = mlp(d, h)
    weights = w1.nbytes + w2.nbytes
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((1, t, d)).astype(np.float32) for t in range(9, 34)]
    wants = [(np.maximum(x.astype(np.float64) @ w1, 0) @ w2).astype(np.float32) for x in xs]
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        s.run_graph(1, [xs[0]])  # the first plan packs the weights (9 rows: the panel kernel)
        before = rss_bytes()
        for x, want in zip(xs[1:], wants[1:], strict=True):  # 24 new row counts, more than the plan cache holds
            (y,) = s.run_graph(1, [x])
            np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)
            del y
        grown = rss_bytes() - before
    # With a pack per plan it grew by 16 plans x 32 MB; shared, by the plans' arenas (and, under AddressSanitizer,
    # the freed blocks it holds back)
    assert grown < 3 * weights, f"grew by {grown / 2**20:.0f} MB over 24 shapes ({weights / 2**20:.0f} MB of weights)"


def test_float16_weights_widened_once_and_results_right_at_every_shape():
    model, w1, w2 = mlp(64, 128, np.float16)
    rng = np.random.default_rng(2)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        for t in [1, 7, 40, 7, 3, 100, 1, 40] + list(range(8, 30)):
            x = rng.standard_normal((2, t, 64)).astype(np.float16)
            (y,) = s.run_graph(1, [x])
            # the twin computes float16 MatMul in float32 and rounds each output (Relu in float16)
            hid = (x.astype(np.float32) @ w1.astype(np.float32)).astype(np.float16)
            want = (np.maximum(hid, 0).astype(np.float32) @ w2.astype(np.float32)).astype(np.float16)
            np.testing.assert_allclose(y.numpy().astype(np.float32), want.astype(np.float32), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("kernel,group", [(3, 1), (1, 1), (3, 8), (5, 32)])
def test_conv_weights_shared_across_batch_and_map_sizes(kernel, group):
    """Conv with constant weights at many input sizes (Winograd at 3x3, the direct kernel's blocks, depthwise taps),
    plans dropped and rebuilt while others share their weights: every result as onnx.reference computes it."""
    from onnx.reference import ReferenceEvaluator

    c = 32
    rng = np.random.default_rng(3)
    w = rng.standard_normal((c, c // group, kernel, kernel)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[kernel // 2] * 4, group=group)
    model = make_model([node], [("x", F, ["N", c, "H", "W"])], [("y", F, ["N", c, "H", "W"])],
                       initializers=[("w", w), ("b", b)], opset=17)
    ref = ReferenceEvaluator(model)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        sizes = [(1, 8, 8), (2, 8, 8), (1, 16, 12), (3, 5, 9)] + [(1, n, n) for n in range(4, 21)] + [(2, 8, 8)]
        for n, hh, ww in sizes:
            x = rng.standard_normal((n, c, hh, ww)).astype(np.float32)
            (y,) = s.run_graph(1, [x])
            (want,) = ref.run(None, {"x": x})
            np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4, err_msg=f"x {x.shape}")


def test_weights_of_a_removed_graph_are_not_reused_by_a_new_one():
    """A new graph whose weights land where a removed graph's were gets its own packs (sharing follows the
    constants' lifetime, not just their address)."""
    rng = np.random.default_rng(4)
    with ga.Session() as s:
        for gid in range(6):
            w = rng.standard_normal((96, 160)).astype(np.float32)
            model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", F, ["M", 96])],
                               [("y", F, ["M", 160])], initializers=[("w", w)], opset=17)
            s.add_graph(gid, ga.Graph.from_onnx(model))
            for m in (12, 40):
                x = rng.standard_normal((m, 96)).astype(np.float32)
                (y,) = s.run_graph(gid, [x])
                np.testing.assert_allclose(y.numpy(), x @ w, rtol=1e-4, atol=1e-4)
                del y
            s.remove_graph(gid)


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads /proc/self/statm")
def test_a_dequantised_weight_is_folded_once_for_every_shape():
    """A QDQ model's weight (DequantizeLinear of an int8 initializer) is folded to float32 when a plan is built; the
    plans of other shapes share that copy (and its packed panels) instead of folding it again."""
    k, n = 1024, 4096  # 16 MB once dequantised
    rng = np.random.default_rng(5)
    wq = rng.integers(-127, 128, (k, n), dtype=np.int8)
    scale = np.float32(0.01)
    nodes = [helper.make_node("DequantizeLinear", ["wq", "ws"], ["w"]), helper.make_node("MatMul", ["x", "w"], ["y"])]
    model = make_model(nodes, [("x", F, ["M", k])], [("y", F, ["M", n])],
                       initializers=[("wq", wq), ("ws", np.array(scale, np.float32))], opset=21)
    w = wq.astype(np.float32) * scale
    xs = [rng.standard_normal((m, k)).astype(np.float32) for m in range(9, 34)]
    wants = [(x.astype(np.float64) @ w).astype(np.float32) for x in xs]
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        s.run_graph(1, [xs[0]])
        before = rss_bytes()
        for x, want in zip(xs[1:], wants[1:], strict=True):
            (y,) = s.run_graph(1, [x])
            np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-3)
            del y
        grown = rss_bytes() - before
    folded = k * n * 4
    assert grown < 2 * folded, f"grew by {grown / 2**20:.0f} MB over 24 shapes ({folded / 2**20:.0f} MB folded weight)"


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads /proc/self/statm")
def test_integer_weights_packed_once_for_every_shape():
    """quantize_dynamic's pattern: MatMulInteger of the activations by a constant int8 weight, at every sequence
    length; the packed weight is shared by the plans, and every product is exact."""
    k, n = 1024, 4096  # 4 MB of int8, 8 MB packed as int16 (a copy per plan: 24 x 8 MB)
    rng = np.random.default_rng(6)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    nodes = [helper.make_node("MatMulInteger", ["a", "b", "az"], ["y"])]
    model = make_model(nodes, [("a", TensorProto.UINT8, ["M", k]), ("az", TensorProto.UINT8, [])],
                       [("y", TensorProto.INT32, ["M", n])], initializers=[("b", b)], opset=17)
    az = np.array(128, np.uint8)
    xs = [rng.integers(0, 256, (m, k), dtype=np.uint8) for m in range(1, 26)]
    wants = [(x.astype(np.int64) - 128) @ b.astype(np.int64) for x in xs]
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        s.run_graph(1, [xs[0], az])
        before = rss_bytes()
        for x, want in zip(xs[1:], wants[1:], strict=True):
            (y,) = s.run_graph(1, [x, az])
            np.testing.assert_array_equal(y.numpy(), want)
            del y
        grown = rss_bytes() - before
    assert grown < 8 * b.nbytes, f"grew by {grown / 2**20:.0f} MB over 24 shapes ({b.nbytes / 2**20:.0f} MB weight)"


def test_integer_conv_weights_shared_across_sizes():
    """ConvInteger with a constant weight and zero point at many input sizes: exact at each (plans share the
    packed weight)."""
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(7)
    w = rng.integers(-128, 128, (16, 8, 3, 3), dtype=np.int8)
    wz = np.array(3, np.int8)
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], pads=[1, 1, 1, 1])
    model = make_model([node], [("x", TensorProto.UINT8, ["N", 8, "H", "W"])], [("y", TensorProto.INT32, None)],
                       initializers=[("w", w), ("xz", np.array(100, np.uint8)), ("wz", wz)], opset=17)
    ref = ReferenceEvaluator(model)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        for nb, hh, ww in [(1, 5, 5), (2, 7, 6), (1, 12, 12), (3, 4, 9)] + [(1, m, m) for m in range(3, 21)]:
            x = rng.integers(0, 256, (nb, 8, hh, ww), dtype=np.uint8)
            (y,) = s.run_graph(1, [x])
            np.testing.assert_array_equal(y.numpy(), ref.run(None, {"x": x})[0], err_msg=f"x {x.shape}")
