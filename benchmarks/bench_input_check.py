"""What the input check costs per request: building a run's input descriptors with and without the check against
the graph's declared inputs (``prepare_inputs``, the step every run takes before the runtime), side by side.

    python benchmarks/bench_input_check.py [--number 20000] [--repeat 30]

Each figure is the best of --repeat timeit rounds of the thread's CPU time, in nanoseconds per request.
This is a benchmark, not a test: it prints what it measures.
"""

from __future__ import annotations

import argparse
import time
import timeit

import numpy as np
from onnx import TensorProto, helper

import geasync as ga
from geasync._inputs import GraphSpec
from geasync.tensor import prepare_inputs


def model(inputs, outputs, nodes) -> ga.Graph:
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "g", [vi(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [vi(n, TensorProto.FLOAT, s) for n, s in outputs])
    return ga.Graph.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


CASES = {
    "2 static inputs [1,16]": (
        model([("a", [1, 16]), ("b", [1, 16])], [("c", [1, 16])], [helper.make_node("Add", ["a", "b"], ["c"])]),
        [np.ones((1, 16), np.float32), np.ones((1, 16), np.float32)]),
    "1 input [N,784], N=8": (
        model([("x", ["N", 784])], [("y", ["N", 784])], [helper.make_node("Relu", ["x"], ["y"])]),
        [np.ones((8, 784), np.float32)]),
    "4 inputs [N,16], N=4": (
        model([(n, ["N", 16]) for n in "abcd"], [("s", ["N", 16])], [helper.make_node("Sum", list("abcd"), ["s"])]),
        [np.ones((4, 16), np.float32) for _ in range(4)]),
}


def interleaved_best_ns(stmts, number: int, repeat: int) -> list[float]:
    """Best ns per call of each statement, the statements timed in turn in every round (a loaded machine slows
    them alike, and the best of many rounds is the least disturbed)."""
    best = [float("inf")] * len(stmts)
    for _ in range(repeat):
        for k, stmt in enumerate(stmts):
            # CPU time of this thread: time spent descheduled on a busy machine is not counted
            best[k] = min(best[k], timeit.timeit(stmt, number=number, timer=time.thread_time) / number * 1e9)
    return best


def added_ops(inputs, spec) -> None:
    """Only what the check adds to prepare_inputs' loop (dtype and shape are read there anyway)."""
    if spec is not None:
        if len(inputs) != spec.count:
            raise AssertionError
        want_dtypes = spec.want_dtypes
        usual_shapes = spec.usual_shapes
        ok_shapes = spec.ok_shapes
    for i, x in enumerate(inputs):
        dt = 0
        shape = x.shape
        if spec is not None and (dt != want_dtypes[i] or (shape != usual_shapes[i] and shape not in ok_shapes[i])):
            raise AssertionError


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    ga.current_backend()
    print("| inputs | unchecked (ns) | checked (ns) | difference (ns) | by name (ns) | check's own work (ns) |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, (graph, inputs) in CASES.items():
        spec = GraphSpec(1, graph.inputs, graph.outputs)
        feeds = dict(zip(spec.names, inputs))
        prepare_inputs(inputs, spec=spec)  # remembers the shape, as the first request of a service would
        plain, checked, named, loop_only, loop_checked = interleaved_best_ns([
            lambda: prepare_inputs(inputs),
            lambda: prepare_inputs(inputs, spec=spec, api="run_graph_async", graph_id=1),
            lambda: prepare_inputs(feeds, spec=spec, api="run_graph_async", graph_id=1),
            lambda: added_ops(inputs, None),
            lambda: added_ops(inputs, spec),
        ], args.number, args.repeat)
        print(f"| {label} | {plain:.0f} | {checked:.0f} | {checked - plain:+.0f} | {named:.0f} | "
              f"{loop_checked - loop_only:.0f} |")
    print("\n'check's own work': the statements the check adds to the loop over the inputs, timed alone; "
          "'difference': the full path with and without the check (noisier); 'by name': a {name: array} feed.")


if __name__ == "__main__":
    main()
