"""Completions per second on a tiny graph (Add of two [1,16] float32 tensors), measured in one run.

Compares, at 1, 16 and 256 requests in flight, on asyncio and uvloop:
  geasync      await session.run_graph_async(...)            (RunGraphAsync -> completion hub -> future)
  sync loop    session.run_graph(...) in a plain loop          (RunGraph, one at a time)
  to_thread    await asyncio.to_thread(session.run_graph, ...) (what users write without geasync)
  native       RunGraphAsync driven from C++, no Python in the loop (the limit)
and the latency of a single awaited run (p50/p99) at 1 in flight.

    python benchmarks/bench_completions.py [--runs 20000] [--repeat 5] [--out benchmarks/results/completions.md]

This is a benchmark, not a test: it prints what it measures; the machine is noisy, so compare ratios from one run.
Every rate is the best of --repeat measurements (as timeit takes the best time), the same for every column; the
columns of a row are measured in turn within each round, so a row's ratios come from the same minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import platform
import sys
import time

import numpy as np

import geasync as ga
from geasync import _lib
from geasync.tensor import prepare_inputs

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "examples" / "models"))


def add_model_bytes() -> bytes:
    """The Add graph, built with onnx.helper (onnx is a benchmark dependency)."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"])], "add",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 16]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 16])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


MODEL = add_model_bytes()
A = np.ones((1, 16), np.float32)
B = np.full((1, 16), 2.0, np.float32)


async def geasync_rate(session: ga.Session, graph_id: int, runs: int, in_flight: int) -> float:
    per_worker = runs // in_flight

    async def worker() -> None:
        for _ in range(per_worker):
            await session.run_graph_async(graph_id, [A, B])

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return per_worker * in_flight / (time.perf_counter() - t0)


async def to_thread_rate(session: ga.Session, graph_id: int, runs: int, in_flight: int) -> float:
    per_worker = runs // in_flight

    async def worker() -> None:
        for _ in range(per_worker):
            await asyncio.to_thread(session.run_graph, graph_id, [A, B])

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return per_worker * in_flight / (time.perf_counter() - t0)


def sync_rate(session: ga.Session, graph_id: int, runs: int) -> float:
    t0 = time.perf_counter()
    for _ in range(runs):
        session.run_graph(graph_id, [A, B])
    return runs / (time.perf_counter() - t0)


def native_rate(session: ga.Session, graph_id: int, runs: int, in_flight: int) -> float:
    descs = prepare_inputs([A, B])
    return runs / _lib.bench_native_run_graph_async(session._handle, graph_id, descs, runs, in_flight)


async def latency(session: ga.Session, graph_id: int, sync_graph_id: int, runs: int) -> tuple[float, float, float]:
    """p50 and p99 (us) of one awaited run_graph_async at 1 in flight, and p50 of a synchronous run_graph, the
    two interleaved run by run so that both see the same machine."""
    samples, sync_samples = [], []
    clock = time.perf_counter
    for _ in range(runs):
        t0 = clock()
        await session.run_graph_async(graph_id, [A, B])
        t1 = clock()
        session.run_graph(sync_graph_id, [A, B])
        sync_samples.append(clock() - t1)
        samples.append(t1 - t0)
    samples.sort()
    sync_samples.sort()
    return (samples[len(samples) // 2] * 1e6, samples[int(len(samples) * 0.99)] * 1e6,
            sync_samples[len(sync_samples) // 2] * 1e6)


async def best_of(repeat: int, *measures) -> list[float]:
    """The highest rate of each measurement over `repeat` rounds, the measurements interleaved within a round:
    noise (other processes, the VM) only ever slows a run down, and it comes in spells of seconds, so the columns
    of a row are measured side by side rather than one after the other."""
    best = [0.0] * len(measures)
    for _ in range(repeat):
        for i, measure_once in enumerate(measures):
            rate = measure_once()
            if asyncio.iscoroutine(rate):
                rate = await rate
            best[i] = max(best[i], rate)
    return best


async def measure(loop_name: str, runs: int, repeat: int) -> list[dict]:
    rows = []
    with ga.Session(max_in_flight=1024) as s:
        ids = iter(range(1, 1000))
        graph = ga.Graph(MODEL)
        g_async, g_sync, g_native = next(ids), next(ids), next(ids)
        for gid in (g_async, g_sync, g_native):
            s.add_graph_clone(gid, graph)
        # warm up: compile, load, start GE's threads and the hub
        for _ in range(200):
            await s.run_graph_async(g_async, [A, B])
            s.run_graph(g_sync, [A, B])
        native_rate(s, g_native, 200, 1)
        for in_flight in (1, 16, 256):
            n = max(runs, in_flight * 20)
            rates = await best_of(repeat,
                                  lambda n=n, in_flight=in_flight: geasync_rate(s, g_async, n, in_flight),
                                  lambda: sync_rate(s, g_sync, runs),
                                  lambda n=n, in_flight=in_flight: to_thread_rate(s, g_sync, n // 4, in_flight),
                                  lambda n=n, in_flight=in_flight: native_rate(s, g_native, n, in_flight))
            rows.append(dict(zip(("geasync", "sync", "to_thread", "native"), rates, strict=True), loop=loop_name,
                             in_flight=in_flight))
        p50, p99, sync_p50 = await latency(s, g_async, g_sync, min(runs, 5000))
        rows[0]["p50_us"], rows[0]["p99_us"], rows[0]["sync_p50_us"] = p50, p99, sync_p50
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=5, help="measurement rounds per row; the best of each counts")
    parser.add_argument("--out", type=pathlib.Path, default=None, help="also write the table (markdown) here")
    args = parser.parse_args()

    loops = [("asyncio", asyncio.new_event_loop)]
    try:
        import uvloop

        loops.append(("uvloop", uvloop.new_event_loop))
    except ImportError:
        print("uvloop not installed: measuring asyncio only")
    rows: list[dict] = []
    for name, factory in loops:
        loop = factory()
        try:
            rows += loop.run_until_complete(measure(name, args.runs, args.repeat))
        finally:
            loop.close()

    lines = [
        f"Completions per second, Add [1,16] float32, {platform.machine()} {platform.python_version()}, "
        f"backend {ga.current_backend()}, {args.runs} runs per cell, best of {args.repeat}",
        "",
        "| loop | in flight | geasync run_graph_async | sync run_graph loop | asyncio.to_thread | native RunGraphAsync "
        "| geasync / to_thread | geasync / sync loop | geasync / native |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['loop']} | {r['in_flight']} | {r['geasync']:,.0f} | {r['sync']:,.0f} | {r['to_thread']:,.0f} | "
            f"{r['native']:,.0f} | {r['geasync'] / r['to_thread']:.2f}x | {r['geasync'] / r['sync']:.2f}x | "
            f"{r['geasync'] / r['native']:.2f}x |")
    lines.append("")
    for r in rows:
        if "p50_us" in r:
            ratio = r["p50_us"] / r["sync_p50_us"]
            lines.append(f"- {r['loop']}: one awaited run_graph_async at 1 in flight: p50 {r['p50_us']:.1f} us, "
                         f"p99 {r['p99_us']:.1f} us; synchronous run_graph p50 {r['sync_p50_us']:.1f} us "
                         f"(interleaved): {ratio:.2f}x (target <= 2.5x: {'met' if ratio <= 2.5 else 'NOT met'})")
    targets = [r for r in rows if r["in_flight"] == 256]
    lines.append("")
    for r in targets:
        lines.append(f"- target at 256 in flight ({r['loop']}): >= 3x to_thread: {r['geasync'] / r['to_thread']:.2f}x "
                     f"({'met' if r['geasync'] >= 3 * r['to_thread'] else 'NOT met'}); >= 0.5x sync loop: "
                     f"{r['geasync'] / r['sync']:.2f}x ({'met' if r['geasync'] >= 0.5 * r['sync'] else 'NOT met'})")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
