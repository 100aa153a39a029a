#!/usr/bin/env python3
"""Soak: many async and stream runs with injected faults on asyncio, uvloop and trio; says whether anything grows.

Per loop, ``--runs`` RunGraphAsync requests (batches of ``--concurrency``, some cancelled by a timeout, every
``--fail-every``-th failing with an injected GE status, some delayed) and stream-mode runs on one Stream, with
periodic synchronize / synchronize_async. Samples RSS, open fds and threads as it goes and prints, per loop:
the RSS slope (KiB per 10k runs, least squares over the second half, after warm-up), fd and thread counts at the
start and end, the native live counters against the start, and whether the session's statistics add up
(completed + failed + cancelled == submitted, nothing in flight or pinned at the end).

    python benchmarks/soak.py                  # 1,000,000 runs per loop (long)
    python benchmarks/soak.py --runs 20000     # a quick check
Exit status 1 if a check fails (growth above --max-slope-kib, counters or fds not back, statistics off).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import threading
import time

import numpy as np

import geasync as ga

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))


def add_model():
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["c"])], "soak",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 16]) for n in "ab"],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 16])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def slope_per_10k(samples: list[tuple[int, int]]) -> float:
    """KiB of RSS per 10k runs, least squares over the second half of the samples."""
    tail = samples[len(samples) // 2:]
    if len(tail) < 2:
        return 0.0
    x = np.array([s[0] for s in tail], float)
    y = np.array([s[1] for s in tail], float)
    return float(np.polyfit(x, y, 1)[0] * 10_000)


async def soak_loop(args, session: ga.Session, stream: ga.Stream, submitted: list[int], samples: list) -> None:
    import anyio

    a = np.ones((1, 16), np.float32)
    done = 0
    next_sample = 0
    while done < args.runs:
        n = min(args.concurrency, args.runs - done)
        arm_faults(session, n, args.fail_every)

        async def one(k: int) -> None:
            try:
                timeout = 0.0005 if k % 97 == 0 else None  # some callers give up (cancellation)
                await session.run_graph_async(1, [a, a], timeout=timeout)
            except (ga.GeError, TimeoutError):
                pass

        async with anyio.create_task_group() as tg:
            for k in range(n):
                tg.start_soon(one, done + k)
        submitted[0] += n
        # stream mode on graph 2 (its own run mode), a few per batch, synchronised on the loop
        for _ in range(max(1, n // 16)):
            try:
                session.run_graph_with_stream_async(2, stream, [a, a])
            except ga.GeError:
                pass
        await stream.synchronize_async()
        done += n
        if done >= next_sample:
            samples.append((done, rss_kib()))
            next_sample += max(args.runs // 200, args.concurrency)


def settled() -> dict:
    """fds, threads and live counters once what a closed loop left behind has been reaped."""
    deadline = time.monotonic() + 5
    while True:
        gc.collect()
        counters = ga.live_counters()  # reaps orphaned hubs first
        if counters.get("pending_completions", 0) == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    time.sleep(0.3)  # the reaper closes an orphan's queue after its last completion
    gc.collect()
    return {"fds": fds(), "threads": threading.active_count(), "counters": ga.live_counters()}


def run_backend(name: str, args) -> dict:
    import anyio

    start = settled()
    stream = ga.Stream()
    session = ga.Session()
    model = add_model()
    session.add_graph(1, ga.Graph.from_onnx(model))
    session.add_graph(2, ga.Graph.from_onnx(model))
    submitted = [0]
    samples: list[tuple[int, int]] = []
    t0 = time.perf_counter()
    backend, options = {"asyncio": ("asyncio", {}), "uvloop": ("asyncio", {"use_uvloop": True}),
                        "trio": ("trio", {})}[name]
    anyio.run(soak_loop, args, session, stream, submitted, samples, backend=backend, backend_options=options)
    elapsed = time.perf_counter() - t0
    stats = session.statistics()
    for gid in (1, 2):
        ga.twin.clear_faults(session, gid)
    # GE keeps a stream's allocator until it is unregistered (process-wide, keyed by stream): not a soak leak
    session.unregister_external_allocator(stream)
    session.close()
    stream.close()
    end = settled()
    moved = {k: (start["counters"][k], end["counters"][k]) for k in start["counters"]
             if end["counters"][k] != start["counters"][k]}
    consistent = (stats.completed + stats.failed + stats.cancelled == submitted[0] and stats.in_flight == 0
                  and stats.pinned_bytes == 0 and stats.waiting == 0)
    return {"loop": name, "runs": submitted[0], "seconds": elapsed, "slope_kib_per_10k": slope_per_10k(samples),
            "rss_start_kib": samples[0][1] if samples else 0, "rss_end_kib": samples[-1][1] if samples else 0,
            "fds": (start["fds"], end["fds"]), "threads": (start["threads"], end["threads"]),
            "counters_moved": moved, "stats": stats, "stats_consistent": consistent}


def arm_faults(session: ga.Session, n: int, fail_every: int) -> None:
    """Faults for the next batch (fault positions count from arming, so they are re-armed per batch): every
    fail_every-th async run fails, one is delayed; one stream run fails to allocate its outputs."""
    for gid in (1, 2):
        ga.twin.clear_faults(session, gid)
    for k in range(1, n // fail_every + 1):
        ga.twin.inject_fault(session, 1, "fail_run", nth=k * fail_every)
    ga.twin.inject_fault(session, 1, "delay_run", nth=max(1, n // 2), delay=0.001)
    ga.twin.inject_fault(session, 2, "fail_alloc", nth=1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1_000_000, help="async runs per loop")
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--fail-every", type=int, default=50)
    parser.add_argument("--loops", default="asyncio,uvloop,trio")
    parser.add_argument("--max-slope-kib", type=float, default=64.0,
                        help="RSS growth per 10k runs (second half) above which the soak fails")
    args = parser.parse_args()
    ok = True
    warm = argparse.Namespace(**{**vars(args), "runs": min(args.runs, 2000)})
    for name in args.loops.split(","):  # warm-up: one-time allocations (hubs' queues, the reaper, caches)
        run_backend(name, warm)
    for name in args.loops.split(","):
        r = run_backend(name, args)
        s = r["stats"]
        print(f"{name:8s} {r['runs']} runs in {r['seconds']:.1f} s ({r['runs'] / r['seconds']:.0f}/s): "
              f"RSS {r['rss_start_kib'] // 1024} -> {r['rss_end_kib'] // 1024} MiB, slope "
              f"{r['slope_kib_per_10k']:+.1f} KiB/10k runs; fds {r['fds'][0]} -> {r['fds'][1]}; threads "
              f"{r['threads'][0]} -> {r['threads'][1]}; live counters moved: {r['counters_moved'] or 'none'}; "
              f"statistics completed={s.completed} failed={s.failed} cancelled={s.cancelled} in_flight={s.in_flight} "
              f"pinned={s.pinned_bytes} -> {'consistent' if r['stats_consistent'] else 'INCONSISTENT'}")
        ok = ok and r["slope_kib_per_10k"] <= args.max_slope_kib and not r["counters_moved"] and \
            r["fds"][1] <= r["fds"][0] and r["stats_consistent"]
    print("soak:", "no growth" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
