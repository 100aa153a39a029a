"""Per-operator speed: the twin vs onnxruntime, side by side in one run, one thread each, at three sizes.

    pip install ".[bench]"          # onnxruntime is a benchmark-only dependency
    env -u OPENBLAS_CORETYPE python benchmarks/bench_ops.py --out benchmarks/results/ops.md
    OPENBLAS_CORETYPE=Haswell python benchmarks/bench_ops.py --out benchmarks/results/ops-coretype-haswell.md

Each case is a small graph per operator family (element-wise ops as a chain of 8 nodes, so that per-call overhead
does not hide the kernel), at "small" (16 elements), "64k" (256x256) and "1M" (1024x1024) sizes, or the
equivalent GEMM / Conv shapes. Both runtimes are driven from Python with one synchronous call per inference, each
returning its outputs as numpy arrays (twin: Session.run_graph and .numpy() of every output, the same work a caller
of onnxruntime's run gets done; --run-only times run_graph alone; onnxruntime: InferenceSession.run with 1
intra-op and 1 inter-op thread, sequential), inputs prepared once; set GEASYNC_INTRA_OP_THREADS=1 for one twin
thread (the header states it). With --ort-defaults onnxruntime keeps its default SessionOptions (an intra-op thread
per physical core): with GEASYNC_INTRA_OP_THREADS unset, the out-of-the-box comparison. The twin's BLAS runs on
GEASYNC_BLAS_THREADS threads (default 1). The two are timed interleaved (--rounds), keeping each side's best median.
The ratio is twin / onnxruntime (lower is better; target <= 1.5).
Outputs are checked against each other before timing (the correctness tests compare with onnx.reference).
OPENBLAS_CORETYPE is read by OpenBLAS when it loads: the header states what this run had.
"""

from __future__ import annotations

import argparse
import ctypes
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

from conftest import TensorProto, helper, make_model  # noqa: E402

F = TensorProto.FLOAT
CHAIN = 8
SIZES = {"small": (4, 4), "64k": (256, 256), "1M": (1024, 1024)}

# Unary element-wise ops and the input range each chain starts from (values may leave the domain along the chain:
# both runtimes then compute the same NaN/inf values).
UNARY = {
    "Relu": (-2, 2), "Abs": (-2, 2), "Neg": (-2, 2), "Exp": (-2, 2), "Log": (0.5, 100), "Sqrt": (0, 100),
    "Reciprocal": (0.5, 2), "Tanh": (-3, 3), "Sigmoid": (-6, 6), "Erf": (-3, 3), "Gelu": (-3, 3),
    "LeakyRelu": (-2, 2), "Elu": (-2, 2), "Softplus": (-3, 3), "HardSigmoid": (-4, 4), "Sin": (-3, 3),
    "Cos": (-3, 3), "Floor": (-9, 9), "Round": (-9, 9), "Sign": (-2, 2), "Clip": (-2, 2),
}
OPSET = 20


def chain_model(op: str, shape, **attrs):
    nodes, x = [], "x"
    for i in range(CHAIN):
        nodes.append(helper.make_node(op, [x], [f"y{i}"], **attrs))
        x = f"y{i}"
    return make_model(nodes, [("x", F, list(shape))], [(x, F, list(shape))], opset=OPSET)


def binary_chain(op: str, shape, bshape):
    """x op b op b ...: b broadcasts like a bias row (bshape) or matches x."""
    nodes, x = [], "x"
    for i in range(CHAIN):
        nodes.append(helper.make_node(op, [x, "b"], [f"y{i}"]))
        x = f"y{i}"
    return make_model(nodes, [("x", F, list(shape)), ("b", F, list(bshape))], [(x, F, list(shape))], opset=OPSET)


def rand(shape, lo=-2.0, hi=2.0, seed=0):
    return np.random.default_rng(seed).uniform(lo, hi, size=shape).astype(np.float32)


def elementwise_cases(size: str):
    shape = SIZES[size]
    for op, (lo, hi) in UNARY.items():
        yield f"{op} x{CHAIN}", chain_model(op, shape), [rand(shape, lo, hi)]
    for op in ("Add", "Mul", "Div"):
        yield f"{op} x{CHAIN} (same shape)", binary_chain(op, shape, shape), [rand(shape), rand(shape, 0.9, 1.1, 1)]
        yield f"{op} x{CHAIN} (row broadcast)", binary_chain(op, shape, shape[-1:]), \
            [rand(shape), rand(shape[-1:], 0.9, 1.1, 1)]


def normalisation_cases(size: str):
    rows, cols = SIZES[size]
    shape = [rows, cols]
    for op in ("Softmax", "LogSoftmax"):
        yield f"{op} x{CHAIN} (axis -1)", chain_model(op, shape, axis=-1), [rand(shape)]
    scale, bias = np.ones(cols, np.float32), np.zeros(cols, np.float32)
    ln = make_model([helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1)],
                    [("x", F, shape)], [("y", F, shape)], initializers=[("s", scale), ("b", bias)], opset=OPSET)
    yield "LayerNormalization (axis -1)", ln, [rand(shape)]
    red = make_model([helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1)], [("x", F, shape)],
                     [("y", F, [rows, 1])], initializers=[("axes", np.array([-1], np.int64))], opset=OPSET)
    yield "ReduceSum (axis -1)", red, [rand(shape)]
    red = make_model([helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=1)], [("x", F, shape)],
                     [("y", F, [1, cols])], initializers=[("axes", np.array([0], np.int64))], opset=OPSET)
    yield "ReduceMean (axis 0)", red, [rand(shape)]
    for op in ("ReduceMax", "ReduceMin"):
        red = make_model([helper.make_node(op, ["x", "axes"], ["y"], keepdims=1)], [("x", F, shape)],
                         [("y", F, [rows, 1])], initializers=[("axes", np.array([-1], np.int64))], opset=OPSET)
        yield f"{op} (axis -1)", red, [rand(shape)]
    arg = make_model([helper.make_node("ArgMax", ["x"], ["y"], axis=-1)], [("x", F, shape)],
                     [("y", TensorProto.INT64, [rows, 1])], opset=OPSET)
    yield "ArgMax (axis -1)", arg, [rand(shape)]
    arg = make_model([helper.make_node("ArgMin", ["x"], ["y"], axis=0)], [("x", F, shape)],
                     [("y", TensorProto.INT64, [1, cols])], opset=OPSET)
    yield "ArgMin (axis 0)", arg, [rand(shape)]


def movement_cases(size: str):
    rows, cols = SIZES[size]
    shape = [rows, cols]
    tr = make_model([helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0])], [("x", F, shape)],
                    [("y", F, [cols, rows])], opset=OPSET)
    yield "Transpose (2-D)", tr, [rand(shape)]
    cat = make_model([helper.make_node("Concat", ["x", "x"], ["y"], axis=1)], [("x", F, shape)],
                     [("y", F, [rows, 2 * cols])], opset=OPSET)
    yield "Concat (axis 1)", cat, [rand(shape)]
    idx = np.arange(0, rows, 2, dtype=np.int64)
    gat = make_model([helper.make_node("Gather", ["x", "i"], ["y"], axis=0)], [("x", F, shape)],
                     [("y", F, [len(idx), cols])], initializers=[("i", idx)], opset=OPSET)
    yield "Gather (rows)", gat, [rand(shape)]
    cast = make_model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16)], [("x", F, shape)],
                      [("y", TensorProto.FLOAT16, shape)], opset=OPSET)
    yield "Cast (float -> float16)", cast, [rand(shape)]
    tile = make_model([helper.make_node("Tile", ["x", "r"], ["y"])], [("x", F, [rows, cols // 2])],
                      [("y", F, shape)], initializers=[("r", np.array([1, 2], np.int64))], opset=OPSET)
    yield "Tile (x2 along the last axis)", tile, [rand((rows, cols // 2))]
    pad = make_model([helper.make_node("Pad", ["x", "p"], ["y"])], [("x", F, shape)], [("y", F, [rows + 2, cols + 2])],
                     initializers=[("p", np.array([1, 1, 1, 1], np.int64))], opset=OPSET)
    yield "Pad (constant, 1 on each side)", pad, [rand(shape)]


# GEMM / Conv shapes per size: (M, K, N) and (N, C, H, W, M, k).
GEMM = {"small": (4, 4, 4), "64k": (256, 256, 256), "1M": (1024, 1024, 1024)}
MLP_ROWS = {"small": 1, "64k": 32, "1M": 256}
CONV = {"small": (1, 3, 8, 8, 4, 3), "64k": (1, 16, 64, 64, 16, 3), "1M": (1, 64, 128, 128, 64, 3)}


def linear_cases(size: str):
    m, k, n = GEMM[size]
    mm = make_model([helper.make_node("MatMul", ["a", "w"], ["y"])], [("a", F, [m, k])], [("y", F, [m, n])],
                    initializers=[("w", rand((k, n), seed=2))], opset=OPSET)
    yield f"MatMul {m}x{k}x{n}", mm, [rand((m, k))]
    rows = MLP_ROWS[size]
    rng = np.random.default_rng(3)
    inits, nodes, x = [], [], "x"
    for i, (a, b) in enumerate(((784, 256), (256, 10))):
        inits += [(f"w{i}", (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)),
                  (f"b{i}", np.zeros(b, np.float32))]
        nodes.append(helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], [f"h{i}"]))
        x = f"h{i}"
        if i == 0:
            nodes.append(helper.make_node("Relu", [x], ["r0"]))
            x = "r0"
    mlp = make_model(nodes, [("x", F, [rows, 784])], [(x, F, [rows, 10])], initializers=inits, opset=OPSET)
    yield f"MLP 784-256-10 (Gemm, batch {rows})", mlp, [rand((rows, 784))]
    nb, c, h, w, mo, kk = CONV[size]
    conv_inits = [("w", rand((mo, c, kk, kk), -0.2, 0.2, 4)), ("b", rand((mo,), seed=5))]
    conv = make_model([helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])], [("x", F, [nb, c, h, w])],
                      [("y", F, [nb, mo, h, w])], initializers=conv_inits, opset=OPSET)
    yield f"Conv {c}->{mo} 3x3 on {h}x{w}", conv, [rand((nb, c, h, w))]
    pool = make_model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
                      [("x", F, [nb, c, h, w])], [("y", F, [nb, c, h // 2, w // 2])], opset=OPSET)
    yield f"MaxPool 2x2 on {c}x{h}x{w}", pool, [rand((nb, c, h, w))]


# Pool inputs per size: (N, C, H, W).
POOL = {"small": (1, 1, 4, 4), "64k": (1, 16, 64, 64), "1M": (1, 64, 128, 128)}


def pooling_cases(size: str):
    shape = list(POOL[size])
    nb, c, h, w = shape
    cases = [("MaxPool 3x3 s2 p1", "MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
             ("AveragePool 3x3 s1 p1", "AveragePool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
             ("AveragePool 3x3 s1 p1 (count pads)", "AveragePool",
              dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1)),
             ("AveragePool 2x2 s2", "AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2]))]
    for name, op, attrs in cases:
        s = attrs.get("strides", [1, 1])[0]
        out = [nb, c, h // s, w // s]
        model = make_model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", F, shape)], [("y", F, out)],
                           opset=OPSET)
        yield f"{name} on {c}x{h}x{w}", model, [rand(shape)]
    gap = make_model([helper.make_node("GlobalAveragePool", ["x"], ["y"])], [("x", F, shape)],
                     [("y", F, [nb, c, 1, 1])], opset=OPSET)
    yield f"GlobalAveragePool on {c}x{h}x{w}", gap, [rand(shape)]
    # MaxPool's stride-1 paths with pads and the Indices output (the general loop), where the NaN rules differ
    for s, extra in ((1, ""), (1, " (Indices)"), (2, " (Indices)")):
        attrs = dict(kernel_shape=[3, 3], strides=[s, s], pads=[1, 1, 1, 1])
        out = [nb, c, (h - 1) // s + 1, (w - 1) // s + 1]
        outs = [("y", F, out)] + ([("i", TensorProto.INT64, out)] if extra else [])
        model = make_model([helper.make_node("MaxPool", ["x"], [o[0] for o in outs], **attrs)], [("x", F, shape)],
                           outs, opset=OPSET)
        yield f"MaxPool 3x3 s{s} p1{extra} on {c}x{h}x{w}", model, [rand(shape)]


# Recurrent layers per size: (sequence length, batch, input size, hidden size).
RECURRENT = {"small": (2, 1, 4, 4), "64k": (16, 4, 64, 64), "1M": (64, 16, 128, 128)}


def recurrent_cases(size: str):
    seq, nb, inp, hid = RECURRENT[size]
    for op, gates in (("LSTM", 4), ("GRU", 3), ("RNN", 1)):
        inits = [("w", rand((1, gates * hid, inp), -0.1, 0.1, seed=1)),
                 ("r", rand((1, gates * hid, hid), -0.1, 0.1, seed=2)),
                 ("b", rand((1, 2 * gates * hid), -0.1, 0.1, seed=3))]
        node = helper.make_node(op, ["x", "w", "r", "b"], ["y"], hidden_size=hid)
        model = make_model([node], [("x", F, [seq, nb, inp])], [("y", F, [seq, 1, nb, hid])], opset=OPSET,
                           initializers=inits)
        yield f"{op} T{seq} B{nb} {inp}->{hid}", model, [rand((seq, nb, inp))]


# Conv variants and ConvTranspose per size: (C, H, W) of the input.
CONV_VARIANTS = {"small": (4, 4, 4), "64k": (16, 64, 64), "1M": (64, 128, 128)}


def conv_variant_cases(size: str):
    c, h, w = CONV_VARIANTS[size]
    x = [1, c, h, w]
    dw = make_model([helper.make_node("Conv", ["x", "w"], ["y"], group=c, pads=[1, 1, 1, 1])], [("x", F, x)],
                    [("y", F, x)], initializers=[("w", rand((c, 1, 3, 3), seed=6))], opset=OPSET)
    yield f"Conv depthwise 3x3 on {c}x{h}x{w}", dw, [rand(x)]
    s2 = make_model([helper.make_node("Conv", ["x", "w"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1])],
                    [("x", F, x)], [("y", F, [1, 2 * c, h // 2, w // 2])],
                    initializers=[("w", rand((2 * c, c, 3, 3), -0.2, 0.2, 7))], opset=OPSET)
    yield f"Conv 3x3 s2 {c}->{2 * c} on {h}x{w}", s2, [rand(x)]
    ct = make_model([helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2])], [("x", F, x)],
                    [("y", F, [1, c // 2, 2 * h, 2 * w])],
                    initializers=[("w", rand((c, c // 2, 2, 2), seed=8)), ("b", rand((c // 2,), seed=9))],
                    opset=OPSET)
    yield f"ConvTranspose 2x2 s2 {c}->{c // 2} on {h}x{w}", ct, [rand(x)]
    bn = make_model([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])], [("x", F, x)],
                    [("y", F, x)], initializers=[("s", rand((c,), 0.5, 1.5, 10)), ("b", rand((c,), seed=11)),
                                                 ("m", rand((c,), seed=12)), ("v", rand((c,), 0.5, 1.5, 13))],
                    opset=OPSET)
    yield f"BatchNormalization on {c}x{h}x{w}", bn, [rand(x)]


# Quantised operators per size: the float tensor's shape; matrix products: (M, K, N); convolutions: (C, H, W).
QUANT = {"small": ((4, 4), (2, 4, 4), (2, 4, 4)), "64k": ((256, 256), (64, 256, 256), (16, 32, 32)),
         "1M": ((1024, 1024), (256, 512, 512), (32, 64, 64))}


def quantisation_cases(size: str):
    shape, (m, k, n), (c, h, w) = QUANT[size]
    u8 = TensorProto.UINT8
    rng = np.random.default_rng(5)
    scale, zp = ("s", np.array(0.02, np.float32)), ("z", np.array(128, np.uint8))
    q = make_model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])], [("x", F, list(shape))],
                   [("y", u8, list(shape))], initializers=[scale, zp], opset=OPSET)
    yield f"QuantizeLinear u8 {shape[0]}x{shape[1]}", q, [rand(shape)]
    dq = make_model([helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "ys", "yz"])], [("x", F, list(shape))],
                    [("y", u8, list(shape)), ("ys", F, []), ("yz", u8, [])], opset=OPSET)
    yield f"DynamicQuantizeLinear {shape[0]}x{shape[1]}", dq, [rand(shape)]
    cols = shape[1]
    dqa = make_model([helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], axis=1)], [("x", u8, list(shape))],
                     [("y", F, list(shape))], initializers=[("s", rand((cols,), 0.01, 0.03, 1)),
                                                            ("z", np.full(cols, 128, np.uint8))], opset=OPSET)
    yield f"DequantizeLinear u8 per-axis {shape[0]}x{shape[1]}", dqa, [rng.integers(0, 256, shape, np.uint8)]
    mi = make_model([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], [("a", u8, [m, k])],
                    [("y", TensorProto.INT32, [m, n])], initializers=[("b", rng.integers(0, 256, (k, n), np.uint8))],
                    opset=OPSET)
    yield f"MatMulInteger u8 {m}x{k}x{n}", mi, [rng.integers(0, 256, (m, k), np.uint8)]
    i8 = TensorProto.INT8
    ms = make_model([helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])], [("a", i8, [m, k])],
                    [("y", TensorProto.INT32, [m, n])],
                    initializers=[("b", rng.integers(-128, 128, (k, n), np.int8)), ("az", np.array(3, np.int8)),
                                  ("bz", np.array(-2, np.int8))], opset=OPSET)
    yield f"MatMulInteger s8 x s8 {m}x{k}x{n}", ms, [rng.integers(-128, 128, (m, k), np.int8)]
    qmm = make_model([helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])],
                     [("a", u8, [m, k])], [("y", u8, [m, n])],
                     initializers=[("as", np.array(0.02, np.float32)), ("az", np.array(128, np.uint8)),
                                   ("b", rng.integers(0, 256, (k, n), np.uint8)), ("bs", np.array(0.01, np.float32)),
                                   ("bz", np.array(127, np.uint8)), ("ys", np.array(4.0, np.float32)),
                                   ("yz", np.array(128, np.uint8))], opset=OPSET)
    yield f"QLinearMatMul u8 {m}x{k}x{n}", qmm, [rng.integers(0, 256, (m, k), np.uint8)]
    conv = make_model([helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"],
                                        pads=[1, 1, 1, 1])], [("x", u8, [1, c, h, w])], [("y", u8, [1, c, h, w])],
                      initializers=[("xs", np.array(0.02, np.float32)), ("xz", np.array(128, np.uint8)),
                                    ("w", rng.integers(0, 256, (c, c, 3, 3), np.uint8)),
                                    ("ws", np.array(0.01, np.float32)), ("wz", np.array(127, np.uint8)),
                                    ("ys", np.array(0.5, np.float32)), ("yz", np.array(128, np.uint8))], opset=OPSET)
    yield f"QLinearConv u8 3x3 {c}->{c} on {h}x{w}", conv, [rng.integers(0, 256, (1, c, h, w), np.uint8)]
    ci = make_model([helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], pads=[1, 1, 1, 1])],
                    [("x", u8, [1, c, h, w])], [("y", TensorProto.INT32, [1, c, h, w])],
                    initializers=[("w", rng.integers(0, 256, (c, c, 3, 3), np.uint8)), ("xz", np.array(128, np.uint8)),
                                  ("wz", np.array(127, np.uint8))], opset=OPSET)
    yield f"ConvInteger u8 3x3 {c}->{c} on {h}x{w}", ci, [rng.integers(0, 256, (1, c, h, w), np.uint8)]


# Attention-shaped work per size: (heads, sequence, head size); GridSample: (C, H, W).
ATTENTION = {"small": ((1, 4, 4), (1, 4, 4)), "64k": ((4, 64, 64), (16, 32, 32)), "1M": ((8, 256, 64), (32, 64, 64))}


def attention_cases(size: str):
    (hd, sq, d), (c, h, w) = ATTENTION[size]
    qkv = [1, hd, sq, d]
    ein = make_model([helper.make_node("Einsum", ["q", "k"], ["y"], equation="bhqd,bhkd->bhqk")],
                     [("q", F, qkv), ("k", F, qkv)], [("y", F, [1, hd, sq, sq])], opset=OPSET)
    yield f"Einsum bhqd,bhkd->bhqk {hd}x{sq}x{d}", ein, [rand(qkv), rand(qkv, seed=1)]
    att = make_model([helper.make_node("Attention", ["q", "k", "v"], ["y"])],
                     [("q", F, qkv), ("k", F, qkv), ("v", F, qkv)], [("y", F, qkv)], opset=23)
    yield f"Attention {hd} heads {sq}x{d}", att, [rand(qkv), rand(qkv, seed=1), rand(qkv, seed=2)]
    grid = make_model([helper.make_node("GridSample", ["x", "g"], ["y"])], [("x", F, [1, c, h, w]),
                      ("g", F, [1, h, w, 2])], [("y", F, [1, c, h, w])], opset=OPSET)
    yield f"GridSample bilinear {c}x{h}x{w}", grid, [rand((1, c, h, w)), rand((1, h, w, 2), -1, 1, seed=3)]


# Instance / group / mean-variance normalisation, Resize linear / cubic, TopK. NCHW inputs per size (normalisations
# and Resize outputs) and TopK rows x cols.
NCHW = {"small": (1, 4, 2, 2), "64k": (1, 16, 64, 64), "1M": (1, 64, 128, 128)}
RESIZE_MODES = [("linear half_pixel", dict(mode="linear")),
                ("linear align_corners", dict(mode="linear", coordinate_transformation_mode="align_corners")),
                ("linear asymmetric", dict(mode="linear", coordinate_transformation_mode="asymmetric")),
                ("cubic half_pixel", dict(mode="cubic"))]


def channel_norm_resize_topk_cases(size: str):
    shape = list(NCHW[size])
    nb, c, h, w = shape
    sb = [("s", rand((c,), 0.5, 1.5, 1)), ("b", rand((c,), seed=2))]
    inorm = make_model([helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"])], [("x", F, shape)],
                       [("y", F, shape)], initializers=sb, opset=OPSET)
    yield f"InstanceNormalization on {c}x{h}x{w}", inorm, [rand(shape)]
    gnorm = make_model([helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=4)],
                       [("x", F, shape)], [("y", F, shape)], initializers=sb, opset=21)
    yield f"GroupNormalization 4 groups on {c}x{h}x{w}", gnorm, [rand(shape)]
    mvn = make_model([helper.make_node("MeanVarianceNormalization", ["x"], ["y"])], [("x", F, shape)],
                     [("y", F, shape)], opset=OPSET)
    yield f"MeanVarianceNormalization on {c}x{h}x{w}", mvn, [rand(shape)]
    small = [nb, c, h // 2, w // 2]
    for name, attrs in RESIZE_MODES:
        model = make_model([helper.make_node("Resize", ["x", "", "sc"], ["y"], **attrs)], [("x", F, small)],
                           [("y", F, shape)], initializers=[("sc", np.array([1, 1, 2, 2], np.float32))], opset=OPSET)
        yield f"Resize {name} 2x to {h}x{w}", model, [rand(small)]
    model = make_model([helper.make_node("Resize", ["x", "", "", "sz"], ["y"], mode="linear")], [("x", F, small)],
                       [("y", F, [nb, c, h + 3, w - 1])], initializers=[("sz", np.array(shape[:2] + [h + 3, w - 1]))],
                       opset=OPSET)
    yield f"Resize linear sizes to {h + 3}x{w - 1}", model, [rand(small)]
    rows, cols = SIZES[size]
    # (sorted=0 leaves the order unspecified: onnxruntime's differs, the twin always sorts; not compared here)
    for name, k, attrs in [("k=10", 10, {}), ("k=1", 1, {}), ("k=cols/2", cols // 2, {}),
                           ("largest=0", 10, dict(largest=0)), ("axis 0", 10, dict(axis=0))]:
        k = min(k, rows)
        out = [k, cols] if attrs.get("axis") == 0 else [rows, k]
        model = make_model([helper.make_node("TopK", ["x", "k"], ["y", "i"], **attrs)], [("x", F, [rows, cols])],
                           [("y", F, out), ("i", TensorProto.INT64, out)],
                           initializers=[("k", np.array([k], np.int64))], opset=OPSET)
        yield f"TopK {name} of {rows}x{cols}", model, [rand((rows, cols))]


def more_single_op_cases(size: str):
    """Single ops beyond the chains above: inverse trig, Cast, IsNaN/IsInf, Max/Min, CumSum along the leading axis,
    ReduceProd."""
    shape = list(SIZES[size])
    for op, (lo, hi) in (("Atan", (-3, 3)), ("Asin", (-1, 1)), ("Acos", (-1, 1))):
        yield f"{op} x{CHAIN}", chain_model(op, shape), [rand(shape, lo, hi)]
    for src, dst in ((TensorProto.FLOAT16, F), (F, TensorProto.INT32), (F, TensorProto.UINT8),
                     (F, TensorProto.INT64), (TensorProto.BOOL, F)):
        x = rand(shape, -300, 300)
        x = x > 0 if src == TensorProto.BOOL else x.astype(np.float16) if src == TensorProto.FLOAT16 else x
        cast = make_model([helper.make_node("Cast", ["x"], ["y"], to=dst)], [("x", src, shape)], [("y", dst, shape)],
                          opset=OPSET)
        yield f"Cast ({x.dtype} -> {helper.tensor_dtype_to_np_dtype(dst)})", cast, [x]
    for op in ("IsNaN", "IsInf"):
        yield op, make_model([helper.make_node(op, ["x"], ["y"])], [("x", F, shape)],
                             [("y", TensorProto.BOOL, shape)], opset=OPSET), [rand(shape)]
    for op in ("Max", "Min"):
        yield f"{op} x{CHAIN} (same shape)", binary_chain(op, shape, shape), [rand(shape), rand(shape, seed=1)]
    cum = make_model([helper.make_node("CumSum", ["x", "a"], ["y"])], [("x", F, shape)], [("y", F, shape)],
                     initializers=[("a", np.array(0, np.int64))], opset=OPSET)
    yield "CumSum (axis 0)", cum, [rand(shape)]
    cum = make_model([helper.make_node("CumSum", ["x", "a"], ["y"], exclusive=1, reverse=1)], [("x", F, shape)],
                     [("y", F, shape)], initializers=[("a", np.array(0, np.int64))], opset=OPSET)
    yield "CumSum (axis 0, reverse, exclusive)", cum, [rand(shape)]
    prod = make_model([helper.make_node("ReduceProd", ["x"], ["y"], keepdims=0)], [("x", F, shape)], [("y", F, [])],
                      opset=OPSET)
    yield "ReduceProd (all)", prod, [rand(shape, 0.999, 1.001)]


# 3-D views of the element counts per size, for the cases below: (D, H, W).
CUBE = {"small": (4, 4, 4), "64k": (64, 32, 32), "1M": (64, 128, 128)}


def single_op(op: str, x: np.ndarray, out_type=F, extra=(), initializers=(), **attrs):
    """One node on input x (plus extra (name, array) inputs and initializers), its output shape left to inference."""
    names = ["x"] + [n for n, _ in extra] + [n for n, _ in initializers]
    ins = [("x", helper.np_dtype_to_tensor_dtype(x.dtype), list(x.shape))] + [
        (n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape)) for n, a in extra]
    model = make_model([helper.make_node(op, names, ["y"], **attrs)], ins, [("y", out_type, None)],
                       initializers=initializers, opset=OPSET)
    return model, [x] + [a for _, a in extra]


def layout_reduce_cases(size: str):
    """Operators over other axes and ranks than the rows above: 3-D MaxPool, Transpose / SpaceToDepth layouts,
    float64 casts, Einsum that is not a matrix product, reductions / softmax / scans over a middle axis."""
    d, h, w = CUBE[size]
    x = rand((d, h, w))
    x4 = x.reshape(max(1, d // 16), -1, h, w)
    x5 = x.reshape(1, max(1, d // 4), -1, h, w)
    yield "MaxPool 3-D 2x2x2 s2", *single_op("MaxPool", x5, kernel_shape=[2, 2, 2], strides=[2, 2, 2])
    yield "MaxPool 3-D 3x3x3 s1 p1", *single_op("MaxPool", x5, kernel_shape=[3, 3, 3], pads=[1] * 6)
    yield "MaxPool 3x3 s1 p1", *single_op("MaxPool", x4, kernel_shape=[3, 3], pads=[1] * 4)
    yield "MaxPool 3x3 dilation 2 p2", *single_op("MaxPool", x4, kernel_shape=[3, 3], dilations=[2, 2], pads=[2] * 4)
    yield "Transpose 3-D [1, 0, 2]", *single_op("Transpose", x, perm=[1, 0, 2])
    yield "Transpose 4-D [0, 2, 1, 3]", *single_op("Transpose", x4, perm=[0, 2, 1, 3])
    yield "Transpose 4-D [0, 3, 1, 2]", *single_op("Transpose", x4, perm=[0, 3, 1, 2])
    yield "Transpose 4-D [0, 2, 1, 3], last axis 2", *single_op("Transpose", x.reshape(d, 2, -1, 2), perm=[0, 2, 1, 3])
    yield "Transpose 4-D [0, 3, 1, 2], 2 channels", *single_op("Transpose", x.reshape(d // 2 or 1, h, -1, 2),
                                                               perm=[0, 3, 1, 2])
    yield "Transpose uint8 2-D", *single_op("Transpose", (x.reshape(d * h, w) * 100).astype(np.uint8),
                                            out_type=TensorProto.UINT8, perm=[1, 0])
    yield "SpaceToDepth 2", *single_op("SpaceToDepth", x4, blocksize=2)
    yield "Cast (float64 -> float32)", *single_op("Cast", rand((d, h, w), -300, 300).astype(np.float64), to=F)
    x2 = x.reshape(d * h, w)
    for eq in ("ij->ji", "ij->i", "ij->j"):
        yield f"Einsum {eq}", *single_op("Einsum", x2, equation=eq)
    yield "Einsum bij->bj", *single_op("Einsum", x, equation="bij->bj")
    v, u = rand((w,), seed=2), rand((d * h,), seed=3)
    yield "Einsum ij,j->i", *single_op("Einsum", x2, extra=[("v", v)], equation="ij,j->i")
    yield "Einsum i,ij->j", *single_op("Einsum", u, extra=[("m", x2)], equation="i,ij->j")
    side = int(np.sqrt(x.size))
    yield "Einsum i,j->ij", *single_op("Einsum", u[:side], extra=[("v", rand((side,), seed=5))], equation="i,j->ij")
    xi = (x2 * 100).astype(np.int32)
    yield "Einsum int32 ij,ij->i", *single_op("Einsum", xi, extra=[("m", xi + 1)], out_type=TensorProto.INT32,
                                              equation="ij,ij->i")
    # contracted a pair at a time: three operands, and a label only one operand has (summed out of it first)
    sq = [rand((side, side), seed=s) for s in (6, 7, 8)]
    yield "Einsum ij,jk,kl->il", *single_op("Einsum", sq[0], extra=[("b", sq[1]), ("c", sq[2])],
                                            equation="ij,jk,kl->il")
    yield "Einsum ij,jk->i", *single_op("Einsum", sq[0], extra=[("b", sq[1])], equation="ij,jk->i")
    axis1 = [("axes", np.array([1], np.int64))]
    yield "ReduceL1 (all)", *single_op("ReduceL1", x, keepdims=0)
    yield "ReduceSumSquare (all)", *single_op("ReduceSumSquare", x, keepdims=0)
    yield "ReduceMax (axis 1 of 3)", *single_op("ReduceMax", x, initializers=axis1, keepdims=1)
    yield "ArgMax (axis 1 of 3)", *single_op("ArgMax", x, out_type=TensorProto.INT64, axis=1)
    yield "Softmax (axis 1 of 3)", *single_op("Softmax", x, axis=1)
    yield "Hardmax (axis -1)", *single_op("Hardmax", x, axis=-1)
    yield "CumSum (axis 1 of 3)", *single_op("CumSum", x, initializers=[("a", np.array(1, np.int64))])


def dtype_and_sweep_cases(size: str):
    """Cases a sweep over the operators above did not cover and found slow (float16 element-wise ops, Pow by a
    constant, int64 unary, RMSNormalization, GatherElements along the last axis, Identity chains; float64 Exp /
    Tanh / Sigmoid / Sin / Cos / Softmax), and a few representative others (Sub / Where / comparisons, Mod, Split,
    variadic Sum)."""
    shape = list(SIZES[size])
    rows, cols = shape
    x = rand(shape)
    h, hb = x.astype(np.float16), rand(shape[-1:], 0.9, 1.1, 1).astype(np.float16)
    for op in ("Relu", "Exp", "Tanh", "Sigmoid"):
        yield f"{op} float16", *single_op(op, h, out_type=TensorProto.FLOAT16)
    for op in ("Add", "Mul"):
        yield f"{op} float16 (row broadcast)", *single_op(op, h, out_type=TensorProto.FLOAT16, extra=[("b", hb)])
    yield "ReduceSum float16 (axis -1)", *single_op("ReduceSum", h, out_type=TensorProto.FLOAT16, keepdims=1,
                                                    initializers=[("a", np.array([-1], np.int64))])
    # the other reductions, and an outermost reduced axis (the whole input widened first)
    yield "ReduceMax float16 (axis -1)", *single_op("ReduceMax", h, out_type=TensorProto.FLOAT16, keepdims=1,
                                                    initializers=[("a", np.array([-1], np.int64))])
    yield "ReduceMean float16 (axis 0)", *single_op("ReduceMean", h, out_type=TensorProto.FLOAT16, keepdims=1,
                                                    initializers=[("a", np.array([0], np.int64))])
    yield "Softmax float16 (axis -1)", *single_op("Softmax", h, out_type=TensorProto.FLOAT16, axis=-1)
    for e in (2.0, 3.0, 0.5):
        base = rand(shape, 0.5, 2) if e == 0.5 else x
        yield f"Pow ^{e:g} (constant)", *single_op("Pow", base, initializers=[("e", np.array(e, np.float32))])
    yield "Pow (tensor exponent)", *single_op("Pow", rand(shape, 0.5, 2), extra=[("e", rand(shape, -2, 2, 2))])
    xi = (x * 1000).astype(np.int64)
    for op in ("Abs", "Sign"):
        yield f"{op} int64", *single_op(op, xi, out_type=TensorProto.INT64)
    yield "Equal int64", *single_op("Equal", xi % 4, out_type=TensorProto.BOOL, extra=[("b", (xi + 1) % 4)])
    yield "Cast (int64 -> float32)", *single_op("Cast", xi, to=F)
    yield "Tanh float64", *single_op("Tanh", x.astype(np.float64), out_type=TensorProto.DOUBLE)
    yield "Sqrt float64", *single_op("Sqrt", rand(shape, 0, 100).astype(np.float64), out_type=TensorProto.DOUBLE)
    for op, (lo, hi) in (("Exp", (-2, 2)), ("Sigmoid", (-6, 6)), ("Sin", (-3, 3)), ("Cos", (-3, 3))):
        yield f"{op} float64", *single_op(op, rand(shape, lo, hi).astype(np.float64), out_type=TensorProto.DOUBLE)
    for op in ("Softmax", "LogSoftmax"):
        yield f"{op} float64 (axis -1)", *single_op(op, x.astype(np.float64), out_type=TensorProto.DOUBLE, axis=-1)
    xi32 = (x * 1000).astype(np.int32)
    yield "Div int32 (same shape)", *single_op("Div", xi32, out_type=TensorProto.INT32,
                                               extra=[("b", (rand(shape, 1, 99, 1)).astype(np.int32))])
    yield "LpNormalization p=2 (axis -1)", *single_op("LpNormalization", x, axis=-1, p=2)
    rms = make_model([helper.make_node("RMSNormalization", ["x", "s"], ["y"], axis=-1)], [("x", F, shape)],
                     [("y", F, shape)], initializers=[("s", rand((cols,), 0.5, 1.5, 3))], opset=23)
    yield "RMSNormalization (axis -1)", rms, [x]
    idx = np.random.default_rng(7).integers(0, cols, shape).astype(np.int64)
    yield "GatherElements (axis -1)", *single_op("GatherElements", x, extra=[("i", idx)], axis=-1)
    bn = [(n, rand((cols,), lo, hi, seed)) for n, lo, hi, seed in (("s", .5, 1.5, 1), ("b", -1, 1, 2), ("m", -1, 1, 3),
                                                                     ("v", .5, 1.5, 4))]
    yield "BatchNormalization (2-D input)", *single_op("BatchNormalization", x, initializers=bn)
    yield f"Identity x{CHAIN}", chain_model("Identity", shape), [x]
    yield f"Sub x{CHAIN} (row broadcast)", binary_chain("Sub", shape, shape[-1:]), [x, rand(shape[-1:], seed=1)]
    yield "Where (same shape)", *single_op("Where", x > 0, extra=[("a", x), ("b", rand(shape, seed=1))])
    yield "Where (condition per row)", *single_op("Where", x[:, :1] > 0, extra=[("a", x), ("b", rand(shape, seed=1))])
    yield "Where (scalar else)", *single_op("Where", x > 0, extra=[("a", x)],
                                            initializers=[("b", np.array(0, np.float32))])
    yield "Greater (scalar)", *single_op("Greater", x, out_type=TensorProto.BOOL,
                                         initializers=[("b", np.array(0.0, np.float32))])
    yield "Mod fmod=1", *single_op("Mod", rand(shape, -10, 10), extra=[("b", rand(shape, 1, 3, 1))], fmod=1)
    yield "Sum of 3", *single_op("Sum", x, extra=[("b", rand(shape, seed=1)), ("c", rand(shape, seed=2))])
    split = make_model([helper.make_node("Split", ["x"], ["a", "b"], axis=1, num_outputs=2)], [("x", F, shape)],
                       [("a", F, [rows, cols // 2]), ("b", F, [rows, cols - cols // 2])], opset=OPSET)
    yield "Split (axis 1, 2 outputs)", split, [x]


# Shapes met in PyTorch-exported models (ResNet / MobileNet blocks at batch 3, an audio front end), per size: a
# small-map conv's (N, C, H, W), a stride-2 conv's, and the STFT's (batch, samples, n_fft).
EXPORTED = {"small": ((1, 8, 6, 6), (1, 8, 7, 7), (1, 1024, 64)),
            "64k": ((3, 32, 8, 8), (3, 16, 11, 11), (3, 16000, 64)),
            "1M": ((3, 64, 16, 16), (3, 32, 32, 32), (3, 16000, 400))}


def exported_model_cases(size: str):
    """Operators whose shapes a sweep of PyTorch-exported models found slow: 3x3 convolutions on feature maps narrower
    than a vector register (stride 1 and 2), the STFT of an audio front end, and the pooling spellings of the
    TorchScript exporter (a window over the whole map, a non-square window)."""
    (n, c, h, w), (n2, c2, h2, w2), (b, samples, n_fft) = EXPORTED[size]
    s1 = make_model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], [("x", F, [n, c, h, w])],
                    [("y", F, [n, c, h, w])], initializers=[("w", rand((c, c, 3, 3), -0.2, 0.2, 21))], opset=OPSET)
    yield f"Conv 3x3 s1 {c}->{c} on {n}x{h}x{w}", s1, [rand([n, c, h, w])]
    ho, wo = (h2 + 1) // 2, (w2 + 1) // 2
    s2 = make_model([helper.make_node("Conv", ["x", "w"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1])],
                    [("x", F, [n2, c2, h2, w2])], [("y", F, [n2, 2 * c2, ho, wo])],
                    initializers=[("w", rand((2 * c2, c2, 3, 3), -0.2, 0.2, 22))], opset=OPSET)
    yield f"Conv 3x3 s2 {c2}->{2 * c2} on {n2}x{h2}x{w2}", s2, [rand([n2, c2, h2, w2])]
    hop = max(n_fft // 4, 1)
    frames = (samples - n_fft) // hop + 1
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)).astype(np.float32)
    stft = make_model([helper.make_node("STFT", ["x", "step", "win"], ["y"], onesided=1)], [("x", F, [b, samples, 1])],
                      [("y", F, [b, frames, n_fft // 2 + 1, 2])],
                      initializers=[("step", np.array(hop, np.int64)), ("win", window)], opset=17)
    yield f"STFT n_fft {n_fft} hop {hop} ({b}x{samples})", stft, [rand([b, samples, 1])]
    # complex DFTs of lengths that are not powers of two: mixed radix (n_fft), a large prime factor (2 * 67)
    rows = max(b * samples // (2 * n_fft), 1)
    for length in (n_fft if n_fft & (n_fft - 1) else n_fft - 4, 134):
        dft = make_model([helper.make_node("DFT", ["x"], ["y"], axis=1)], [("x", F, [rows, length, 2])],
                         [("y", F, [rows, length, 2])], opset=17)
        yield f"DFT {rows}x{length} complex", dft, [rand([rows, length, 2])]
    x = rand([n, c, h, w])
    yield f"MaxPool over the whole {h}x{w} map", *single_op("MaxPool", x, kernel_shape=[h, w])
    xa = rand([n2, c2, 4 * (h2 // 4), 3 * (w2 // 3)])
    yield f"AveragePool 4x3 s 4x3 on {n2}x{c2}x{xa.shape[2]}x{xa.shape[3]}", *single_op(
        "AveragePool", xa, kernel_shape=[4, 3], strides=[4, 3])


# Pooling and small-conv shapes that measured well behind onnxruntime, per size: (N, C, H, W) of the pools' input,
# then the convs' (N, C, H) on square maps.
GAPS = {"small": ((1, 3, 9, 9), (1, 4, 5)), "64k": ((4, 16, 28, 28), (1, 64, 7)), "1M": ((1, 64, 57, 55), (4, 64, 14))}


def gap_cases(size: str):
    """Windows side by side along the row (kernel == stride 3, 4x3 stride (4, 3)), AveragePool 3x3 stride 2 with
    pads, dilated 3x3 Conv, 3x3 ConvTranspose at stride 1 and 3x3 Conv on maps of a few pixels with many channels."""
    x = rand(list(GAPS[size][0]))
    for op in ("AveragePool", "MaxPool"):
        for k in ([3, 3], [4, 3]):
            yield f"{op} {k[0]}x{k[1]} s {k[0]}x{k[1]} on {'x'.join(map(str, x.shape))}", *single_op(
                op, x, kernel_shape=k, strides=k)
    yield f"AveragePool 3x3 s2 p1 on {'x'.join(map(str, x.shape))}", *single_op(
        "AveragePool", x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    n, c, h = GAPS[size][1]
    xc = rand([n, c, h, h])
    w = [("w", rand((c, c, 3, 3), -0.2, 0.2, 23))]
    yield f"Conv 3x3 dilation 2 {c}->{c} on {n}x{h}x{h}", *single_op(
        "Conv", xc, initializers=w, kernel_shape=[3, 3], dilations=[2, 2], pads=[2, 2, 2, 2])
    yield f"ConvTranspose 3x3 s1 {c}->{c} on {n}x{h}x{h}", *single_op(
        "ConvTranspose", xc, initializers=w, kernel_shape=[3, 3])
    yield f"Conv 3x3 p1 {c}->{c} on {n}x{h}x{h} (small map)", *single_op(
        "Conv", xc, initializers=w, kernel_shape=[3, 3], pads=[1, 1, 1, 1])


def sweep3_cases(size: str):
    """A third sweep's findings (float16 comparisons / classes and casts to and from float16, float64 classes and
    narrowing casts, reductions and ArgMax over rows of 3, float64 ReduceMax rows, ReduceL1 over the leading axis,
    NHWC <-> NCHW of 3 and 8 channels) and representative others it measured (integer element-wise ops with
    broadcasts, bitwise ops)."""
    rows, cols = SIZES[size]
    n = rows * cols
    x = rand((rows, cols), -50, 50)
    h = x.astype(np.float16)
    hs = np.asarray(rand((cols,), -50, 50, 1).astype(np.float16))
    for op in ("Equal", "Less", "GreaterOrEqual"):
        yield f"{op} float16 (row broadcast)", *single_op(op, h, out_type=TensorProto.BOOL, extra=[("b", hs)])
    hx = h.copy()
    hx.reshape(-1)[::7] = np.inf
    for op in ("IsNaN", "IsInf"):
        yield f"{op} float16", *single_op(op, hx, out_type=TensorProto.BOOL)
        yield f"{op} float64", *single_op(op, hx.astype(np.float64), out_type=TensorProto.BOOL)
    for src, dst in ((np.float64, np.float16), (np.float16, np.float64), (np.float16, np.int32), (np.int32, np.float16),
                     (np.int8, np.float16), (np.float16, np.bool_), (np.bool_, np.float16), (np.float64, np.int16),
                     (np.float64, np.int32)):
        xs = (x > 0) if src == np.bool_ else x.astype(src)
        t = helper.np_dtype_to_tensor_dtype(np.dtype(dst))
        yield (f"Cast ({np.dtype(src).name} -> {np.dtype(dst).name})",
               *single_op("Cast", xs, out_type=t, to=t))
    xi = (x * 10).astype(np.int32)
    bi = (rand((cols,), 1, 50, 2) * 10).astype(np.int32)
    yield "Add int32 (row broadcast)", *single_op("Add", xi, out_type=TensorProto.INT32, extra=[("b", bi)])
    yield "Mul int8 (column broadcast)", *single_op("Mul", xi.astype(np.int8), out_type=TensorProto.INT8,
                                                    extra=[("b", xi[:, :1].astype(np.int8))])
    yield "BitwiseAnd int64", *single_op("BitwiseAnd", xi.astype(np.int64), out_type=TensorProto.INT64,
                                         extra=[("b", (xi + 3).astype(np.int64))])
    yield "Mod float64 fmod=1", *single_op("Mod", x.astype(np.float64), out_type=TensorProto.DOUBLE,
                                           extra=[("b", rand((rows, cols), 1, 3, 3).astype(np.float64))], fmod=1)
    short = rand((max(n // 3, 1), 3), seed=4)
    last = [("a", np.array([-1], np.int64))]
    for op in ("ReduceSum", "ReduceMax", "ReduceL2", "ReduceLogSumExp"):
        yield f"{op} (rows of 3)", *single_op(op, short, initializers=last, keepdims=1)
    yield "ArgMax (rows of 3)", *single_op("ArgMax", short, out_type=TensorProto.INT64, axis=-1)
    yield "ReduceL1 (axis 0 of rows of 3)", *single_op("ReduceL1", short, initializers=[("a", np.array([0], np.int64))],
                                                        keepdims=1)
    yield "ReduceMax float64 (axis -1)", *single_op("ReduceMax", x.astype(np.float64), out_type=TensorProto.DOUBLE,
                                                    initializers=last, keepdims=1)
    side = max(int(np.sqrt(n // 24)), 1)
    nhwc = rand((1, side, side, 3), seed=5)
    yield "Transpose NHWC -> NCHW, 3 channels", *single_op("Transpose", nhwc, perm=[0, 3, 1, 2])
    nchw = rand((1, 8, side, side), seed=6)
    yield "Transpose NCHW -> NHWC, 8 channels", *single_op("Transpose", nchw, perm=[0, 2, 3, 1])


def conv_sweep_cases(size: str):
    """Shapes other people's models use (1M size only): Conv1d (audio / text, plain and depthwise), Conv3d (video),
    ConvTranspose stride 2 (2-D k 2/3/4 with output_padding, 1-D), 2-D convs with asymmetric pads, 1x7 / 7x1 kernels,
    stride 2, grouped, the 7x7 s2 first layer at batch 1 and 8; pools with ceil_mode / count_include_pad, 1-D and 3-D,
    global and Lp pools; Resize in its modes and coordinate transformations, up and down."""
    if size != "1M":
        return

    def conv(name, x, w, op="Conv", **attrs):
        wt = [("w", rand(w, -0.2, 0.2, 31))]
        return f"{name} on {'x'.join(map(str, x.shape))}", *single_op(op, x, initializers=wt, **attrs)

    for c_in, c_out, k, s, length in ((128, 128, 3, 1, 4096), (64, 128, 5, 2, 16000), (256, 256, 7, 1, 1024),
                                      (64, 64, 11, 1, 4096), (512, 512, 3, 2, 1024)):
        yield conv(f"Conv1d k{k} s{s} {c_in}->{c_out}", rand([1, c_in, length], seed=32), [c_out, c_in, k],
                   kernel_shape=[k], strides=[s], pads=[k // 2, k // 2])
    for c, k, length in ((512, 3, 1024), (256, 7, 4096), (128, 11, 16000)):
        yield conv(f"Conv1d depthwise k{k} {c}", rand([1, c, length], seed=33), [c, 1, k], kernel_shape=[k],
                   pads=[k // 2, k // 2], group=c)
    for c_in, c_out, d, h in ((16, 32, 8, 56), (64, 64, 4, 28)):
        yield conv(f"Conv3d 3x3x3 p1 {c_in}->{c_out}", rand([1, c_in, d, h, h], seed=34), [c_out, c_in, 3, 3, 3],
                   kernel_shape=[3, 3, 3], pads=[1] * 6)
    x = rand([1, 64, 56, 56], seed=35)
    yield conv("ConvTranspose 2x2 s2 64->32", x, [64, 32, 2, 2], op="ConvTranspose", kernel_shape=[2, 2],
               strides=[2, 2])
    yield conv("ConvTranspose 3x3 s2 p1 op1 64->32", x, [64, 32, 3, 3], op="ConvTranspose", kernel_shape=[3, 3],
               strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])
    yield conv("ConvTranspose 4x4 s2 p1 64->32", x, [64, 32, 4, 4], op="ConvTranspose", kernel_shape=[4, 4],
               strides=[2, 2], pads=[1, 1, 1, 1])
    yield conv("ConvTranspose1d k4 s2 p1 128->64", rand([1, 128, 2048], seed=36), [128, 64, 4], op="ConvTranspose",
               kernel_shape=[4], strides=[2], pads=[1, 1])
    yield conv("Conv 3x3 s2 pads 0,0,1,1 64->128", x, [128, 64, 3, 3], kernel_shape=[3, 3], strides=[2, 2],
               pads=[0, 0, 1, 1])
    yield conv("Conv 3x3 s2 p1 64->128", x, [128, 64, 3, 3], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    yield conv("Conv 1x1 s2 64->128", x, [128, 64, 1, 1], kernel_shape=[1, 1], strides=[2, 2])
    for n in (1, 8):
        xi = rand([n, 128, 17, 17], seed=37)
        yield conv("Conv 1x7 128->128", xi, [128, 128, 1, 7], kernel_shape=[1, 7], pads=[0, 3, 0, 3])
        yield conv("Conv 7x1 128->128", xi, [128, 128, 7, 1], kernel_shape=[7, 1], pads=[3, 0, 3, 0])
    for g in (2, 8, 32):
        yield conv(f"Conv 3x3 p1 groups {g} 128->128", x.repeat(2, axis=1), [128, 128 // g, 3, 3],
                   kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=g)
    for n, h in ((1, 224), (8, 112)):
        yield conv("Conv 7x7 s2 p3 3->64", rand([n, 3, h, h], seed=38), [64, 3, 7, 7], kernel_shape=[7, 7],
                   strides=[2, 2], pads=[3, 3, 3, 3])
    xp = rand([1, 64, 112, 112], seed=39)
    name = "x".join(map(str, xp.shape))
    yield f"MaxPool 3x3 s2 ceil on {name}", *single_op("MaxPool", xp, kernel_shape=[3, 3], strides=[2, 2],
                                                       ceil_mode=1)
    yield f"AveragePool 3x3 s2 p1 ceil count_pad on {name}", *single_op(
        "AveragePool", xp, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=1)
    yield f"AveragePool 2x2 s2 ceil on {name}", *single_op("AveragePool", xp[:, :, :111, :111].copy(),
                                                           kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
    yield f"LpPool p2 3x3 s2 on {name}", *single_op("LpPool", xp, kernel_shape=[3, 3], strides=[2, 2], p=2)
    x1 = rand([1, 256, 4096], seed=40)
    for op in ("MaxPool", "AveragePool"):
        yield f"{op}1d k3 s2 p1 on 1x256x4096", *single_op(op, x1, kernel_shape=[3], strides=[2], pads=[1, 1])
    x3 = rand([1, 32, 16, 56, 56], seed=41)
    yield "MaxPool3d 2x2x2 s2 on 1x32x16x56x56", *single_op("MaxPool", x3, kernel_shape=[2, 2, 2], strides=[2, 2, 2])
    yield "AveragePool3d 3x3x3 s2 p1 on 1x32x16x56x56", *single_op(
        "AveragePool", x3, kernel_shape=[3, 3, 3], strides=[2, 2, 2], pads=[1] * 6)
    for shape in ((1, 2048, 7, 7), (1, 256, 56, 56)):
        xg = rand(list(shape), seed=42)
        for op in ("GlobalAveragePool", "GlobalMaxPool"):
            yield f"{op} on {'x'.join(map(str, shape))}", *single_op(op, xg)
    xr = rand([1, 32, 128, 128], seed=43)
    empty = ("roi", np.zeros(0, np.float32))
    for mode, ctm, scale, extra in (("nearest", "asymmetric", 2.0, {"nearest_mode": "floor"}),
                                    ("nearest", "half_pixel", 2.0, {}),
                                    ("linear", "half_pixel", 2.0, {}), ("linear", "align_corners", 2.0, {}),
                                    ("linear", "pytorch_half_pixel", 0.5, {}), ("linear", "half_pixel", 0.5, {}),
                                    ("nearest", "asymmetric", 0.5, {}), ("cubic", "half_pixel", 2.0, {}),
                                    ("cubic", "align_corners", 0.5, {}), ("linear", "asymmetric", 1.5, {})):
        sc = ("sc", np.array([1, 1, scale, scale], np.float32))
        yield f"Resize {mode} {ctm} x{scale} on 1x32x128x128", *single_op(
            "Resize", xr, initializers=[empty, sc], mode=mode, coordinate_transformation_mode=ctm, **extra)


def sweep4_cases(size: str):
    """A fourth sweep: the gaps the third left (ArgMax / ArgMin and ReduceLogSumExp over short rows, float64 Mod and
    comparisons, variadic / broadcast Max and Min over rows of 8-16, GatherND, float16 Transpose and Sign,
    ScatterElements with reduction=add) and what a dtype / broadcast / axis sweep found beside them."""
    rows, cols = SIZES[size]
    n = rows * cols
    x = rand((rows, cols), -50, 50)
    short = rand((max(n // 3, 1), 3), seed=4)
    for op in ("ArgMax", "ArgMin"):
        yield f"{op} (rows of 3, keepdims 0)", *single_op(op, short, out_type=TensorProto.INT64, axis=-1, keepdims=0)
    yield "ArgMin (axis 0, 16 columns)", *single_op("ArgMin", x.reshape(-1, 16) if n >= 16 else x,
                                                    out_type=TensorProto.INT64, axis=0)
    last = [("a", np.array([-1], np.int64))]
    for w in (3, 8):
        xs = rand((max(n // w, 1), w), seed=5)
        yield f"ReduceLogSumExp (rows of {w})", *single_op("ReduceLogSumExp", xs, initializers=last, keepdims=0)
    d = x.astype(np.float64)
    b = rand((rows, cols), 1, 3, 3).astype(np.float64)
    yield "Mod float64 fmod=1", *single_op("Mod", d, out_type=TensorProto.DOUBLE, extra=[("b", b)], fmod=1)
    yield "Mod float64 fmod=1 (scalar)", *single_op("Mod", d, out_type=TensorProto.DOUBLE,
                                                    extra=[("b", np.array(1.7, np.float64))], fmod=1)
    for op in ("GreaterOrEqual", "LessOrEqual"):
        yield f"{op} float64", *single_op(op, d, out_type=TensorProto.BOOL, extra=[("b", b * 20 - 40)])
        yield f"{op} float64 (row broadcast)", *single_op(op, d, out_type=TensorProto.BOOL,
                                                          extra=[("b", b[0] * 20 - 40)])
    for w in (8, 16):
        xw = rand((max(n // w, 1), w), seed=6)
        yw = rand((max(n // w, 1), w), seed=7)
        bw = rand((w,), seed=8)
        for op in ("Max", "Min"):
            yield f"{op} 3 inputs (rows of {w}, row broadcast)", *single_op(op, xw, extra=[("c", yw), ("b", bw)])
            yield f"{op} (rows of {w}, row broadcast)", *single_op(op, xw, extra=[("b", bw)])
    k = max(n // 8, 1)
    rng = np.random.default_rng(9)
    idx2 = np.stack([rng.integers(0, rows, k), rng.integers(0, cols, k)], axis=1).astype(np.int64)
    yield "GatherND (scalars, indices [k, 2])", *single_op("GatherND", x, initializers=[("i", idx2)])
    idx1 = rng.integers(0, rows, (rows, 1)).astype(np.int64)
    yield "GatherND (rows, indices [k, 1])", *single_op("GatherND", x, initializers=[("i", idx1)])
    h = x.astype(np.float16)
    yield "Transpose float16 2-D", *single_op("Transpose", h, out_type=TensorProto.FLOAT16, perm=[1, 0])
    h3 = h.reshape(-1, 64) if n >= 64 else h
    yield "Transpose float16 2-D (64 columns)", *single_op("Transpose", h3, out_type=TensorProto.FLOAT16, perm=[1, 0])
    yield "Sign float16", *single_op("Sign", h, out_type=TensorProto.FLOAT16)
    c3 = rand(CUBE[size], seed=44).astype(np.float64)  # x has other sizes than the cube at "small"
    mid = [("a", np.array([1], np.int64))]
    for op in ("ReduceMax", "ReduceMin"):
        yield f"{op} float64 (middle axis)", *single_op(op, c3, out_type=TensorProto.DOUBLE, initializers=mid,
                                                        keepdims=1)
    yield "ReduceMax float64 (rows of 32)", *single_op("ReduceMax", c3.reshape(-1, 32), out_type=TensorProto.DOUBLE,
                                                       initializers=last, keepdims=1)
    yield "ReduceMax (rows of 32)", *single_op("ReduceMax", c3.astype(np.float32).reshape(-1, 32), initializers=last,
                                               keepdims=1)
    upd = rand((rows, cols), seed=10)
    sidx = rng.integers(0, rows, (rows, cols)).astype(np.int64)
    yield "ScatterElements add (axis 0)", *single_op("ScatterElements", x, extra=[("i", sidx)],
                                                     initializers=[("u", upd)], axis=0, reduction="add")
    sidx1 = rng.integers(0, cols, (rows, cols)).astype(np.int64)
    yield "ScatterElements add (axis 1)", *single_op("ScatterElements", x, extra=[("i", sidx1)],
                                                     initializers=[("u", upd)], axis=1, reduction="add")


def conv_sweep2_cases(size: str):
    """A second conv sweep (1M size only): the rows "pooling / conv gaps" left above 1.5x (dilated 3x3 on 7x7 /
    14x14 maps, depthwise 3x3 stride 2 on 32x32, 1x1 on 2x2 maps of several images), 1x1 convs on small maps at
    batch 2-16 (ResNet's last stage, a classifier head as a 1x1 conv on 1x1 maps), depthwise 3x3 / 5x5 with bias,
    grouped 3x3, dilated Conv1d (WaveNet / TCN), strided 1x1, SAME_UPPER pads, ConvTranspose with groups /
    dilations / output_padding, float16."""
    if size != "1M":
        return

    def conv(name, x, w, op="Conv", bias=False, **attrs):
        init = [("w", rand(w, -0.2, 0.2, 51).astype(x.dtype))]
        if bias:
            init.append(("b", rand([w[1] * attrs.get("group", 1) if op == "ConvTranspose" else w[0]], seed=52)
                         .astype(x.dtype)))
        t = helper.np_dtype_to_tensor_dtype(x.dtype)
        return f"{name} on {'x'.join(map(str, x.shape))}", *single_op(op, x, out_type=t, initializers=init, **attrs)

    for n, h in ((1, 7), (4, 14)):
        yield conv("Conv 3x3 dilation 2 64->64", rand([n, 64, h, h], seed=53), [64, 64, 3, 3], kernel_shape=[3, 3],
                   dilations=[2, 2], pads=[2, 2, 2, 2])
    yield conv("Conv depthwise 3x3 s2 p1 96", rand([2, 96, 32, 32], seed=54), [96, 1, 3, 3], kernel_shape=[3, 3],
               strides=[2, 2], pads=[1, 1, 1, 1], group=96)
    for n, c, m in ((1, 256, 512), (2, 256, 512), (4, 512, 512)):
        yield conv(f"Conv 1x1 {c}->{m}", rand([n, c, 2, 2], seed=55), [m, c, 1, 1], kernel_shape=[1, 1])
    yield conv("Conv 1x1 bias 1280->1000", rand([8, 1280, 1, 1], seed=56), [1000, 1280, 1, 1], bias=True,
               kernel_shape=[1, 1])
    for n in (2, 8):
        yield conv("Conv 1x1 bias 512->2048", rand([n, 512, 7, 7], seed=57), [2048, 512, 1, 1], bias=True,
                   kernel_shape=[1, 1])
        yield conv("Conv 1x1 bias 2048->512", rand([n, 2048, 7, 7], seed=57), [512, 2048, 1, 1], bias=True,
                   kernel_shape=[1, 1])
    yield conv("Conv 3x3 p1 bias 256->256", rand([8, 256, 14, 14], seed=58), [256, 256, 3, 3], bias=True,
               kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    yield conv("Conv depthwise 3x3 p1 bias 576", rand([2, 576, 14, 14], seed=59), [576, 1, 3, 3], bias=True,
               kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=576)
    yield conv("Conv depthwise 5x5 p2 bias 240", rand([1, 240, 14, 14], seed=60), [240, 1, 5, 5], bias=True,
               kernel_shape=[5, 5], pads=[2, 2, 2, 2], group=240)
    yield conv("Conv 3x3 p1 groups 2 256->256", rand([2, 256, 14, 14], seed=61), [256, 128, 3, 3],
               kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=2)
    for c, k, d, length in ((64, 2, 16, 4096), (256, 3, 64, 1024), (64, 3, 32, 16000)):
        yield conv(f"Conv1d k{k} dilation {d} {c}->{c}", rand([1, c, length], seed=62), [c, c, k], kernel_shape=[k],
                   dilations=[d], pads=[d * (k - 1), 0])
    yield conv("Conv 1x1 s2 256->512", rand([2, 256, 28, 28], seed=63), [512, 256, 1, 1], kernel_shape=[1, 1],
               strides=[2, 2])
    yield conv("Conv 3x3 s2 SAME_UPPER 64->128", rand([1, 64, 56, 56], seed=64), [128, 64, 3, 3],
               kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")
    yield conv("ConvTranspose 3x3 s2 p1 op1 groups 2 64->64", rand([2, 64, 14, 14], seed=65), [64, 32, 3, 3],
               op="ConvTranspose", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1],
               group=2)
    yield conv("ConvTranspose 3x3 dilation 2 64->64", rand([1, 64, 28, 28], seed=66), [64, 64, 3, 3],
               op="ConvTranspose", kernel_shape=[3, 3], dilations=[2, 2])
    yield conv("Conv float16 depthwise 3x3 p1 128", rand([1, 128, 28, 28], seed=67).astype(np.float16),
               [128, 1, 3, 3], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=128)


def conv_sweep3_cases(size: str):
    """A third conv sweep (1M size only): dilated 3x3 on small maps (DeepLab / ASPP), dilated Conv1d (WaveNet / TCN),
    depthwise 3x3 stride 2 (MobileNet / EfficientNet downsampling), depthwise 5x5 on 14x14 and 7x7 (EfficientNet,
    ConvNeXt), depthwise with channel multiplier 2, ResNeXt's groups of 32, and Conv + bias followed by the
    activations exported models put after it (Relu, Clip 0..6, HardSwish, Sigmoid-Mul)."""
    if size != "1M":
        return

    def conv(name, x, w, bias=False, after=None, **attrs):
        init = [("w", rand(w, -0.2, 0.2, 71))]
        if bias:
            init.append(("b", rand([w[0]], seed=72)))
        nodes = [helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), ["c" if after else "y"], **attrs)]
        if after == "Clip":
            init += [("lo", np.array(0, np.float32)), ("hi", np.array(6, np.float32))]
            nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))
        elif after == "SiLU":
            nodes += [helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
        elif after:
            nodes.append(helper.make_node(after, ["c"], ["y"]))
        model = make_model(nodes, [("x", F, list(x.shape))], [("y", F, None)], initializers=init, opset=OPSET)
        return f"{name} on {'x'.join(map(str, x.shape))}", model, [x]

    for n, h in ((1, 7), (4, 14)):
        for d in (2, 4):
            yield conv(f"Conv 3x3 dilation {d} 64->64", rand([n, 64, h, h], seed=73), [64, 64, 3, 3],
                       kernel_shape=[3, 3], dilations=[d, d], pads=[d] * 4)
    for c, k, d, length in ((64, 2, 16, 4096), (256, 3, 64, 1024), (64, 3, 32, 16000), (32, 2, 2, 8192),
                            (128, 3, 8, 4096)):
        yield conv(f"Conv1d k{k} dilation {d} {c}->{c}", rand([1, c, length], seed=74), [c, c, k], kernel_shape=[k],
                   dilations=[d], pads=[d * (k - 1), 0])
    for shape in ((2, 96, 32, 32), (1, 144, 56, 56), (1, 240, 28, 28)):
        yield conv(f"Conv depthwise 3x3 s2 p1 {shape[1]}", rand(list(shape), seed=75), [shape[1], 1, 3, 3],
                   kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4, group=shape[1])
    for c in (480, 672):
        for s in (1, 2):
            yield conv(f"Conv depthwise 5x5 s{s} p2 {c}", rand([1, c, 14, 14], seed=76), [c, 1, 5, 5],
                       kernel_shape=[5, 5], strides=[s, s], pads=[2] * 4, group=c)
    for c, h in ((96, 56), (192, 28), (384, 14), (768, 7)):
        yield conv(f"Conv depthwise 7x7 p3 bias {c}", rand([1, c, h, h], seed=77), [c, 1, 7, 7], bias=True,
                   kernel_shape=[7, 7], pads=[3] * 4, group=c)
    for s in (1, 2):
        yield conv(f"Conv depthwise x2 3x3 s{s} p1 32->64", rand([1, 32, 56, 56], seed=78), [64, 1, 3, 3],
                   kernel_shape=[3, 3], strides=[s, s], pads=[1] * 4, group=32)
    for c, h in ((256, 56), (512, 28), (1024, 14)):
        yield conv(f"Conv 3x3 p1 groups 32 {c}->{c}", rand([1, c, h, h], seed=79), [c, c // 32, 3, 3],
                   kernel_shape=[3, 3], pads=[1] * 4, group=32)
    for after in ("Relu", "Clip", "HardSwish", "SiLU"):
        yield conv(f"Conv 3x3 p1 bias + {after} 64->64", rand([1, 64, 28, 28], seed=80), [64, 64, 3, 3], bias=True,
                   after=after, kernel_shape=[3, 3], pads=[1] * 4)
        yield conv(f"Conv depthwise 3x3 p1 bias + {after} 144", rand([1, 144, 56, 56], seed=81), [144, 1, 3, 3],
                   bias=True, after=after, kernel_shape=[3, 3], pads=[1] * 4, group=144)
        yield conv(f"Conv 1x1 bias + {after} 96->576", rand([1, 96, 14, 14], seed=82), [576, 96, 1, 1], bias=True,
                   after=after, kernel_shape=[1, 1])

def conv_sweep4_cases(size: str):
    """A fourth conv sweep (1M size only): what unknown models use and earlier sweeps did not measure:
    ConvTranspose for UNet / decoder / GAN upsampling (2x2 s2, 4x4 s2 p1, 3x3 s2 p1 output_padding 1, depthwise),
    1-D ConvTranspose for audio vocoders, Conv1d k=1 / 3 / 5 (speech / TTS), a small Conv3d, and depthwise 3x3 / 5x5
    stride 2 on the maps MobileNet / EfficientNet downsample."""
    if size != "1M":
        return

    def conv(op, name, x, w, **attrs):
        init = [("w", rand(w, -0.2, 0.2, 91))]
        node = helper.make_node(op, ["x", "w"], ["y"], **attrs)
        model = make_model([node], [("x", F, list(x.shape))], [("y", F, None)], initializers=init, opset=OPSET)
        return f"{name} on {'x'.join(map(str, x.shape))}", model, [x]

    for c, m, h in ((64, 32, 32), (128, 64, 16), (256, 128, 8), (32, 16, 64)):
        yield conv("ConvTranspose", f"ConvTranspose 2x2 s2 {c}->{m}", rand([1, c, h, h], seed=92), [c, m, 2, 2],
                   kernel_shape=[2, 2], strides=[2, 2])
    for c, m, h in ((128, 64, 16), (64, 32, 32), (256, 128, 8)):
        yield conv("ConvTranspose", f"ConvTranspose 4x4 s2 p1 {c}->{m}", rand([1, c, h, h], seed=93), [c, m, 4, 4],
                   kernel_shape=[4, 4], strides=[2, 2], pads=[1] * 4)
    for c, m, h in ((64, 32, 32), (128, 64, 16)):
        yield conv("ConvTranspose", f"ConvTranspose 3x3 s2 p1 op1 {c}->{m}", rand([1, c, h, h], seed=94),
                   [c, m, 3, 3], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4, output_padding=[1, 1])
    yield conv("ConvTranspose", "ConvTranspose depthwise 4x4 s2 p1 64", rand([1, 64, 32, 32], seed=95), [64, 1, 4, 4],
               kernel_shape=[4, 4], strides=[2, 2], pads=[1] * 4, group=64)
    yield conv("ConvTranspose", "ConvTranspose 2x2 s2 groups 4 128->128", rand([1, 128, 16, 16], seed=96),
               [128, 32, 2, 2], kernel_shape=[2, 2], strides=[2, 2], group=4)
    for c, m, k, s, p, length in ((512, 256, 16, 8, 4, 64), (256, 128, 16, 8, 4, 512), (128, 64, 4, 2, 1, 2048)):
        yield conv("ConvTranspose", f"ConvTranspose1d k{k} s{s} p{p} {c}->{m}", rand([1, c, length], seed=97),
                   [c, m, k], kernel_shape=[k], strides=[s], pads=[p, p])
    for c, m, k, length in ((256, 256, 1, 1000), (256, 256, 3, 500), (80, 256, 5, 400), (512, 512, 5, 200)):
        yield conv("Conv", f"Conv1d k{k} p{k // 2} {c}->{m}", rand([1, c, length], seed=98), [m, c, k],
                   kernel_shape=[k], pads=[k // 2] * 2)
    yield conv("Conv", "Conv3d 3x3x3 p1 16->16", rand([1, 16, 8, 32, 32], seed=99), [16, 16, 3, 3, 3],
               kernel_shape=[3, 3, 3], pads=[1] * 6)
    for c, h, k in ((32, 112, 3), (144, 56, 3), (240, 28, 5), (672, 14, 5), (96, 112, 3), (192, 20, 5)):
        yield conv("Conv", f"Conv depthwise {k}x{k} s2 p{k // 2} {c}", rand([1, c, h, h], seed=100), [c, 1, k, k],
                   kernel_shape=[k, k], strides=[2, 2], pads=[k // 2] * 4, group=c)


def conv_sweep5_cases(size: str):
    """A fifth conv sweep (1M size only): the conv rows still above 1.5x onnxruntime after the fourth: dilated 3x3
    on 7x7 / 8x8 / 14x14 / 28x28 maps (ASPP, FCN-ResNet50's dilated layer4), depthwise 7x7 on ConvNeXt's late maps,
    Conv3d 3x3x3, depthwise 5x5 stride 2 to 7x7 / 14x14."""
    if size != "1M":
        return

    def conv(name, x, w, bias=False, **attrs):
        init = [("w", rand(w, -0.2, 0.2, 111))]
        if bias:
            init.append(("b", rand([w[0]], seed=112)))
        node = helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), ["y"], **attrs)
        model = make_model([node], [("x", F, list(x.shape))], [("y", F, None)], initializers=init, opset=OPSET)
        return f"{name} on {'x'.join(map(str, x.shape))}", model, [x]

    for c, h in ((64, 7), (512, 8), (64, 14), (64, 28)):
        for d in (2, 4):
            yield conv(f"Conv 3x3 dilation {d} {c}->{c}", rand([1, c, h, h], seed=113), [c, c, 3, 3],
                       kernel_shape=[3, 3], dilations=[d, d], pads=[d] * 4)
    for c, h in ((768, 7), (384, 14), (192, 28)):
        yield conv(f"Conv depthwise 7x7 p3 bias {c}", rand([1, c, h, h], seed=114), [c, 1, 7, 7], bias=True,
                   kernel_shape=[7, 7], pads=[3] * 4, group=c)
    for c, m, d, h in ((16, 16, 8, 32), (32, 32, 8, 16), (64, 64, 4, 14)):
        yield conv(f"Conv3d 3x3x3 p1 {c}->{m}", rand([1, c, d, h, h], seed=115), [m, c, 3, 3, 3],
                   kernel_shape=[3, 3, 3], pads=[1] * 6)
    for c, h in ((672, 14), (480, 28), (240, 28)):
        yield conv(f"Conv depthwise 5x5 s2 p2 {c}", rand([1, c, h, h], seed=116), [c, 1, 5, 5],
                   kernel_shape=[5, 5], strides=[2, 2], pads=[2] * 4, group=c)


def conv_sweep6_cases(size: str):
    """A sixth conv sweep (1M size only): dilated convs on small maps whose taps partly read padding (the channels-
    last path by regions): 3x3 dilation 2 / 4 / 6 on 7x7 / 8x8 / 14x14 (DeepLab's ASPP at output stride 16 / 32,
    FCN's dilated layer4), several images, a dilated Conv1d over a short sequence."""
    if size != "1M":
        return

    def conv(name, x, w, **attrs):
        init = [("w", rand(w, -0.2, 0.2, 121))]
        node = helper.make_node("Conv", ["x", "w"], ["y"], **attrs)
        model = make_model([node], [("x", F, list(x.shape))], [("y", F, None)], initializers=init, opset=OPSET)
        return f"{name} on {'x'.join(map(str, x.shape))}", model, [x]

    for n, c, h, d in ((1, 64, 7, 4), (1, 64, 7, 2), (1, 256, 7, 6), (1, 512, 8, 4), (1, 128, 14, 6),
                       (4, 64, 7, 4), (1, 256, 4, 2)):
        yield conv(f"Conv 3x3 dilation {d} {c}->{c}", rand([n, c, h, h], seed=122), [c, c, 3, 3],
                   kernel_shape=[3, 3], dilations=[d, d], pads=[d] * 4)
    yield conv("Conv1d k3 dilation 8 64->64", rand([1, 64, 24], seed=123), [64, 64, 3], kernel_shape=[3],
               dilations=[8], pads=[8, 8])


def conv_sweep7_cases(size: str):
    """A seventh conv sweep (1M size only): the activations a Conv absorbs after itself (SiLU as Sigmoid -> Mul,
    Sigmoid, Tanh, HardSwish), after depthwise convs at stride 1 and 2 (EfficientNet / MobileNetV3 blocks, one and
    two images) and a dense 3x3, and after a folded BatchNormalization."""
    if size != "1M":
        return

    def conv(name, x, w, after, bn=False, **attrs):
        m = w[0]
        init = [("w", rand(w, -0.2, 0.2, 131)), ("b", rand([m], seed=132))]
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c0" if bn else "c"], **attrs)]
        if bn:
            init += [("sc", rand([m], 0.5, 1.5, 133)), ("sh", rand([m], seed=134)), ("mu", rand([m], seed=135)),
                     ("var", rand([m], 0.5, 2.0, 136))]
            nodes.append(helper.make_node("BatchNormalization", ["c0", "sc", "sh", "mu", "var"], ["c"]))
        if after == "SiLU":
            nodes += [helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
        else:
            nodes.append(helper.make_node(after, ["c"], ["y"]))
        model = make_model(nodes, [("x", F, list(x.shape))], [("y", F, None)], initializers=init, opset=OPSET)
        return f"{name} + {after} on {'x'.join(map(str, x.shape))}", model, [x]

    for after in ("SiLU", "Sigmoid", "Tanh", "HardSwish"):
        yield conv("Conv depthwise 3x3 p1 bias", rand([1, 96, 56, 56], seed=137), [96, 1, 3, 3], after,
                   kernel_shape=[3, 3], pads=[1] * 4, group=96)
    for shape, k, s in (((1, 240, 28, 28), 5, 2), ((2, 96, 32, 32), 3, 2), ((1, 672, 14, 14), 5, 1),
                        ((1, 1152, 7, 7), 3, 1)):
        yield conv(f"Conv depthwise {k}x{k} s{s} bias + BN", rand(list(shape), seed=138), [shape[1], 1, k, k], "SiLU",
                   bn=True, kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4, group=shape[1])
    yield conv("Conv 3x3 p1 bias", rand([1, 32, 56, 56], seed=139), [32, 32, 3, 3], "SiLU", kernel_shape=[3, 3],
               pads=[1] * 4)


def quant_model_cases(size: str):
    """Quantised models: QuantizeLinear / DequantizeLinear with 16-bit activations (quantize_static's QUInt16 /
    QInt16, opset 21), per tensor and per channel, and a QDQ Conv whose weight is a DequantizeLinear of an int8
    initializer above the 1 MiB folding limit (a resnet18 layer4 convolution)."""
    rows, cols = SIZES[size]
    shape = [rows, cols]
    rng = np.random.default_rng(46)
    for name, qt, npt in (("u16", TensorProto.UINT16, np.uint16), ("s16", TensorProto.INT16, np.int16)):
        zero = ("z", np.array(7, npt))
        q = make_model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])], [("x", F, shape)],
                       [("y", qt, shape)], initializers=[("s", np.array(1e-4, np.float32)), zero], opset=21)
        yield f"QuantizeLinear {name} {rows}x{cols}", q, [rand(shape)]
        ints = rng.integers(np.iinfo(npt).min, np.iinfo(npt).max, shape, npt, endpoint=True)
        dq = make_model([helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"])], [("x", qt, shape)],
                        [("y", F, shape)], initializers=[("s", np.array(1e-4, np.float32)), zero], opset=21)
        yield f"DequantizeLinear {name} {rows}x{cols}", dq, [ints]
        dqa = make_model([helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], axis=1)], [("x", qt, shape)],
                         [("y", F, shape)], initializers=[("s", rand((cols,), 1e-4, 3e-4, 1)),
                                                          ("z", np.full(cols, 3, npt))], opset=21)
        yield f"DequantizeLinear {name} per-axis {rows}x{cols}", dqa, [ints]
    c = {"small": 8, "64k": 256, "1M": 512}[size]
    w = rng.integers(-128, 128, (c, c, 3, 3), np.int8)
    conv = make_model([helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=0),
                       helper.make_node("Conv", ["x", "wf"], ["y"], pads=[1, 1, 1, 1])],
                      [("x", F, [2, c, 2, 2])], [("y", F, [2, c, 2, 2])],
                      initializers=[("w", w), ("ws", rand((c,), 1e-3, 2e-3, 2)), ("wz", np.zeros(c, np.int8))],
                      opset=OPSET)
    yield f"QDQ Conv 3x3 {c}->{c} on 2x2 (int8 per-channel weight)", conv, [rand((2, c, 2, 2))]


# Cases whose onnxruntime output may differ from the graph as written (its fused integer QDQ Conv rounds the int32
# sum once, where the graph's float Conv rounds partial sums): name -> the output's quantisation step. When the twin
# and onnxruntime disagree there, the twin is checked against onnx.reference (the oracle) instead: within one step,
# at under 1% of the outputs (the fused Conv's documented rule, docs/operators.md "Quantised models").
ONE_STEP_CASES: dict[str, float] = {}


def agrees_with_reference(model, feeds, out: np.ndarray, step: float) -> bool:
    from onnx.reference import ReferenceEvaluator

    ref = ReferenceEvaluator(model)
    want = ref.run(None, dict(zip(ref.input_names, feeds, strict=True)))[0]
    if want.shape != out.shape:
        return False
    steps = np.abs(out.astype(np.float64) - want.astype(np.float64)) / step
    return bool(steps.max(initial=0.0) <= 1.0 + 1e-3 and np.mean(steps > 0.5) < 0.01)


def qdq_fusion_cases(size: str):
    """QuantizeLinear -> DequantizeLinear pairs as quantize_static writes them between the layers of QDQ models (one
    fused float -> float kernel in the twin), alone and after a Conv -> Relu, u8 and s8 activations. onnxruntime runs
    the Conv block as one integer Conv that rounds its int32 sum once, so its output differs from the graph as
    written by one quantisation step in places (documented, docs/operators.md): the block's output is checked
    against onnx.reference instead (ONE_STEP_CASES), under the twin's own documented rule."""
    rows, cols = SIZES[size]
    shape = [rows, cols]
    for name, zero in (("u8", np.array(128, np.uint8)), ("s8", np.array(-3, np.int8))):
        pair = make_model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
                           helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])], [("x", F, shape)],
                          [("y", F, shape)], initializers=[("s", np.array(0.02, np.float32)), ("z", zero)],
                          opset=OPSET)
        yield f"QuantizeLinear -> DequantizeLinear {name} {rows}x{cols}", pair, [rand(shape)]
    c, hw = {"small": (4, 4), "64k": (16, 64), "1M": (64, 128)}[size]
    rng = np.random.default_rng(47)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=0),
             helper.make_node("Conv", ["xd", "wf", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c", "s", "z"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "s", "z"], ["cd"]),
             helper.make_node("Relu", ["cd"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "s", "z"], ["rq"]),
             helper.make_node("DequantizeLinear", ["rq", "s", "z"], ["y"])]
    block = make_model(nodes, [("x", F, [1, c, hw, hw])], [("y", F, [1, c, hw, hw])],
                       initializers=[("s", np.array(0.05, np.float32)), ("z", np.array(128, np.uint8)),
                                     ("w", rng.integers(-128, 128, (c, c, 3, 3), np.int8)),
                                     ("ws", rand((c,), 1e-3, 2e-3, 3)), ("wz", np.zeros(c, np.int8)),
                                     ("b", rand((c,), -1, 1, 4))], opset=OPSET)
    name = f"QDQ Conv 3x3 {c}->{c} on {hw}x{hw} -> Relu, u8 activations"
    ONE_STEP_CASES[name] = 0.05  # the output's quantisation step (its last DequantizeLinear's scale)
    yield name, block, [rand((1, c, hw, hw))]


def model_patterns3_cases(size: str):
    """Shapes from the model families of docs/operators.md ("families tried", round 3): a float16 UNet's bilinear 2x
    upsampling (Resize, half_pixel, on a float16 tensor; the twin widens each plane to float32 and runs its plane
    kernel, 6.5x onnxruntime's time before)."""
    c, hw = {"small": (2, 4), "64k": (16, 32), "1M": (16, 128)}[size]
    for n in (1, 8):
        x = rand((n, c, hw, hw), seed=48).astype(np.float16)
        model = make_model([helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear",
                                             coordinate_transformation_mode="half_pixel")],
                           [("x", TensorProto.FLOAT16, list(x.shape))], [("y", TensorProto.FLOAT16, None)],
                           initializers=[("s", np.array([1, 1, 2, 2], np.float32))], opset=OPSET)
        yield f"Resize linear 2x float16 {n}x{c}x{hw}x{hw}", model, [x]


def pool_reduce7_cases(size: str):
    """A seventh sweep: AveragePool 3x3 at strides 2 (pads 1, both count_include_pad) and 3, short-axis reductions
    (rows of 3; a middle axis of 4 with a long inner extent; the leading axis of 4) for every dtype each reduction
    allows, Cast from bool and the integer casts, and element-wise ops on the narrow / unsigned integer dtypes,
    float16 and bool with the broadcasts exported graphs use ([N,1]x[1,M], [N,C,1,1]x[N,C,H,W], [1]x[...] and the
    reverse order)."""
    rows, cols = SIZES[size]
    n = rows * cols
    shape = list(POOL[size])
    xp = rand(shape, seed=70)
    for cip in (0, 1):
        yield f"AveragePool 3x3 s2 p1 count_pad {cip}", *single_op(
            "AveragePool", xp, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=cip)
    yield "AveragePool 3x3 s3", *single_op("AveragePool", xp, kernel_shape=[3, 3], strides=[3, 3])
    last = [("a", np.array([-1], np.int64))]
    mid = [("a", np.array([1], np.int64))]
    first = [("a", np.array([0], np.int64))]
    short = rand((max(n // 3, 1), 3), 0.5, 2, seed=71)
    cube = rand((max(n // (4 * 64), 1), 4, 64) if n >= 256 else (1, 4, 4), 0.5, 2, seed=72)
    lead = rand((4, max(n // 4, 1)), 0.5, 2, seed=73)
    dtypes = {"float": np.float32, "float64": np.float64, "int32": np.int32, "int64": np.int64}
    red_types = {"ReduceMax": dtypes, "ReduceMin": dtypes, "ReduceSum": dtypes, "ReduceProd": dtypes,
                 "ReduceMean": dtypes, "ReduceL1": dtypes, "ReduceSumSquare": dtypes,
                 "ReduceLogSum": {"float": np.float32, "float64": np.float64}}
    for op, types in red_types.items():
        for tname, dt in types.items():
            t = helper.np_dtype_to_tensor_dtype(np.dtype(dt))
            scale = 1 if np.dtype(dt).kind == "f" else 10
            for where, arr, axes in (("rows of 3", short, last), ("middle axis of 4", cube, mid),
                                     ("leading axis of 4", lead, first)):
                yield (f"{op} {tname} ({where})",
                       *single_op(op, (arr * scale).astype(dt), out_type=t, initializers=axes, keepdims=1))
    for op in ("ArgMax", "ArgMin"):
        for tname, dt in dtypes.items():
            for where, arr, ax in (("rows of 3", short, -1), ("middle axis of 4", cube, 1),
                                   ("leading axis of 4", lead, 0)):
                yield (f"{op} {tname} ({where})",
                       *single_op(op, (arr * 10).astype(dt), out_type=TensorProto.INT64, axis=ax, keepdims=1))
    x = rand((rows, cols), -50, 50, seed=74)
    casts = [np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64, np.float16,
             np.float32, np.float64]
    for src in casts:
        for dst in casts:
            if src == dst:
                continue
            xs = (x > 0) if src == np.bool_ else np.abs(x).astype(src)
            t = helper.np_dtype_to_tensor_dtype(np.dtype(dst))
            yield f"Cast ({np.dtype(src).name} -> {np.dtype(dst).name})", *single_op("Cast", xs, out_type=t, to=t)
    ints = (np.int8, np.uint8, np.int16, np.uint16, np.uint32, np.uint64)
    pos = np.abs(x) + 1
    for dt in ints:
        t = helper.np_dtype_to_tensor_dtype(np.dtype(dt))
        name = np.dtype(dt).name
        a = (pos * 2).astype(dt)
        b = rand((rows, cols), 1, 7, seed=75).astype(dt)
        for op in ("Add", "Sub", "Mul", "Div", "Max", "Min", "Mod", "BitwiseAnd"):
            if op in ("Max", "Min") and name in ("int16", "uint16"):
                continue  # onnxruntime has no kernel for these
            yield f"{op} {name}", *single_op(op, a, out_type=t, extra=[("b", b)])
        yield f"Add {name} ([N,1] x [1,M])", *single_op("Add", a[:, :1].copy(), out_type=t,
                                                        extra=[("b", b[:1].copy())])
        yield f"Mul {name} ([1] x [...])", *single_op("Mul", b[0, :1].copy(), out_type=t, extra=[("b", a)])
        if np.dtype(dt).kind == "u":
            yield f"BitShift {name} LEFT", *single_op("BitShift", a, out_type=t, extra=[("b", b % 4)],
                                                      direction="LEFT")
    i64 = (x * 10).astype(np.int64)
    h = x.astype(np.float16)
    for op in ("Equal", "Less", "Greater"):
        yield f"{op} int64", *single_op(op, i64, out_type=TensorProto.BOOL, extra=[("b", i64[::-1].copy())])
        yield f"{op} float16", *single_op(op, h, out_type=TensorProto.BOOL, extra=[("b", h[::-1].copy())])
    cond = x > 0
    yield "Where (scalar else branch)", single_where(cond, x, np.array(0, np.float32), False), [cond, x]
    yield "Where (scalar then branch)", single_where(cond, x, np.array(0, np.float32), True), [cond, x]
    bb = x[::-1] > 0
    yield "Not bool", *single_op("Not", cond, out_type=TensorProto.BOOL)
    for op in ("And", "Or", "Xor"):
        yield f"{op} bool", *single_op(op, cond, out_type=TensorProto.BOOL, extra=[("b", bb)])
    H = TensorProto.FLOAT16
    hb = rand((rows, cols), -3, 3, seed=76).astype(np.float16)
    hsmall = (x / 20).astype(np.float16)
    for op in ("Add", "Mul"):
        yield f"{op} float16", *single_op(op, hsmall, out_type=H, extra=[("b", hb)])
    for op in ("Relu", "Sigmoid", "Tanh", "Erf"):
        yield f"{op} float16", *single_op(op, hsmall, out_type=H)
    side = max(int(np.sqrt(n // 16)), 1)
    nchw = rand((1, 16, side, side), seed=77)
    scale = rand((1, 16, 1, 1), seed=78)
    for op in ("Add", "Mul"):
        yield f"{op} [N,C,1,1] x [N,C,H,W]", *single_op(op, scale, extra=[("b", nchw)])
        yield f"{op} [N,C,H,W] x [N,C,1,1]", *single_op(op, nchw, extra=[("b", scale)])
    one = np.array([1.5], np.float32)
    yield "Sub [1] x [N,M]", *single_op("Sub", one, extra=[("b", x)])
    yield "Sub [N,M] x [1]", *single_op("Sub", x, extra=[("b", one)])
    yield "Add float [N,1] x [1,M]", *single_op("Add", x[:, :1].copy(), extra=[("b", x[:1].copy())])
    yield "Add float [1,M] x [N,1]", *single_op("Add", x[:1].copy(), extra=[("b", x[:, :1].copy())])


def sweep7_cases(size: str):
    """A seventh sweep: the rows an earlier survey listed at 1.3-2.2x onnxruntime, re-measured together: float32 ->
    int64 / uint32 / int32 casts (special values included), AveragePool 3x3 s2 p1, ReduceMax / ReduceMin over rows of
    3, GatherND of scalars, Einsum ij->ji, NHWC <-> NCHW transposes of 3 and 8 channels, small integer element-wise
    ops and Attention."""
    rows, cols = SIZES[size]
    n = rows * cols
    x = rand((rows, cols), -50, 50, seed=80)
    big = (x * np.float32(1e7)).astype(np.float32)
    for dst in (np.int64, np.uint32, np.int32):
        t = helper.np_dtype_to_tensor_dtype(np.dtype(dst))
        yield f"Cast (float32 -> {np.dtype(dst).name})", *single_op("Cast", x, out_type=t, to=t)
        yield f"Cast (float32 -> {np.dtype(dst).name}, large values)", *single_op("Cast", big, out_type=t, to=t)
    xp = rand(list(POOL[size]), seed=81)
    yield "AveragePool 3x3 s2 p1", *single_op("AveragePool", xp, kernel_shape=[3, 3], strides=[2, 2],
                                               pads=[1, 1, 1, 1])
    short = rand((max(n // 3, 1), 3), seed=82)
    last = [("a", np.array([-1], np.int64))]
    for op in ("ReduceMax", "ReduceMin"):
        yield f"{op} (rows of 3)", *single_op(op, short, initializers=last, keepdims=1)
    rng = np.random.default_rng(83)
    k = max(n // 8, 1)
    idx2 = np.stack([rng.integers(0, rows, k), rng.integers(0, cols, k)], axis=1).astype(np.int64)
    yield "GatherND (scalars, indices [k, 2])", *single_op("GatherND", x, initializers=[("i", idx2)])
    yield "Einsum ij->ji", *single_op("Einsum", x, equation="ij->ji")
    side = max(int(np.sqrt(n // 24)), 1)
    for c in (3, 8):
        yield f"Transpose NHWC -> NCHW, {c} channels", *single_op("Transpose", rand((1, side, side, c), seed=84),
                                                                  perm=[0, 3, 1, 2])
        yield f"Transpose NCHW -> NHWC, {c} channels", *single_op("Transpose", rand((1, c, side, side), seed=85),
                                                                  perm=[0, 2, 3, 1])
    for dt in (np.int8, np.uint8, np.int16, np.int32):
        t = helper.np_dtype_to_tensor_dtype(np.dtype(dt))
        a = (np.abs(x) * 2 + 1).astype(dt)
        b = rand((rows, cols), 1, 7, seed=86).astype(dt)
        for op in ("Add", "Mul", "Max"):
            if op == "Max" and dt == np.int16:
                continue  # onnxruntime has no kernel for it
            yield f"{op} {np.dtype(dt).name}", *single_op(op, a, out_type=t, extra=[("b", b)])
    (hd, sq, d), _ = ATTENTION[size]
    qkv = [1, hd, sq, d]
    att = make_model([helper.make_node("Attention", ["q", "k", "v"], ["y"])],
                     [("q", F, qkv), ("k", F, qkv), ("v", F, qkv)], [("y", F, qkv)], opset=23)
    yield f"Attention {hd} heads {sq}x{d}", att, [rand(qkv), rand(qkv, seed=1), rand(qkv, seed=2)]


def single_where(cond, x, scalar, scalar_first: bool):
    """Where(cond, x, scalar) or Where(cond, scalar, x), the scalar an initializer as exporters emit it."""
    names = ["c", "s", "x"] if scalar_first else ["c", "x", "s"]
    return make_model([helper.make_node("Where", names, ["y"])],
                      [("c", TensorProto.BOOL, list(cond.shape)), ("x", F, list(x.shape))], [("y", F, None)],
                      initializers=[("s", scalar)], opset=OPSET)


def pool_stride1_cases(size: str):
    """AveragePool at stride 1 over the window sizes and map shapes exported models use: 2x2 to 7x7 with "same"
    pads, both count_include_pad, small and odd maps (14x14, 28x28, 57x55), a 1-D pool."""
    shape = list(POOL[size])
    xp = rand(shape, seed=90)
    for k in (2, 5, 7):
        p = k // 2
        yield f"AveragePool {k}x{k} s1 p{p}", *single_op("AveragePool", xp, kernel_shape=[k, k],
                                                          pads=[p, p, k - 1 - p, k - 1 - p])
    yield "AveragePool 5x5 s1 p2 count_pad 1", *single_op("AveragePool", xp, kernel_shape=[5, 5], pads=[2] * 4,
                                                           count_include_pad=1)
    scale = {"small": 1, "64k": 4, "1M": 16}[size]
    for c, h, w in ((8 * scale, 14, 14), (2 * scale, 28, 28), (scale, 57, 55)):
        x = rand([1, c, h, w], seed=91)
        yield f"AveragePool 3x3 s1 p1 on 1x{c}x{h}x{w}", *single_op("AveragePool", x, kernel_shape=[3, 3],
                                                                    pads=[1] * 4)
    x1 = rand([shape[0], shape[1], shape[2] * shape[3]], seed=92)
    yield "AveragePool 1-D k3 s1 p1", *single_op("AveragePool", x1, kernel_shape=[3], pads=[1, 1])


FAMILIES = {
    "element-wise": elementwise_cases,
    "normalisation / reduction": normalisation_cases,
    "data movement": movement_cases,
    "linear algebra / conv": linear_cases,
    "pooling": pooling_cases,
    "recurrent": recurrent_cases,
    "conv variants": conv_variant_cases,
    "quantisation": quantisation_cases,
    "attention / sampling": attention_cases,
    "channel norms / resize / top-k": channel_norm_resize_topk_cases,
    "inverse trig, casts, scans": more_single_op_cases,
    "layouts, 3-D pooling, axes": layout_reduce_cases,
    "dtypes, sweep findings": dtype_and_sweep_cases,
    "exported-model shapes": exported_model_cases,
    "pooling / conv gaps": gap_cases,
    "sweep 3: dtypes, short rows, layouts": sweep3_cases,
    "conv sweep": conv_sweep_cases,
    "sweep 4: gaps left, dtype / axis sweep": sweep4_cases,
    "conv sweep 2": conv_sweep2_cases,
    "conv sweep 3": conv_sweep3_cases,
    "pool reduce 7": pool_reduce7_cases,
    "conv sweep 4": conv_sweep4_cases,
    "conv sweep 5": conv_sweep5_cases,
    "conv sweep 6": conv_sweep6_cases,
    "conv sweep 7": conv_sweep7_cases,
    "sweep 7": sweep7_cases,

    "quant models": quant_model_cases,
    "qdq fusion": qdq_fusion_cases,
    "model patterns 3": model_patterns3_cases,
    "pool stride 1": pool_stride1_cases,
}


def time_calls(fn, seconds: float, min_calls: int = 5) -> float:
    """Median wall time of fn() in microseconds over about `seconds` (after warm-up)."""
    for _ in range(3):
        fn()
    samples = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(samples) < min_calls:
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) / 1e3)
    return statistics.median(samples)


def blas_core() -> str:
    try:
        import scipy_openblas32 as sob
        lib = ctypes.CDLL(os.path.join(sob.get_lib_dir(), sob.get_library(fullname=True)))
        lib.scipy_openblas_get_corename.restype = ctypes.c_char_p
        return lib.scipy_openblas_get_corename().decode()
    except (ImportError, OSError, AttributeError):
        return "unknown"


def vector_isa() -> str:
    """The instruction set the twin's vectorised kernels pick on this CPU (the twin's own rule, see vmath.h)."""
    try:
        flags = set(next(ln for ln in open("/proc/cpuinfo") if ln.startswith("flags")).split())
    except (OSError, StopIteration):
        return platform.machine()
    best = "avx512" if {"avx512f", "avx512dq"} <= flags else "avx2" if {"avx2", "fma"} <= flags else "baseline"
    cap = os.environ.get("GEASYNC_TWIN_SIMD")
    if cap == "baseline" or (cap == "avx2" and best == "avx512"):
        return cap
    return best


def agree_cell(agree) -> str:
    return "yes (onnx.reference; onnxruntime one step off)" if agree == "reference" else "yes" if agree else "NO"


def outputs_agree(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape:
        return False
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    both_nan = np.isnan(a64) & np.isnan(b64)
    scale = max(1.0, float(np.nanmax(np.abs(np.where(np.isfinite(b64), b64, 0))))) if b64.size else 1.0
    close = np.isclose(a64, b64, rtol=1e-3, atol=1e-4 * scale) | both_nan
    return bool(close.all())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=0.1, help="measuring time per (case, runtime, round)")
    ap.add_argument("--rounds", type=int, default=5,
                    help="interleaved rounds (twin, then onnxruntime); the ratio is the median of the rounds' ratios "
                         "and each side's time the median of its rounds' medians")
    ap.add_argument("--sizes", default="small,64k,1M", help="comma-separated subset of: " + ", ".join(SIZES))
    ap.add_argument("--only", default="", help="only cases whose name contains one of these (comma-separated)")
    ap.add_argument("--family", default="", help="only families whose name contains one of these (comma-separated)")
    ap.add_argument("--out", type=pathlib.Path, default=None, help="also write the table (markdown) here")
    ap.add_argument("--run-only", action="store_true",
                    help="time Session.run_graph alone (by default every output is also read with .numpy(), as "
                         "onnxruntime's run returns numpy arrays)")
    ap.add_argument("--ort-defaults", action="store_true",
                    help="onnxruntime with its default SessionOptions (intra-op threads: one per physical core) "
                         "instead of one thread; run it with GEASYNC_INTRA_OP_THREADS unset for the twin's defaults "
                         "(its intra-op pool): what a user comparing both out of the box sees")
    args = ap.parse_args(argv)

    import onnxruntime as ort

    so = ort.SessionOptions()
    if args.ort_defaults:  # as bench_models.py --ort-defaults: what a user comparing both out of the box sees
        threading = "onnxruntime: its default SessionOptions (intra-op threads: one per physical core)"
    else:
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        threading = "onnxruntime: 1 intra-op thread"
    intra = os.environ.get("GEASYNC_INTRA_OP_THREADS")
    threading += (f"; twin: GEASYNC_INTRA_OP_THREADS={intra}" if intra else
                  "; twin: its defaults (GEASYNC_INTRA_OP_THREADS unset: intra-op pool on every usable core)")
    sizes = [s for s in args.sizes.split(",") if s]
    only = [s for s in args.only.split(",") if s]
    fams = [s for s in args.family.split(",") if s]
    rows = []
    with ga.Session() as session:
        run, numpy = session.run_graph, ga.Tensor.numpy
        gid = 0
        for family, cases in FAMILIES.items():
            if fams and not any(f in family for f in fams):
                continue
            for size in sizes:
                for name, model, feeds in cases(size):
                    if only and not any(o in name for o in only):
                        continue
                    blob = model.SerializeToString()
                    gid += 1
                    session.add_graph(gid, ga.Graph.from_onnx(blob))
                    sess = ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"])
                    names = [i.name for i in sess.get_inputs()]
                    ort_feeds = dict(zip(names, feeds, strict=True))
                    with np.errstate(all="ignore"):
                        twin_out = session.run_graph(gid, feeds)[0].numpy().copy()
                        ort_out = sess.run(None, ort_feeds)[0]
                    agree = outputs_agree(twin_out, ort_out)
                    if not agree and name in ONE_STEP_CASES:  # onnxruntime's documented difference: the oracle
                        agree = "reference" if agrees_with_reference(model, feeds, twin_out,
                                                                     ONE_STEP_CASES[name]) else False
                    # Paired rounds: on a shared machine a slow spell can cover one side's whole measurement
                    # (seen here: one side 1.5x slower for a second), and it then skews that side's best time; the
                    # two halves of one round see about the same machine, so their ratio stays fair.
                    twin_times, ort_times = [], []
                    for _ in range(args.rounds):
                        # one lambda frame per call on both sides, as onnxruntime's below
                        twin_call = ((lambda g=gid, f=feeds: run(g, f)) if args.run_only else
                                     (lambda g=gid, f=feeds: list(map(numpy, run(g, f)))))
                        twin_times.append(time_calls(twin_call, args.seconds))
                        ort_times.append(time_calls(lambda o=sess, f=ort_feeds: o.run(None, f), args.seconds))
                    session.remove_graph(gid)
                    twin_us, ort_us = statistics.median(twin_times), statistics.median(ort_times)
                    ratio = statistics.median(t / o for t, o in zip(twin_times, ort_times, strict=True))
                    rows.append((family, name, size, twin_us, ort_us, ratio, agree))
                    print(f"{family:<26} {name:<36} {size:>5}: twin {twin_us:10.1f} us  onnxruntime "
                          f"{ort_us:10.1f} us  ratio {ratio:5.2f}"
                          f"{'  (onnxruntime differs; twin = onnx.reference)' if agree == 'reference' else ''}"
                          f"{'' if agree else '  OUTPUTS DIFFER'}",
                          flush=True)

    coretype = os.environ.get("OPENBLAS_CORETYPE")
    reading = "run_graph alone" if args.run_only else "run_graph and .numpy() of every output"
    header = (f"Twin vs onnxruntime {ort.__version__}, per operator (median microseconds per synchronous call from "
              f"Python, over {args.rounds} interleaved rounds; the ratio is the median of the rounds' ratios; twin: "
              f"{reading}), {threading}; "
              f"{os.environ.get('GEASYNC_BLAS_THREADS', '1')} BLAS thread, "
              f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}; "
              f"OPENBLAS_CORETYPE {'=' + coretype if coretype else 'unset'} (OpenBLAS core: {blas_core()}), "
              f"twin vector kernels: {vector_isa()}.")
    lines = [header, "", "| family | case | size | twin (us) | onnxruntime (us) | twin / onnxruntime | outputs agree |",
             "|---|---|---|---:|---:|---:|---|"]
    for family, name, size, t, o, r, agree in rows:
        lines.append(f"| {family} | {name} | {size} | {t:.1f} | {o:.1f} | {r:.2f} | {agree_cell(agree)} |")
    if rows:
        worst = max(rows, key=lambda r: r[5])
        lines += ["", f"Worst ratio: {worst[5]:.2f} ({worst[1]}, {worst[2]}); target <= 1.5 for every row."]
        over = [f"{r[1]} ({r[2]}): {r[5]:.2f}" for r in rows if r[5] > 1.5]
        lines.append("Rows above 1.5: " + ("; ".join(over) if over else "none") + ".")
    text = "\n".join(lines)
    print()
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("# Operator speed: twin vs onnxruntime\n\n"
                            f"Produced by `python benchmarks/bench_ops.py"
                            f"{' --ort-defaults' if args.ort_defaults else ''} --out {args.out.as_posix()}`.\n\n"
                            + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
