"""The seventh sweep's cases against onnx.reference: Cast from bool to every integer dtype (bytes other than 0 / 1
never reach a bool tensor through the API, so 0 / 1 patterns at odd lengths), AveragePool 3x3 at stride 2 (pads 1,
both count_include_pad) and stride 3, short-axis reductions (rows of 3, a middle axis of 4) on the integer dtypes,
and element-wise ops on narrow / unsigned integers with the broadcasts exported graphs use."""
import warnings

import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from onnx_cases import run_twin  # noqa: E402

RNG = np.random.default_rng(4807)


def _model(op, inputs, initializers=(), **attrs):
    """One node over `inputs` ((name, array) pairs), then the initializers ((name, array) pairs)."""
    names = [n for n, _ in inputs] + [n for n, _ in initializers]
    vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in inputs]
    inits = [helper.make_tensor(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape, a.reshape(-1).tolist())
             for n, a in initializers]
    graph = helper.make_graph([helper.make_node(op, names, ["y"], **attrs)], "g", vis,
                              [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _check(op, inputs, initializers=(), exact=True, ref_widens=False, **attrs):
    model = _model(op, inputs, initializers, **attrs)
    feeds = dict(inputs)
    got = run_twin(model, feeds)[0]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = np.asarray(ReferenceEvaluator(model).run(None, feeds)[0])
    if ref_widens:  # the reference's ReduceSumSquare / ReduceL1 return int64 for int32 (the spec: the input's type)
        assert got.dtype == inputs[0][1].dtype
        want = want.astype(got.dtype)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    if exact:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64,
                                   np.float16, np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 15, 16, 17, 63, 64, 65, 1000, 4099])
def test_cast_from_bool(dtype, n):
    x = RNG.random(n) < 0.5
    x[::5] = True
    _check("Cast", [("x", x)], to=helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))


@pytest.mark.parametrize("count_pad", [0, 1])
@pytest.mark.parametrize("hw", [(7, 7), (16, 16), (33, 20)])
def test_average_pool_3x3_stride2(hw, count_pad):
    x = RNG.standard_normal((2, 3) + hw).astype(np.float32)
    _check("AveragePool", [("x", x)], exact=False, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
           count_include_pad=count_pad)


@pytest.mark.parametrize("hw", [(9, 9), (32, 32), (17, 23)])
def test_average_pool_3x3_stride3(hw):
    x = RNG.standard_normal((1, 4) + hw).astype(np.float32)
    _check("AveragePool", [("x", x)], exact=False, kernel_shape=[3, 3], strides=[3, 3])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin", "ReduceSum", "ReduceProd", "ReduceL1", "ReduceSumSquare"])
@pytest.mark.parametrize("where", ["rows of 3", "middle axis of 4"])
def test_short_axis_reductions(op, dtype, where):
    if where == "rows of 3":
        shape, axes = (53, 3), [-1]
    else:
        shape, axes = (3, 4, 67), [1]
    x = (RNG.integers(-9, 10, shape) if np.dtype(dtype).kind == "i" else RNG.standard_normal(shape)).astype(dtype)
    _check(op, [("x", x)], [("a", np.array(axes, np.int64))], exact=op in ("ReduceMax", "ReduceMin") or
           np.dtype(dtype).kind == "i", ref_widens=dtype == np.int32 and op in ("ReduceSumSquare", "ReduceL1"),
           keepdims=1)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.uint32, np.uint64])
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min", "Mod", "BitwiseAnd"])
def test_narrow_integer_binary(op, dtype):
    a = RNG.integers(0, 120, (5, 37)).astype(dtype)
    b = RNG.integers(1, 7, (5, 37)).astype(dtype)
    _check(op, [("x", a), ("b", b)])
    _check(op, [("x", a[:, :1].copy()), ("b", b[:1].copy())])  # [N,1] x [1,M]
    _check(op, [("x", b[0, :1].copy()), ("b", a)])  # [1] x [N,M]


def _with_specials(x):
    """NaNs (one and two to a row), signed zeros, infinities and ties in the first rows of a float array."""
    x = x.copy()
    flat = x.reshape(-1, x.shape[-1])
    if flat.shape[0] >= 8:
        flat[1, 0] = np.nan
        flat[2, -1] = np.nan
        flat[3, :] = np.nan
        flat[4, :] = 0.0
        flat[4, 0] = -0.0
        flat[5, 1] = np.inf
        flat[6, :] = -np.inf
        flat[7, :] = 1.5  # a tie: the first (or with select_last_index the last) index
    return x


@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("w", [2, 3, 5, 7])
def test_arg_float64_short_rows(op, w, last):
    x = _with_specials(RNG.integers(-3, 4, (37, w)).astype(np.float64))
    _check(op, [("x", x)], axis=-1, keepdims=1, select_last_index=last)


@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize(("shape", "axis"), [((4, 37), 0), ((3, 4, 19), 1), ((2, 9, 4), 1), ((5, 3), 0)])
def test_arg_float64_columns(op, shape, axis, last):
    x = RNG.integers(-3, 4, shape).astype(np.float64)
    x.reshape(-1)[::11] = np.nan
    x.reshape(-1)[5::13] = -0.0
    _check(op, [("x", x)], axis=axis, keepdims=0, select_last_index=last)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("w", [2, 3, 4, 7])
def test_extremum_float_short_rows(op, w):
    """Rows of 2-7 terms, 8 rows at a time plus a tail: NaN rows, signed zeros (the first sign kept), infinities."""
    x = _with_specials(RNG.standard_normal((43, w)).astype(np.float32))
    x[8:12] = np.array([0.0, -0.0] * w, np.float32)[:w]
    _check(op, [("x", x)], [("a", np.array([-1], np.int64))], keepdims=0)


@pytest.mark.parametrize(("src", "dst"), [(np.int8, np.uint8), (np.uint8, np.int8), (np.int16, np.uint16),
                                          (np.uint16, np.int16), (np.int32, np.uint32), (np.uint32, np.int32),
                                          (np.int64, np.uint64), (np.uint64, np.int64)])
def test_cast_same_width_integers(src, dst):
    info = np.iinfo(src)
    x = RNG.integers(info.min, info.max, 301, dtype=src, endpoint=True)
    x[:2] = (info.min, info.max)
    _check("Cast", [("x", x)], to=helper.np_dtype_to_tensor_dtype(np.dtype(dst)))
