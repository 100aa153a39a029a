"""Twin vs onnxruntime latency on the three models of tests/test_models.py (MLP, CNN, transformer encoder block),
at batch 1 and 32, plus a MatMul+Tanh chain, the transformer block at sequence length 256 and a CNN with smooth
activations (SiLU, HardSwish, Tanh), all measured in this one run, interleaved, with the same threading policy;
then throughput with 256 requests in flight (twin: Session.run_graph_async under asyncio; onnxruntime:
InferenceSession.run from a thread pool), on the same cores.

    pip install ".[bench]"          # onnxruntime is a benchmark-only dependency
    python benchmarks/bench_models.py [--seconds 1.5] [--out benchmarks/results/models.md]

Threading: the twin's GEMMs use OpenBLAS with GEASYNC_BLAS_THREADS threads (default 1: every loaded graph has its
own model thread, so one BLAS thread per graph never oversubscribes the cores); onnxruntime gets the same number
of intra-op threads and one inter-op thread (sequential execution). Both are driven from Python with one
synchronous call per inference that hands back numpy arrays (twin: Session.run_graph and .numpy() of its outputs;
onnxruntime: InferenceSession.run), inputs prepared once. With --ort-defaults onnxruntime keeps its default
SessionOptions (an intra-op thread per physical core) while the twin keeps its own: the out-of-the-box comparison.
Latency is the median over repeated calls after warm-up; the ratio column is twin / onnxruntime (lower is better,
the target is <= 1.5). Throughput: the model is added to the twin once per core (each graph has its own model
thread) and requests go round-robin; onnxruntime gets a thread pool with one worker per core, one shared session
(1 intra-op thread each); the ratio there is twin / onnxruntime time per request (lower is better).
With --models, batch-1 networks can be added: bench_quant's float ResNet- / MobileNet-like CNNs and the onnx
package's model-zoo networks (light_resnet50, light_vgg19, ...: see LIGHT).
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

from test_models import MODELS, make_transformer, model_input, reference  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _finish(nodes, name, x_shape, y_shape, inits):
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
                              initializer=[numpy_helper.from_array(a, n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    return model


def make_matmul_tanh(seed: int = 0, width: int = 256, depth: int = 4):
    """depth x (MatMul width x width, Tanh): the shape of an RNN cell / tanh MLP."""
    rng = np.random.default_rng(seed)
    inits, nodes, x = {}, [], "x"
    for i in range(depth):
        inits[f"w{i}"] = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]),
                  helper.make_node("Tanh", [f"m{i}"], [f"t{i}" if i < depth - 1 else "y"])]
        x = f"t{i}"
    return _finish(nodes, "matmul_tanh", ["N", width], ["N", width], inits)


def make_cnn_activations(seed: int = 0, image: int = 32):
    """Conv 3->32 + SiLU (x * Sigmoid(x)), Conv 32->32 + HardSwish, Conv 32->16 + Tanh, global pool, Gemm 10."""
    rng = np.random.default_rng(seed)
    inits, nodes, x = {}, [], "x"
    n = helper.make_node
    for i, (cin, cout, act) in enumerate(((3, 32, "silu"), (32, 32, "HardSwish"), (32, 16, "Tanh"))):
        inits[f"c{i}_w"] = (rng.standard_normal((cout, cin, 3, 3)) / np.sqrt(cin * 9)).astype(np.float32)
        inits[f"c{i}_b"] = (rng.standard_normal(cout) * 0.1).astype(np.float32)
        nodes.append(n("Conv", [x, f"c{i}_w", f"c{i}_b"], [f"c{i}"], pads=[1, 1, 1, 1]))
        if act == "silu":
            nodes += [n("Sigmoid", [f"c{i}"], [f"s{i}"]), n("Mul", [f"c{i}", f"s{i}"], [f"a{i}"])]
        else:
            nodes.append(n(act, [f"c{i}"], [f"a{i}"]))
        x = f"a{i}"
    inits["fc_w"] = (rng.standard_normal((16, 10)) / 4).astype(np.float32)
    inits["fc_b"] = np.zeros(10, np.float32)
    nodes += [n("GlobalAveragePool", [x], ["g"]), n("Flatten", ["g"], ["f"]), n("Gemm", ["f", "fc_w", "fc_b"], ["y"])]
    return _finish(nodes, "cnn_activations", ["N", 3, image, image], ["N", 10], inits)


EXTRA_MODELS = {
    "matmul_tanh": make_matmul_tanh,
    "transformer_seq256": lambda: make_transformer(seq=256),
    "cnn_activations": make_cnn_activations,
}


def _quant_cnn(kind: str, image: int):
    """bench_quant.py's float ResNet-like / MobileNet-like CNN (input of batch 1 only), built on demand."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_quant

    return (bench_quant.make_resnet if kind == "resnet" else bench_quant.make_mobilenet)(image)


def _light(name: str):
    """A network of the ONNX model zoo as the onnx package ships it for its backend tests (onnx/backend/test/data/
    light): the real topology, its weights made at run time by ConstantOfShape so that the file stays small."""
    import onnx

    return onnx.load(str(pathlib.Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" /
                         f"light_{name}.onnx"))


LIGHT = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet",
         "vgg19", "zfnet512"]

# Only with --models (their batch is fixed at 1; onnx.reference takes minutes on them, so their error column is
# measured against onnxruntime instead).
BATCH1_MODELS = {
    "mobilenet56": lambda: _quant_cnn("mobilenet", 56),
    "mobilenet224": lambda: _quant_cnn("mobilenet", 224),
    "resnet56": lambda: _quant_cnn("resnet", 56),
    "resnet224": lambda: _quant_cnn("resnet", 224),
    **{f"light_{n}": (lambda n=n: _light(n)) for n in LIGHT},
}


def _input(name: str, model, batch: int) -> np.ndarray:
    """A random input for the model's one data input (older models also list their initializers as inputs)."""
    inits = {t.name for t in model.graph.initializer}
    data = next(i for i in model.graph.input if i.name not in inits)
    dims = [d.dim_value or 1 for d in data.type.tensor_type.shape.dim]
    dims[0] = batch
    return np.random.default_rng(1).standard_normal(dims).astype(np.float32)


def all_models(names=None):
    """(name, model, input for a batch) for every benchmarked model, or for those named."""
    out = []
    known = {**MODELS, **EXTRA_MODELS, **BATCH1_MODELS}
    for name in names or [*MODELS, *EXTRA_MODELS]:
        model = known[name]()
        make = model_input if name in MODELS or name in EXTRA_MODELS else _input
        out.append((name, model, lambda b, name=name, model=model, make=make: make(name, model, b)))
    return out


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


def measure_throughput(models, so, args):
    """Requests per second with args.in_flight requests outstanding, twin vs onnxruntime, batch 1."""
    import asyncio
    import concurrent.futures
    import onnxruntime as ort

    cores = os.cpu_count() or 1
    out = []
    for name, model, make_input in models:
        blob = model.SerializeToString()
        x = make_input(1)
        sess = ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"])
        in_name = sess.get_inputs()[0].name
        with ga.Session() as session:
            for g in range(cores):
                session.add_graph(g + 1, ga.Graph.from_onnx(blob))

            async def drive(n: int, x: np.ndarray = x) -> None:
                todo = iter(range(n))

                async def worker() -> None:
                    for i in todo:
                        await session.run_graph_async(i % cores + 1, [x])
                await asyncio.gather(*(worker() for _ in range(args.in_flight)))

            asyncio.run(drive(min(args.requests, 256)))  # warm-up
            t0 = time.perf_counter()
            asyncio.run(drive(args.requests))
            twin_rps = args.requests / (time.perf_counter() - t0)
        with concurrent.futures.ThreadPoolExecutor(cores) as pool:
            list(pool.map(lambda _, sess=sess, in_name=in_name, x=x: sess.run(None, {in_name: x}),
                          range(min(args.requests, 256))))
            t0 = time.perf_counter()
            pending = set()
            for _ in range(args.requests):
                if len(pending) >= args.in_flight:
                    _, pending = concurrent.futures.wait(pending, return_when=concurrent.futures.FIRST_COMPLETED)
                pending.add(pool.submit(sess.run, None, {in_name: x}))
            concurrent.futures.wait(pending)
            ort_rps = args.requests / (time.perf_counter() - t0)
        out.append((name, twin_rps, ort_rps))
        print(f"{name:<20} {args.in_flight} in flight: twin {twin_rps:9.0f} req/s  onnxruntime {ort_rps:9.0f} req/s  "
              f"ratio {ort_rps / twin_rps:5.2f}", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=1.5, help="measuring time per (model, batch, runtime)")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds; the best median per side is kept")
    ap.add_argument("--out", type=pathlib.Path, default=None, help="also write the table (markdown) here")
    ap.add_argument("--batches", type=lambda v: [int(b) for b in v.split(",")], default=[1, 32],
                    help="comma-separated batch sizes")
    ap.add_argument("--in-flight", type=int, default=256, help="requests in flight for the throughput rows (0: skip)")
    ap.add_argument("--requests", type=int, default=2048, help="requests per throughput measurement")
    ap.add_argument("--ort-defaults", action="store_true",
                    help="onnxruntime with its default SessionOptions (intra-op threads: one per physical core) "
                         "instead of the twin's thread count: what a user comparing both out of the box sees")
    ap.add_argument("--models", type=lambda v: v.split(","), default=None,
                    help=f"comma-separated model names (default: all but the batch-1-only ones) from "
                         f"{', '.join([*MODELS, *EXTRA_MODELS, *BATCH1_MODELS])}")
    args = ap.parse_args()

    import onnxruntime as ort

    threads = blas_threads()
    so = ort.SessionOptions()
    if args.ort_defaults:
        threading = (f"twin: {threads} BLAS thread(s) (GEASYNC_BLAS_THREADS); onnxruntime: its default "
                     f"SessionOptions (intra-op threads: one per physical core)")
    else:
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        threading = f"{threads} BLAS / intra-op thread(s)"

    rows = []
    models = all_models(args.models)
    with ga.Session() as session:
        gid = 0
        for name, model, make_input in models:
            blob = model.SerializeToString()
            ort_sess = ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"])
            in_name = ort_sess.get_inputs()[0].name
            gid += 1
            session.add_graph(gid, ga.Graph.from_onnx(blob))
            for batch in args.batches:
                if name in BATCH1_MODELS and batch != 1:
                    continue
                x = make_input(batch)
                twin_out = session.run_graph(gid, [x])[0].numpy()
                ort_out = ort_sess.run(None, {in_name: x})[0]
                ref = ort_out if name in BATCH1_MODELS else reference(model, x)
                scale = float(np.abs(ref).max())
                err_twin = float(np.abs(twin_out - ref).max()) / scale
                err_ort = float(np.abs(ort_out - ref).max()) / scale
                best_twin = best_ort = float("inf")
                for _ in range(args.rounds):
                    best_twin = min(best_twin, time_calls(
                        lambda gid=gid, x=x: list(map(ga.Tensor.numpy, session.run_graph(gid, [x]))), args.seconds))
                    best_ort = min(best_ort, time_calls(lambda o=ort_sess, n=in_name, x=x: o.run(None, {n: x}),
                                                        args.seconds))
                rows.append((name, batch, best_twin, best_ort, best_twin / best_ort, err_twin, err_ort))
                print(f"{name:<20} batch {batch:>2}: twin {best_twin:9.1f} us  onnxruntime {best_ort:9.1f} us  "
                      f"ratio {best_twin / best_ort:5.2f}", flush=True)
    throughput = [] if args.in_flight <= 0 else measure_throughput(models, so, args)

    header = (f"Twin vs onnxruntime {ort.__version__} latency (median, microseconds per inference, one synchronous "
              f"call from Python; twin: run_graph and .numpy() of its outputs), {threading}, {os.cpu_count()} cores, "
              f"{platform.machine()}, Python {platform.python_version()}.")
    lines = [header, "", "| model | batch | twin (us) | onnxruntime (us) | twin / onnxruntime | max rel. error twin | "
             "max rel. error ort |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name, batch, t, o, r, et, eo in rows:
        lines.append(f"| {name} | {batch} | {t:.1f} | {o:.1f} | {r:.2f} | {et:.1e} | {eo:.1e} |")
    worst = max(r for *_, r, _, _ in rows)
    lines += ["", f"Worst ratio: {worst:.2f} (target <= 1.5). Errors are max |out - onnx.reference| / max |reference|."]
    if throughput:
        lines += ["", f"Throughput, {args.in_flight} requests in flight, batch 1, {os.cpu_count()} cores (twin: the "
                  f"graph added once per core, run_graph_async under asyncio; onnxruntime: one session, a pool of "
                  f"{os.cpu_count()} threads):", "",
                  "| model | twin (requests/s) | onnxruntime (requests/s) | twin / onnxruntime (time per request) |",
                  "|---|---:|---:|---:|"]
        for name, t, o in throughput:
            lines.append(f"| {name} | {t:.0f} | {o:.0f} | {o / t:.2f} |")
    text = "\n".join(lines)
    print()
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("# Model latency: twin vs onnxruntime\n\n"
                            f"Produced by `python benchmarks/bench_models.py{' --ort-defaults' * args.ort_defaults} "
                            f"--out {args.out}`.\n\n"
                            + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
