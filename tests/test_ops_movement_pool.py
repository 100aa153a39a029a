"""Fast paths of data movement, casts and pooling in the twin: N-d MaxPool (separable), against onnx.reference,
a numpy oracle where the reference cannot run, and the general loop (the Indices output takes it) bit for bit."""
import os
import warnings

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from onnx_cases import rerun_file_with_instruction_set  # noqa: E402

import geasync as ga  # noqa: E402
from geasync import _lib  # noqa: E402

RNG = np.random.default_rng(1010)
EDGE = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 3e38, -3e38, 1e-45], np.float32)


def _model(op, inputs, n_out=1, opset=18, **attrs):
    node = helper.make_node(op, [f"x{i}" for i in range(len(inputs))], [f"y{i}" for i in range(n_out)], **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(f"x{i}", helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for i, a in enumerate(inputs)],
        [helper.make_tensor_value_info(f"y{i}", TensorProto.UNDEFINED, None) for i in range(n_out)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _twin(model, inputs):
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        return [t.numpy() for t in s.run_graph(1, list(inputs))]


def _reference(model, inputs):
    with np.errstate(all="ignore"):
        return ReferenceEvaluator(model).run(None, {f"x{i}": a for i, a in enumerate(inputs)})


def _with_edges(x, frac):
    x = x.copy()
    if frac and x.size:
        k = max(1, x.size // frac)
        x.flat[RNG.choice(x.size, k, replace=False)] = RNG.choice(EDGE, k)
    return x


# ---- MaxPool 3-D: separable (innermost axis first, then the rows of the two outer axes) ----

_POOLS3 = [
    dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2]),
    dict(kernel_shape=[3, 3, 3]),
    dict(kernel_shape=[3, 3, 3], pads=[1] * 6),
    dict(kernel_shape=[3, 3, 3], strides=[2, 2, 2], pads=[1] * 6),
    dict(kernel_shape=[2, 3, 2], strides=[1, 2, 3], pads=[0, 1, 1, 1, 0, 1], ceil_mode=1),
    dict(kernel_shape=[1, 1, 3], strides=[1, 1, 2]),
    dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2], ceil_mode=1),
    dict(kernel_shape=[3, 2, 5], strides=[2, 1, 2], pads=[1, 0, 2, 1, 1, 2]),
    dict(kernel_shape=[2, 2, 3], strides=[2, 2, 2], auto_pad="SAME_UPPER"),
]
_SHAPES3 = [(1, 2, 5, 6, 7), (2, 1, 4, 9, 19), (1, 1, 3, 3, 40), (1, 2, 1, 1, 9), (1, 1, 4, 4, 83),
            (2, 3, 4, 6, 66)]  # the last: even rows at stride 2, taken as one long row


def _fits(shape, attrs):
    if attrs.get("auto_pad"):
        return True
    p = attrs.get("pads", [0] * 6)
    return all(shape[2 + i] + p[i] + p[i + 3] >= attrs["kernel_shape"][i] for i in range(3))


def _stride1_oracle(x, attrs):
    """onnx.reference's rule at stride 1 (NaN taps skipped; all-NaN windows: -inf here); its own stride-1 pool
    reads 1-D, asymmetric 2-D and 3-D pads wrongly (or fails), so numpy."""
    ks = attrs["kernel_shape"]
    nsp = len(ks)
    p = attrs.get("pads", [0] * 2 * nsp)
    if attrs.get("auto_pad") == "SAME_UPPER":
        p = [(k - 1) // 2 for k in ks] + [k - 1 - (k - 1) // 2 for k in ks]
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p[i], p[i + nsp]) for i in range(nsp)], constant_values=np.nan)
    v = sliding_window_view(xp, ks, axis=tuple(range(2, 2 + nsp)))
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        o = np.nanmax(v.reshape(*v.shape[:2 + nsp], -1), axis=-1)
    return np.where(np.isnan(o), np.float32(-np.inf), o).astype(np.float32)


@pytest.mark.parametrize("attrs", _POOLS3)
@pytest.mark.parametrize("shape", _SHAPES3)
def test_maxpool3d_against_reference_without_nan(attrs, shape):
    if not _fits(shape, attrs):
        pytest.skip("window larger than the padded input")
    x = (RNG.standard_normal(shape) * 100).astype(np.float32)
    x.flat[RNG.choice(x.size, x.size // 5, replace=False)] = RNG.choice(EDGE[1:], x.size // 5)
    model = _model("MaxPool", [x], **attrs)
    (got,) = _twin(model, [x])
    stride1 = all(s == 1 for s in attrs.get("strides", [1, 1, 1])) and not attrs.get("auto_pad")
    if stride1 and any(attrs.get("pads", [0])):
        want = _stride1_oracle(x, attrs)
    else:
        (want,) = _reference(model, [x])
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("attrs", _POOLS3)
@pytest.mark.parametrize("shape", _SHAPES3)
@pytest.mark.parametrize("frac", [1, 3])
def test_maxpool3d_nan_and_signed_zeros(attrs, shape, frac):
    # Stride 1: NaN taps skipped (onnx.reference). Other strides: the general loop's bits (a NaN first tap kept,
    # +-0 ties keep the first zero), which is onnx.reference's rule there.
    if not _fits(shape, attrs):
        pytest.skip("window larger than the padded input")
    x = _with_edges((RNG.standard_normal(shape) * 10).astype(np.float32), frac)
    (fast,) = _twin(_model("MaxPool", [x], **attrs), [x])
    exact, _ = _twin(_model("MaxPool", [x], 2, **attrs), [x])
    stride1 = all(s == 1 for s in attrs.get("strides", [1, 1, 1])) and not attrs.get("auto_pad")
    if stride1:
        np.testing.assert_array_equal(fast, _stride1_oracle(x, attrs))
        xn = np.where(np.isnan(x), np.float32(1.5), x)  # without NaN: the general loop's bits (signed zeros)
        (fast,) = _twin(_model("MaxPool", [xn], **attrs), [xn])
        exact, _ = _twin(_model("MaxPool", [xn], 2, **attrs), [xn])
    else:
        want = _reference(_model("MaxPool", [x], **attrs), [x])[0]
        np.testing.assert_array_equal(fast, want)
    np.testing.assert_array_equal(fast.view(np.uint32), exact.view(np.uint32))


def test_maxpool3d_nan_first_tap_rows():
    # A NaN at each window's first tap in only some rows, at stride 2 (kept) with the other taps finite.
    x = (RNG.standard_normal((1, 1, 4, 6, 34)) * 10).astype(np.float32)
    x[0, 0, 2, 2, ::2] = np.nan
    x[0, 0, 0, 3, 4] = np.nan
    attrs = dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2])
    model = _model("MaxPool", [x], **attrs)
    (got,) = _twin(model, [x])
    np.testing.assert_array_equal(got, _reference(model, [x])[0])
    assert np.isnan(got[0, 0, 1, 1]).sum() == 17


@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_fallback_instruction_sets_pass_the_same_checks(isa):
    rerun_file_with_instruction_set(__file__, isa)


# ---- Transpose: the last axis kept (contiguous runs copied whole), and the tiled 2-D transposes ----

_TRANSPOSES = [((3, 5, 7), (1, 0, 2)), ((2, 3, 4, 5), (0, 2, 1, 3)), ((2, 3, 4, 5), (0, 3, 1, 2)),
               ((2, 3, 4, 5), (0, 2, 3, 1)), ((4, 1, 9, 17), (2, 0, 1, 3)), ((1, 16, 33), (1, 0, 2)),
               ((5, 0, 3), (1, 0, 2)), ((2, 9, 1, 40), (1, 0, 2, 3)), ((2, 3, 1), (1, 0, 2)), ((3, 20, 12), (0, 2, 1))]


@pytest.mark.parametrize("shape,perm", _TRANSPOSES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int8, np.uint16, np.int64, np.bool_])
def test_transpose_same_bits(shape, perm, dtype):
    raw = RNG.integers(0, 256, size=int(np.prod(shape)) * np.dtype(dtype).itemsize, dtype=np.uint8)
    x = (raw.view(dtype) if dtype is not np.bool_ else raw[: int(np.prod(shape))] > 127).reshape(shape)
    if dtype is np.float32:
        x = _with_edges(x, 3)
    model = _model("Transpose", [x], perm=list(perm))
    (got,) = _twin(model, [x])
    want = np.transpose(x, perm)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got.view(np.uint8), np.ascontiguousarray(want).view(np.uint8))
    if x.size and dtype is np.float32:
        np.testing.assert_array_equal(got, _reference(model, [x])[0])


# ---- Cast float64 -> float32 (AVX blocks of 8; a block with a finite value past +-FLT_MAX element by element) ----

_F64_EDGE = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 1e-46, 5e-324, 1e-300,
                      3.4028234663852886e38, -3.4028234663852886e38, 3.4028235677973366e38 * (1 + 1e-12),
                      3.40282356e38, 3.4028236e38, -3.4028236e38, 1e300, -1e300, 1.0000000596046448,
                      1.0000001788139343, 2.0 ** -149, 2.0 ** -150, 3 * 2.0 ** -151], np.float64)


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 16, 23, 64, 1001])
@pytest.mark.parametrize("edge_frac", [0, 2])
def test_cast_f64_to_f32(n, edge_frac):
    x = RNG.standard_normal(n) * 10.0 ** RNG.integers(-50, 50, n)
    if edge_frac and n:
        k = max(1, n // edge_frac)
        x[RNG.choice(n, k, replace=False)] = RNG.choice(_F64_EDGE, k)
    model = _model("Cast", [x], opset=21, to=TensorProto.FLOAT)
    (got,) = _twin(model, [x])
    (want,) = _reference(model, [x])
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_cast_f64_to_f32_every_edge_in_every_lane():
    base = np.full(8 * len(_F64_EDGE), 1.5)
    for lane in range(8):
        x = base.copy()
        x[lane::8][: len(_F64_EDGE)] = _F64_EDGE[: len(x[lane::8])]
        x = np.concatenate([x, _F64_EDGE[:5]])  # and a tail
        model = _model("Cast", [x], opset=21, to=TensorProto.FLOAT)
        (got,) = _twin(model, [x])
        want = _reference(model, [x])[0]
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


# ---- SpaceToDepth: rows split into column phases (blocksize 2 as one loop over column pairs) ----

@pytest.mark.parametrize("shape,b", [((1, 1, 2, 2), 2), ((2, 3, 4, 6), 2), ((1, 2, 6, 34), 2), ((2, 2, 6, 9), 3),
                                     ((1, 3, 5, 7), 1), ((1, 2, 8, 36), 4), ((0, 2, 4, 4), 2), ((3, 1, 2, 18), 2)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.float16])
def test_space_to_depth(shape, b, dtype):
    x = (RNG.standard_normal(shape) * 100).astype(dtype)
    if dtype is np.float32:
        x = _with_edges(x, 3)
    model = _model("SpaceToDepth", [x], opset=13, blocksize=b)
    (got,) = _twin(model, [x])
    (want,) = _reference(model, [x])
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got.view(np.uint8), np.ascontiguousarray(want).view(np.uint8))
    # and DepthToSpace (DCR) brings it back
    (back,) = _twin(_model("DepthToSpace", [got], opset=13, blocksize=b, mode="DCR"), [got])
    np.testing.assert_array_equal(back.view(np.uint8), x.view(np.uint8))


# ---- MaxPool 1-D / 2-D at stride 1 with pads: the separable path with the general loop's NaN rule ----

_POOLS12 = [dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), dict(kernel_shape=[2, 5], pads=[0, 2, 1, 1]),
            dict(kernel_shape=[5, 1], pads=[2, 0, 2, 0]), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], ceil_mode=1),
            dict(kernel_shape=[4, 4], auto_pad="SAME_UPPER"), dict(kernel_shape=[3], pads=[1, 1]),
            dict(kernel_shape=[7], pads=[0, 3])]


@pytest.mark.parametrize("attrs", _POOLS12)
@pytest.mark.parametrize("width", [1, 2, 5, 8, 9, 31, 32, 33, 40, 70])
def test_maxpool_stride1_pads_row_tails(attrs, width):
    shape = (2, 3, 5, width) if len(attrs["kernel_shape"]) == 2 else (2, 3, width)
    p = attrs.get("pads", [0] * 4)
    if not attrs.get("auto_pad") and width + p[len(p) // 2 - 1] + p[-1] < attrs["kernel_shape"][-1]:
        pytest.skip("window wider than the padded input")
    x = (RNG.standard_normal(shape) * 100).astype(np.float32)
    x.flat[RNG.choice(x.size, x.size // 5, replace=False)] = RNG.choice(EDGE[1:], x.size // 5)
    model = _model("MaxPool", [x], **attrs)
    (got,) = _twin(model, [x])
    np.testing.assert_array_equal(got, _stride1_oracle(x, attrs))
    x = _with_edges(x, 3)  # with NaN: the same bits as the general loop (Indices output)
    (fast,) = _twin(model, [x])
    exact, _ = _twin(_model("MaxPool", [x], 2, **attrs), [x])
    np.testing.assert_array_equal(fast.view(np.uint32), exact.view(np.uint32))


# ---- Cast float32 -> 8- and 16-bit ints (AVX2: truncation to int32, low bits kept, packed) ----

_F32_INT_EDGE = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-45, 0.999, -0.999, 127.9, 128.0, -128.5,
                          -129.0, 255.5, 256.0, 300.7, -300.7, 65535.9, 65536.0, -32768.9, 70000.0, 2147483520.0,
                          2147483648.0, -2147483648.0, -2147483904.0, 3e9, -3e9, 1e20, -1e20], np.float32)


@pytest.mark.parametrize("to", [TensorProto.UINT8, TensorProto.INT8, TensorProto.UINT16, TensorProto.INT16])
@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100])
def test_cast_f32_to_narrow_ints(to, n):
    x = (RNG.standard_normal(n) * 400).astype(np.float32)
    if n:
        k = max(1, n // 2)
        x[RNG.choice(n, k, replace=False)] = RNG.choice(_F32_INT_EDGE, k)
    model = _model("Cast", [x], opset=21, to=to)
    (got,) = _twin(model, [x])
    (want,) = _reference(model, [x])
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def _average_oracle(x, kernel, pads, count_pad):
    """AveragePool at stride 1 as the general loop computes it: each window's valid taps added in float32 in window
    order (an out-of-input tap adds +0.0, which leaves a sum that started at +0.0 unchanged), then one division."""
    kh, kw = kernel
    pt, pl, pb, pr = pads
    n, c, h, w = x.shape
    oh, ow = h + pt + pb - kh + 1, w + pl + pr - kw + 1
    xp = np.zeros((n, c, h + pt + pb, w + pl + pr), np.float32)
    xp[:, :, pt:pt + h, pl:pl + w] = x
    inside = np.zeros(xp.shape[2:], np.int64)
    inside[pt:pt + h, pl:pl + w] = 1
    acc = np.zeros((n, c, oh, ow), np.float32)
    count = np.zeros((oh, ow), np.int64)
    with np.errstate(all="ignore"):
        for i in range(kh):
            for j in range(kw):
                acc += xp[:, :, i:i + oh, j:j + ow]
                count += inside[i:i + oh, j:j + ow]
        div = np.float32(kh * kw) if count_pad else count.astype(np.float32)
        return (acc / div).astype(np.float32)


@pytest.mark.parametrize("shape", [(1, 3, 1, 1), (2, 5, 7, 7), (1, 2, 5, 9), (1, 3, 14, 14), (1, 2, 9, 33),
                                   (1, 1, 20, 64), (1, 2, 3, 65), (1, 1, 4, 130)])
@pytest.mark.parametrize("kernel,pads", [((3, 3), (1, 1, 1, 1)), ((2, 2), (0, 0, 0, 0)), ((3, 3), (0, 0, 0, 0)),
                                         ((5, 5), (2, 2, 2, 2)), ((3, 5), (0, 2, 2, 1)), ((2, 3), (1, 0, 0, 2)),
                                         ((1, 7), (0, 3, 0, 3))])
@pytest.mark.parametrize("count_pad", [0, 1])
def test_averagepool_stride1_whole_planes(shape, kernel, pads, count_pad):
    """Short rows at stride 1 (the whole-plane kernel, rows up to 64) and longer ones: the general loop's bits, with
    edge values (NaN, infinities, signed zeros, denormals, and on short rows large magnitudes) in a third of the
    inputs (float32 sums: 3e38 + 3e38 overflows to inf, as the general loop's)."""
    if shape[2] + pads[0] + pads[2] < kernel[0] or shape[3] + pads[1] + pads[3] < kernel[1]:
        pytest.skip("the window does not fit")
    x = _with_edges(RNG.standard_normal(shape).astype(np.float32) * 4, 3)
    if shape[3] > 64:
        x[np.isfinite(x) & (np.abs(x) > 1e3)] = 0.5
    m = _model("AveragePool", [x], kernel_shape=list(kernel), pads=list(pads), count_include_pad=count_pad)
    np.testing.assert_array_equal(_twin(m, [x])[0], _average_oracle(x, kernel, pads, count_pad))


# ---- copies that glibc's `rep movsb` would run slowly (bug 30994): the twin moves them in pieces ----

def _carve(nbytes, addr_mod_4096, seed):
    """A float32 vector of nbytes whose data starts at addr_mod_4096 modulo 4 KiB, of random bits (a byte copied
    wrong or left out shows)."""
    raw = np.empty(nbytes + 8192, np.uint8)
    start = (addr_mod_4096 - raw.ctypes.data) % 4096
    x = raw[start:start + nbytes].view(np.float32)
    x.view(np.uint32)[:] = np.random.default_rng(seed).integers(0, 2**32, x.size, dtype=np.uint32)
    return x


_ROWS = _lib.OUTPUT_COPY_MAX // 4096 + 8  # rows of 4 KiB: outputs left in runtime memory, whose address shows
_PICK = np.array([3, 0, _ROWS - 1, 7, 7, 1] * (_ROWS // 6 + 1), np.int64)
_COPY_CASES = {
    "Identity": (lambda x: [x], dict(), lambda x: x),
    "Concat": (lambda x: [x, x[::-1].copy()], dict(axis=0), lambda x: np.concatenate([x, x[::-1]])),
    "Gather rows": (lambda x: [x, _PICK], dict(axis=0), lambda x: x[_PICK]),
}


@pytest.mark.parametrize("case", list(_COPY_CASES))
def test_copies_near_the_source_modulo_4k_move_every_byte(case):
    """Rows of 4 KiB copied to a destination 0-63 bytes past the source modulo 4 KiB (where CopyBytes goes in 2 KiB
    pieces), and elsewhere: every byte arrives. An output usually lands where the previous one was freed, so the
    input is placed relative to that; at least one run must take the pieces path."""
    make_inputs, attrs, expect = _COPY_CASES[case]
    probe = _carve(_ROWS * 4096, 0, 0).reshape(_ROWS, 1024)
    model = _model(case.split()[0], make_inputs(probe), **attrs)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        y = s.run_graph(1, make_inputs(probe))[0].numpy()
        in_zone = 0
        for k, gap in enumerate((16, 16, 0, 8, 40, 60, 64, 100, 2048)):
            x = _carve(_ROWS * 4096, (y.ctypes.data - gap) % 4096, k + 1).reshape(_ROWS, 1024)
            del y  # its block is free for this run's output
            y = s.run_graph(1, make_inputs(x))[0].numpy()
            in_zone += (y.ctypes.data - x.ctypes.data) % 4096 < 64
            np.testing.assert_array_equal(y.view(np.uint32), expect(x).view(np.uint32))
    # AddressSanitizer's allocator holds freed blocks back, so there outputs do not land where the last one was
    assert in_zone >= 1 or "libasan" in os.environ.get("LD_PRELOAD", "")


# ---- windows larger than the input: ceil_mode, and attributes whose arithmetic would overflow ----

_CEIL_WIDER = [  # (op, input spatial shape, attributes): every window is wider than the input plus pads
    ("MaxPool", (2, 2), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("MaxPool", (1,), dict(kernel_shape=[2], strides=[3], dilations=[2], ceil_mode=1)),
    ("MaxPool", (3, 2), dict(kernel_shape=[4, 3], strides=[3, 2], pads=[0, 0, 0, 0], ceil_mode=1)),
    ("AveragePool", (1, 1), dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
    ("AveragePool", (2, 3), dict(kernel_shape=[3, 4], strides=[2, 3], ceil_mode=1, count_include_pad=0)),
    ("AveragePool", (2,), dict(kernel_shape=[4], strides=[3], pads=[1, 0], ceil_mode=1, count_include_pad=1)),
]


@pytest.mark.parametrize("op,spatial,attrs", _CEIL_WIDER)
def test_ceil_mode_window_wider_than_the_input(op, spatial, attrs):
    """ceil_mode=1 gives one output per axis when the window is wider than the input plus pads, but less than a
    stride wider (the ONNX output-size formula; onnxruntime, onnx.reference and PyTorch agree): the twin refused such
    a model ("kernel ... does not fit"), which a ResNet's ceil-mode pools meet on small images."""
    x = RNG.standard_normal((2, 3) + spatial).astype(np.float32)
    model = _model(op, [x], opset=19, **attrs)
    (got,) = _twin(model, [x])
    (want,) = _reference(model, [x])
    assert got.shape == want.shape == (2, 3) + (1,) * len(spatial)
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("attrs", [dict(kernel_shape=[1 << 62], dilations=[4]),
                                   dict(kernel_shape=[3], dilations=[1 << 62], pads=[1 << 62, 1 << 62]),
                                   dict(kernel_shape=[2], pads=[1 << 62, 1 << 62]),
                                   dict(kernel_shape=[1 << 25], strides=[1 << 26], ceil_mode=1)])
def test_pool_attributes_whose_arithmetic_overflows_are_refused(attrs):
    """A kernel extent or pads past int64 used to wrap around: MaxPool with kernel 2^62 and dilation 4 returned
    8 outputs (-inf past the input's 4) for a 4-wide input. Windows of more than 2^24 taps are refused too: a pool's
    work and tables grow with its taps (a kernel of 2^30 over 4 values ran 27 s, or ran out of memory)."""
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 4)
    with pytest.raises(ga.GeError, match=r"\(op MaxPool\).*(at most 2\^(40|24)|does not fit)"):
        _twin(_model("MaxPool", [x], opset=19, **attrs), [x])


@pytest.mark.parametrize("attrs,spatial", [(dict(kernel_shape=[3], strides=[2], ceil_mode=1), (2,)),
                                           (dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, p=3), (2, 2)),
                                           (dict(kernel_shape=[4], strides=[3], pads=[1, 0], ceil_mode=1), (2,))])
def test_lppool_ceil_mode_window_wider_than_the_input(attrs, spatial):
    """As MaxPool and AveragePool: one output over what the window covers (onnxruntime's values; onnx.reference
    scales partial ceil-mode windows of LpPool, onnxruntime and the twin do not)."""
    x = RNG.standard_normal((1, 2) + spatial).astype(np.float32)
    (got,) = _twin(_model("LpPool", [x], opset=19, **attrs), [x])
    p = attrs.get("p", 2)
    want = (np.abs(x.astype(np.float64)) ** p).reshape(1, 2, -1).sum(axis=2) ** (1 / p)
    np.testing.assert_allclose(got.reshape(1, 2), want, rtol=1e-5)


@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 4, 9), (2, 3, 2, 3, 4), (3, 5), (2, 3, 0, 4)])
@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_global_lppool(shape, p, dtype):
    """(sum |x|^p over every spatial dim)^(1/p) per (N, C), keeping the spatial dims as 1s; onnx.reference has no
    GlobalLpPool, so numpy in float64 is the oracle (onnxruntime agrees). Opset 1 took p as a float."""
    x = RNG.standard_normal(shape).astype(dtype)
    x.flat[:: max(1, x.size // 3)] = -x.flat[:: max(1, x.size // 3)]
    axes = tuple(range(2, len(shape)))
    want = (np.abs(x.astype(np.float64)) ** p).sum(axis=axes, keepdims=True) ** (1 / p)
    for opset, attr in [(1, float(p)), (18, p)]:
        model = _model("GlobalLpPool", [x], opset=opset, p=attr)
        model.ir_version = 3 if opset == 1 else model.ir_version
        (got,) = _twin(model, [x])
        assert got.dtype == dtype and got.shape == want.shape
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-3 if dtype == np.float16 else 1e-6)


@pytest.mark.parametrize("attrs,match", [(dict(p=0), "'p' must be positive"), (dict(p=-2), "'p' must be positive")])
def test_global_lppool_refuses_a_p_that_is_not_positive(attrs, match):
    x = np.ones((1, 2, 3), np.float32)
    with pytest.raises(ga.GeError, match=match):
        _twin(_model("GlobalLpPool", [x], **attrs), [x])


def test_global_lppool_refuses_integers():
    x = np.ones((1, 2, 3), np.int32)
    with pytest.raises(ga.GeError, match="GlobalLpPool"):
        _twin(_model("GlobalLpPool", [x]), [x])
