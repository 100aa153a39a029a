"""Quantised CNNs, twin vs onnxruntime: float ResNet-style and MobileNet-style networks built with onnx.helper
(Conv with folded BatchNorm as bias, Relu, Add residuals, MaxPool, GlobalAveragePool, Gemm; depthwise-separable
blocks), quantised with onnxruntime.quantization.quantize_static from a small random calibration set, in the QDQ
and QOperator formats, uint8 activations and int8 weights, per channel and per tensor (and int8 activations).

    pip install onnxruntime            # benchmark-only dependency
    python benchmarks/bench_quant.py [--seconds 1.0] [--rounds 3] [--out benchmarks/results/quant.md]

onnxruntime runs at one intra-op thread (sequential execution) and, in a second column, with its default
SessionOptions, and at one thread with its graph optimizations off ("as written": float Convs between
QuantizeLinear / DequantizeLinear, as the twin runs them, where its optimizer would fuse them into integer
QLinearConv kernels); the twin with its defaults (one BLAS thread per graph). Latency is the median over repeated calls
after warm-up, best median over interleaved rounds; ratios are twin / onnxruntime (lower is better). A model the
twin refuses at add_graph is listed with the reason.
"""

from __future__ import annotations

import argparse
import datetime
import os
import pathlib
import platform
import statistics
import sys
import tempfile
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper

try:
    import geasync as ga
except ImportError:  # model building alone
    ga = None

F = TensorProto.FLOAT


class _Builder:
    """Nodes and initializers of a float CNN, with BatchNorm already folded into the Conv bias."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.n = [], [], 0

    def name(self, p: str) -> str:
        self.n += 1
        return f"{p}{self.n}"

    def const(self, a: np.ndarray, p: str) -> str:
        n = self.name(p)
        self.inits.append(numpy_helper.from_array(a, n))
        return n

    def conv(self, x, cin, cout, k, stride=1, group=1, relu=True):
        fan_in = cin // group * k * k
        w = (self.rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        b = (self.rng.standard_normal(cout) * 0.1).astype(np.float32)
        y = self.name("conv")
        self.nodes.append(helper.make_node("Conv", [x, self.const(w, "w"), self.const(b, "b")], [y],
                                           kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4,
                                           group=group))
        return self.relu(y) if relu else y

    def relu(self, x):
        y = self.name("relu")
        self.nodes.append(helper.make_node("Relu", [x], [y]))
        return y

    def add(self, a, b):
        y = self.name("add")
        self.nodes.append(helper.make_node("Add", [a, b], [y]))
        return y

    def head(self, x, c, classes=1000):
        g, f, y = self.name("gap"), self.name("flat"), "y"
        w = (self.rng.standard_normal((classes, c)) * np.sqrt(1.0 / c)).astype(np.float32)
        b = (self.rng.standard_normal(classes) * 0.01).astype(np.float32)
        self.nodes += [helper.make_node("GlobalAveragePool", [x], [g]), helper.make_node("Flatten", [g], [f]),
                       helper.make_node("Gemm", [f, self.const(w, "fcw"), self.const(b, "fcb")], [y], transB=1)]
        return y

    def model(self, name, x_shape, classes=1000):
        graph = helper.make_graph(self.nodes, name, [helper.make_tensor_value_info("x", F, x_shape)],
                                  [helper.make_tensor_value_info("y", F, [x_shape[0], classes])],
                                  initializer=self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
        m.ir_version = 9
        return m


def make_resnet(image: int = 224, seed: int = 0, widths=(64, 128, 256, 512), blocks=(2, 2, 2, 2)):
    """ResNet-18-like: a 7x7 stem and MaxPool at 3x224x224, or straight into the stages at 64xNxN."""
    b = _Builder(seed)
    if image == 224:
        x_shape = [1, 3, 224, 224]
        x = b.conv("x", 3, widths[0], 7, stride=2)
        mp = b.name("pool")
        b.nodes.append(helper.make_node("MaxPool", [x], [mp], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4))
        x = mp
    else:
        x_shape, x = [1, widths[0], image, image], "x"
    cin = widths[0]
    for si, (c, nb) in enumerate(zip(widths, blocks, strict=True)):
        for bi in range(nb):
            stride = 2 if si > 0 and bi == 0 else 1
            h = b.conv(x, cin, c, 3, stride=stride)
            h = b.conv(h, c, c, 3, relu=False)
            short = x if stride == 1 and cin == c else b.conv(x, cin, c, 1, stride=stride, relu=False)
            x, cin = b.relu(b.add(h, short)), c
    b.head(x, cin)
    return b.model(f"resnet{image}", x_shape)


def make_mobilenet(image: int = 224, seed: int = 1):
    """MobileNet-V1/V2-like: depthwise 3x3 + pointwise 1x1 blocks, some with residual Adds."""
    b = _Builder(seed)
    if image == 224:
        x_shape = [1, 3, 224, 224]
        x, c = b.conv("x", 3, 32, 3, stride=2), 32
    else:
        x_shape, x, c = [1, 64, image, image], "x", 64
    for cout, stride, repeat in ((64, 1, 1), (128, 2, 2), (256, 2, 2), (512, 2, 3), (1024, 2, 1)):
        for r in range(repeat):
            s = stride if r == 0 else 1
            h = b.conv(x, c, c, 3, stride=s, group=c)  # depthwise
            h = b.conv(h, c, cout, 1, relu=s != 1 or c != cout)  # pointwise (linear before a residual Add)
            x, c = (b.relu(b.add(h, x)) if s == 1 and c == cout else h), cout
    b.head(x, c)
    return b.model(f"mobilenet{image}", x_shape)


VARIANTS = {  # name: (format, activation type, weight type, per channel)
    "QDQ u8/s8 per-channel": ("QDQ", "QUInt8", "QInt8", True),
    "QDQ u8/s8 per-tensor": ("QDQ", "QUInt8", "QInt8", False),
    "QDQ s8/s8 per-channel": ("QDQ", "QInt8", "QInt8", True),
    "QOp u8/s8 per-channel": ("QOperator", "QUInt8", "QInt8", True),
    "QOp u8/s8 per-tensor": ("QOperator", "QUInt8", "QInt8", False),
}


def quantize(model, variant: str, samples: int = 4, seed: int = 5):
    """model quantised by onnxruntime's quantize_static, calibrated on `samples` random inputs."""
    import onnx
    from onnxruntime import quantization as q

    fmt, act, wt, per_channel = VARIANTS[variant]
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    rng = np.random.default_rng(seed)

    class Reader(q.CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(samples)])

        def get_next(self):
            return next(self.it, None)

    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "f.onnx"), os.path.join(d, "q.onnx")
        onnx.save(model, src)
        q.quantize_static(src, dst, Reader(), quant_format=getattr(q.QuantFormat, fmt),
                          activation_type=getattr(q.QuantType, act), weight_type=getattr(q.QuantType, wt),
                          per_channel=per_channel, calibrate_method=q.CalibrationMethod.MinMax)
        return onnx.load(dst)


def all_models():
    return [("resnet18-like 3x224", make_resnet(224)), ("resnet-like 64x56", make_resnet(56)),
            ("mobilenet-like 3x224", make_mobilenet(224)), ("mobilenet-like 64x56", make_mobilenet(56))]


def conv_blocks():
    """One quantised conv block per ResNet stage / MobileNet layer shape, in both forms: QDQ (DequantizeLinear ->
    Conv with a dequantised int8 weight and int32 bias -> QuantizeLinear, uint8 in and out) and the QLinearConv
    onnxruntime fuses it into (same integers in, same scales)."""
    rng = np.random.default_rng(3)
    for c, m, hw, k, group in ((64, 64, 56, 3, 1), (128, 128, 28, 3, 1), (256, 256, 14, 3, 1), (512, 512, 7, 3, 1),
                               (256, 512, 14, 1, 1), (128, 128, 56, 3, 128)):
        w = rng.integers(-127, 128, (m, c // group, k, k)).astype(np.int8)
        ws = (rng.uniform(0.5, 2, m) * 2e-3).astype(np.float32)
        b = rng.integers(-500, 500, m).astype(np.int32)
        inits = [numpy_helper.from_array(a, n) for n, a in (
            ("xs", np.float32(0.02)), ("xz", np.uint8(128)), ("w", w), ("ws", ws), ("wz", np.zeros(m, np.int8)),
            ("ys", np.float32(0.05)), ("yz", np.uint8(120)), ("b", b), ("bs", (ws * np.float32(0.02))),
            ("bz", np.zeros(m, np.int32)))]
        attrs = dict(kernel_shape=[k, k], pads=[k // 2] * 4, group=group)
        qdq = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
               helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=0),
               helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bf"], axis=0),
               helper.make_node("Conv", ["xf", "wf", "bf"], ["yf"], **attrs),
               helper.make_node("QuantizeLinear", ["yf", "ys", "yz"], ["y"])]
        qlin = [helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"], **attrs)]
        x = rng.integers(0, 256, (1, c, hw, hw)).astype(np.uint8)
        name = f"{'dw ' if group > 1 else ''}{k}x{k} {c}->{m} on {hw}x{hw}"
        for form, nodes in (("QDQ", qdq), ("QLinearConv", qlin)):
            graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.UINT8, x.shape)],
                                      [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
                                      initializer=inits)
            yield name, form, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), x


def bench_conv_blocks(args, ort, one):
    print("conv blocks (ms): twin, onnxruntime 1 thread (fused into integer kernels where it can)", flush=True)
    rows = []
    for name, form, model, x in conv_blocks():
        blob = model.SerializeToString()
        so = ort.InferenceSession(blob, one, providers=["CPUExecutionProvider"])
        with ga.Session() as s:
            s.add_graph(1, ga.Graph.from_onnx(blob))
            calls = [lambda s=s, x=x: [o.numpy() for o in s.run_graph(1, [x])],
                     lambda so=so, x=x: so.run(None, {"x": x})]
            best = [float("inf")] * 2
            for _ in range(args.rounds):
                best = [min(p, time_calls(f, args.seconds)) for p, f in zip(best, calls, strict=True)]
        rows.append((name, form, *best))
        print(f"  {name:<24} {form:<12} twin {best[0]:7.3f}  ort1 {best[1]:7.3f}  ratio {best[0] / best[1]:5.2f}",
              flush=True)
    return rows


def time_calls(fn, seconds: float, min_calls: int = 10) -> float:
    """Median wall time of fn() in milliseconds over about `seconds` after warm-up."""
    for _ in range(3):
        fn()
    samples, deadline = [], time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(samples) < min_calls:
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) / 1e6)
    return statistics.median(samples)


def main() -> int:
    import onnxruntime as ort

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", default="", help="comma-separated substrings of model names to keep")
    ap.add_argument("--variants", default="", help="comma-separated substrings of variant names to keep")
    ap.add_argument("--convs", action="store_true", help="single conv blocks (QDQ and QLinearConv) only")
    ap.add_argument("--out", type=pathlib.Path, default=None)
    args = ap.parse_args()
    keep = [s for s in args.models.split(",") if s]
    keepv = [s for s in args.variants.split(",") if s]
    one = ort.SessionOptions()
    one.intra_op_num_threads, one.inter_op_num_threads = 1, 1
    one.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    raw = ort.SessionOptions()  # the graph as written: float Convs between QuantizeLinear / DequantizeLinear
    raw.intra_op_num_threads, raw.inter_op_num_threads = 1, 1
    raw.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    raw.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if args.convs:
        rows = bench_conv_blocks(args, ort, one)
        if args.out:
            lines = [f"Measured {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, onnxruntime "
                     f"{ort.__version__}, 1 thread each, seconds={args.seconds}, rounds={args.rounds}", "",
                     "| conv block | form | twin ms | ort 1 thread ms | twin / ort |", "|---|---|---|---|---|"]
            lines += [f"| {n} | {f} | {t:.3f} | {o:.3f} | {t / o:.2f} |" for n, f, t, o in rows]
            args.out.write_text("\n".join(lines) + "\n")
        return 0
    rows = []
    for mname, fmodel in all_models():
        if keep and not any(k in mname for k in keep):
            continue
        for vname in VARIANTS:
            if keepv and not any(k in vname for k in keepv):
                continue
            qm = quantize(fmodel, vname)
            blob = qm.SerializeToString()
            shape = [d.dim_value for d in qm.graph.input[0].type.tensor_type.shape.dim]
            x = np.random.default_rng(9).standard_normal(shape).astype(np.float32)
            s1 = ort.InferenceSession(blob, one, providers=["CPUExecutionProvider"])
            sd = ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
            sr = ort.InferenceSession(blob, raw, providers=["CPUExecutionProvider"])
            with ga.Session() as s:
                try:
                    s.add_graph(1, ga.Graph.from_onnx(blob))
                except Exception as e:  # noqa: BLE001  (reported, not fatal)
                    lines = str(e).splitlines()
                    why = next((ln for ln in lines if "com.microsoft" in ln), lines[-1]).strip()
                    rows.append((mname, vname, None, None, None, None, why[:160]))
                    print(f"{mname:<22} {vname:<24} refused: {rows[-1][-1]}", flush=True)
                    continue
                best = [float("inf")] * 4
                calls = [lambda s=s, x=x: [o.numpy() for o in s.run_graph(1, [x])]]
                calls += [lambda o=o, x=x: o.run(None, {"x": x}) for o in (s1, sd, sr)]
                for _ in range(args.rounds):
                    best = [min(p, time_calls(f, args.seconds)) for p, f in zip(best, calls, strict=True)]
            rows.append((mname, vname, *best, ""))
            print(f"{mname:<22} {vname:<24} twin {best[0]:8.2f} ms  ort1 {best[1]:8.2f} ms  ortdef {best[2]:8.2f} ms"
                  f"  ort-as-written {best[3]:8.2f} ms  ratio1 {best[0] / best[1]:5.2f}  ratiodef "
                  f"{best[0] / best[2]:5.2f}  ratio-as-written {best[0] / best[3]:5.2f}", flush=True)
    if args.out:
        lines = [f"Measured {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC on "
                 f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, onnxruntime "
                 f"{ort.__version__}, seconds={args.seconds}, rounds={args.rounds}", "",
                 "| model | variant | twin ms | ort 1 thread ms | ort defaults ms | ort as written, 1 thread ms | "
                 "twin / ort1 | twin / ort defaults | twin / ort as written |",
                 "|---|---|---|---|---|---|---|---|---|"]
        for m, v, t, a, d, r, why in rows:
            if t is None:
                lines.append(f"| {m} | {v} | refused: {why} | | | | | | |")
            else:
                lines.append(f"| {m} | {v} | {t:.2f} | {a:.2f} | {d:.2f} | {r:.2f} | {t / a:.2f} | {t / d:.2f} | "
                             f"{t / r:.2f} |")
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
