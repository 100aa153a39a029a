"""Every supported op, run through Session.run_graph and compared with onnx.reference.ReferenceEvaluator."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator

import geasync as ga
from conftest import MLP_PATH, TensorProto, helper, make_mlp, make_model

F = TensorProto.FLOAT
RNG = np.random.default_rng(1234)

NP_OF = {
    TensorProto.FLOAT: np.float32,
    TensorProto.DOUBLE: np.float64,
    TensorProto.FLOAT16: np.float16,
    TensorProto.INT32: np.int32,
    TensorProto.INT64: np.int64,
    TensorProto.BOOL: np.bool_,
}


def rand(shape, dtype=np.float32, low=-2.0, high=2.0):
    return RNG.uniform(low, high, size=shape).astype(dtype)


def run_and_compare(model: onnx.ModelProto, feeds: dict, *, rtol=1e-5, atol=1e-6, exact=False):
    """Runs `model` on geasync and on the ONNX reference; asserts outputs agree (values, shapes, dtypes)."""
    if all(o.type.tensor_type.HasField("shape") for o in model.graph.output):
        onnx.checker.check_model(model)
    input_names = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    with np.errstate(all="ignore"):  # the reference's own exp() may overflow on extreme inputs
        expected = ReferenceEvaluator(model).run(None, feeds)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        outs = s.run_graph(1, [feeds[n] for n in input_names])
        assert len(outs) == len(expected)
        got = [o.numpy().copy() for o in outs]
        del outs
    for g, e in zip(got, expected, strict=True):
        e = np.asarray(e)
        assert g.shape == e.shape, (g.shape, e.shape)
        assert g.dtype == e.dtype, (g.dtype, e.dtype)
        if exact or e.dtype.kind in "biu":
            np.testing.assert_array_equal(g, e)
        else:
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
    return got


def single(op, in_shapes, out_shape=None, *, dtype=F, out_dtype=None, initializers=(), feeds=None, **attrs):
    """A one-node model with inputs x0.. (given shapes) and output y."""
    names = [f"x{i}" for i in range(len(in_shapes))]
    init_names = [n for n, _ in initializers]
    node = helper.make_node(op, names + init_names, ["y"], name=f"{op.lower()}_node", **attrs)
    model = make_model([node], [(n, dtype, list(s)) for n, s in zip(names, in_shapes, strict=True)],
                       [("y", out_dtype if out_dtype is not None else dtype, out_shape)], initializers=initializers)
    if feeds is None:
        feeds = {n: rand(s, NP_OF[dtype]) for n, s in zip(names, in_shapes, strict=True)}
    return model, feeds


# --- MatMul --------------------------------------------------------------------------------------

MATMUL_CASES = [
    ((3, 4), (4, 5)),
    ((1, 1), (1, 1)),
    ((7, 33), (33, 17)),
    ((2, 3, 4), (2, 4, 5)),          # batched
    ((2, 3, 4), (4, 5)),             # batch vs 2-D
    ((3, 4), (2, 4, 5)),             # 2-D vs batch
    ((2, 1, 3, 4), (5, 4, 6)),       # broadcast batch dims
    ((1, 3, 3, 4), (2, 1, 4, 2)),    # broadcast both ways
    ((4,), (4, 5)),                  # 1-D lhs
    ((3, 4), (4,)),                  # 1-D rhs
    ((4,), (4,)),                    # both 1-D -> scalar
    ((4,), (2, 4, 5)),               # 1-D lhs with batch rhs
    ((2, 3, 4), (4,)),               # batch lhs with 1-D rhs
]


@pytest.mark.parametrize("a_shape,b_shape", MATMUL_CASES, ids=[f"{a}x{b}" for a, b in MATMUL_CASES])
def test_matmul(a_shape, b_shape):
    model, feeds = single("MatMul", [a_shape, b_shape])
    run_and_compare(model, feeds)


def test_matmul_with_initializer_weight():
    w = rand((6, 3))
    model, feeds = single("MatMul", [(5, 6)], initializers=[("w", w)])
    run_and_compare(model, feeds)


# --- Gemm ----------------------------------------------------------------------------------------

GEMM_CASES = []
for trans_a, trans_b in itertools.product([0, 1], [0, 1]):
    for alpha, beta in [(1.0, 1.0), (0.5, 2.0), (-1.25, 0.0)]:
        for c_shape in [None, (5,), (1, 5), (3, 1), (3, 5), (), (1,)]:
            GEMM_CASES.append((trans_a, trans_b, alpha, beta, c_shape))


@pytest.mark.parametrize("trans_a,trans_b,alpha,beta,c_shape", GEMM_CASES)
def test_gemm(trans_a, trans_b, alpha, beta, c_shape):
    m, k, n = 3, 4, 5
    a_shape = (k, m) if trans_a else (m, k)
    b_shape = (n, k) if trans_b else (k, n)
    shapes = [a_shape, b_shape] + ([] if c_shape is None else [c_shape])
    model, feeds = single("Gemm", shapes, alpha=alpha, beta=beta, transA=trans_a, transB=trans_b)
    run_and_compare(model, feeds)


def test_gemm_default_attrs_with_initializers():
    w = rand((8, 6))
    b = rand((6,))
    model, feeds = single("Gemm", [(4, 8)], initializers=[("w", w), ("b", b)])
    run_and_compare(model, feeds)


# --- elementwise binary --------------------------------------------------------------------------

BROADCAST_CASES = [
    ((3, 4), (3, 4)),
    ((3, 4), (4,)),
    ((3, 4), (1, 4)),
    ((3, 4), (3, 1)),
    ((3, 1), (1, 4)),
    ((2, 3, 4), (3, 1)),
    ((1,), (2, 3, 4)),
    ((2, 1, 4), (1, 3, 1)),
    ((5,), ()),
    ((), ()),
    ((2, 3, 4, 5), (1, 3, 1, 5)),
]


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("a_shape,b_shape", BROADCAST_CASES, ids=[f"{a}-{b}" for a, b in BROADCAST_CASES])
def test_binary_broadcast(op, a_shape, b_shape):
    model, feeds = single(op, [a_shape, b_shape])
    if op == "Div":  # keep the denominator away from 0
        d = feeds["x1"]
        feeds["x1"] = np.where(np.abs(d) < 0.25, np.float32(0.5), d).astype(np.float32)
    run_and_compare(model, feeds)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_binary_with_constant_initializer(op):
    c = rand((4,), low=0.5, high=2.0)
    model, feeds = single(op, [(3, 4)], initializers=[("c", c)])
    run_and_compare(model, feeds)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul"])
@pytest.mark.parametrize("dtype", [TensorProto.INT64, TensorProto.INT32])
def test_binary_integer(op, dtype):
    model, _ = single(op, [(3, 4), (4,)], dtype=dtype)
    feeds = {"x0": RNG.integers(-100, 100, (3, 4)).astype(NP_OF[dtype]),
             "x1": RNG.integers(-100, 100, (4,)).astype(NP_OF[dtype])}
    run_and_compare(model, feeds)


# --- unary ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["Relu", "Sigmoid", "Tanh", "Identity"])
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4), ()])
def test_unary(op, shape):
    model, feeds = single(op, [shape])
    feeds["x0"] = rand(shape, low=-8, high=8)
    run_and_compare(model, feeds)


def test_sigmoid_tanh_extremes():
    x = np.array([-100.0, -20.0, -1e-7, 0.0, 1e-7, 20.0, 100.0], np.float32)
    for op in ("Sigmoid", "Tanh", "Relu"):
        model, _ = single(op, [x.shape])
        run_and_compare(model, {"x0": x})


@pytest.mark.parametrize("dtype", [TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL])
def test_identity_other_dtypes(dtype):
    model, _ = single("Identity", [(3, 4)], dtype=dtype)
    x = RNG.integers(-5, 5, (3, 4)).astype(NP_OF[dtype])
    run_and_compare(model, {"x0": x})


# --- Softmax -------------------------------------------------------------------------------------

SOFTMAX_CASES = [((4, 10), a) for a in (-1, 0, 1, -2)] + [((2, 3, 5), a) for a in (-1, 0, 1, 2, -3)] + [((6,), 0)]


@pytest.mark.parametrize("shape,axis", SOFTMAX_CASES, ids=[f"{s}-axis{a}" for s, a in SOFTMAX_CASES])
def test_softmax(shape, axis):
    model, feeds = single("Softmax", [shape], axis=axis)
    feeds["x0"] = rand(shape, low=-10, high=10)
    got = run_and_compare(model, feeds)
    np.testing.assert_allclose(got[0].sum(axis=axis), 1.0, rtol=1e-5)


def test_softmax_default_axis_and_large_values():
    model, _ = single("Softmax", [(3, 4)])
    x = np.array([[1000, 1001, 1002, 999], [-1000, -1000, -1000, -1000], [0, 0, 88, 89]], np.float32)
    got = run_and_compare(model, {"x0": x})
    assert np.all(np.isfinite(got[0]))


# --- Reshape / Flatten / Transpose ---------------------------------------------------------------

RESHAPE_CASES = [
    ((2, 3, 4), [6, 4]),
    ((2, 3, 4), [-1]),
    ((2, 3, 4), [0, -1]),
    ((2, 3, 4), [0, 0, 2, 2]),
    ((2, 3, 4), [-1, 3, 2]),
    ((2, 3, 4), [4, 0, -1]),
    ((6,), [1, 2, 1, 3]),
    ((1, 12), [3, 4]),
]


@pytest.mark.parametrize("in_shape,new_shape", RESHAPE_CASES, ids=[f"{a}->{b}" for a, b in RESHAPE_CASES])
def test_reshape(in_shape, new_shape):
    model, feeds = single("Reshape", [in_shape], initializers=[("shape", np.array(new_shape, np.int64))])
    run_and_compare(model, feeds, exact=True)


def test_reshape_shape_from_constant_node():
    nodes = [
        helper.make_node("Constant", [], ["shape"], name="c",
                         value=helper.make_tensor("v", TensorProto.INT64, [2], [0, -1])),
        helper.make_node("Reshape", ["x", "shape"], ["y"], name="r"),
    ]
    model = make_model(nodes, [("x", F, [3, 2, 2])], [("y", F, None)])
    run_and_compare(model, {"x": rand((3, 2, 2))}, exact=True)


FLATTEN_CASES = [((2, 3, 4), a) for a in (0, 1, 2, 3, -1, -2, -3)] + [((5, 6), 1), ((5,), 0), ((5,), 1)]


@pytest.mark.parametrize("shape,axis", FLATTEN_CASES, ids=[f"{s}-axis{a}" for s, a in FLATTEN_CASES])
def test_flatten(shape, axis):
    model, feeds = single("Flatten", [shape], axis=axis)
    run_and_compare(model, feeds, exact=True)


def test_flatten_default_axis():
    model, feeds = single("Flatten", [(2, 3, 4)])
    run_and_compare(model, feeds, exact=True)


TRANSPOSE_CASES = [((3, 4), None), ((3, 4), [1, 0]), ((3, 4), [0, 1]), ((2, 3, 4), None), ((2, 3, 4), [0, 2, 1]),
                   ((2, 3, 4), [2, 0, 1]), ((2, 3, 4, 5), [3, 1, 0, 2]), ((2, 3, 4, 5), None), ((7,), None)]


@pytest.mark.parametrize("shape,perm", TRANSPOSE_CASES, ids=[f"{s}-{p}" for s, p in TRANSPOSE_CASES])
def test_transpose(shape, perm):
    attrs = {} if perm is None else {"perm": perm}
    model, feeds = single("Transpose", [shape], **attrs)
    run_and_compare(model, feeds, exact=True)


# --- Cast ----------------------------------------------------------------------------------------

CAST_TYPES = [TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32, TensorProto.FLOAT16, TensorProto.BOOL]


def _cast_source(dtype, shape=(4, 6)):
    if dtype == TensorProto.BOOL:
        return RNG.integers(0, 2, shape).astype(np.bool_)
    if dtype in (TensorProto.INT64, TensorProto.INT32):
        return RNG.integers(-1000, 1000, shape).astype(NP_OF[dtype])
    x = RNG.uniform(-1000, 1000, shape)
    x.flat[:4] = [0.0, -0.0, 2.5, -3.75]  # zeros and exactly representable halves
    return x.astype(NP_OF[dtype])


@pytest.mark.parametrize("src,dst", list(itertools.product(CAST_TYPES, CAST_TYPES)),
                         ids=[f"{TensorProto.DataType.Name(a)}->{TensorProto.DataType.Name(b)}"
                              for a, b in itertools.product(CAST_TYPES, CAST_TYPES)])
def test_cast(src, dst):
    model, _ = single("Cast", [(4, 6)], dtype=src, out_dtype=dst, to=dst)
    run_and_compare(model, {"x0": _cast_source(src)}, exact=True)


def test_cast_float_to_int_truncates_toward_zero():
    x = np.array([1.9, -1.9, 0.5, -0.5, 7.0, -7.0], np.float32)
    for dst in (TensorProto.INT32, TensorProto.INT64):
        model, _ = single("Cast", [x.shape], out_dtype=dst, to=dst)
        run_and_compare(model, {"x0": x}, exact=True)


# --- Constant ------------------------------------------------------------------------------------

def test_constant_only_output():
    value = rand((2, 3))
    nodes = [helper.make_node("Constant", [], ["y"], name="c", value=onnx.numpy_helper.from_array(value, "v"))]
    model = make_model(nodes, [], [("y", F, [2, 3])])
    run_and_compare(model, {}, exact=True)


def test_constant_feeds_add():
    value = rand((3, 4))
    nodes = [
        helper.make_node("Constant", [], ["c"], name="c", value=onnx.numpy_helper.from_array(value, "v")),
        helper.make_node("Add", ["x", "c"], ["y"], name="add"),
    ]
    model = make_model(nodes, [("x", F, [3, 4])], [("y", F, [3, 4])])
    run_and_compare(model, {"x": rand((3, 4))})


@pytest.mark.parametrize("attr,value,dtype", [
    ("value_float", 2.5, TensorProto.FLOAT),
    ("value_floats", [1.0, -2.0, 3.5], TensorProto.FLOAT),
    ("value_int", 7, TensorProto.INT64),
    ("value_ints", [1, 2, -3], TensorProto.INT64),
])
def test_constant_scalar_attrs(attr, value, dtype):
    nodes = [helper.make_node("Constant", [], ["y"], name="c", **{attr: value})]
    model = make_model(nodes, [], [("y", dtype, None)])
    run_and_compare(model, {}, exact=True)


# --- chains and multiple outputs -----------------------------------------------------------------

def test_chain_multiple_outputs():
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Tanh", ["h"], ["t"], name="tanh"),
        helper.make_node("Transpose", ["t"], ["tt"], name="tr", perm=[1, 0]),
        helper.make_node("Sigmoid", ["tt"], ["s"], name="sig"),
        helper.make_node("Sub", ["s", "tt"], ["d"], name="sub"),
    ]
    model = make_model(nodes, [("x", F, [5, 6])], [("s", F, [4, 5]), ("d", F, [4, 5]), ("h", F, [5, 4])],
                       initializers=[("w", rand((6, 4)))])
    run_and_compare(model, {"x": rand((5, 6))})


def test_graph_output_is_input_passthrough():
    nodes = [helper.make_node("Identity", ["x"], ["y"], name="id"), helper.make_node("Relu", ["x"], ["z"], name="r")]
    model = make_model(nodes, [("x", F, [2, 3])], [("y", F, [2, 3]), ("z", F, [2, 3])])
    run_and_compare(model, {"x": rand((2, 3))})


# --- MLP -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("batch", [1, 2, 7, 32, 128])
def test_mlp_batches(batch):
    model = make_mlp()
    x = RNG.random((batch, 784), dtype=np.float32)
    got = run_and_compare(model, {"x": x})
    assert got[0].shape == (batch, 10)


def test_mlp_several_batches_one_session():
    model = make_mlp()
    ref = ReferenceEvaluator(model)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        for batch in (3, 1, 16, 3):
            x = RNG.random((batch, 784), dtype=np.float32)
            (y,) = s.run_graph(1, [x])
            np.testing.assert_allclose(y.numpy(), ref.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("batch", [1, 4, 64])
def test_shipped_mlp_onnx(batch):
    model = onnx.load(str(MLP_PATH))
    x = RNG.random((batch, 784), dtype=np.float32)
    ref = ReferenceEvaluator(model).run(None, {"x": x})[0]
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(MLP_PATH))
        (y,) = s.run_graph(1, [x])
        np.testing.assert_allclose(y.numpy(), ref, rtol=1e-5, atol=1e-6)
        assert y.shape == (batch, 10) and y.dtype == np.float32
