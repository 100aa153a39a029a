"""Fast paths a second sweep against onnxruntime added, compared with onnx.reference (and numpy in float64): the
vectorised float64 Exp / Tanh / Sigmoid / Sin / Cos kernels (edge values: NaN, infinities, signed zeros,
denormals, the overflow and underflow thresholds, libm's range for large |x|), float64 Softmax / LogSoftmax rows and
strided axes, copies (Identity, Reshape, Squeeze, ...) into intermediates dropped from the plan, their readers
reading the copied value, dilated 2-D / 1-D MaxPool rows (bit for bit the general loop), BatchNormalization on
planes of a few elements (2-D inputs), Transpose with short last runs, a few (de)interleaved rows, 1- and 8-byte tiles,
DequantizeLinear per axis, Where's broadcasts. The last test reruns the file with the fallback instruction sets."""

from __future__ import annotations

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

from conftest import TensorProto, helper, make_model
from onnx_cases import rerun_file_with_instruction_set, run_twin

RNG = np.random.default_rng(2026)
F32, F64 = TensorProto.FLOAT, TensorProto.DOUBLE
EDGES64 = [np.nan, np.inf, -np.inf, 0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1e-300, -1e-300, 1e-17,
           -1e-17, 1.0, -1.0, 19.06, -19.06, 20.0, -20.0, 22.0, -22.0, 36.0, -36.0, 40.0, -40.0, 709.78, 709.79, 710.0,
           -708.4, -709.0, -744.0, -745.1, -746.0, -800.0, 1e308, -1e308, 8191.9, -8191.9, 8192.0, 8192.1, -8192.1,
           1e5, -1e5, 1e22, -1e22, np.pi, -np.pi, np.pi / 2, np.pi / 4, 3 * np.pi / 4, 355.0, 103993.0,
           1.5707963267948966]


def reference(model, feeds):
    with np.errstate(all="ignore"):
        return [np.asarray(r) for r in ReferenceEvaluator(model).run(None, feeds)]


def check(got, want, rtol, atol=0.0):
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg="NaN positions")
        np.testing.assert_array_equal(g[np.isinf(w)], w[np.isinf(w)], err_msg="infinities")
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def unary(op, x, out=F64):
    t = F64 if x.dtype == np.float64 else F32
    return make_model([helper.make_node(op, ["x"], ["y"])], [("x", t, list(x.shape))], [("y", out, list(x.shape))],
                      opset=20)


def float64_inputs(n, lo, hi):
    x = RNG.uniform(lo, hi, n)
    k = min(len(EDGES64), n)
    x[RNG.choice(n, size=k, replace=False)] = EDGES64[:k]
    return x


# ---- float64 element-wise kernels ----

@pytest.mark.parametrize("op", ["Exp", "Tanh", "Sigmoid", "Sin", "Cos"])
@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 255, 257, 4099])
@pytest.mark.parametrize("lo, hi", [(-4.0, 4.0), (-50.0, 50.0), (-800.0, 800.0), (-1e4, 1e4)])
def test_float64_unary_against_reference(op, n, lo, hi):
    x = float64_inputs(n, lo, hi) if n else np.zeros(0)
    model = unary(op, x)
    got, want = run_twin(model, {"x": x}), reference(model, {"x": x})
    check(got, want, rtol=2e-15, atol=1e-300)
    # signed zeros: the odd functions keep -0 (tanh, sin), the others have no zero result at +-0
    zeros = x == 0
    if op in ("Tanh", "Sin"):
        np.testing.assert_array_equal(np.signbit(got[0][zeros]), np.signbit(x[zeros]))


@pytest.mark.parametrize("op, fn", [("Exp", np.exp), ("Tanh", np.tanh), ("Sin", np.sin), ("Cos", np.cos)])
def test_float64_unary_within_ulps_of_numpy(op, fn):
    # denser than the reference comparison: a few ulp over each function's working range, denormal results included
    x = np.concatenate([RNG.uniform(-1, 1, 20000), RNG.uniform(-30, 30, 20000), RNG.uniform(-745, 709, 20000),
                        RNG.uniform(-8192, 8192, 20000), np.geomspace(1e-310, 1e3, 5000)])
    with np.errstate(all="ignore"):
        want = fn(x)
        got = run_twin(unary(op, x), {"x": x})[0]
    ok = np.isfinite(want) & (want != 0)
    ulp = np.abs(got[ok] - want[ok]) / np.spacing(np.abs(want[ok]))
    assert ulp.max() <= 4.0, (op, x[ok][np.argmax(ulp)], ulp.max())
    np.testing.assert_array_equal(got[~ok], want[~ok])


def test_float64_tanh_in_a_chain_in_place():
    x = float64_inputs(1000, -5, 5)
    nodes = [helper.make_node("Tanh", ["x"], ["a"]), helper.make_node("Sigmoid", ["a"], ["b"]),
             helper.make_node("Exp", ["b"], ["c"]), helper.make_node("Sin", ["c"], ["d"]),
             helper.make_node("Cos", ["d"], ["y"])]
    model = make_model(nodes, [("x", F64, [1000])], [("y", F64, [1000])], opset=20)
    check(run_twin(model, {"x": x}), reference(model, {"x": x}), rtol=1e-14, atol=1e-300)


# ---- float64 Softmax / LogSoftmax ----

def softmax_want(op, model, x, axis):
    """onnx.reference for Softmax; LogSoftmax as (x - max) - log(sum(exp(x - max))) (the reference takes the log of
    the softmax: -inf where an exp underflows, and the log of a rounded ratio near the max)."""
    if op == "Softmax":
        return reference(model, {"x": x})
    with np.errstate(all="ignore"):
        t = x - x.max(axis=axis, keepdims=True) if x.size else x
        return [t - np.log(np.exp(t).sum(axis=axis, keepdims=True))]


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape, axis", [((5, 1), -1), ((3, 7), -1), ((4, 8), -1), ((2, 1037), -1), ((6, 9, 4), 1),
                                         ((6, 9, 4), 0), ((3, 5, 17), -1), ((0, 5), -1), ((4, 0), -1)])
def test_float64_softmax(op, shape, axis):
    x = RNG.uniform(-30, 30, shape)
    model = make_model([helper.make_node(op, ["x"], ["y"], axis=axis)], [("x", F64, list(shape))],
                       [("y", F64, list(shape))], opset=20)
    # (LogSoftmax near 0 is the log of a sum near 1: an ulp of the sum, summed in another order, is the difference)
    check(run_twin(model, {"x": x}), softmax_want(op, model, x, axis), rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_float64_softmax_rows_with_edge_values(op):
    x = RNG.uniform(-5, 5, (9, 33))
    x[0, 3] = np.nan                      # a NaN row
    x[1, 5] = np.inf                      # +inf: inf - inf gives NaN, as the reference
    x[2, :] = -np.inf                     # every element -inf
    x[3, 7] = -np.inf                     # one -inf: exp 0
    x[4, :] = 700.0                       # large equal values: uniform
    x[5, 0] = 1e300                       # one dominant value
    x[6, :] = RNG.uniform(-1000, 1000, 33)  # exps far into the denormals
    x[7, 1] = -1e308
    model = make_model([helper.make_node(op, ["x"], ["y"], axis=-1)], [("x", F64, [9, 33])], [("y", F64, [9, 33])],
                       opset=20)
    check(run_twin(model, {"x": x}), softmax_want(op, model, x, -1), rtol=1e-13, atol=1e-15)


def test_float64_softmax_in_place_after_another_step():
    x = RNG.uniform(-3, 3, (8, 40))
    nodes = [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Softmax", ["a"], ["y"], axis=-1)]
    model = make_model(nodes, [("x", F64, [8, 40])], [("y", F64, [8, 40])], opset=20)
    check(run_twin(model, {"x": x}), reference(model, {"x": x}), rtol=1e-13)


# ---- copies dropped from the plan ----

def copies_model(nodes, inputs, outputs, initializers=()):
    return make_model(nodes, inputs, outputs, initializers=initializers, opset=20)


def test_identity_chain_to_an_output():
    x = RNG.standard_normal((16, 9)).astype(np.float32)
    nodes, v = [], "x"
    for i in range(8):
        nodes.append(helper.make_node("Identity", [v], [f"y{i}"]))
        v = f"y{i}"
    model = copies_model(nodes, [("x", F32, [16, 9])], [(v, F32, [16, 9])])
    (y,) = run_twin(model, {"x": x})
    np.testing.assert_array_equal(y, x)


def test_identity_outputs_that_are_also_graph_outputs_and_read_later():
    # a copy that is a graph output is still written; a copy read by two steps, one of which may run in place
    x = RNG.standard_normal((5, 12)).astype(np.float32)
    nodes = [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Identity", ["a"], ["b"]),
             helper.make_node("Identity", ["b"], ["c"]), helper.make_node("Relu", ["c"], ["d"]),
             helper.make_node("Add", ["c", "b"], ["e"]), helper.make_node("Identity", ["e"], ["f"]),
             helper.make_node("Identity", ["f"], ["out_f"]), helper.make_node("Mul", ["f", "a"], ["g"])]
    outs = [("b", F32, [5, 12]), ("d", F32, [5, 12]), ("out_f", F32, [5, 12]), ("g", F32, [5, 12]),
            ("c", F32, [5, 12])]
    model = copies_model(nodes, [("x", F32, [5, 12])], outs)
    got = run_twin(model, {"x": x})
    a = -x
    want = [a, np.maximum(a, 0), a + a, (a + a) * a, a]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_copies_of_a_graph_input_are_not_written_in_place():
    # Identity of the graph input feeds an element-wise step: the step must not write over the caller's input
    x = RNG.standard_normal((7, 8)).astype(np.float32)
    keep = x.copy()
    nodes = [helper.make_node("Identity", ["x"], ["a"]), helper.make_node("Exp", ["a"], ["b"]),
             helper.make_node("Reshape", ["b", "s"], ["c"]), helper.make_node("Squeeze", ["c"], ["d"]),
             helper.make_node("Neg", ["d"], ["y"]), helper.make_node("Identity", ["a"], ["y2"])]
    model = copies_model(nodes, [("x", F32, [7, 8])], [("y", F32, [56]), ("y2", F32, [7, 8])],
                         initializers=[("s", np.array([1, 56], np.int64))])
    y, y2 = run_twin(model, {"x": x})
    np.testing.assert_array_equal(x, keep)
    np.testing.assert_allclose(y, -np.exp(keep).reshape(56), rtol=1e-6)
    np.testing.assert_array_equal(y2, keep)


def test_copies_of_constants_and_empty_tensors():
    c = RNG.standard_normal((3, 4)).astype(np.float32)
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    e = np.zeros((0, 4), np.float32)
    nodes = [helper.make_node("Identity", ["c"], ["a"]), helper.make_node("Add", ["a", "x"], ["b"]),
             helper.make_node("Identity", ["e"], ["e1"]), helper.make_node("Flatten", ["e1"], ["e2"]),
             helper.make_node("Identity", ["e2"], ["ey"]), helper.make_node("Identity", ["b"], ["b1"]),
             helper.make_node("Sub", ["b1", "a"], ["y"])]
    model = copies_model(nodes, [("x", F32, [3, 4]), ("e", F32, [0, 4])], [("y", F32, [3, 4]), ("ey", F32, [0, 4])],
                         initializers=[("c", c)])
    y, ey = run_twin(model, {"x": x, "e": e})
    np.testing.assert_array_equal(y, (c + x) - c)
    assert ey.shape == (0, 4)


def test_copies_inside_a_loop_body_and_of_other_dtypes():
    # Identity in a subgraph (its own plan) and of int64 / bool values
    x = RNG.integers(-50, 50, (6,)).astype(np.int64)
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Identity", ["s_in"], ["t"]),
         helper.make_node("Add", ["t", "one"], ["u"]), helper.make_node("Identity", ["u"], ["s_out"])],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("s_in", TensorProto.INT64, [6])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("s_out", TensorProto.INT64, [6])],
        initializer=[helper.make_tensor("one", TensorProto.INT64, [], [1])])
    nodes = [helper.make_node("Identity", ["x"], ["x1"]),
             helper.make_node("Loop", ["n", "c", "x1"], ["y"], body=body),
             helper.make_node("Greater", ["y", "x1"], ["g"]), helper.make_node("Identity", ["g"], ["g1"]),
             helper.make_node("Not", ["g1"], ["z"])]
    model = copies_model(nodes, [("x", TensorProto.INT64, [6])], [("y", TensorProto.INT64, [6]),
                                                                  ("z", TensorProto.BOOL, [6])],
                         initializers=[("n", np.array(3, np.int64)), ("c", np.array(True))])
    y, z = run_twin(model, {"x": x})
    np.testing.assert_array_equal(y, x + 3)
    np.testing.assert_array_equal(z, np.zeros(6, bool))


# ---- dilated MaxPool ----

DILATED = [dict(kernel_shape=[3, 3], dilations=[2, 2]),
           dict(kernel_shape=[3, 3], dilations=[2, 2], pads=[2, 2, 2, 2]),
           dict(kernel_shape=[2, 3], dilations=[3, 1], pads=[1, 0, 2, 1], strides=[2, 1], ceil_mode=1),
           dict(kernel_shape=[3, 2], dilations=[1, 3], strides=[1, 2], pads=[0, 1, 0, 1]),
           dict(kernel_shape=[4, 4], dilations=[2, 3], strides=[3, 2], pads=[3, 3, 1, 2], ceil_mode=1),
           dict(kernel_shape=[3], dilations=[2], pads=[1, 2]),
           dict(kernel_shape=[2, 2], dilations=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])]


@pytest.mark.parametrize("attrs", DILATED, ids=lambda a: str(sorted(a.items())))
@pytest.mark.parametrize("width", [5, 16, 37, 70])
def test_dilated_maxpool_against_reference(attrs, width):
    shape = (2, 3, width) if len(attrs["kernel_shape"]) == 1 else (2, 3, 11, width)
    x = np.round(RNG.standard_normal(shape) * 4).astype(np.float32)  # ties, zeros of both signs
    x.reshape(-1)[::7] *= -1.0
    model = make_model([helper.make_node("MaxPool", ["x"], ["y"], **attrs)], [("x", F32, list(shape))],
                       [("y", F32, None)], opset=18)
    got, want = run_twin(model, {"x": x}), reference(model, {"x": x})
    check(got, want, rtol=0)


@pytest.mark.parametrize("attrs", DILATED, ids=lambda a: str(sorted(a.items())))
def test_dilated_maxpool_matches_the_general_loop_bit_for_bit(attrs):
    # the Indices output keeps the general loop: NaN (a first tap kept, later ones skipped), infinities, +-0 ties
    shape = (2, 3, 41) if len(attrs["kernel_shape"]) == 1 else (2, 3, 13, 41)
    x = np.round(RNG.standard_normal(shape)).astype(np.float32)
    flat = x.reshape(-1)
    flat[RNG.choice(flat.size, 40, replace=False)] = np.tile(np.array([np.nan, np.inf, -np.inf, -0.0], np.float32), 10)
    x2 = x.copy()
    x2[1] = np.abs(x2[1])  # a plane without NaN next to planes with
    x2[1][np.isnan(x2[1])] = 0.0
    for xx in (x, x2):
        fast = make_model([helper.make_node("MaxPool", ["x"], ["y"], **attrs)], [("x", F32, list(shape))],
                          [("y", F32, None)], opset=18)
        general = make_model([helper.make_node("MaxPool", ["x"], ["y", "i"], **attrs)], [("x", F32, list(shape))],
                             [("y", F32, None), ("i", TensorProto.INT64, None)], opset=18)
        y = run_twin(fast, {"x": xx})[0]
        y_general = run_twin(general, {"x": xx})[0]
        np.testing.assert_array_equal(y.view(np.int32), y_general.view(np.int32))


# ---- BatchNormalization on small planes ----

@pytest.mark.parametrize("shape", [(64, 37), (5, 3, 1), (7, 20, 3), (3, 8, 2, 7), (0, 6), (4, 5, 15), (2, 4, 4, 4)])
def test_batchnorm_small_planes(shape):
    c = shape[1]
    x = RNG.standard_normal(shape).astype(np.float32) * 3
    if x.size:
        x.reshape(-1)[:4] = [np.nan, np.inf, -np.inf, -0.0]
    params = [("s", RNG.uniform(0.5, 1.5, c).astype(np.float32)), ("b", RNG.standard_normal(c).astype(np.float32)),
              ("m", RNG.standard_normal(c).astype(np.float32)), ("v", RNG.uniform(0.1, 2, c).astype(np.float32))]
    model = make_model([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])],
                       [("x", F32, list(shape))], [("y", F32, list(shape))], initializers=params, opset=15)
    check(run_twin(model, {"x": x}), reference(model, {"x": x}), rtol=2e-6, atol=1e-6)


# ---- Transpose: short last runs moved as wider elements, a few rows from interleaved input ----

TRANSPOSES = [((6, 2, 5, 2), [0, 2, 1, 3]), ((3, 4, 7, 1), [0, 2, 1, 3]), ((9, 2, 11, 4), [2, 0, 1, 3]),
              ((2, 13, 17, 2), [0, 3, 1, 2]), ((3, 9, 10, 4), [0, 3, 1, 2]), ((2, 5, 7, 3), [0, 3, 1, 2]),
              ((33, 2), [1, 0]), ((41, 3), [1, 0]), ((29, 4), [1, 0]), ((5, 6, 2, 2), [1, 0, 2, 3]),
              ((4, 3, 2, 2, 2), [2, 0, 1, 3, 4]), ((7, 1, 2), [1, 0, 2]), ((0, 3, 2), [1, 0, 2]),
              ((8, 8, 2), [2, 1, 0]), ((4, 3, 10), [0, 2, 1]), ((2, 4, 9), [0, 2, 1]), ((3, 2, 11), [0, 2, 1]),
              ((13, 18), [1, 0]), ((40, 37), [1, 0]), ((3, 12, 9, 2), [0, 2, 1, 3]), ((48, 32), [1, 0]),
              ((37, 50), [1, 0]), ((3, 40, 35), [0, 2, 1]), ((17, 2, 33), [2, 1, 0])]


@pytest.mark.parametrize("dtype", [np.uint8, np.float16, np.float32, np.int64, np.bool_], ids=lambda d: d.__name__)
@pytest.mark.parametrize("shape, perm", TRANSPOSES, ids=str)
def test_transpose_short_runs_and_interleaved_rows(dtype, shape, perm):
    x = (RNG.standard_normal(shape) * 100).astype(dtype)
    t = {np.uint8: TensorProto.UINT8, np.float16: TensorProto.FLOAT16, np.float32: F32, np.int64: TensorProto.INT64,
         np.bool_: TensorProto.BOOL}[dtype]
    model = make_model([helper.make_node("Transpose", ["x"], ["y"], perm=perm)], [("x", t, list(shape))],
                       [("y", t, None)], opset=18)
    (y,) = run_twin(model, {"x": x})
    np.testing.assert_array_equal(y, np.transpose(x, perm))


# ---- DequantizeLinear per axis ----

@pytest.mark.parametrize("dtype", [np.uint8, np.int8], ids=lambda d: d.__name__)
@pytest.mark.parametrize("shape, axis", [((6, 37), 1), ((6, 37), 0), ((3, 5, 7), 1), ((3, 5, 7), -1), ((0, 4), 1),
                                         ((2, 3, 1), 1)])
@pytest.mark.parametrize("with_zero", [True, False])
def test_dequantize_per_axis(dtype, shape, axis, with_zero):
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max + 1, shape).astype(dtype)
    n = shape[axis]
    inits = [("s", RNG.uniform(1e-3, 2, n).astype(np.float32))]
    if with_zero:
        inits.append(("z", RNG.integers(info.min, info.max + 1, n).astype(dtype)))
    t = TensorProto.UINT8 if dtype == np.uint8 else TensorProto.INT8
    model = make_model([helper.make_node("DequantizeLinear", ["x"] + [n_ for n_, _ in inits], ["y"], axis=axis)],
                       [("x", t, list(shape))], [("y", F32, list(shape))], initializers=inits, opset=19)
    check(run_twin(model, {"x": x}), reference(model, {"x": x}), rtol=1e-7)


# ---- Where: a condition constant along a row, one side a scalar ----

WHERE_SHAPES = [((7, 33), (7, 33), (7, 33)), ((7, 1), (7, 33), (7, 33)), ((7, 33), (7, 33), (33,)),
                ((7, 33), (7, 33), ()), ((7, 33), (), (7, 33)), ((7, 33), (1, 33), (7, 1)), ((33,), (7, 33), ()),
                ((5, 1, 9), (5, 4, 9), (5, 4, 9)), ((), (3, 4), (3, 4)), ((0, 3), (0, 3), (3,))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.float16, np.bool_], ids=lambda d: d.__name__)
@pytest.mark.parametrize("shapes", WHERE_SHAPES, ids=str)
def test_where_broadcasts(dtype, shapes):
    cs, xs, ys = shapes
    cond = np.asarray(RNG.random(cs) > 0.5)
    x = np.asarray((RNG.standard_normal(xs) * 50).astype(dtype))
    y = np.asarray((RNG.standard_normal(ys) * 50).astype(dtype))
    if dtype == np.float32 and x.size:
        x.reshape(-1)[0] = np.nan
    t = {np.float32: F32, np.float64: F64, np.int8: TensorProto.INT8, np.float16: TensorProto.FLOAT16,
         np.bool_: TensorProto.BOOL}[dtype]
    model = make_model([helper.make_node("Where", ["c", "x", "y"], ["o"])],
                       [("c", TensorProto.BOOL, list(cs)), ("x", t, list(xs)), ("y", t, list(ys))], [("o", t, None)],
                       opset=18)
    (o,) = run_twin(model, {"c": cond, "x": x, "y": y})
    np.testing.assert_array_equal(o, np.where(cond, x, y))


@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_fallback_instruction_sets_pass_the_same_checks(isa):
    rerun_file_with_instruction_set(__file__, isa)
