"""The twin's intra-op pool (GEASYNC_INTRA_OP_THREADS): kernels split big GEMMs, batched MatMuls, convolutions,
element-wise and row-wise ops (softmax, layer norm, reductions, concat / split) over helper threads while a core is
idle. Results must be bit-identical whatever the thread count (the split depends only on the problem size), match
onnx.reference, survive concurrent runs and a fork, and the variable must fall back to its default on bad values.
Each setting runs in a subprocess: the pool reads the variable once.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("onnx")

HERE = pathlib.Path(__file__).resolve().parent


def usable_cores() -> int:
    """The cores this process may run on: its affinity mask, and its cgroup's CPU quota (a container's limit)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    candidates = ["/sys/fs/cgroup/cpu.max"]
    try:
        for line in pathlib.Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                candidates.insert(0, f"/sys/fs/cgroup{line[3:]}/cpu.max")
    except OSError:
        pass
    for path in candidates:
        try:
            quota, period = pathlib.Path(path).read_text().split()[:2]
        except (OSError, ValueError):
            continue
        if quota != "max":
            return max(1, min(cores, -(-int(quota) // int(period))))
        break
    return cores


CORES = usable_cores()

# The pooled runs set the thread count (the cores) explicitly; the default is checked by the helper-count tests.
ALL = str(CORES)


def _python(args, **kwargs):
    """subprocess.run of a script, from this folder: the repository root's source tree has no compiled extension
    after a non-editable install, and `python -c` would import it first."""
    return subprocess.run(args, cwd=str(HERE), **kwargs)

# Builds the graphs, runs them and saves every output (and whether helper threads exist) to an .npz file.
_RUN_ALL = textwrap.dedent("""
    import os, sys
    import numpy as np
    sys.path.insert(0, {here!r})
    import geasync as ga
    from onnx import TensorProto, helper, numpy_helper
    from test_models import make_cnn, make_mlp, make_transformer, model_input
    from test_intra_op import conv_models, elementwise_models, matmul_models, row_models

    def helpers():
        names = []
        for t in os.listdir("/proc/self/task"):
            try:
                names.append(open(f"/proc/self/task/{{t}}/comm").read().strip())
            except OSError:
                pass
        return sum(n == "ge-intra-op" for n in names)

    def run(s, gid, feeds):
        # Back to back (a helper may still be spinning from the run before, as between a model's kernels): every
        # repeat must give the same outputs.
        first = [y.numpy().copy() for y in s.run_graph(gid, feeds)]
        for _ in range(3):
            again = [y.numpy() for y in s.run_graph(gid, feeds)]
            assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(first, again)), gid
        return first

    out = {{}}
    cases = [("cnn", make_cnn(), 16), ("transformer", make_transformer(), 8), ("mlp", make_mlp(), 96),
             ("cnn_b1", make_cnn(), 1), ("mlp_b1", make_mlp(), 1)]
    with ga.Session() as s:
        gid = 0
        for name, model, batch in cases:
            gid += 1
            s.add_graph(gid, ga.Graph.from_onnx(model))
            out[name] = run(s, gid, [model_input(name, model, batch)])[0]
        for name, (model, feeds) in {{**elementwise_models(), **conv_models(), **row_models(),
                                      **matmul_models()}}.items():
            gid += 1
            s.add_graph(gid, ga.Graph.from_onnx(model))
            for i, y in enumerate(run(s, gid, feeds)):
                out[f"{{name}}/{{i}}"] = y
    out["helpers"] = np.array(helpers())
    np.savez(sys.argv[1], **out)
""")


def elementwise_models():
    """Element-wise graphs large enough to be split: unary float32 / float64, same-shape, bias and scalar Add/Mul."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(7)
    big = (300, 1000)  # 300K elements: several blocks, and a last block that is not full

    def model(nodes, inputs, outputs):
        g = helper.make_graph(nodes, "g", inputs, outputs)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        return m

    def vi(name, shape, t=TensorProto.FLOAT):
        return helper.make_tensor_value_info(name, t, list(shape))

    x = rng.standard_normal(big).astype(np.float32)
    y = rng.standard_normal(big).astype(np.float32)
    bias = rng.standard_normal(big[1:]).astype(np.float32)
    s = np.array(1.7, np.float32)
    xd = rng.standard_normal(big)
    return {
        "unary_f32": (model([helper.make_node("Tanh", ["x"], ["a"]), helper.make_node("Sigmoid", ["x"], ["b"]),
                             helper.make_node("Relu", ["x"], ["c"]), helper.make_node("Exp", ["x"], ["d"])],
                            [vi("x", big)], [vi(n, big) for n in "abcd"]), [x]),
        "unary_f64": (model([helper.make_node("Exp", ["x"], ["a"]), helper.make_node("Sqrt", ["a"], ["b"]),
                             helper.make_node("Abs", ["x"], ["c"])],
                            [vi("x", big, TensorProto.DOUBLE)], [vi(n, big, TensorProto.DOUBLE) for n in "abc"]),
                      [xd]),
        "binary": (model([helper.make_node("Add", ["x", "y"], ["a"]), helper.make_node("Mul", ["x", "b"], ["m"]),
                          helper.make_node("Div", ["m", "s"], ["d"]), helper.make_node("Sub", ["d", "y"], ["e"])],
                         [vi("x", big), vi("y", big), vi("b", big[1:]), vi("s", [])],
                         [vi("a", big), vi("m", big), vi("d", big), vi("e", big)]), [x, y, bias, s]),
    }


# Row-wise ops split over whole outer slices (rows, [n, inner] blocks, the outer index of a reduction; Concat and
# Split cases in row_models): each big
# enough for several chunks, with odd sizes, axes not last, negative axes, keepdims both ways, and NaN where it
# propagates. (op, input shape, dtype, attributes, axes input or None, NaN at)
ROW_CASES = {
    "softmax_last": ("Softmax", (300, 1001), np.float32, dict(axis=-1), None, (7, 500)),
    "softmax_strided": ("Softmax", (40, 37, 211), np.float32, dict(axis=1), None, (3, 5, 7)),
    "logsoftmax_last": ("LogSoftmax", (257, 1203), np.float32, {}, None, (256, 0)),
    "logsoftmax_strided": ("LogSoftmax", (33, 101, 97), np.float32, dict(axis=-2), None, None),
    "softmax_f64": ("Softmax", (150, 1999), np.float64, {}, None, (1, 1)),
    "logsoftmax_f64_strided": ("LogSoftmax", (9, 64, 555), np.float64, dict(axis=1), None, None),
    "layernorm_last": ("LayerNormalization", (600, 1001), np.float32, dict(axis=-1, epsilon=1e-3), None, None),
    "layernorm_2axes": ("LayerNormalization", (128, 33, 129), np.float32, dict(axis=1), None, None),
    "layernorm_f64": ("LayerNormalization", (600, 999), np.float64, dict(axis=-1), None, None),
    "reducesum_last": ("ReduceSum", (1100, 1001), np.float32, dict(keepdims=1), [-1], None),
    "reducemean_middle": ("ReduceMean", (60, 377, 53), np.float32, dict(keepdims=0), [1], None),
    "reducemax_nan": ("ReduceMax", (12001, 100), np.float32, dict(keepdims=0), [-1], (1500, 3)),
    "reducemax_short_rows": ("ReduceMax", (240001, 5), np.float32, dict(keepdims=1), [1], (239999, 4)),
    "reducemin_rows_40": ("ReduceMin", (30001, 40), np.float32, dict(keepdims=0), [-1], (8, 9)),
    "reducelogsumexp": ("ReduceLogSumExp", (60, 30, 701), np.float32, dict(keepdims=1), [2], (59, 29, 700)),
    "reducesumsquare_2axes": ("ReduceSumSquare", (48, 20, 30, 41), np.float32, dict(keepdims=0), [1, -1], None),
    "reducel2_f64": ("ReduceL2", (1100, 1001), np.float64, dict(keepdims=0), [-1], None),
    "reduceprod_int32": ("ReduceProd", (11000, 101), np.int32, dict(keepdims=1), [1], None),
    "reducesum_int64": ("ReduceSum", (400, 1001, 3), np.int64, dict(keepdims=0), [-2], None),
    "reducemin_middle_of_4": ("ReduceMin", (4099, 4, 64), np.float32, dict(keepdims=1), [1], (4000, 2, 5)),
    "reducemean_f64_middle": ("ReduceMean", (3001, 3, 50), np.float64, dict(keepdims=0), [1], None),
}


def row_models():
    """One node per case of ROW_CASES (LayerNormalization with scale, bias and, float32, its Mean / InvStdDev), then
    Concat and Split cases."""
    from onnx import helper, numpy_helper
    from onnx.helper import np_dtype_to_tensor_dtype

    rng = np.random.default_rng(13)
    out = {}
    for name, (op, shape, dtype, attrs, axes, nan_at) in ROW_CASES.items():
        t = np_dtype_to_tensor_dtype(np.dtype(dtype))
        if np.issubdtype(dtype, np.integer):
            x = rng.integers(-3, 4, shape).astype(dtype) if op == "ReduceSum" else \
                rng.choice(np.array([-1, 1, 1, 1], dtype), shape)  # products stay small
        else:
            x = rng.standard_normal(shape).astype(dtype)
        if nan_at is not None:
            x[nan_at] = np.nan
        inits, inputs, outputs = [], ["x"], ["y"]
        if axes is not None:
            inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
            inputs.append("axes")
        if op == "LayerNormalization":
            norm = shape[attrs["axis"] % len(shape):]
            inits += [numpy_helper.from_array(rng.standard_normal(norm).astype(dtype), "scale"),
                      numpy_helper.from_array(rng.standard_normal(norm).astype(dtype), "bias")]
            inputs += ["scale", "bias"]
            if dtype == np.float32:  # (onnx.reference types float64 statistics as float64, the spec as float)
                outputs += ["mean", "inv_std"]
        g = helper.make_graph([helper.make_node(op, inputs, outputs, **attrs)], name,
                              [helper.make_tensor_value_info("x", t, list(shape))],
                              [helper.make_tensor_value_info(o, t if o == "y" else 1, None) for o in outputs],
                              initializer=inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
        m.ir_version = 8
        out[name] = (m, [x])
    # Concat / Split: whole outer rows (disjoint outputs) over the pool.
    copies = {
        "concat_axis1": ((600, 1001), np.float32, "Concat", dict(axis=1), (600, 17), None),
        "concat_3d_int16": ((40, 300, 101), np.int16, "Concat", dict(axis=-2), (40, 7, 101), None),
        "split_sizes": ((1100, 1001), np.float32, "Split", dict(axis=-1), None, [100, 1, 900]),
        "split_3d_uint8": ((128, 400, 99), np.uint8, "Split", dict(axis=1, num_outputs=3), None, None),
    }
    for name, (shape, dtype, op, attrs, other, split) in copies.items():
        t = np_dtype_to_tensor_dtype(np.dtype(dtype))
        x = np.abs(rng.standard_normal(shape) * 50).astype(dtype)
        inits = []
        if op == "Concat":
            inits.append(numpy_helper.from_array((rng.standard_normal(other) * 50).astype(dtype), "c"))
            inputs, outputs = ["x", "c", "x"], ["y"]
        else:
            inputs, outputs = ["x"], ["y0", "y1", "y2"]
            if split is not None:
                inits.append(numpy_helper.from_array(np.array(split, np.int64), "split"))
                inputs.append("split")
        g = helper.make_graph([helper.make_node(op, inputs, outputs, **attrs)], name,
                              [helper.make_tensor_value_info("x", t, list(shape))],
                              [helper.make_tensor_value_info(o, t, None) for o in outputs], initializer=inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
        m.ir_version = 8
        out[name] = (m, [x])
    return out


# Convolutions of every kernel path, each big enough to be cut into kMinChunks chunks (over images, groups, planes,
# channel blocks or Winograd tile blocks) at batch > 1; at batch 1 only big convs are split (chunks of ~4M
# multiply-adds), the small batch-1 cases check the unsplit path: (N, C, H, W), (M, C / group, kh, kw), attributes.
CONV_CASES = {
    "conv_direct_b1_blocks": ((1, 32, 32, 32), (32, 32, 3, 3), dict(pads=[1, 1, 1, 1])),
    "conv_direct_b4_images": ((4, 16, 32, 32), (32, 16, 3, 3), dict(pads=[1, 1, 1, 1])),
    "conv_direct_s2_b1": ((1, 32, 56, 56), (64, 32, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2])),
    "conv_direct_s2_b3": ((3, 32, 28, 28), (64, 32, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2])),
    "conv_flat_b1": ((1, 64, 7, 7), (512, 64, 3, 3), dict(pads=[1, 1, 1, 1])),
    "conv_grouped": ((2, 64, 28, 28), (64, 16, 3, 3), dict(pads=[1, 1, 1, 1], group=4)),
    "conv_dilated": ((4, 32, 28, 28), (32, 32, 3, 3), dict(pads=[2, 2, 2, 2], dilations=[2, 2])),
    "conv_winograd": ((8, 64, 16, 16), (64, 64, 3, 3), dict(pads=[1, 1, 1, 1])),
    "conv_winograd_odd": ((5, 64, 15, 13), (64, 64, 3, 3), dict(pads=[1, 1, 1, 1])),
    "conv_1x1": ((4, 64, 28, 28), (128, 64, 1, 1), {}),
    "conv_im2col": ((4, 16, 64, 64), (32, 16, 5, 5), dict(strides=[3, 3])),
    "conv_depthwise": ((2, 64, 56, 56), (64, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=64)),
    "conv_depthwise_s2": ((2, 64, 112, 112), (64, 1, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2], group=64)),
    "conv_depthwise_small": ((16, 576, 7, 7), (576, 1, 5, 5), dict(pads=[2, 2, 2, 2], group=576)),
    "conv_depthwise_cl": ((16, 192, 14, 14), (192, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=192)),
    # one image, big enough to split (chunks of ~4M multiply-adds): channel blocks, Winograd tile blocks
    "conv_direct_b1_big": ((1, 16, 64, 64), (64, 16, 3, 3), dict(pads=[1, 1, 1, 1])),
    "conv_winograd_b1": ((1, 64, 56, 56), (64, 64, 3, 3), dict(pads=[1, 1, 1, 1])),
    # one image, too small to split: direct, Winograd, depthwise (direct, stride 2, multiplier 2) run whole
    "conv_direct_b1_small": ((1, 16, 16, 16), (32, 16, 3, 3), dict(pads=[1, 1, 1, 1])),
    "conv_winograd_b1_small": ((1, 64, 16, 16), (64, 64, 3, 3), dict(pads=[1, 1, 1, 1])),
    "conv_depthwise_b1": ((1, 64, 56, 56), (64, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=64)),
    "conv_depthwise_s2_b1": ((1, 64, 112, 112), (64, 1, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2], group=64)),
    "conv_depthwise_mult_b1": ((1, 32, 28, 28), (64, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=32)),
}


def conv_models():
    """One Conv (+ bias, + Relu for half of them) per case of CONV_CASES."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(11)
    out = {}
    for i, (name, (xs, ws, attrs)) in enumerate(CONV_CASES.items()):
        w = (rng.standard_normal(ws) / np.sqrt(np.prod(ws[1:]))).astype(np.float32)
        b = (rng.standard_normal(ws[0]) * 0.1).astype(np.float32)
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if i % 2 else "y"], kernel_shape=list(ws[2:]), **attrs)]
        if i % 2:
            nodes.append(helper.make_node("Relu", ["c"], ["y"]))
        g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xs))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        out[name] = (m, [rng.standard_normal(xs).astype(np.float32)])
    return out


# Batched MatMul without a constant B (attention's per-head products): one GEMM per batch, shared over the pool.
# (A's shape, B's shape, dtype)
MATMUL_CASES = {
    "matmul_heads": ((1, 4, 256, 32), (1, 4, 32, 256), np.float32),
    "matmul_heads_context": ((2, 4, 200, 200), (2, 4, 200, 32), np.float32),
    "matmul_broadcast_b": ((3, 5, 96, 80), (1, 5, 80, 112), np.float32),
    "matmul_broadcast_a": ((6, 1, 64, 128), (6, 7, 128, 72), np.float32),
    "matmul_f64": ((8, 90, 70), (8, 70, 110), np.float64),
}


# Attention (opset 23): its (batch, head) pairs shared over the pool. (Q, K, V shapes, dtype, attributes, outputs,
# with a boolean mask)
ATTENTION_CASES = {
    "attention_plain": (((2, 8, 128, 64), (2, 8, 128, 64), (2, 8, 128, 64)), np.float32, {}, 1, False),
    "attention_gqa_causal_3d": (((2, 96, 8 * 64), (2, 112, 2 * 64), (2, 112, 2 * 48)), np.float32,
                                dict(q_num_heads=8, kv_num_heads=2, is_causal=1, qk_matmul_output_mode=2), 4, True),
    "attention_f16": (((1, 8, 96, 64), (1, 8, 96, 64), (1, 8, 96, 64)), np.float16, {}, 1, False),
}

# Einsum's batched products (equation, operand shapes): one GEMM, GEMV or outer product per batch item.
EINSUM_CASES = {
    "einsum_scores": ("bhqd,bhkd->bhqk", ((2, 8, 128, 64), (2, 8, 128, 64))),
    "einsum_transposed_a": ("bji,bjk->bik", ((12, 96, 80), (12, 96, 112))),
    "einsum_outer": ("bi,bj->bij", ((64, 500), (64, 520))),
    "einsum_gemv": ("bij,bj->bi", ((64, 250, 260), (64, 260))),
}


def matmul_models():
    """One MatMul of two graph inputs per case of MATMUL_CASES, one Einsum per case of EINSUM_CASES, one Attention per
    case of ATTENTION_CASES."""
    from onnx import TensorProto, helper
    from onnx.helper import np_dtype_to_tensor_dtype

    rng = np.random.default_rng(17)
    out = {}
    for name, (a_shape, b_shape, dtype) in MATMUL_CASES.items():
        t = np_dtype_to_tensor_dtype(np.dtype(dtype))
        g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], name,
                              [helper.make_tensor_value_info("a", t, list(a_shape)),
                               helper.make_tensor_value_info("b", t, list(b_shape))],
                              [helper.make_tensor_value_info("y", t, None)])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        out[name] = (m, [rng.standard_normal(a_shape).astype(dtype), rng.standard_normal(b_shape).astype(dtype)])
    for name, (equation, (a_shape, b_shape)) in EINSUM_CASES.items():
        g = helper.make_graph([helper.make_node("Einsum", ["a", "b"], ["y"], equation=equation)], name,
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, list(a_shape)),
                               helper.make_tensor_value_info("b", TensorProto.FLOAT, list(b_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        out[name] = (helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
                     [rng.standard_normal(a_shape).astype(np.float32), rng.standard_normal(b_shape).astype(np.float32)])
    for name, (shapes, dtype, attrs, n_out, masked) in ATTENTION_CASES.items():
        t = np_dtype_to_tensor_dtype(np.dtype(dtype))
        feeds = [rng.standard_normal(sh).astype(dtype) for sh in shapes]
        inputs = [helper.make_tensor_value_info(n, t, list(sh)) for n, sh in zip("qkv", shapes, strict=True)]
        names = ["q", "k", "v"]
        if masked:
            seq = 1 if len(shapes[0]) == 3 else 2  # the sequence axis
            sq, skv = shapes[0][seq], shapes[1][seq]
            feeds.append(rng.random((shapes[0][0], 1, sq, skv)) > 0.2)
            inputs.append(helper.make_tensor_value_info("m", helper.np_dtype_to_tensor_dtype(np.dtype(bool)),
                                                        [shapes[0][0], 1, sq, skv]))
            names.append("m")
        g = helper.make_graph([helper.make_node("Attention", names, [f"y{i}" for i in range(n_out)], **attrs)],
                              name, inputs, [helper.make_tensor_value_info(f"y{i}", t, None) for i in range(n_out)])
        out[name] = (helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)]), feeds)
    return out


def _run_all(tmp_path, env_value):
    env = dict(os.environ)
    env.pop("GEASYNC_INTRA_OP_THREADS", None)
    if env_value is not None:
        env["GEASYNC_INTRA_OP_THREADS"] = env_value
    path = tmp_path / f"out_{env_value}.npz"
    _python([sys.executable, "-c", _RUN_ALL.format(here=str(HERE)), str(path)], env=env, check=True,
                   timeout=300)
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("intra_op")
    return {v: _run_all(tmp, v) for v in ("1", ALL)}


def test_outputs_bit_identical_whatever_the_thread_count(runs):
    serial, pooled = runs["1"], runs[ALL]
    assert set(serial) == set(pooled)
    for k in serial:
        if k != "helpers":
            np.testing.assert_array_equal(pooled[k], serial[k], err_msg=k)


def test_outputs_match_onnx_reference(runs):
    from onnx.reference import ReferenceEvaluator
    from test_models import make_cnn, make_mlp, make_transformer, model_input

    out = runs[ALL]
    for name, make, batch in (("cnn", make_cnn, 16), ("transformer", make_transformer, 8), ("mlp", make_mlp, 96),
                              ("cnn_b1", make_cnn, 1), ("mlp_b1", make_mlp, 1)):
        model = make()
        x = model_input(name, model, batch)
        ref = ReferenceEvaluator(model).run(None, {model.graph.input[0].name: x})[0]
        np.testing.assert_allclose(out[name], ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()), err_msg=name)
    for name, (model, feeds) in elementwise_models().items():
        refs = ReferenceEvaluator(model).run(None, {i.name: f for i, f in zip(model.graph.input, feeds, strict=True)})
        for i, ref in enumerate(refs):
            got = out[f"{name}/{i}"]
            assert got.dtype == ref.dtype
            np.testing.assert_allclose(got, ref, rtol=1e-6 if ref.dtype == np.float64 else 2e-6, atol=1e-6,
                                       err_msg=f"{name}/{i}")


def test_convolutions_match_onnx_reference(runs):
    from onnx.reference import ReferenceEvaluator

    out = runs[ALL]
    for name, (model, feeds) in conv_models().items():
        (ref,) = ReferenceEvaluator(model).run(None, {"x": feeds[0]})
        got = out[f"{name}/0"]
        assert got.shape == ref.shape, name
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=2e-5 * float(np.abs(ref).max()), err_msg=name)


def test_row_wise_ops_match_onnx_reference(runs):
    from onnx.reference import ReferenceEvaluator

    out = runs[ALL]
    for name, (model, feeds) in row_models().items():
        refs = ReferenceEvaluator(model).run(None, {"x": feeds[0]})
        for i, ref in enumerate(refs):
            got = out[f"{name}/{i}"]
            assert got.shape == ref.shape and got.dtype == ref.dtype, (name, i, got.shape, ref.shape)
            if np.issubdtype(ref.dtype, np.integer):
                np.testing.assert_array_equal(got, ref, err_msg=f"{name}/{i}")
                continue
            finite = np.isfinite(ref)
            scale = float(np.abs(ref[finite]).max()) if finite.any() else 1.0
            tol = 1e-12 if ref.dtype == np.float64 else 2e-5
            np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * scale, err_msg=f"{name}/{i}")
            assert np.array_equal(np.isnan(got), np.isnan(ref)), f"{name}/{i}: NaNs differ"


def test_batched_matmuls_and_attention_match_onnx_reference(runs):
    from onnx.reference import ReferenceEvaluator

    out = runs[ALL]
    for name, (model, feeds) in matmul_models().items():
        refs = ReferenceEvaluator(model).run(None, {i.name: f for i, f in zip(model.graph.input, feeds, strict=True)})
        for i, ref in enumerate(refs):
            got = out[f"{name}/{i}"]
            assert got.shape == ref.shape and got.dtype == ref.dtype, (name, i)
            tol = {np.dtype(np.float64): 1e-12, np.dtype(np.float16): 2e-3}.get(ref.dtype, 2e-5)
            finite = np.isfinite(ref)
            np.testing.assert_allclose(got[finite], ref[finite], rtol=tol, atol=tol * float(np.abs(ref[finite]).max()),
                                       err_msg=f"{name}/{i}")
            assert np.array_equal(got[~finite], ref[~finite]), f"{name}/{i}: non-finite values differ"


@pytest.mark.skipif(CORES < 2, reason="the pool has no helper on one core")
def test_helpers_start_only_when_enabled(runs):
    assert int(runs["1"]["helpers"]) == 0
    assert int(runs[ALL]["helpers"]) == CORES - 1


_HELPER_COUNT = textwrap.dedent("""
    import os, sys
    import numpy as np
    import geasync as ga
    from onnx import TensorProto, helper
    g = helper.make_graph([helper.make_node("Tanh", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [512, 512])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [512, 512])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]); m.ir_version = 8
    x = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(m))
        y = s.run_graph(1, [x])[0].numpy()
        assert np.allclose(y, np.tanh(x), rtol=1e-6, atol=1e-6)
    names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
    print(sum(n == "ge-intra-op" for n in names))
""")


@pytest.mark.skipif(CORES < 2, reason="the pool has no helper on one core")
@pytest.mark.parametrize("value", ["0", "-1", "x", "", "2x", None])
def test_bad_values_fall_back_to_the_default(value):
    env = dict(os.environ)
    env.pop("GEASYNC_INTRA_OP_THREADS", None)
    if value is not None:
        env["GEASYNC_INTRA_OP_THREADS"] = value
    r = _python([sys.executable, "-c", _HELPER_COUNT], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.strip()) == CORES - 1  # default: one thread per usable core, the caller included


@pytest.mark.skipif(CORES < 2 or not hasattr(os, "sched_setaffinity"), reason="needs two cores and affinity")
def test_a_process_bound_to_one_cpu_starts_no_helper():
    """taskset / a cpuset: the pool counts the CPUs the process may run on, not the machine's."""
    script = "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n" + _HELPER_COUNT
    env = dict(os.environ)
    env.pop("GEASYNC_INTRA_OP_THREADS", None)
    r = _python([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.strip()) == 0


def test_one_turns_the_pool_off():
    env = dict(os.environ, GEASYNC_INTRA_OP_THREADS="1")
    r = _python([sys.executable, "-c", _HELPER_COUNT], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.strip()) == 0


def test_concurrent_sessions_from_threads_are_correct():
    """Two graphs running at once from two threads (the idle-core gate then keeps helpers out on 2 cores; on more
    cores they share the pool): every result equals the one of a run alone."""
    import threading

    import geasync as ga
    sys.path.insert(0, str(HERE))
    from test_models import make_cnn, make_transformer, model_input

    models = {"cnn": (make_cnn(), 16), "transformer": (make_transformer(), 8)}
    xs = {n: model_input(n, m, b) for n, (m, b) in models.items()}
    alone = {}
    with ga.Session() as s:
        for gid, (n, (m, _)) in enumerate(models.items(), 1):
            s.add_graph(gid, ga.Graph.from_onnx(m))
            alone[n] = s.run_graph(gid, [xs[n]])[0].numpy().copy()
    errors = []

    def worker(name):
        try:
            with ga.Session() as s:
                s.add_graph(1, ga.Graph.from_onnx(models[name][0]))
                for _ in range(6):
                    got = s.run_graph(1, [xs[name]])[0].numpy()
                    if not np.array_equal(got, alone[name]):
                        errors.append(name)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(n,)) for n in models for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors


# geasync refuses a forked child of a process that initialised it (GE's threads do not survive fork): the child
# must get that error promptly (not hang on the pool's lock), and the parent's pool must keep working.
_FORK = textwrap.dedent("""
    import os, sys
    import numpy as np
    sys.path.insert(0, {here!r})
    import geasync as ga
    from test_models import make_transformer, model_input
    m = make_transformer(); x = model_input("transformer", m, 8)
    s = ga.Session()
    s.add_graph(1, ga.Graph.from_onnx(m))
    want = s.run_graph(1, [x])[0].numpy().copy()  # the parent used the pool
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            with ga.Session() as c:
                c.add_graph(1, ga.Graph.from_onnx(m))
                c.run_graph(1, [x])
            code = 2
        except ga.GeError as e:
            code = 0 if "fork" in str(e) else 3
        finally:
            os._exit(code)
    for _ in range(3):
        assert np.array_equal(s.run_graph(1, [x])[0].numpy(), want)
    _, status = os.waitpid(pid, 0)
    s.close()
    print(os.waitstatus_to_exitcode(status))
""")


def test_fork_after_the_pool_ran():
    r = _python([sys.executable, "-c", _FORK.format(here=str(HERE))], capture_output=True, text=True,
                       timeout=180)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "0", r.stdout + r.stderr


# A big MatMul run synchronously, then asynchronously: the helpers' CPU time (from /proc) shows who shared the work.
_WHO_WORKS = textwrap.dedent("""
    import asyncio, os
    import numpy as np
    import geasync as ga
    from onnx import TensorProto, helper

    def helper_ticks():
        ticks = 0
        for t in os.listdir("/proc/self/task"):
            try:
                if open(f"/proc/self/task/{t}/comm").read().strip() == "ge-intra-op":
                    ticks += int(open(f"/proc/self/task/{t}/stat").read().rsplit(")", 1)[1].split()[11])
            except OSError:
                pass
        return ticks

    v = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [768, 768]) for n in "aby"]
    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "g", v[:2], v[2:])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]); m.ir_version = 8
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((768, 768)).astype(np.float32) for _ in range(2))
    want = a.astype(np.float64) @ b
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(m))
        s.add_graph(2, ga.Graph.from_onnx(m))  # (a graph's run mode is fixed by its first run)

        async def runs():
            for _ in range(8):
                (y,) = await s.run_graph_async(1, [a, b])
                assert np.allclose(y.numpy(), want, rtol=1e-4, atol=1e-3)
        asyncio.run(runs())
        after_async = helper_ticks()
        for _ in range(16):
            (y,) = s.run_graph(2, [a, b])
            assert np.allclose(y.numpy(), want, rtol=1e-4, atol=1e-3)
        print(after_async, helper_ticks())
""")


@pytest.mark.skipif(CORES != 2 or not os.path.isdir("/proc/self/task"),
                    reason="the gate's answer for an async run is fixed on two cores; helpers' CPU time from /proc")
def test_sync_runs_share_work_async_runs_leave_the_core_to_the_event_loop():
    """On two cores an async run gets no helper (its event loop may need the other core), a synchronous run of a big
    MatMul does (its caller only waits)."""
    env = dict(os.environ)
    env["GEASYNC_INTRA_OP_THREADS"] = ALL
    r = _python([sys.executable, "-c", _WHO_WORKS], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    after_async, after_sync = map(int, r.stdout.split())
    assert after_async == 0
    assert after_sync > 0
