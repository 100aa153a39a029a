"""Twin vs onnxruntime latency on the three models of tests/test_models.py (MLP, CNN, transformer encoder block),
at batch 1 and 32, both measured in this one run, interleaved, with the same threading policy.

    pip install ".[bench]"          # onnxruntime is a benchmark-only dependency
    python benchmarks/bench_models.py [--seconds 1.5] [--out benchmarks/results/models.md]

Threading: the twin's GEMMs use OpenBLAS with GEASYNC_BLAS_THREADS threads (default 1: every loaded graph has its
own model thread, so one BLAS thread per graph never oversubscribes the cores); onnxruntime gets the same number
of intra-op threads and one inter-op thread (sequential execution). Both are driven from Python with one
synchronous call per inference (twin: Session.run_graph; onnxruntime: InferenceSession.run), inputs prepared once.
Latency is the median over repeated calls after warm-up; the ratio column is twin / onnxruntime (lower is better,
the target is <= 1.5).
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

from test_models import MODELS, model_input, reference  # noqa: E402


def blas_threads() -> int:
    try:
        n = int(os.environ.get("GEASYNC_BLAS_THREADS", "1"))
    except ValueError:
        n = 1
    return max(1, min(n, os.cpu_count() or 1))


def time_calls(fn, seconds: float, min_calls: int = 20) -> float:
    """Median wall time of fn() in microseconds, over batches of calls for about `seconds`."""
    for _ in range(5):
        fn()
    samples = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(samples) < min_calls:
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) / 1e3)
    return statistics.median(samples)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=1.5, help="measuring time per (model, batch, runtime)")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds; the best median per side is kept")
    ap.add_argument("--out", type=pathlib.Path, default=None, help="also write the table (markdown) here")
    args = ap.parse_args()

    import onnxruntime as ort

    threads = blas_threads()
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL

    rows = []
    with ga.Session() as session:
        gid = 0
        for name, build in MODELS.items():
            model = build()
            blob = model.SerializeToString()
            ort_sess = ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"])
            in_name = ort_sess.get_inputs()[0].name
            gid += 1
            session.add_graph(gid, ga.Graph.from_onnx(blob))
            for batch in (1, 32):
                x = model_input(name, model, batch)
                twin_out = session.run_graph(gid, [x])[0].numpy()
                ort_out = ort_sess.run(None, {in_name: x})[0]
                ref = reference(model, x)
                scale = float(np.abs(ref).max())
                err_twin = float(np.abs(twin_out - ref).max()) / scale
                err_ort = float(np.abs(ort_out - ref).max()) / scale
                best_twin = best_ort = float("inf")
                for _ in range(args.rounds):
                    best_twin = min(best_twin, time_calls(lambda: session.run_graph(gid, [x]), args.seconds))
                    best_ort = min(best_ort, time_calls(lambda: ort_sess.run(None, {in_name: x}), args.seconds))
                rows.append((name, batch, best_twin, best_ort, best_twin / best_ort, err_twin, err_ort))
                print(f"{name:<12} batch {batch:>2}: twin {best_twin:9.1f} us  onnxruntime {best_ort:9.1f} us  "
                      f"ratio {best_twin / best_ort:5.2f}", flush=True)

    header = (f"Twin vs onnxruntime {ort.__version__} latency (median, microseconds per inference, one synchronous "
              f"call from Python), {threads} BLAS / intra-op thread(s), {os.cpu_count()} cores, "
              f"{platform.machine()}, Python {platform.python_version()}.")
    lines = [header, "", "| model | batch | twin (us) | onnxruntime (us) | twin / onnxruntime | max rel. error twin | "
             "max rel. error ort |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name, batch, t, o, r, et, eo in rows:
        lines.append(f"| {name} | {batch} | {t:.1f} | {o:.1f} | {r:.2f} | {et:.1e} | {eo:.1e} |")
    worst = max(r for *_, r, _, _ in rows)
    lines += ["", f"Worst ratio: {worst:.2f} (target <= 1.5). Errors are max |out - onnx.reference| / max |reference|."]
    text = "\n".join(lines)
    print()
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("# Model latency: twin vs onnxruntime\n\n"
                            "Produced by `python benchmarks/bench_models.py --out benchmarks/results/models.md`.\n\n"
                            + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
