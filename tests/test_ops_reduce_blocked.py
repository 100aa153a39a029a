"""Reductions with many outputs (past 32K) where the outermost axis is kept: the twin folds them in blocks of
outputs, from their start value through the final division / root / log, instead of over one array of all the
outputs. Each output must be bit for bit what the same terms give in a small run (a slice of the outer axis, under
the blocking threshold), and match onnx.reference: every reduction, float32 / float64 / int32 / int64 / float16,
middle and last axes, keepdims 0 / 1, NaN, infinities and signed zeros, blocks that split the outer axis unevenly."""
import warnings

import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from onnx_cases import rerun_file_with_instruction_set, run_twin  # noqa: E402

RNG = np.random.default_rng(5601)
OPS = ["ReduceMax", "ReduceMin", "ReduceSum", "ReduceMean", "ReduceProd", "ReduceL1", "ReduceL2",
       "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]
FLOAT_ONLY = {"ReduceL2", "ReduceLogSum", "ReduceLogSumExp"}
# (shape, axes): outputs past the 32K threshold with the outer axis kept; blocks of whole outer slices (4096
# outputs, or one slice when a slice has more) that do not divide the outer axis
SHAPES = [((4099, 4, 64), [1]), ((40001, 3), [-1]), ((3, 7, 20001), [1]), ((9001, 2, 5, 3), [1, 3]),
          ((35000, 1), [1]), ((2, 40000), [0, 1])]


def _model(op, x, axes, keepdims):
    t = helper.np_dtype_to_tensor_dtype(x.dtype)
    inits = [helper.make_tensor("a", TensorProto.INT64, [len(axes)], list(axes))]
    node = helper.make_node(op, ["x", "a"], ["y"], keepdims=keepdims)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", t, x.shape)],
                              [helper.make_tensor_value_info("y", t, None)], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _data(shape, dtype, op):
    if np.dtype(dtype).kind == "f":
        lo = 0.5 if op in ("ReduceLogSum", "ReduceProd") else -2.0  # products stay finite, logs defined
        return RNG.uniform(lo, 2.0, shape).astype(dtype)
    return RNG.integers(-3 if op != "ReduceProd" else 1, 4, shape).astype(dtype)


def _reference(model, x):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(ReferenceEvaluator(model).run(None, {"x": x})[0])


def _pieces(op, x, axes, keepdims):
    """The same reduction over slices of the outer axis, each run small enough not to be blocked, joined."""
    reduced = [a % x.ndim for a in axes]
    per = int(np.prod([d for i, d in enumerate(x.shape) if i > 0 and i not in reduced]))  # outputs per slice
    step = max(1, 30000 // max(1, per))
    parts = [run_twin(_model(op, x[i:i + step], axes, keepdims), {"x": x[i:i + step]})[0]
             for i in range(0, x.shape[0], step)]
    return np.concatenate(parts, axis=0)


@pytest.mark.parametrize("shape,axes", SHAPES, ids=[f"{s}-{a}" for s, a in SHAPES])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("op", OPS)
def test_many_outputs_match_small_runs_and_the_reference(op, dtype, shape, axes):
    if op in FLOAT_ONLY and np.dtype(dtype).kind != "f":
        pytest.skip("float only")
    x = _data(shape, dtype, op)
    for keepdims in (1, 0):
        model = _model(op, x, axes, keepdims)
        got = run_twin(model, {"x": x})[0]
        if 0 not in [a % x.ndim for a in axes]:  # the outer axis kept: the blocked path
            assert np.array_equal(got, _pieces(op, x, axes, keepdims), equal_nan=True)
        want = _reference(model, x)
        # the ONNX output type is the input's (this numpy's onnx.reference widens int32 sums of squares)
        assert got.shape == want.shape and got.dtype == x.dtype
        if np.dtype(dtype).kind == "f":
            rtol = 1e-5 if dtype == np.float32 else 1e-12
            np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)
        else:
            np.testing.assert_array_equal(got, want.astype(got.dtype))


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_extrema_keep_nan_infinities_and_the_first_zero(op, dtype):
    x = RNG.uniform(-1, 1, (4099, 4, 64)).astype(dtype)
    x[5, 2, 7] = np.nan
    x[4098, 0, 63] = np.nan
    x[100, :, 3] = [0.0, -0.0, 0.0, -0.0]
    x[101, :, 3] = [-0.0, 0.0, -0.0, 0.0]
    x[2000, 1, 9] = np.inf
    x[2000, 3, 10] = -np.inf
    model = _model(op, x, [1], 1)
    got = run_twin(model, {"x": x})[0]
    assert np.array_equal(got, _pieces(op, x, [1], 1), equal_nan=True)
    assert np.isnan(got[5, 0, 7]) and np.isnan(got[4098, 0, 63])
    assert np.signbit(got[100, 0, 3]) == np.signbit(_pieces(op, x[100:101], [1], 1)[0, 0, 3])
    want = _reference(model, x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.nan_to_num(got), np.nan_to_num(want))


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMean"])
def test_float16_many_outputs(op):
    x = RNG.uniform(-2, 2, (4099, 4, 16)).astype(np.float16)
    model = _model(op, x, [1], 1)
    got = run_twin(model, {"x": x})[0]
    want = _reference(model, x)
    assert got.dtype == np.float16 and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=2e-3)


def test_run_twice_gives_the_same_bits():
    """The blocks' accumulators are reused between runs: a second run starts from Init again."""
    x = _data((4099, 4, 64), np.float32, "ReduceSum")
    model = _model("ReduceSum", x, [1], 1)
    import geasync as ga

    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        a = s.run_graph(1, [x])[0].numpy().copy()
        b = s.run_graph(1, [x])[0].numpy().copy()
    assert np.array_equal(a, b)


@pytest.mark.parametrize("isa", ["avx2", "baseline"])
def test_fallback_instruction_sets(isa):
    rerun_file_with_instruction_set(__file__, isa, "float32 and (ReduceMax or ReduceSum or ReduceMin)")
