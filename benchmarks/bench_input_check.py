"""What the input check costs per request: building a run's input descriptors with and without the check against
the graph's declared inputs (``prepare_inputs``, the step every run takes before the runtime), side by side.

    python benchmarks/bench_input_check.py [--number 20000] [--repeat 30] [--throughput-rounds 12]

With --throughput-rounds N, also the completions benchmark's 256-in-flight run_graph_async throughput on asyncio and
uvloop with and without the check (the same session, its graph's input spec dropped for the unchecked rounds; rounds
alternate, the best of N counts), and the process CPU time per request.

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


async def throughput(rounds: int, runs: int) -> tuple[dict, dict]:
    import pathlib
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    import bench_completions as bc

    async with ga.Session() as s:
        s.add_graph(1, ga.Graph(bc.MODEL))
        spec = s._specs[1]  # the graph's input spec: present = checked (benchmark-only access)
        await bc.geasync_rate(s, 1, 2048, 256)
        rate = {"checked": 0.0, "unchecked": 0.0}
        cpu = {"checked": float("inf"), "unchecked": float("inf")}
        for r in range(rounds):
            for label in ("checked", "unchecked") if r % 2 == 0 else ("unchecked", "checked"):
                if label == "checked":
                    s._specs[1] = spec
                else:
                    s._specs.pop(1, None)
                c0, t0 = time.process_time(), time.perf_counter()
                await bc.geasync_rate(s, 1, runs, 256)
                rate[label] = max(rate[label], runs / (time.perf_counter() - t0))
                cpu[label] = min(cpu[label], (time.process_time() - c0) / runs * 1e6)
        s._specs[1] = spec
        return rate, cpu


def print_throughput(rounds: int) -> None:
    import asyncio

    import uvloop

    print(f"\n256 in flight, best of {rounds} alternating rounds:\n")
    print("| loop | checked (runs/s) | unchecked (runs/s) | checked / unchecked "
          "| CPU per run checked / unchecked (us) |")
    print("|---|---:|---:|---:|---:|")
    for name, run in (("asyncio", asyncio.run), ("uvloop", uvloop.run)):
        rate, cpu = run(throughput(rounds, 4096))
        print(f"| {name} | {rate['checked']:,.0f} | {rate['unchecked']:,.0f} | "
              f"{rate['checked'] / rate['unchecked']:.2f}x | {cpu['checked']:.1f} / {cpu['unchecked']:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--throughput-rounds", type=int, default=0)
    args = parser.parse_args()
    ga.current_backend()
    print("| inputs | unchecked (ns) | checked (ns) | difference (ns) | by name (ns) | check's own work (ns) |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, (graph, inputs) in CASES.items():
        spec = GraphSpec(1, graph.inputs, graph.outputs)
        feeds = dict(zip(spec.names, inputs, strict=True))
        prepare_inputs(inputs, spec=spec)  # remembers the shape, as the first request of a service would
        plain, checked, named, loop_only, loop_checked = interleaved_best_ns([
            lambda inputs=inputs: prepare_inputs(inputs),
            lambda inputs=inputs, spec=spec: prepare_inputs(inputs, spec=spec, api="run_graph_async", graph_id=1),
            lambda feeds=feeds, spec=spec: prepare_inputs(feeds, spec=spec, api="run_graph_async", graph_id=1),
            lambda inputs=inputs: added_ops(inputs, None),
            lambda inputs=inputs, spec=spec: added_ops(inputs, spec),
        ], args.number, args.repeat)
        print(f"| {label} | {plain:.0f} | {checked:.0f} | {checked - plain:+.0f} | {named:.0f} | "
              f"{loop_checked - loop_only:.0f} |")
    print("\n'check's own work': the statements the check adds to the loop over the inputs, timed alone; "
          "'difference': the full path with and without the check (noisier); 'by name': a {name: array} feed.")
    if args.throughput_rounds:
        print_throughput(args.throughput_rounds)


if __name__ == "__main__":
    main()
