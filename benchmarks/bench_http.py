"""HTTP load benchmark of the example service (examples/http_service) against the same service on onnxruntime.

Three servers, each uvicorn (uvloop when installed) on loopback, serving the example MLP (784-256-10) with raw
float32 bodies:
  geasync            examples/http_service/app.py: geasync with the Batcher
  ort to_thread      onnxruntime's InferenceSession.run through anyio.to_thread (what a service writes today)
  ort blocking       onnxruntime's run called in the handler, blocking the loop
Each server calls ``gc.freeze()`` once started (the example does with ``freeze_gc=True``, as ``python app.py``
runs it), so CPython's full collections skip the objects of its imports and model.
A closed-loop generator (this process, raw HTTP/1.1 keep-alive connections on uvloop) sends batch-1 requests at
1, 16, 64 and 256 connections; a separate connection probes GET /health every 10 ms. Every server is measured in
each round, in turn, so drift over rounds shows per server; ``--cancel`` makes that fraction of requests close
their connection before the answer (a client that gives up), as in the drift seen over repeated rounds.

    python benchmarks/bench_http.py [--seconds 2] [--rounds 2] [--concurrency 1,16,64,256] [--cancel 0.0]
                                    [--servers geasync,ort-thread,ort-blocking] [--out benchmarks/results/http.md]

Loopback only; each measurement is bounded by --seconds. The load generator shares the machine's cores with the
server, so compare columns measured in the same round.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import pathlib
import platform
import random
import socket
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODEL = ROOT / "examples" / "models" / "mlp.onnx"
SERVERS = ("geasync", "ort-thread", "ort-blocking")


# --- servers (run in a child process: bench_http.py --serve KIND --port N) ---

def ort_app(blocking: bool):
    import anyio
    import numpy as np
    import onnxruntime as ort
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # one core per run, as geasync's twin runs a graph
    session = ort.InferenceSession(str(MODEL), options, providers=["CPUExecutionProvider"])

    def run(x):
        return session.run(None, {"x": x})[0]

    async def predict(request):
        x = np.frombuffer(await request.body(), np.float32).reshape(-1, 784)
        probs = run(x) if blocking else await anyio.to_thread.run_sync(run, x)
        return Response(probs.tobytes(), media_type="application/octet-stream",
                        headers={"x-shape": ",".join(map(str, probs.shape))})

    async def health(request):
        return JSONResponse({"status": "ok"})

    async def stats(request):
        return JSONResponse({})

    return Starlette(routes=[Route("/predict", predict, methods=["POST"]), Route("/health", health),
                             Route("/stats", stats)])


def serve(kind: str, port: int) -> None:
    import uvicorn

    if kind == "geasync":
        sys.path.insert(0, str(ROOT / "examples" / "http_service"))
        from app import create_app

        app = create_app(MODEL, freeze_gc=True)  # as `python app.py` serves it
    else:
        app = ort_app(blocking=kind == "ort-blocking")
        gc.collect()  # the same for the onnxruntime servers: what exists now is exempt from full collections
        gc.freeze()
    try:
        import uvloop  # noqa: F401

        loop = "uvloop"
    except ImportError:
        loop = "asyncio"
    uvicorn.run(app, host="127.0.0.1", port=port, loop=loop, log_level="error", access_log=False)


def start_server(kind: str) -> tuple[subprocess.Popen, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, __file__, "--serve", kind, "--port", str(port)])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, port
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"server {kind} exited with {proc.returncode}") from None
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"server {kind} did not start")


# --- load generator ---

class Conn:
    """One keep-alive HTTP/1.1 connection."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def ensure(self) -> None:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def request(self, raw: bytes) -> int:
        await self.ensure()
        assert self.reader is not None and self.writer is not None
        self.writer.write(raw)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        if length:
            await self.reader.readexactly(length)
        return status


def predict_request(body: bytes) -> bytes:
    return (b"POST /predict HTTP/1.1\r\nhost: bench\r\ncontent-type: application/octet-stream\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


HEALTH = b"GET /health HTTP/1.1\r\nhost: bench\r\n\r\n"


async def load(port: int, connections: int, seconds: float, cancel: float, seed: int) -> dict:
    import numpy as np

    body = np.random.default_rng(seed).random((1, 784), dtype=np.float32).tobytes()
    raw = predict_request(body)
    rng = random.Random(seed)
    latencies: list[float] = []
    probes: list[float] = []
    errors = {"non200": 0, "cancelled": 0}
    clock = time.perf_counter
    stop = clock() + seconds

    async def client() -> None:
        conn = Conn(port)
        try:
            while clock() < stop:
                if cancel and rng.random() < cancel:  # give up mid-request: send, then hang up
                    await conn.ensure()
                    assert conn.writer is not None
                    conn.writer.write(raw)
                    await conn.writer.drain()
                    await asyncio.sleep(0.001)
                    conn.close()
                    errors["cancelled"] += 1
                    continue
                t0 = clock()
                status = await conn.request(raw)
                if status != 200:
                    errors["non200"] += 1
                latencies.append(clock() - t0)
        finally:
            conn.close()

    async def prober() -> None:
        conn = Conn(port)
        try:
            while clock() < stop:
                t0 = clock()
                await conn.request(HEALTH)
                probes.append(clock() - t0)
                await asyncio.sleep(0.01)
        finally:
            conn.close()

    t0 = clock()
    await asyncio.wait_for(asyncio.gather(prober(), *(client() for _ in range(connections))), seconds + 60)
    elapsed = clock() - t0
    latencies.sort()
    probes.sort()
    n = len(latencies)
    pct = lambda xs, q: xs[min(len(xs) - 1, int(len(xs) * q))] if xs else float("nan")  # noqa: E731
    return {"rps": n / elapsed, "p50": pct(latencies, 0.5), "p99": pct(latencies, 0.99),
            "health_p99": pct(probes, 0.99), **errors}


async def fetch_stats(port: int) -> dict:
    conn = Conn(port)
    try:
        await conn.ensure()
        assert conn.writer is not None and conn.reader is not None
        conn.writer.write(b"GET /stats HTTP/1.1\r\nhost: bench\r\n\r\n")
        head = await conn.reader.readuntil(b"\r\n\r\n")
        length = int([ln for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length:")][0][15:])
        return json.loads(await conn.reader.readexactly(length))
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", default="1,16,64,256")
    parser.add_argument("--cancel", type=float, default=0.0, help="fraction of requests whose client hangs up")
    parser.add_argument("--servers", default=",".join(SERVERS))
    parser.add_argument("--out", type=pathlib.Path, default=None)
    parser.add_argument("--serve", choices=SERVERS, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port)
        return
    try:
        import uvloop

        new_loop = uvloop.new_event_loop
    except ImportError:
        new_loop = asyncio.new_event_loop
    kinds = [k for k in args.servers.split(",") if k]
    levels = [int(c) for c in args.concurrency.split(",")]
    servers = {k: start_server(k) for k in kinds}
    loop = new_loop()
    results: dict = {}
    lines = [f"HTTP service benchmark, {platform.machine()} Python {platform.python_version()}, {os.cpu_count()} "
             f"CPUs, load average {os.getloadavg()[0]:.1f} at start, {args.seconds} s per cell, {args.rounds} rounds, "
             f"cancel fraction {args.cancel}, gc.freeze() after startup on every server", "",
             "| round | connections | server | req/s | p50 | p99 | health p99 | non-200 | hung up |",
             "|---|---|---|---|---|---|---|---|---|"]
    try:
        for rnd in range(1, args.rounds + 1):
            for c in levels:
                for kind in kinds:
                    r = loop.run_until_complete(load(servers[kind][1], c, args.seconds, args.cancel, rnd))
                    results.setdefault((c, kind), []).append(r)
                    lines.append(f"| {rnd} | {c} | {kind} | {r['rps']:,.0f} | {r['p50'] * 1e3:.2f} ms | "
                                 f"{r['p99'] * 1e3:.2f} ms | {r['health_p99'] * 1e3:.2f} ms | {r['non200']} | "
                                 f"{r['cancelled']} |")
                    print(lines[-1], flush=True)
        if "geasync" in servers:
            stats = loop.run_until_complete(fetch_stats(servers["geasync"][1]))
            s, b = stats["session"], stats["batcher"]
            mean_batch = b["batch_size"]["sum"] / max(b["batch_size"]["count"], 1)
            lines += ["", f"- geasync server at the end: session submitted {s['submitted']}, "
                      f"completed {s['completed']}, cancelled {s['cancelled']}, in flight {s['in_flight']}, "
                      f"abandoned {s['abandoned']}; batcher batches {b['batches']}, mean batch {mean_batch:.1f}"
                      f" rows, cancelled {b['cancelled']}; disconnects seen {stats['disconnects']}"]
    finally:
        loop.close()
        for proc, _ in servers.values():
            proc.terminate()
        for proc, _ in servers.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
    lines.append("")
    for c in levels:
        best = {k: max(r["rps"] for r in results[(c, k)]) for k in kinds}
        if "geasync" in best:
            ratios = ", ".join(f"{best['geasync'] / best[k]:.2f}x {k}" for k in kinds if k != "geasync")
            lines.append(f"- {c} connections, best round: geasync {best['geasync']:,.0f} req/s ({ratios})")
    lines.append(f"- load average at the end: {os.getloadavg()[0]:.1f}")
    text = "\n".join(lines)
    print("\n".join(lines[-len(levels) - 3:]))
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
