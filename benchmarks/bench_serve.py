"""geasync through Ray Serve vs geasync in one process: throughput and latency of the MLP (784-256-10, batch 1
per request) at a fixed number of concurrent callers.

Rows (all in one run, on one machine, a local Ray cluster on loopback):
  in-process     one Session + geasync.Batcher, the callers in the same event loop (no Serve)
  serve 1 / 2    geasync.serve.GeasyncModel with 1 or 2 replicas, called through a DeploymentHandle
  serve.batch    1 replica batching with Ray Serve's @serve.batch instead of geasync's Batcher
  http 1 / 2     the same deployments over HTTP (httpx, keep-alive connections)

Each cell is the best of --rounds closed-loop rounds of --seconds each. The load generator runs in this process
and shares the machine's cores with the replicas: on a 2-core machine two replicas compete with it (and with
Serve's proxy and controller), so the 2-replica row shows Serve's overhead more than its scaling; see
docs/scaling.md for what to expect with one replica per NPU.

    python benchmarks/bench_serve.py [--concurrency 64] [--seconds 3] [--rounds 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import platform
import socket
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
MLP = ROOT / "examples" / "models" / "mlp.onnx"


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


async def _closed_loop(call, concurrency: int, seconds: float) -> tuple[float, list[float]]:
    """Requests/s and per-request latencies (s) of ``concurrency`` callers each calling ``call()`` in a loop."""
    latencies: list[float] = []
    stop = time.perf_counter() + seconds

    async def caller():
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            await call()
            latencies.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return len(latencies) / (time.perf_counter() - t0), latencies


def _best(rounds: list[tuple[float, list[float]]]) -> tuple[float, float, float]:
    rate, lat = max(rounds, key=lambda r: r[0])
    return rate, _percentile(lat, 50) * 1e3, _percentile(lat, 99) * 1e3


async def _in_process(x: np.ndarray, args) -> tuple[float, float, float]:
    import geasync as ga

    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(MLP))
        batcher = ga.Batcher(s, 1, max_batch_size=args.max_batch_size, max_delay=args.max_delay)
        rounds = [await _closed_loop(lambda: batcher.run([x]), args.concurrency, args.seconds)
                  for _ in range(args.rounds)]
        await batcher.aclose()
    return _best(rounds)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-batch-size", type=int, default=32)
    p.add_argument("--max-delay", type=float, default=0.002)
    p.add_argument("--out", type=pathlib.Path, default=None, help="write the markdown results here")
    args = p.parse_args()

    import httpx
    import ray
    from ray import serve

    from geasync.serve import GeasyncModel

    x = np.random.default_rng(0).random((1, 784), dtype=np.float32)
    rows: list[tuple[str, float, float, float]] = []

    def record(name: str, result: tuple[float, float, float]) -> None:
        rows.append((name, *result))
        print(f"{name:<22} {result[0]:>10,.0f} req/s   p50 {result[1]:7.2f} ms   p99 {result[2]:7.2f} ms", flush=True)

    record("in-process (Batcher)", asyncio.run(_in_process(x, args)))

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})

    @serve.deployment(max_ongoing_requests=1024)
    class ServeBatched:
        """One replica batching with Serve's own @serve.batch, for comparison."""

        def __init__(self, model: bytes, max_batch_size: int, max_delay: float) -> None:
            import geasync as ga

            self.session = ga.Session()
            self.session.add_graph(1, ga.Graph.from_onnx(model))
            self.session.compile_graph(1)  # from the model's symbolic batch dim: every batch size runs
            self.infer_batch.set_max_batch_size(max_batch_size)
            self.infer_batch.set_batch_wait_timeout_s(max_delay)

        @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.002)
        async def infer_batch(self, xs: list[np.ndarray]) -> list[list[np.ndarray]]:
            sizes = [len(a) for a in xs]
            (y,) = await self.session.run_graph_async(1, [np.concatenate(xs)])
            ys = np.split(y.numpy(), np.cumsum(sizes)[:-1])
            return [[part.copy()] for part in ys]

        async def infer(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
            return await self.infer_batch(inputs[0])

    model = MLP.read_bytes()
    try:
        for replicas in (1, 2):
            name = f"mlp{replicas}"
            app = GeasyncModel.options(num_replicas=replicas, ray_actor_options={"num_cpus": 0.5}).bind(
                model, max_batch_size=args.max_batch_size, max_delay=args.max_delay)
            handle = serve.run(app, name=name, route_prefix=f"/{name}")

            async def via_handle(handle=handle):
                return [await _closed_loop(lambda: handle.infer.remote([x]), args.concurrency, args.seconds)
                        for _ in range(args.rounds)]

            record(f"serve, {replicas} replica{'s' if replicas > 1 else ''}", _best(asyncio.run(via_handle())))

            async def via_http(name=name):
                limits = httpx.Limits(max_connections=args.concurrency, max_keepalive_connections=args.concurrency)
                async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=60) as c:
                    body, headers = x.tobytes(), {"content-type": "application/octet-stream", "x-shape": "1,784"}
                    return [await _closed_loop(lambda: c.post(f"/{name}", content=body, headers=headers),
                                               args.concurrency, args.seconds) for _ in range(args.rounds)]

            record(f"http, {replicas} replica{'s' if replicas > 1 else ''}", _best(asyncio.run(via_http())))
            serve.delete(name)

        handle = serve.run(ServeBatched.options(ray_actor_options={"num_cpus": 0.5}).bind(
            model, args.max_batch_size, args.max_delay), name="servebatch", route_prefix="/servebatch")

        async def serve_batch():
            return [await _closed_loop(lambda: handle.infer.remote([x]), args.concurrency, args.seconds)
                    for _ in range(args.rounds)]

        record("serve.batch, 1 replica", _best(asyncio.run(serve_batch())))
    finally:
        serve.shutdown()
        ray.shutdown()

    base = rows[0][1]
    lines = [
        "# geasync on Ray Serve vs in one process",
        "",
        f"`python benchmarks/bench_serve.py --concurrency {args.concurrency} --seconds {args.seconds} "
        f"--rounds {args.rounds}`: MLP 784-256-10, batch-1 requests, {args.concurrency} concurrent callers, "
        f"max_batch_size {args.max_batch_size}, max_delay {args.max_delay * 1e3:g} ms, best of {args.rounds} "
        f"rounds. {platform.machine()}, {len(os.sched_getaffinity(0))} cores, Python "
        f"{sys.version.split()[0]}, a local Ray cluster with num_cpus=2 on loopback; the load generator shares "
        "the cores with the replicas.",
        "",
        "| path | req/s | p50 (ms) | p99 (ms) | vs in-process |",
        "|---|---:|---:|---:|---:|",
        *[f"| {n} | {r:,.0f} | {p50:.2f} | {p99:.2f} | {r / base:.2f}x |" for n, r, p50, p99 in rows],
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
