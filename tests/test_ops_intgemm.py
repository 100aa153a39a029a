"""The exact integer GEMM behind MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv against onnx.reference:
every tile / panel / K-pair tail, u8 and s8 operands at their extremes, zero points (none, scalar, per row / per
column), constant and run-time operands, broadcast batches, int32 sums past 2^24 and past int32 (wrapping as the
reference's int32 product does), convolution geometries; rerun under each instruction set (at the CPU's best,
MatMulInteger / QLinearMatMul take the AVX-512 VNNI byte path where the CPU has it, the int16 path otherwise)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_cases import graph_model, reference, rerun_file_with_instruction_set, run_once, value_info

from onnx import TensorProto, helper, numpy_helper

U8, S8 = np.uint8, np.int8
SIZES = [1, 2, 3, 7, 8, 15, 16, 17, 31, 33, 65, 257, 513]


def _ints(rng, dtype, shape, extremes=True):
    """Random 8-bit values, a quarter of them replaced by the type's extremes (and 0)."""
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)
    if extremes and x.size:
        flat = x.reshape(-1)
        pick = rng.random(flat.size) < 0.25
        flat[pick] = rng.choice(np.array([info.min, info.max, 0, info.max], dtype), int(pick.sum()))
    return x


def _tdtype(a):
    return helper.np_dtype_to_tensor_dtype(a.dtype)


def _model(op, names, values, const, out_dtype, attrs=None, opset=21):
    """One node; inputs listed in ``const`` become initializers, the rest graph inputs (None: omitted)."""
    inputs, inits, feeds, node_in = [], [], [], []
    for name, v in zip(names, values, strict=True):
        if v is None:
            node_in.append("")
            continue
        node_in.append(name)
        if name in const:
            inits.append(numpy_helper.from_array(np.asarray(v), name))
        else:
            inputs.append(value_info(name, _tdtype(np.asarray(v)), list(np.shape(v))))
            feeds.append(np.asarray(v))
    while node_in and node_in[-1] == "":
        node_in.pop()
    node = helper.make_node(op, node_in, ["y"], **(attrs or {}))
    m = graph_model([node], inputs, [value_info("y", out_dtype)], opset=opset, initializers=inits)
    return m, feeds


def _check(session, m, feeds, want=None):
    if want is None:
        want = reference(m, feeds)[0]
    got = run_once(session, m, feeds)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def _oracle(a, b, azp, bzp):
    """The spec's product with int64 sums wrapped to int32 (per-row a_zero_point as a column)."""
    a64 = a.astype(np.int64) - (0 if azp is None else np.asarray(azp).astype(np.int64).reshape(-1, 1))
    b64 = b.astype(np.int64) - (0 if bzp is None else np.asarray(bzp).astype(np.int64))
    return np.matmul(a64, b64).astype(np.int32)


# ---- MatMulInteger: every tail of M (6-row tiles), N (16-column panels) and K (pairs and 512-value blocks; on the
# byte path quads, 32-byte packing steps and 1024-value blocks) ----

SHAPES = ([(m, 16, 8) for m in SIZES] + [(6, n, 9) for n in SIZES] + [(5, 17, k) for k in SIZES] +
          [(13, 33, 31), (65, 65, 65), (7, 257, 3), (257, 7, 1025), (1, 1, 1), (12, 48, 1)])


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matmul_integer_tails(session, shape):
    m, n, k = shape
    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    for at, bt in [(U8, U8), (S8, S8), (U8, S8), (S8, U8)]:
        a, b = _ints(rng, at, (m, k)), _ints(rng, bt, (k, n))
        azp, bzp = _ints(rng, at, ()), _ints(rng, bt, ())
        for const in [(), ("b", "bz")]:
            mdl, feeds = _model("MatMulInteger", ["a", "b", "az", "bz"], [a, b, azp, bzp], const, TensorProto.INT32)
            _check(session, mdl, feeds)


@pytest.mark.parametrize("const", [(), ("b",), ("b", "bz"), ("b", "az", "bz")], ids=str)
@pytest.mark.parametrize("types", [(U8, U8), (S8, S8), (U8, S8), (S8, U8)], ids=str)
def test_matmul_integer_zero_points(session, types, const):
    at, bt = types
    rng = np.random.default_rng(7)
    m, k, n = 9, 35, 37
    a, b = _ints(rng, at, (m, k)), _ints(rng, bt, (k, n))
    # none, A's only, B's only, per row of A (as a column, which the reference broadcasts by row), per column of B
    cases = [(None, None), (_ints(rng, at, ()), None), (None, _ints(rng, bt, ())),
             (_ints(rng, at, (m, 1)), _ints(rng, bt, (n,))), (_ints(rng, at, (1,)), _ints(rng, bt, (1,)))]
    for azp, bzp in cases:
        mdl, feeds = _model("MatMulInteger", ["a", "b", "az", "bz"], [a, b, azp, bzp], const, TensorProto.INT32)
        _check(session, mdl, feeds)
    # per row of A as the spec's 1-D [M] (the reference would broadcast it along K): against the spec's product
    azp, bzp = _ints(rng, at, (m,)), _ints(rng, bt, (n,))
    mdl, feeds = _model("MatMulInteger", ["a", "b", "az", "bz"], [a, b, azp, bzp], const, TensorProto.INT32)
    _check(session, mdl, feeds, _oracle(a, b, azp, bzp))


BATCHES = [((2, 3, 7, 19), (19, 18)), ((7, 19), (2, 19, 18)), ((2, 1, 7, 19), (1, 3, 19, 18)),
           ((3, 7, 19), (3, 19, 18)), ((19,), (19, 18)), ((7, 19), (19,)), ((19,), (2, 19, 5)),
           ((1, 7, 19), (4, 19, 17)),
           ((0, 7, 19), (19, 5)), ((7, 0), (0, 5)), ((0, 4), (4, 3)), ((4, 3), (3, 0))]


@pytest.mark.parametrize("shapes", BATCHES, ids=str)
def test_matmul_integer_batches(session, shapes):
    rng = np.random.default_rng(sum(map(sum, shapes)))
    a, b = _ints(rng, U8, shapes[0]), _ints(rng, S8, shapes[1])
    for const in [(), ("b",)]:
        mdl, feeds = _model("MatMulInteger", ["a", "b", "az", "bz"], [a, b, np.uint8(131), np.int8(-5)], const,
                            TensorProto.INT32)
        _check(session, mdl, feeds)


def test_matmul_integer_sums_past_float32_and_int32(session):
    rng = np.random.default_rng(3)
    # extremes only: |sum| far above 2^24 (where a float32 sum stops being exact)
    k = 4099
    a = rng.choice(np.array([0, 255], U8), (5, k))
    b = rng.choice(np.array([0, 255], U8), (k, 19))
    for azp, bzp in [(np.uint8(0), np.uint8(255)), (np.uint8(255), np.uint8(0)), (np.uint8(128), np.uint8(127))]:
        mdl, feeds = _model("MatMulInteger", ["a", "b", "az", "bz"], [a, b, azp, bzp], ("b",), TensorProto.INT32)
        _check(session, mdl, feeds)
    # 33100 products of 255 * 255 (and of -255 * 255) overflow int32: the reference's int32 product wraps
    k = 33100
    for at, av, azp, bv, bzp in [(U8, 255, 0, 255, 0), (S8, -128, 127, 127, -128)]:
        a = np.full((3, k), av, at)
        b = np.full((k, 18), bv, at)
        b[::7, 5] = 0
        mdl, feeds = _model("MatMulInteger", ["a", "b", "az", "bz"], [a, b, at(azp), at(bzp)], (), TensorProto.INT32)
        want = reference(mdl, feeds)[0]
        assert (want.astype(np.int64) != _oracle(a, b, at(azp), at(bzp)).astype(np.int64)).sum() == 0
        assert (np.abs(a.astype(np.int64) - azp) @ np.abs(b.astype(np.int64) - bzp)).max() > 2**31
        _check(session, mdl, feeds, want)


# ---- QLinearMatMul ----

@pytest.mark.parametrize("shape", [(2, 4, 4), (7, 33, 17), (64, 256, 65), (1, 513, 16), (13, 1, 31)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("types", [(U8, U8, U8), (S8, S8, S8), (U8, S8, U8), (S8, U8, S8)], ids=str)
def test_qlinear_matmul(session, shape, types):
    m, k, n = shape
    at, bt, yt = types
    rng = np.random.default_rng(m + k + n)
    a, b = _ints(rng, at, (m, k)), _ints(rng, bt, (k, n))
    scale = np.float32(1.0 / (255.0 * np.sqrt(k)))
    for const, bscale, bzp in [((), np.float32(0.02), _ints(rng, bt, ())),
                               (("b", "bs", "bz"), (0.01 + 0.03 * rng.random(n)).astype(np.float32),
                                _ints(rng, bt, (n,)))]:
        vals = [a, np.float32(0.03), _ints(rng, at, ()), b, bscale, bzp, scale, _ints(rng, yt, ())]
        mdl, feeds = _model("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], vals, const,
                            _tdtype(vals[7]))
        _check(session, mdl, feeds)


# ---- ConvInteger / QLinearConv ----

CONVS = [  # (x shape, w shape, attributes)
    ((1, 3, 9, 11), (5, 3, 1, 1), {}),
    ((2, 16, 8, 8), (17, 16, 1, 1), {}),
    ((1, 4, 9, 11), (6, 4, 1, 1), {"strides": [2, 2]}),
    ((1, 5, 10, 9), (7, 5, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 3, 12, 13), (4, 3, 3, 3), {"strides": [2, 1], "pads": [0, 1, 2, 1]}),
    ((1, 2, 14, 15), (3, 2, 5, 5), {"pads": [2, 1, 2, 3], "dilations": [1, 2]}),
    ((1, 6, 11, 11), (6, 2, 3, 3), {"group": 3, "pads": [1, 1, 1, 1], "dilations": [2, 2]}),
    ((1, 8, 9, 7), (8, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}),
    ((1, 33, 5, 6), (19, 33, 3, 3), {}),
    ((1, 4, 28, 28), (8, 4, 3, 3), {"pads": [1, 1, 1, 1]}),  # panels spanning two output rows
    ((1, 3, 16, 5), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),  # panels spanning many rows
    ((1, 3, 20, 40), (4, 3, 3, 3), {"strides": [1, 2]}),  # stride 2 along rows, panels spanning two rows
    ((1, 4, 25, 25), (3, 4, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 2, 9, 70), (3, 2, 1, 3), {"strides": [1, 3]}),  # stride 3: gathered element by element
    ((1, 64, 28, 28), (5, 64, 3, 3), {"pads": [1, 1, 1, 1]}),  # several pixel chunks, the last partial
    ((1, 700, 3, 4), (3, 700, 3, 3), {"pads": [0, 1, 0, 1]}),  # K past one 512-value block, one-panel chunks
    ((2, 3, 30), (5, 3, 3), {"pads": [1, 2], "strides": [2]}),
    ((1, 2, 5, 6, 7), (3, 2, 3, 2, 3), {"pads": [1, 0, 1, 1, 1, 0]}),
]


@pytest.mark.parametrize("conv", CONVS, ids=lambda c: f"{c[0]}-{c[1]}-{sorted(c[2].items())}")
@pytest.mark.parametrize("types", [(U8, U8), (S8, S8), (U8, S8)], ids=str)
def test_conv_integer(session, conv, types):
    xs, ws, attrs = conv
    xt, wt = types
    rng = np.random.default_rng(len(xs) * 100 + ws[0] * 10 + ws[1])
    x, w = _ints(rng, xt, xs), _ints(rng, wt, ws)
    # per output channel zero points (the reference expands them for 2-D kernels only)
    per = _ints(rng, wt, (ws[0],)) if len(ws) == 4 else _ints(rng, wt, ())
    for const, wzp in [((), _ints(rng, wt, ())), (("w", "wz"), per), (("w",), None)]:
        mdl, feeds = _model("ConvInteger", ["x", "w", "xz", "wz"], [x, w, _ints(rng, xt, ()), wzp], const,
                            TensorProto.INT32, attrs)
        _check(session, mdl, feeds)


@pytest.mark.parametrize("conv", CONVS, ids=lambda c: f"{c[0]}-{c[1]}-{sorted(c[2].items())}")
@pytest.mark.parametrize("types", [(U8, U8, U8), (S8, S8, S8), (U8, S8, U8)], ids=str)
def test_qlinear_conv(session, conv, types):
    xs, ws, attrs = conv
    xt, wt, yt = types
    rng = np.random.default_rng(len(xs) * 100 + ws[0] * 10 + ws[1] + 1)
    x, w = _ints(rng, xt, xs), _ints(rng, wt, ws)
    m = ws[0]
    kk = int(np.prod(ws[1:]))
    ys = np.float32(1.0 / (255.0 * np.sqrt(kk)))
    # per output channel scales (the reference expands them for 2-D kernels only)
    per = (0.5 + rng.random(m)).astype(np.float32) if len(ws) == 4 else np.float32(0.7)
    bias = rng.integers(-50000, 50000, m).astype(np.int32)
    for const, wscale, wzp, b in [((), np.float32(0.9), _ints(rng, wt, ()), None),
                                  (("w", "ws", "wz", "b"), per, np.zeros(m, wt), bias)]:
        vals = [x, np.float32(1.0), _ints(rng, xt, ()), w, wscale, wzp, ys, _ints(rng, yt, ()), b]
        mdl, feeds = _model("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], vals, const,
                            _tdtype(vals[7]), attrs)
        _check(session, mdl, feeds)


@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_fallback_instruction_sets_pass_the_same_checks(isa):
    rerun_file_with_instruction_set(__file__, isa)
