"""Shapes from the "conv sweep" benchmark family (benchmarks/bench_ops.py) whose kernels changed: ConvTranspose at
stride > 1 (the scatter-add of the GEMM's columns now bounds each output row once, so the taps that fall off an edge
are the ones the pads / output_padding / odd sizes decide), Resize nearest (whole repeated rows copied from the
previous output row, integer last-axis repeats written as runs), Conv3d (im2col in blocks of output rows) and batches
of 1x7 / 7x1 convs (images blocked together only while their planes are small). Each is
checked against onnx.reference at small sizes."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from conftest import TensorProto, helper, make_model  # noqa: E402
from onnx_cases import assert_close, reference, run_twin  # noqa: E402

F = TensorProto.FLOAT
RNG = np.random.default_rng(4511)


def _one(op, x, inits=(), out_type=F, **attrs):
    names = ["x"] + [n for n, _ in inits]
    model = make_model([helper.make_node(op, names, ["y"], **attrs)],
                       [("x", helper.np_dtype_to_tensor_dtype(x.dtype), list(x.shape))], [("y", out_type, None)],
                       initializers=inits, opset=19)
    return model, {"x": x}


def _check(model, feeds, rtol=1e-5, atol=1e-5):
    got = run_twin(model, feeds)
    assert_close(got, reference(model, [feeds["x"]]), rtol, atol)
    return got


# (x shape, W shape [C, M / group, k...], strides, pads, output_padding, dilations, group): stride 2 and 3 with
# kernels 2..5, pads on one side, output padding, odd input sizes, 1-D / 2-D / 3-D and a dilation (onnx.reference has
# no grouped ConvTranspose).
_TRANSPOSE = [
    ((1, 4, 5, 6), (4, 3, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), (1, 1), 1),
    ((2, 3, 7, 5), (3, 2, 4, 4), (2, 2), (1, 1, 1, 1), (0, 0), (1, 1), 1),
    ((1, 2, 4, 4), (2, 5, 2, 2), (2, 2), (0, 0, 0, 0), (0, 0), (1, 1), 1),
    ((1, 3, 5, 7), (3, 2, 3, 5), (3, 2), (0, 2, 1, 0), (2, 1), (1, 1), 1),
    ((1, 4, 6, 5), (4, 3, 3, 3), (2, 2), (1, 0, 0, 1), (1, 0), (2, 2), 1),
    ((1, 6, 9), (6, 4, 4), (2,), (1, 1), (0,), (1,), 1),
    ((2, 3, 11), (3, 2, 5), (3,), (2, 0), (1,), (1,), 1),
    ((1, 2, 3, 4, 5), (2, 3, 3, 3, 3), (2, 2, 2), (1, 1, 1, 1, 1, 1), (1, 0, 1), (1, 1, 1), 1),
]


@pytest.mark.parametrize("xs,ws,strides,pads,op,dil,group", _TRANSPOSE)
@pytest.mark.parametrize("bias", [False, True])
def test_convtranspose_strided(xs, ws, strides, pads, op, dil, group, bias):
    x = RNG.standard_normal(xs).astype(np.float32)
    inits = [("w", RNG.standard_normal((ws[0], ws[1], *ws[2:])).astype(np.float32))]
    if bias:
        inits.append(("b", RNG.standard_normal(ws[1] * group).astype(np.float32)))
    model, feeds = _one("ConvTranspose", x, inits, strides=list(strides), pads=list(pads), output_padding=list(op),
                        dilations=list(dil), group=group)
    _check(model, feeds, rtol=1e-4, atol=1e-4)


# Resize nearest: every rounding mode meets the repeated-row copy, integer factors 2 / 3 on the last axis (runs), a
# non-integer factor (gather), downsampling, and a 5-D input; float32 and int8 (the byte-wise path).
_NEAREST = [
    ((1, 3, 5, 6), (1, 1, 2, 2), "asymmetric", "floor"),
    ((2, 2, 4, 5), (1, 1, 3, 3), "asymmetric", "floor"),
    ((1, 3, 5, 6), (1, 1, 2, 2), "half_pixel", "round_prefer_floor"),
    ((1, 3, 5, 6), (1, 1, 2, 2), "asymmetric", "round_prefer_ceil"),
    ((1, 2, 7, 4), (1, 1, 2.5, 1.5), "align_corners", "round_prefer_floor"),
    ((1, 2, 8, 9), (1, 1, 0.5, 0.5), "asymmetric", "floor"),
    ((1, 2, 3, 4, 5), (1, 1, 2, 2, 2), "asymmetric", "floor"),
    ((1, 1, 3, 4), (1, 1, 2, 1), "asymmetric", "floor"),
]


@pytest.mark.parametrize("shape,scales,ctm,nearest", _NEAREST)
@pytest.mark.parametrize("dtype", [np.float32, np.int8])
def test_resize_nearest(shape, scales, ctm, nearest, dtype):
    x = (RNG.standard_normal(shape) * 50).astype(dtype)
    inits = [("roi", np.zeros(0, np.float32)), ("sc", np.array(scales, np.float32))]
    model, feeds = _one("Resize", x, inits, out_type=helper.np_dtype_to_tensor_dtype(np.dtype(dtype)),
                        mode="nearest", coordinate_transformation_mode=ctm, nearest_mode=nearest)
    got = run_twin(model, feeds)
    (want,) = reference(model, [x])
    assert got[0].shape == want.shape
    np.testing.assert_array_equal(got[0], want)  # a gather: the same bits


# Conv3d through im2col in blocks of output rows (about 1 MB of columns each): maps whose column matrix spans
# several blocks, a block boundary inside a depth slice, strides, pads, dilation, groups, batch and bias.
_CONV3D = [
    ((1, 4, 8, 24, 24), (6, 4, 3, 3, 3), (1, 1, 1), (1, 1, 1, 1, 1, 1), (1, 1, 1), 1),
    ((2, 4, 6, 30, 26), (6, 2, 3, 3, 3), (1, 1, 1), (1, 0, 1, 1, 2, 0), (1, 1, 1), 2),
    ((1, 8, 7, 40, 33), (4, 8, 3, 3, 3), (2, 1, 2), (1, 1, 1, 1, 1, 1), (1, 1, 1), 1),
    ((1, 3, 9, 36, 36), (4, 3, 3, 5, 5), (1, 1, 1), (2, 2, 2, 2, 2, 2), (1, 2, 2), 1),
]


@pytest.mark.parametrize("xs,ws,strides,pads,dil,group", _CONV3D)
@pytest.mark.parametrize("bias", [False, True])
def test_conv3d_column_blocks(xs, ws, strides, pads, dil, group, bias):
    x = RNG.standard_normal(xs).astype(np.float32)
    inits = [("w", (RNG.standard_normal(ws) * 0.2).astype(np.float32))]
    if bias:
        inits.append(("b", RNG.standard_normal(ws[0]).astype(np.float32)))
    model, feeds = _one("Conv", x, inits, strides=list(strides), pads=list(pads), dilations=list(dil), group=group)
    _check(model, feeds, rtol=1e-4, atol=1e-4)


# Inception's 1x7 / 7x1 convs on 17x17 maps through the flat direct kernel: batch 2 has its images' planes blocked
# together (under 512 KB of them), batch 3 runs them image by image (past that).
@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("kernel,pads", [((1, 7), (0, 3, 0, 3)), ((7, 1), (3, 0, 3, 0))])
def test_conv_1x7_batches(n, kernel, pads):
    x = RNG.standard_normal((n, 128, 17, 17)).astype(np.float32)
    inits = [("w", (RNG.standard_normal((24, 128, *kernel)) * 0.1).astype(np.float32)),
             ("b", RNG.standard_normal(24).astype(np.float32))]
    model, feeds = _one("Conv", x, inits, kernel_shape=list(kernel), pads=list(pads))
    _check(model, feeds, rtol=1e-4, atol=1e-4)
