"""Fast paths of the twin's element-wise and normalisation kernels, compared with onnx.reference: float16 ops
through the float32 kernels (blocks of 1024 elements, broadcasts, NaN / infinities), Pow by a constant exponent,
integer unary loops per instruction set, RMSNormalization rows, GatherElements along the last axis, copies
(Identity / Reshape / Squeeze) run in place. The last test reruns the file with the fallback instruction sets."""

from __future__ import annotations

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

import geasync as ga
from conftest import TensorProto, helper, make_model
from onnx_cases import rerun_file_with_instruction_set, run_twin

RNG = np.random.default_rng(77)
F16, F32, F64 = TensorProto.FLOAT16, TensorProto.FLOAT, TensorProto.DOUBLE
ONNX_OF = {np.dtype(np.float16): F16, np.dtype(np.float32): F32, np.dtype(np.float64): F64,
           np.dtype(np.int8): TensorProto.INT8, np.dtype(np.int16): TensorProto.INT16,
           np.dtype(np.int32): TensorProto.INT32, np.dtype(np.int64): TensorProto.INT64,
           np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.uint16): TensorProto.UINT16,
           np.dtype(np.uint32): TensorProto.UINT32, np.dtype(np.uint64): TensorProto.UINT64,
           np.dtype(np.bool_): TensorProto.BOOL}
SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 65504.0, -65504.0, 6e-8, -6e-8]


def reference(model, feeds):
    with np.errstate(all="ignore"):
        return [np.asarray(r) for r in ReferenceEvaluator(model).run(None, feeds)]


def check(model, feeds, rtol, atol=0.0):
    got, want = run_twin(model, feeds), reference(model, feeds)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg="NaN positions")
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return got


def with_specials(x):
    x = x.copy()
    flat = x.reshape(-1)
    idx = RNG.choice(flat.size, size=len(SPECIALS), replace=False)
    with np.errstate(over="ignore"):
        flat[idx] = np.array(SPECIALS).astype(x.dtype)
    return x


def model_of(nodes, inputs, outputs, initializers=(), opset=20):
    ins = [(n, ONNX_OF[a.dtype], list(a.shape)) for n, a in inputs]
    outs = [(n, ONNX_OF[np.dtype(d)], None) for n, d in outputs]
    return make_model(nodes, ins, outs, initializers=initializers, opset=opset)


# ---- float16 through the float32 kernels ----

HALF_UNARY = {"Relu": {}, "Abs": {}, "Neg": {}, "Exp": {}, "Tanh": {}, "Sigmoid": {}, "Sqrt": {}, "Log": {},
              "LeakyRelu": {"alpha": 0.2}, "HardSwish": {}, "Softsign": {}, "Floor": {}, "Round": {}, "Sign": {},
              "Gelu": {}, "Erf": {}, "Sin": {}, "Reciprocal": {}}


@pytest.mark.parametrize("n", [1, 15, 1024, 2500])
@pytest.mark.parametrize("op", sorted(HALF_UNARY))
def test_float16_unary_in_blocks(op, n):
    # blocks of 1024 on the stack: sizes below, at and across a block edge; a chain runs steps in place
    x = with_specials(RNG.uniform(-6, 6, n).astype(np.float16)) if n >= 15 else RNG.uniform(-6, 6, n).astype(
        np.float16)
    nodes = [helper.make_node(op, ["x"], ["a"], **HALF_UNARY[op]), helper.make_node("Neg", ["a"], ["b"]),
             helper.make_node(op, ["b"], ["y"], **HALF_UNARY[op])]
    check(model_of(nodes, [("x", x)], [("y", np.float16)]), {"x": x}, rtol=2e-3, atol=1e-3)


BROADCASTS = [((5, 301), (5, 301)), ((5, 301), (301,)), ((5, 301), (5, 1)), ((5, 301), ()), ((301,), (5, 301)),
              ((1,), (5, 301))]


@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "PRelu", "Mod"])
def test_float16_binary_broadcasts(op, shapes):
    sa, sb = shapes
    if op == "PRelu" and len(sb) > len(sa):
        pytest.skip("PRelu's slope broadcasts to X")
    lo = 0.25 if op == "Pow" else -4
    a = with_specials(RNG.uniform(lo, 4, sa).astype(np.float16)) if len(sa) > 1 else RNG.uniform(lo, 4, sa).astype(
        np.float16)
    b = RNG.uniform(0.5, 2, sb).astype(np.float16)
    attrs = {"fmod": 1} if op == "Mod" else {}
    model = model_of([helper.make_node(op, ["a", "b"], ["y"], **attrs)], [("a", a), ("b", b)], [("y", np.float16)])
    check(model, {"a": a, "b": b}, rtol=2e-3, atol=1e-3)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL2", "ReduceLogSumExp",
                                "ReduceSumSquare"])
@pytest.mark.parametrize("axis", [0, -1])
def test_float16_reductions(op, axis):
    # accumulated in double and rounded once (the reference sums in float16: the exact sums are the yardstick)
    x = RNG.uniform(-2, 2, (7, 300)).astype(np.float16)
    model = model_of([helper.make_node(op, ["x", "axes"], ["y"], keepdims=1)], [("x", x)], [("y", np.float16)],
                     initializers=[("axes", np.array([axis], np.int64))])
    x64 = x.astype(np.float64)
    exact = {"ReduceSum": lambda: x64.sum(axis, keepdims=True), "ReduceMean": lambda: x64.mean(axis, keepdims=True),
             "ReduceMax": lambda: x64.max(axis, keepdims=True), "ReduceMin": lambda: x64.min(axis, keepdims=True),
             "ReduceL2": lambda: np.sqrt((x64 * x64).sum(axis, keepdims=True)),
             "ReduceLogSumExp": lambda: np.log(np.exp(x64).sum(axis, keepdims=True)),
             "ReduceSumSquare": lambda: (x64 * x64).sum(axis, keepdims=True)}[op]().astype(np.float16)
    got = run_twin(model, {"x": x})[0]
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), exact.astype(np.float64), rtol=1e-3, atol=1e-3)


def test_float16_clip_and_variadic():
    x = with_specials(RNG.uniform(-3, 3, (9, 130)).astype(np.float16))
    y, z = RNG.uniform(-3, 3, (130,)).astype(np.float16), RNG.uniform(-3, 3, (9, 1)).astype(np.float16)
    nodes = [helper.make_node("Clip", ["x", "lo", "hi"], ["c"]), helper.make_node("Max", ["c", "y", "z"], ["m"]),
             helper.make_node("Min", ["m", "x"], ["out"])]
    model = model_of(nodes, [("x", x), ("y", y), ("z", z)], [("out", np.float16)],
                     initializers=[("lo", np.array(-1.5, np.float16)), ("hi", np.array(2.25, np.float16))])
    check(model, {"x": x, "y": y, "z": z}, rtol=0, atol=0)


# ---- Pow by a constant exponent ----

POW_EDGES = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0, -2.0, 0.5, 1e-40, -1e-40, 1e20, -1e20, 3e38]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16], ids=lambda d: d.__name__)
@pytest.mark.parametrize("e_dtype", [None, np.float32, np.int64, np.float64], ids=str)
@pytest.mark.parametrize("e", [0, 1, 2, 3, 0.5, -1, 2.5, -2])
def test_pow_by_a_constant(dtype, e_dtype, e):
    if e_dtype is np.int64 and e != int(e):
        pytest.skip("integer exponent")
    e_dtype = e_dtype or dtype
    with np.errstate(over="ignore"):
        x = np.concatenate([np.array(POW_EDGES).astype(dtype), RNG.uniform(-5, 5, 1037).astype(dtype)])
    # Neg -> Pow -> Neg: the Pow step runs in place over the intermediate
    nodes = [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Pow", ["a", "e"], ["p"]),
             helper.make_node("Neg", ["p"], ["y"])]
    model = model_of(nodes, [("x", x)], [("y", dtype)], initializers=[("e", np.array(e, e_dtype))])
    rtol = {np.float16: 2e-3, np.float32: 1e-6, np.float64: 1e-14}[dtype]
    got = check(model, {"x": x}, rtol=rtol, atol=0)[0]
    want = reference(model, {"x": x})[0]
    if e == 0.5:  # the reference's signed zeros too: sqrt's for float32/64 (-0), pow's for float16 (+0)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_pow_by_a_constant_of_another_shape_broadcasts():
    x = RNG.uniform(0.5, 2, (3, 4)).astype(np.float32)
    model = model_of([helper.make_node("Pow", ["x", "e"], ["y"])], [("x", x)], [("y", np.float32)],
                     initializers=[("e", np.full((2, 1, 1), 2.0, np.float32))])
    got = check(model, {"x": x}, rtol=1e-6)[0]
    assert got.shape == (2, 3, 4)


def test_pow_by_a_runtime_scalar_is_not_a_constant():
    x = RNG.uniform(0.5, 2, (3, 40)).astype(np.float32)
    model = model_of([helper.make_node("Pow", ["x", "e"], ["y"])], [("x", x), ("e", np.array(2.0, np.float32))],
                     [("y", np.float32)])
    for e in (2.0, 0.5, 7.0):
        check(model, {"x": x, "e": np.array(e, np.float32)}, rtol=1e-6)


# ---- integer unary loops per instruction set ----

INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: d.__name__)
@pytest.mark.parametrize("op", ["Abs", "Neg", "Sign", "Relu", "BitwiseNot"])
def test_integer_unary(op, dtype):
    info = np.iinfo(dtype)
    if op in ("Neg", "Relu") and info.min == 0:
        pytest.skip("signed types only")
    x = np.concatenate([np.array([info.min, info.max, 0, 1, info.min + 1, info.max - 1], dtype),
                        RNG.integers(info.min, info.max, 1037, dtype=dtype, endpoint=True)])
    model = model_of([helper.make_node(op, ["x"], ["y"])], [("x", x)], [("y", dtype)], opset=18)
    check(model, {"x": x}, rtol=0)


@pytest.mark.parametrize("op", ["Relu", "Neg", "Abs", "LeakyRelu", "Sqrt", "Tanh", "Sign", "Ceil"])
def test_float64_unary(op):
    x = with_specials(RNG.uniform(-4, 4, 1037)).astype(np.float64)
    if op == "Sqrt":
        x = np.abs(x)
    model = model_of([helper.make_node(op, ["x"], ["y"])], [("x", x)], [("y", np.float64)])
    check(model, {"x": x}, rtol=1e-12, atol=1e-300)


# ---- float32 Mod through double ----

def _mod_operands(n=4000):
    a = RNG.uniform(-50, 50, n).astype(np.float32)
    b = RNG.uniform(-7, 7, n).astype(np.float32)
    k = RNG.integers(-300, 300, n).astype(np.float32)
    exact = (k[: n // 4] * b[: n // 4]).astype(np.float32)  # quotients at or next to integers
    a[: n // 4] = exact
    a[n // 4: n // 2] = np.nextafter(exact, np.float32(np.inf))
    a[n // 2: 3 * n // 4] = np.nextafter(exact, np.float32(-np.inf))
    edges_a = [0.0, -0.0, 1e30, -1e30, 3e38, np.inf, -np.inf, np.nan, 5.0, -5.0, 1e-40, -1e-40, 7.0, 536870912.0,
               536870913.0, 1.5e9, -6.0, 6.0, -1.0, 1.0, -1.0, 1.0, 0.0, -0.0]
    edges_b = [3.0, 3.0, 3.0, -7.0, 1e-3, 2.0, 2.0, 2.0, 0.0, -0.0, 1e-41, 3e-41, np.inf, 1.0, 1.0, 0.1, 3.0, -3.0,
               np.inf, np.inf, -np.inf, -np.inf, np.inf, -np.inf]
    return (np.concatenate([a, np.array(edges_a, np.float32)]), np.concatenate([b, np.array(edges_b, np.float32)]))


@pytest.mark.parametrize("fmod", [1, 0])
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=lambda d: d.__name__)
def test_float_mod(fmod, dtype):
    a, b = _mod_operands()
    with np.errstate(over="ignore"):
        a, b = a.astype(dtype), b.astype(dtype)
    model = model_of([helper.make_node("Mod", ["a", "b"], ["y"], fmod=fmod)], [("a", a), ("b", b)], [("y", dtype)])
    got = run_twin(model, {"a": a, "b": b})[0]
    with np.errstate(all="ignore"):
        want = (np.fmod(a, b) if fmod else np.mod(a, b)) if dtype == np.float32 else reference(
            model, {"a": a, "b": b})[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got, want)  # exact, like fmod
    ok = ~np.isnan(want) & (want == 0)
    np.testing.assert_array_equal(np.signbit(got[ok]), np.signbit(want[ok]))  # zeros keep the reference's sign


# ---- Cast loops compiled for AVX-512 ----

def _cast_source(dtype):
    if dtype == np.bool_:
        return RNG.integers(0, 2, 1037).astype(np.bool_)
    if dtype == np.float32:
        x = RNG.uniform(-3, 3, 1037).astype(np.float32)
        x[:6] = [np.nan, -0.0, 0.0, np.inf, -np.inf, 1e-45]
        return x
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max, 1037, dtype=dtype, endpoint=True)
    if dtype == np.int64:  # values float32 / float64 round: ties, 2^53 + 1, the extremes
        x[:8] = [2 ** 53 + 1, -(2 ** 53) - 1, 2 ** 24 + 1, 2 ** 24 + 3, info.min, info.max, 2 ** 31, -(2 ** 31) - 1]
    return x


@pytest.mark.parametrize("src, dst", [(np.int64, np.float32), (np.int64, np.float64), (np.int64, np.int32),
                                      (np.int64, np.bool_), (np.int32, np.float32), (np.int32, np.int64),
                                      (np.float32, np.bool_), (np.uint8, np.float32), (np.bool_, np.float32)],
                         ids=str)
def test_cast_loops(src, dst):
    x = _cast_source(src)
    model = model_of([helper.make_node("Cast", ["x"], ["y"], to=ONNX_OF[np.dtype(dst)])], [("x", x)], [("y", dst)])
    got = run_twin(model, {"x": x})[0]
    np.testing.assert_array_equal(got, x.astype(dst))


@pytest.mark.parametrize("src, dst", [(np.float32, np.uint32), (np.float32, np.uint64), (np.float64, np.uint32),
                                      (np.float64, np.uint64)], ids=str)
def test_cast_float_to_unsigned_loops(src, dst):
    """In range (the values numpy and the ONNX spec agree on): fractions truncated, the ends of the range, and
    float values past 2^63 (uint64 converts them without the signed 64-bit step)."""
    top = float(np.iinfo(dst).max)
    x = np.concatenate([RNG.uniform(0, 1000, 500), RNG.uniform(0, top, 500) * RNG.uniform(0, 1, 500),
                        [0.0, -0.0, 0.999, 1.0, 2.0 ** 31, 2.0 ** 32 - 2 ** 11, 2.0 ** 63, 2.0 ** 64 - 2 ** 40]])
    x = x[x < top].astype(src)
    x = x[x.astype(np.float64) < top]  # float32 rounding may reach the top
    model = model_of([helper.make_node("Cast", ["x"], ["y"], to=ONNX_OF[np.dtype(dst)])], [("x", x)], [("y", dst)])
    np.testing.assert_array_equal(run_twin(model, {"x": x})[0], x.astype(dst))


@pytest.mark.parametrize("src, dst", [(np.uint8, np.uint64), (np.uint8, np.int64), (np.int8, np.int32),
                                      (np.int64, np.uint8), (np.uint16, np.int64), (np.int32, np.int16),
                                      (np.uint64, np.int8)], ids=str)
def test_cast_integer_loops(src, dst):
    """Widening (zero / sign extension) and narrowing (the low bits: the wrap ONNX and numpy use)."""
    x = _cast_source(src)
    model = model_of([helper.make_node("Cast", ["x"], ["y"], to=ONNX_OF[np.dtype(dst)])], [("x", x)], [("y", dst)])
    np.testing.assert_array_equal(run_twin(model, {"x": x})[0], x.astype(dst))


# ---- comparisons per instruction set ----

CMP_TYPES = [np.float32, np.float64, np.float16] + INTS
CMP_SHAPES = [((3, 301), (3, 301)), ((3, 301), ()), ((), (3, 301)), ((3, 301), (301,)), ((3, 1), (1, 301)),
              ((1037,), (1037,))]


@pytest.mark.parametrize("shapes", CMP_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", CMP_TYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
def test_comparisons(op, dtype, shapes):
    def values(shape, seed):
        rng = np.random.default_rng(seed)
        if np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            v = rng.integers(-3 if info.min else 0, 4, shape).astype(dtype)  # many ties
            if v.size > 4:
                v.reshape(-1)[:4] = [info.min, info.max, info.max - 1, info.min + 1]
            return v
        v = rng.integers(-3, 4, shape).astype(dtype)
        if v.size > 6:
            v.reshape(-1)[:6] = [np.nan, np.inf, -np.inf, -0.0, 0.0, np.nan]
        return v
    a, b = values(shapes[0], 1), values(shapes[1], 2)
    model = model_of([helper.make_node(op, ["a", "b"], ["y"])], [("a", a), ("b", b)], [("y", np.bool_)])
    check(model, {"a": a, "b": b}, rtol=0)


# ---- integer / float64 arithmetic per instruction set ----

@pytest.mark.parametrize("shapes", CMP_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [np.float64] + INTS, ids=lambda d: d.__name__)
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_arithmetic_broadcasts(op, dtype, shapes):
    if op == "Div" and dtype != np.float64:
        pytest.skip("integer Div: test_integer_div_truncates")

    def values(shape, seed):
        rng = np.random.default_rng(seed)
        if dtype == np.float64:
            v = rng.uniform(-3, 3, shape)
            if v.size > 5:
                v.reshape(-1)[:5] = [np.nan, np.inf, -np.inf, -0.0, 1e308]
            return v
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)  # products and sums wrap
    a, b = values(shapes[0], 1), values(shapes[1], 2)
    model = model_of([helper.make_node(op, ["a", "b"], ["y"])], [("a", a), ("b", b)], [("y", dtype)])
    check(model, {"a": a, "b": b}, rtol=0)


def test_arithmetic_in_place_chain_int64():
    x = RNG.integers(-1000, 1000, (9, 301)).astype(np.int64)
    row = RNG.integers(-5, 5, (301,)).astype(np.int64)
    nodes = [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Mul", ["a", "r"], ["b"]),
             helper.make_node("Add", ["r", "b"], ["c"]), helper.make_node("Sub", ["c", "x"], ["y"])]
    model = model_of(nodes, [("x", x), ("r", row)], [("y", np.int64)])
    got = run_twin(model, {"x": x, "r": row})[0]
    np.testing.assert_array_equal(got, row + (-x) * row - x)


# ---- variadic Mean / Sum (Mean's scale in the last input's pass) ----

@pytest.mark.parametrize("count", [1, 2, 3, 5])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16], ids=lambda d: d.__name__)
@pytest.mark.parametrize("op", ["Mean", "Sum"])
def test_variadic_mean_and_sum(op, dtype, count):
    shapes = [(3, 301), (301,), (3, 1), (), (1, 301)][:count]
    xs = [with_specials(RNG.uniform(-4, 4, sh).astype(dtype)) if sh == (3, 301) else RNG.uniform(-4, 4, sh).astype(
        dtype) for sh in shapes]
    names = [f"x{i}" for i in range(count)]
    model = model_of([helper.make_node(op, names, ["y"])], list(zip(names, xs, strict=True)), [("y", dtype)])
    rtol = {np.float16: 2e-3, np.float32: 1e-6, np.float64: 1e-15}[dtype]
    if dtype != np.float16:
        check(model, dict(zip(names, xs, strict=True)), rtol=rtol, atol=rtol)
        return
    # float16 accumulates in float32 (the reference rounds each partial sum to float16): exact sums as the yardstick
    got = run_twin(model, dict(zip(names, xs, strict=True)))[0]
    with np.errstate(invalid="ignore"):
        total = sum(np.broadcast_to(x.astype(np.float64), (3, 301)) for x in xs)
        want = (total / count if op == "Mean" else total).astype(np.float16)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)


# ---- integer Div (32-bit and narrower through a double quotient) ----

@pytest.mark.parametrize("dtype", [d for d in INTS if d is not np.uint64], ids=lambda d: d.__name__)
def test_integer_div_truncates(dtype):
    info = np.iinfo(dtype)
    edges = np.array([info.min, info.max, info.min + 1, info.max - 1, 0, 1, 7, -7 if info.min else 9, 2], np.int64)
    a = np.concatenate([np.repeat(edges, len(edges)), RNG.integers(info.min, info.max, 3000, endpoint=True)])
    b = np.concatenate([np.tile(edges, len(edges)), RNG.integers(info.min, info.max, 3000, endpoint=True)])
    b[-1000:] = RNG.integers(-5 if info.min else 0, 6, 1000)  # small divisors: large quotients, -1 and 0
    a, b = a.astype(dtype), b.astype(dtype)
    model = model_of([helper.make_node("Div", ["a", "b"], ["y"])], [("a", a), ("b", b)], [("y", dtype)])
    got = run_twin(model, {"a": a, "b": b})[0]
    a64, b64 = a.astype(object), b.astype(object)
    want = [0 if y == 0 else (abs(x) // abs(y)) * (1 if (x < 0) == (y < 0) else -1)
            for x, y in zip(a64, b64, strict=True)]
    want = np.array([w & ((1 << (8 * np.dtype(dtype).itemsize)) - 1) for w in want], np.uint64)
    np.testing.assert_array_equal(got.view(f"u{np.dtype(dtype).itemsize}").astype(np.uint64), want)


# ---- RMSNormalization ----

@pytest.mark.parametrize("shape, scale_shape, axis", [((3, 1000), (1000,), -1), ((4, 17), (17,), -1),
                                                      ((5, 3), (3,), 1), ((2, 3, 40), (3, 40), 1),
                                                      ((2, 3, 40), (40,), 1), ((6, 33), (1,), -1),
                                                      ((2, 16), (16,), 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16], ids=lambda d: d.__name__)
def test_rms_normalization(shape, scale_shape, axis, dtype):
    x = RNG.uniform(-3, 3, shape).astype(dtype)
    s = RNG.uniform(0.5, 1.5, scale_shape).astype(dtype)
    model = model_of([helper.make_node("RMSNormalization", ["x", "s"], ["y"], axis=axis)], [("x", x), ("s", s)],
                     [("y", dtype)], opset=23)
    rtol = {np.float16: 3e-3, np.float32: 1e-5, np.float64: 1e-6}[dtype]  # the reference's statistics: float32
    check(model, {"x": x, "s": s}, rtol=rtol, atol=rtol)


def test_rms_normalization_with_nan_and_inf_rows():
    x = RNG.uniform(-3, 3, (4, 64)).astype(np.float32)
    x[1, 5], x[2, 60] = np.nan, np.inf
    s = RNG.uniform(0.5, 1.5, (64,)).astype(np.float32)
    model = model_of([helper.make_node("RMSNormalization", ["x", "s"], ["y"])], [("x", x), ("s", s)],
                     [("y", np.float32)], opset=23)
    check(model, {"x": x, "s": s}, rtol=1e-5, atol=1e-6)


# ---- LpNormalization along the last axis ----

@pytest.mark.parametrize("n", [1, 7, 8, 33, 1000])
@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: d.__name__)
def test_lp_normalization_rows(n, p, dtype):
    # (onnx.reference's p = 1 sums x, not |x|: the yardstick is numpy's norm)
    x = RNG.uniform(-3, 3, (5, n)).astype(dtype)
    x[1] = 0  # a zero norm gives 0
    x[3, 0] = np.nan
    model = model_of([helper.make_node("LpNormalization", ["x"], ["y"], axis=-1, p=p)], [("x", x)], [("y", dtype)])
    got = run_twin(model, {"x": x})[0]
    norm = np.linalg.norm(x.astype(np.float64), ord=p, axis=-1, keepdims=True)
    with np.errstate(all="ignore"):
        want = np.where(norm == 0, 0, x / norm).astype(dtype)
    np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == np.float32 else 1e-13)


# ---- GatherElements ----

@pytest.mark.parametrize("idx_dtype", [np.int64, np.int32], ids=lambda d: d.__name__)
@pytest.mark.parametrize("shape, idx_shape, axis", [((3, 5, 7), (3, 5, 4), 2), ((3, 5, 7), (3, 5, 9), -1),
                                                    ((6, 11), (6, 11), 1), ((6, 11), (6, 3), 1),
                                                    ((3, 5, 7), (3, 2, 7), 1), ((6, 11), (4, 11), 0),
                                                    ((6, 11), (4, 5), 1)])
def test_gather_elements(shape, idx_shape, axis, idx_dtype):
    x = RNG.standard_normal(shape).astype(np.float32)
    n = shape[axis]
    idx = RNG.integers(-n, n, idx_shape).astype(idx_dtype)
    model = model_of([helper.make_node("GatherElements", ["x", "i"], ["y"], axis=axis)], [("x", x), ("i", idx)],
                     [("y", np.float32)])
    got = run_twin(model, {"x": x, "i": idx})[0]
    part = x[tuple(slice(None) if d == axis % x.ndim else slice(0, k) for d, k in enumerate(idx_shape))]
    want = np.take_along_axis(part, np.where(idx < 0, idx + n, idx).astype(np.int64), axis=axis)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("bad", [7, -8])
def test_gather_elements_last_axis_out_of_range_fails(bad):
    x = RNG.standard_normal((3, 7)).astype(np.float32)
    idx = np.zeros((3, 7), np.int64)
    idx[2, 4] = bad
    model = model_of([helper.make_node("GatherElements", ["x", "i"], ["y"], axis=1)], [("x", x), ("i", idx)],
                     [("y", np.float32)])
    with pytest.raises(ga.GeError, match="out of range|outside"):
        run_twin(model, {"x": x, "i": idx})


# ---- copies in place ----

def test_identity_reshape_squeeze_chain_in_place():
    x = RNG.standard_normal((4, 1, 33)).astype(np.float32)
    nodes = [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Identity", ["a"], ["b"]),
             helper.make_node("Squeeze", ["b", "ax"], ["c"]), helper.make_node("Reshape", ["c", "sh"], ["d"]),
             helper.make_node("Flatten", ["d"], ["e"], axis=1), helper.make_node("Identity", ["e"], ["f"]),
             helper.make_node("Neg", ["f"], ["y"]), helper.make_node("Identity", ["e"], ["y2"])]
    model = model_of(nodes, [("x", x)], [("y", np.float32), ("y2", np.float32)],
                     initializers=[("ax", np.array([1], np.int64)), ("sh", np.array([2, 66], np.int64))])
    y, y2 = run_twin(model, {"x": x})
    np.testing.assert_array_equal(y, x.reshape(2, 66))
    np.testing.assert_array_equal(y2, -x.reshape(2, 66))


@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_fallback_instruction_sets_pass_the_same_checks(isa):
    rerun_file_with_instruction_set(__file__, isa)
