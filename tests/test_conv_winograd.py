"""Conv with 3x3 kernels, stride 1, one group, against onnx.reference: the shapes where the twin takes Winograd
F(2x2, 3x3) (>= 32 channels in and out, and 64 x 64 channels or >= 512 tiles) and their neighbours on the direct
path, every tile edge (odd and even H and W, 1x1 and 2x2 images, asymmetric pads), N = 2 and 8, with and without
bias, with a fused Relu, constant and run-time weights, and edge values (NaN, +-inf, overflow, large magnitudes,
denormals). The last test reruns the file with the fallback instruction sets (GEASYNC_TWIN_SIMD)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator
from onnx_cases import rerun_file_with_instruction_set

import geasync as ga
from conftest import TensorProto, helper, make_model

F = TensorProto.FLOAT


def conv_model(shape, m, pads, *, bias=True, relu=False, weights=None, b=None):
    """A Conv (+ Relu) graph; weights as initializers when given, else a second graph input."""
    n, c, h, w = shape
    oh, ow = h + pads[0] + pads[2] - 2, w + pads[1] + pads[3] - 2
    ins = ["x", "w", "b"] if bias else ["x", "w"]
    nodes = [helper.make_node("Conv", ins, ["c" if relu else "y"], pads=pads)]
    if relu:  # Conv + Relu: the twin fuses the Relu into the convolution
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    inputs = [("x", F, list(shape))]
    inits = []
    if weights is None:
        inputs.append(("w", F, [m, c, 3, 3]))
    else:
        inits.append(("w", weights))
    if bias:
        inits.append(("b", b))
    return make_model(nodes, inputs, [("y", F, [n, m, oh, ow])], initializers=inits, opset=20)


def abs_conv(x, wt, pads):
    """conv(|x|, |w|) in float64: the scale of each output's rounding error, whatever the summation order."""
    xp = np.pad(np.abs(x).astype(np.float64), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh, ow = xp.shape[2] - 2, xp.shape[3] - 2
    out = np.zeros((x.shape[0], wt.shape[0], oh, ow))
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,mc->nmhw", xp[:, :, i:i + oh, j:j + ow], np.abs(wt[:, :, i, j]).astype(np.float64))
    return out


def run_twin(model, feeds):
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        return s.run_graph(1, feeds)[0].numpy().copy()


def check(shape, m, pads, *, bias=True, relu=False, const_weights=True, x=None, wt=None, seed=0):
    rng = np.random.default_rng(seed)
    if x is None:
        x = rng.standard_normal(shape).astype(np.float32)
    if wt is None:
        wt = rng.standard_normal((m, shape[1], 3, 3)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    model = conv_model(shape, m, pads, bias=bias, relu=relu, weights=wt if const_weights else None, b=b)
    feeds = [x] if const_weights else [x, wt]
    names = {"x": x} if const_weights else {"x": x, "w": wt}
    got = run_twin(model, feeds)
    with np.errstate(all="ignore"):  # inf * 0 and overflow in the reference's own matmul
        ref = ReferenceEvaluator(model).run(None, names)[0]
    assert got.shape == ref.shape
    # Finite outputs: within 1e-5 of the output's scale (sum of |w x| + |b|); any inf/NaN must match exactly.
    finite = np.isfinite(ref)
    np.testing.assert_array_equal(np.isfinite(got), finite)
    np.testing.assert_array_equal(got[~finite], ref[~finite])
    with np.errstate(all="ignore"):
        scale = abs_conv(x, wt, pads) + (np.abs(b)[None, :, None, None] if bias else 0.0)
        err = np.abs(got.astype(np.float64) - ref.astype(np.float64))
    assert np.all(err[finite] <= 1e-5 * scale[finite] + 1e-30), float(np.max(err[finite] / (scale[finite] + 1e-30)))
    return got, ref


@pytest.mark.parametrize("shape,m,pads", [
    ((1, 64, 8, 8), 64, [1, 1, 1, 1]),     # even H, W: whole tiles (the flat direct kernel on AVX-512)
    ((1, 64, 10, 10), 64, [1, 1, 1, 1]),   # even H, W: whole tiles, Winograd on AVX-512 too
    ((1, 65, 7, 9), 64, [1, 1, 1, 1]),     # odd H, W: a partial last tile row and column
    ((2, 48, 6, 5), 96, [0, 1, 2, 0]),     # N = 2, asymmetric pads
    ((1, 64, 1, 1), 64, [1, 1, 1, 1]),     # 1x1 image: one tile, one output
    ((1, 32, 2, 2), 128, [1, 1, 1, 1]),    # 2x2 image
    ((1, 64, 2, 2), 64, [1, 0, 0, 1]),     # 2x2 image, pads on two sides: one output
    ((1, 80, 3, 4), 64, [0, 0, 0, 0]),     # no pads
    ((1, 64, 5, 6), 64, [2, 0, 0, 3]),     # pads wider than the kernel's reach on one side
    ((1, 64, 6, 5), 64, [0, 2, 3, 0]),     # ... on the left and the bottom
    ((2, 64, 11, 10), 64, [1, 2, 1, 0]),
    ((1, 32, 45, 47), 32, [1, 1, 1, 1]),   # 32 channels, >= 512 tiles: several tile blocks per image
    ((8, 32, 16, 17), 32, [1, 1, 1, 1]),   # tile blocks spanning images
    ((1, 1, 6, 6), 32, [1, 1, 1, 1]),      # below the thresholds: the direct path
    ((1, 16, 6, 7), 64, [1, 1, 1, 1]),
    ((1, 64, 5, 6), 8, [1, 1, 1, 1]),
])
@pytest.mark.parametrize("bias,relu", [(True, False), (False, False), (True, True)])
def test_conv_3x3_matches_reference(shape, m, pads, bias, relu):
    check(shape, m, pads, bias=bias, relu=relu, seed=sum(shape) + m)


@pytest.mark.parametrize("shape,m,pads", [((1, 64, 7, 8), 64, [1, 1, 1, 1]), ((2, 32, 5, 5), 128, [0, 1, 1, 0])])
def test_conv_3x3_with_runtime_weights_matches_reference(shape, m, pads):
    check(shape, m, pads, const_weights=False, seed=m)


def edge_input(kind, shape, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    idx = rng.choice(flat.size, size=max(1, flat.size // 50), replace=False)
    if kind == "nan":
        flat[idx] = np.nan
    elif kind == "inf":
        flat[idx] = np.where(np.arange(idx.size) % 2 == 0, np.inf, -np.inf)
    elif kind == "large":
        x *= np.float32(1e30)
    elif kind == "denormal":
        x *= np.float32(1e-41)
    elif kind == "mixed":
        x *= np.float32(1e30)
        flat[idx] = np.float32(1e-42)
    return x


@pytest.mark.parametrize("kind", ["nan", "inf", "large", "denormal", "mixed"])
@pytest.mark.parametrize("relu", [False, True])
def test_conv_3x3_edge_values_match_reference(kind, relu):
    rng = np.random.default_rng(len(kind))
    shape = (2, 64, 9, 8)
    check(shape, 64, [1, 0, 1, 1], relu=relu, x=edge_input(kind, shape, rng), seed=3)


def test_conv_3x3_overflow_gives_inf_like_the_reference():
    # Every window sums at least four terms of ~3e38: +inf everywhere in the reference; Winograd's transforms would
    # turn some of them into inf - inf = NaN, so the twin must recompute on the direct path.
    shape = (1, 64, 6, 7)
    x = np.full(shape, 3e38, np.float32)
    wt = np.random.default_rng(1).uniform(1.0, 2.0, (64, 64, 3, 3)).astype(np.float32)
    got, _ = check(shape, 64, [1, 1, 1, 1], x=x, wt=wt)
    assert np.all(np.isposinf(got))


def test_conv_3x3_nan_weights_give_nan_like_the_reference():
    shape = (1, 64, 6, 6)
    wt = np.random.default_rng(2).standard_normal((64, 64, 3, 3)).astype(np.float32)
    wt[5, 3, 1, 2] = np.nan
    wt[7, 0, 0, 0] = np.inf
    got, _ = check(shape, 64, [1, 1, 1, 1], wt=wt, const_weights=False)
    assert np.isnan(got[0, 5]).all() and not np.isnan(got[0, 4]).any()


@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_fallback_instruction_sets_pass_the_same_checks(isa):
    rerun_file_with_instruction_set(__file__, isa)
