"""Twin vs onnxruntime on a KV-cache decode loop: a GPT-style decoder step (tests/test_decode_loop.py's builder)
called as a generation loop calls it, each step's present keys / values fed back as the next step's past, so every
call has a new past length. Several sequences in a row, as a service decodes request after request: the first meets
every length for the first time (the twin compiles a plan per new shape), the later ones meet them again.

    pip install ".[bench]"          # onnxruntime is a benchmark-only dependency
    python benchmarks/bench_decode.py [--layers 4] [--d-model 256] [--out benchmarks/results/decode.md]

Both runtimes at one thread (GEASYNC_BLAS_THREADS default 1; onnxruntime intra_op_num_threads=1, its default
graph optimisations), driven by one synchronous call per step from Python with numpy arrays in and out (twin:
Session.run_graph and .numpy(); onnxruntime: InferenceSession.run). Per-step time is the median over a sequence's
steps; the same loop runs on both, interleaved sequence by sequence. The ratio is twin / onnxruntime (lower is
better). Also printed: the twin's process memory growth over the run (its plans share the weights).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import statistics
import sys
import time

import numpy as np

import geasync as ga

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from test_decode_loop import make_kv_decoder, next_inputs, start  # noqa: E402


def rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096 / 2**20
    except OSError:
        return float("nan")


def decode(run, model, batch: int, prompt: int, tokens: int, seed: int) -> list[float]:
    """Runs one sequence of `tokens` steps from a cache of `prompt` positions; returns each step's seconds."""
    feeds = start(model, batch, prompt, seed=seed)
    times = []
    for step in range(tokens):
        t0 = time.perf_counter()
        outs = run(feeds)
        times.append(time.perf_counter() - t0)
        feeds = next_inputs(feeds, outs, seed=seed * 1000 + step)
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=16, help="past length of the first step")
    ap.add_argument("--tokens", type=int, default=48, help="steps per sequence")
    ap.add_argument("--sequences", type=int, default=4, help="sequences in a row (the first meets every length first)")
    ap.add_argument("--out", type=pathlib.Path, default=None, help="also write the table (markdown) here")
    args = ap.parse_args()

    import onnxruntime as ort

    model = make_kv_decoder(layers=args.layers, d_model=args.d_model, heads=args.heads)
    blob = model.SerializeToString()
    weights = sum(np.prod(i.dims) * 4 for i in model.graph.initializer) / 2**20
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    ort_sess = ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"])
    names = [i.name for i in ort_sess.get_inputs()]

    def run_ort(feeds):
        return ort_sess.run(None, dict(zip(names, feeds, strict=True)))

    rows = []
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(blob))

        def run_twin(feeds):
            return [t.numpy() for t in s.run_graph(1, feeds)]

        check = start(model, args.batch, args.prompt, seed=99)
        err = max(float(np.abs(a - b).max()) for a, b in zip(run_twin(check), run_ort(check), strict=True))
        rss0 = rss_mb()
        for seq in range(args.sequences):
            tw = decode(run_twin, model, args.batch, args.prompt, args.tokens, seed=seq + 1)
            ox = decode(run_ort, model, args.batch, args.prompt, args.tokens, seed=seq + 1)
            label = "first (every length new)" if seq == 0 else f"{seq + 1}: the same lengths again"
            rows.append((label, statistics.median(tw) * 1e6, statistics.median(ox) * 1e6))
        grown = rss_mb() - rss0
        same = start(model, args.batch, args.prompt + args.tokens, seed=7)
        t_same = statistics.median(_timed(run_twin, same, 200))
        o_same = statistics.median(_timed(run_ort, same, 200))
        rows.append(("one length, repeated", t_same * 1e6, o_same * 1e6))

    header = (f"KV-cache decode loop: {args.layers} layers, d_model {args.d_model}, {args.heads} heads "
              f"({weights:.1f} MB of float32 weights), batch {args.batch}, past length {args.prompt} to "
              f"{args.prompt + args.tokens - 1} ({args.tokens} steps per sequence); onnxruntime {ort.__version__}, "
              f"one thread each, {os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}. "
              f"Max |twin - onnxruntime| on one step: {err:.1e}. The twin's resident memory grew by {grown:.0f} MB "
              f"over the {args.sequences} sequences.")
    lines = [header, "", "| sequence | twin (us per step, median) | onnxruntime (us per step, median) | "
             "twin / onnxruntime |", "|---|---:|---:|---:|"]
    for label, t, o in rows:
        lines.append(f"| {label} | {t:.0f} | {o:.0f} | {t / o:.2f} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("# KV-cache decode loop: twin vs onnxruntime\n\n"
                            "Produced by `python benchmarks/bench_decode.py --out benchmarks/results/decode.md`.\n\n"
                            + text + "\n")
    return 0


def _timed(run, feeds, n: int) -> list[float]:
    run(feeds)
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        run(feeds)
        out.append(time.perf_counter() - t0)
    return out


if __name__ == "__main__":
    sys.exit(main())
