"""float16 / bfloat16 reductions (every Reduce* op, kept and reduced outer axes, rows longer than the widening
block, NaN / inf / signed zeros, keepdims, empty axes). Where the outermost axis is kept the twin widens a few
slices at a time; the results must be bit for bit those of widening the whole input and reducing in float32 (the
path it replaced, and still the one used where the outermost axis is reduced), and within float16 rounding of
onnx.reference."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from conftest import make_model  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from onnx_cases import reference, run_twin  # noqa: E402

RNG = np.random.default_rng(5454)
OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
       "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]
# (shape, axes): outermost kept (the blocked path) and reduced (the whole-input path); rows of 1, of a vector and
# a remainder, and longer than the 4096-element block
CASES = [((3, 5, 17), [-1]), ((3, 5, 17), [1]), ((3, 5, 17), [0]), ((3, 5, 17), [1, 2]), ((3, 5, 17), None),
         ((33, 9), [-1]), ((33, 9), [0]), ((700, 13), [1]), ((3, 5000), [-1]), ((2, 3, 6, 7), [2, 3]),
         ((4, 3, 1), [-1]), ((5, 2), [-1])]


def _inputs(shape, op, special):
    lo, hi = (0.5, 1.5) if op in ("ReduceProd", "ReduceLogSum") else (-2.0, 2.0)
    x = RNG.uniform(lo, hi, shape).astype(np.float32)
    if special:
        flat = x.reshape(-1)
        idx = RNG.choice(flat.size, min(flat.size, 6), replace=False)
        flat[idx] = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 70000.0], np.float32)[: idx.size]
    return x


def _model(op, shape, axes, keepdims, in_type, pre_cast=None, post_cast=None, noop=None):
    """op over x (in_type); pre_cast / post_cast: Cast nodes before / after it (the bfloat16 cases, as numpy has no
    bfloat16, and the float32 path that the half one must match)."""
    nodes, src = [], "x"
    for i, t in enumerate(pre_cast or []):
        nodes.append(helper.make_node("Cast", [src], [f"c{i}"], to=t))
        src = f"c{i}"
    attrs = {"keepdims": keepdims}
    if noop is not None:
        attrs["noop_with_empty_axes"] = noop
    nodes.append(helper.make_node(op, [src, "a"] if axes is not None else [src], ["r"], **attrs))
    src = "r"
    for i, t in enumerate(post_cast or []):
        nodes.append(helper.make_node("Cast", [src], [f"d{i}"], to=t))
        src = f"d{i}"
    nodes.append(helper.make_node("Identity", [src], ["y"]))
    inits = [("a", np.array(axes, np.int64))] if axes is not None else []
    return make_model(nodes, [("x", in_type, list(shape))], [("y", (post_cast or [in_type])[-1], None)],
                      inits, opset=18)


def _bits_equal(got, want):
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    g, w = got.view(np.uint16 if got.itemsize == 2 else np.uint32), want.view(np.uint16 if want.itemsize == 2
                                                                                else np.uint32)
    nan = np.isnan(got) & np.isnan(want)
    np.testing.assert_array_equal(np.where(nan, 0, g), np.where(nan, 0, w))


@pytest.mark.parametrize("special", [False, True])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("shape,axes", CASES)
@pytest.mark.parametrize("op", OPS)
def test_float16_reduce(op, shape, axes, keepdims, special):
    x = _inputs(shape, op, special)
    with np.errstate(all="ignore"):
        h = x.astype(np.float16)  # 70000 -> inf
        got = run_twin(_model(op, shape, axes, keepdims, TensorProto.FLOAT16), {"x": h})[0]
        # the float32 path: h widened exactly, reduced in float32, rounded to float16 once (numpy's round to nearest
        # even, as the twin's)
        wide = run_twin(_model(op, shape, axes, keepdims, TensorProto.FLOAT), {"x": h.astype(np.float32)})[0]
        _bits_equal(got, wide.astype(np.float16))
        want = reference(_model(op, shape, axes, keepdims, TensorProto.FLOAT), [h.astype(np.float32)])[0]
    assert got.dtype == np.float16
    if op == "ReduceLogSumExp":  # an infinite max: the reference subtracts it (inf - inf, NaN), the twin does not
        want = np.where(np.isnan(want) & np.isinf(got), got.astype(want.dtype), want)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float16).astype(np.float32),
                               rtol=2e-3, atol=1e-3, equal_nan=True)


@pytest.mark.parametrize("shape,axes", [((3, 5, 17), [-1]), ((3, 5000), [-1]), ((3, 5, 17), [0]),
                                        ((2, 3, 6, 7), [2, 3]), ((3, 5, 17), None)])
@pytest.mark.parametrize("op", OPS)
def test_bfloat16_reduce(op, shape, axes):
    x = _inputs(shape, op, True)
    bf, f = TensorProto.BFLOAT16, TensorProto.FLOAT
    with np.errstate(all="ignore"):
        got = run_twin(_model(op, shape, axes, 1, f, pre_cast=[bf], post_cast=[f]), {"x": x})[0]
        want = run_twin(_model(op, shape, axes, 1, f, pre_cast=[bf, f], post_cast=[bf, f]), {"x": x})[0]
    _bits_equal(got, want)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMean"])
@pytest.mark.parametrize("shape,axes", [((0, 5), [1]), ((5, 0), [1]), ((4, 6), [])])
def test_float16_reduce_empty(op, shape, axes):
    h = RNG.uniform(-2, 2, shape).astype(np.float16)
    for noop in (0, 1):
        if not axes and noop == 0 and 0 in shape:
            continue
        with np.errstate(all="ignore"):
            got = run_twin(_model(op, shape, axes, 1, TensorProto.FLOAT16, noop=noop), {"x": h})[0]
            wide = run_twin(_model(op, shape, axes, 1, TensorProto.FLOAT, noop=noop), {"x": h.astype(np.float32)})[0]
        _bits_equal(got, wide.astype(np.float16))
