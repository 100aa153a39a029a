"""Einsum's non-GEMM loop-nest kernels (permutation copies, contiguous sums, row accumulation, products of two
and more operands) against onnx.reference, on shape edges (tails, size-1 dims, empty tensors), edge values (NaN,
+-inf, -0.0, denormals, large magnitudes) and integer / float64 dtypes; rerun under each instruction set."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx_cases import (assert_close, graph_model, reference, rerun_file_with_instruction_set, run_once,
                        value_info)

from onnx import helper

EDGE = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, -3e-39, 1e30, -7e29, 1.5, -2.25], np.float32)


def _einsum_model(eq, feeds):
    inputs = [value_info(f"x{i}", helper.np_dtype_to_tensor_dtype(f.dtype), list(f.shape))
              for i, f in enumerate(feeds)]
    node = helper.make_node("Einsum", [f"x{i}" for i in range(len(feeds))], ["y"], equation=eq)
    return graph_model([node], inputs, [value_info("y", helper.np_dtype_to_tensor_dtype(feeds[0].dtype))],
                       opset=12)


def _feeds(shapes, dtype, seed, edges=False):
    rng = np.random.default_rng(seed)
    out = []
    for s in shapes:
        if np.dtype(dtype).kind in "iu":
            info = np.iinfo(dtype)
            x = rng.integers(max(info.min, -100), min(info.max, 100), s, endpoint=True).astype(dtype)
        else:
            x = (rng.standard_normal(s) * 3).astype(dtype)
            if edges and x.size:
                flat = x.reshape(-1)
                pick = rng.choice(flat.size, size=min(flat.size, 6), replace=False)
                with np.errstate(over="ignore"):  # 1e30 is inf in float16: still an edge value
                    flat[pick] = rng.choice(EDGE, size=pick.size).astype(dtype)
        out.append(x)
    return out


def _check(session, eq, feeds, rtol=1e-5, atol=1e-5, exact=False):
    m = _einsum_model(eq, feeds)
    with np.errstate(all="ignore"):
        want = reference(m, feeds)
    got = run_once(session, m, feeds)
    if exact:  # a reordering: the same bits, -0.0 and NaN payloads included
        assert got[0].shape == want[0].shape and got[0].dtype == want[0].dtype
        np.testing.assert_array_equal(got[0].view(np.uint8), np.ascontiguousarray(want[0]).view(np.uint8))
    else:
        assert_close(got, want, rtol=rtol, atol=atol)


PERMUTES = [("ij->ji", [(33, 17)]), ("ij->ji", [(1, 40)]), ("ij->ji", [(64, 48)]), ("bij->bji", [(3, 17, 40)]),
            ("bij->jbi", [(3, 5, 7)]), ("ijk->kji", [(5, 16, 33)]), ("ij->ij", [(7, 9)]), ("ii->i", [(13, 13)]),
            ("bii->ib", [(3, 6, 6)]), ("...ij->...ji", [(2, 3, 18, 5)]), ("ij->ji", [(0, 5)]), ("ji", [(4, 3)])]


@pytest.mark.parametrize("eq,shapes", PERMUTES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int8, np.int64])
def test_einsum_reorderings_are_exact(session, eq, shapes, dtype):
    feeds = _feeds(shapes, dtype, seed=1, edges=True)
    _check(session, eq, feeds, exact=True)


REDUCES = [("ij->i", [(9, 1)]), ("ij->i", [(5, 3)]), ("ij->i", [(7, 17)]), ("ij->i", [(4, 64)]), ("ij->i", [(3, 131)]),
           ("ij->j", [(9, 1)]), ("ij->j", [(7, 17)]), ("ij->j", [(6, 35)]), ("ij->", [(1, 1)]), ("ij->", [(13, 31)]),
           ("bij->bj", [(3, 7, 19)]), ("bij->bj", [(2, 4, 16)]), ("bij->b", [(3, 5, 9)]), ("bij->jb", [(3, 6, 10)]),
           ("bij->ib", [(4, 3, 21)]), ("ii->", [(17, 17)]), ("ii", [(6, 6)]), ("bii->b", [(3, 5, 5)]),
           ("...ij->...i", [(2, 3, 4, 19)]), ("i...->i", [(5, 3, 7)]), ("ij->i", [(0, 4)]), ("ij->j", [(0, 4)]),
           ("ij->", [(4, 0)]), ("ijk->j", [(3, 1, 37)]),
           # rows of 64 and more (8-double vectors on AVX-512): 16-wide steps, an 8-wide step, scalar tails
           ("ij->i", [(9, 64)]), ("ij->i", [(5, 79)]), ("ij->i", [(8, 88)]), ("ij->i", [(6, 1000)]),
           ("bij->bi", [(2, 7, 130)])]


@pytest.mark.parametrize("eq,shapes", REDUCES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int8, np.uint8])
def test_einsum_single_operand_sums(session, eq, shapes, dtype):
    _check(session, eq, _feeds(shapes, dtype, seed=2))


PRODUCTS = [("ij,ij->i", [(5, 37), (5, 37)]), ("ij,ij->i", [(8, 16), (8, 16)]), ("i,i->", [(1,), (1,)]),
            ("i,i->", [(67,), (67,)]), ("ij,j->i", [(6, 21), (21,)]), ("j,ij->i", [(21,), (6, 21)]),
            ("bi,bi->b", [(4, 35), (4, 35)]), ("i,j->ij", [(7,), (19,)]), ("i,j->ji", [(7,), (19,)]),
            ("ij,ij->ij", [(3, 17), (3, 17)]), ("ij,ij->", [(9, 13), (9, 13)]), ("ij,ij->j", [(9, 13), (9, 13)]),
            ("ij,i->ij", [(4, 9), (4,)]), ("...i,...i->...", [(3, 1, 18), (4, 18)]),
            ("ij,ij->i", [(1, 20), (5, 20)]), ("ii,i->i", [(6, 6), (6,)]), ("i,i->i", [(0,), (0,)]),
            ("ij,ij->i", [(3, 0), (3, 0)]), ("i,i,i->", [(23,), (23,), (23,)]), ("ij,j,i->i", [(5, 19), (19,), (5,)]),
            # matrix-vector, vector-matrix and outer products (BLAS or a direct loop), plain, transposed, batched
            ("ij,j->i", [(130, 257), (257,)]), ("ji,j->i", [(21, 6), (21,)]), ("i,ij->j", [(33,), (33, 65)]),
            ("bij,bj->bi", [(3, 17, 40), (3, 40)]), ("bk,bki->bi", [(2, 5), (2, 5, 9)]),
            ("bi,bj->bij", [(3, 5), (3, 7)]), ("bi,bj->bji", [(2, 6), (2, 11)]), ("i,j->ij", [(1, ), (9,)]),
            ("ij,ij->i", [(6, 95), (6, 95)]), ("ij,ij->i", [(4, 64), (4, 64)]), ("ij,j->i", [(7, 72), (72,)]),
            ("ij,j->i", [(5, 203), (203,)])]


@pytest.mark.parametrize("eq,shapes", PRODUCTS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.int8])
def test_einsum_products(session, eq, shapes, dtype):
    # Matrix-vector products run in the GEMM's float32 arithmetic, in another order than the reference's float32
    # sums: rounding differences of a few ulps of the largest term (|term| ~ 10, sums of up to 257 terms).
    tol = 2e-4 if dtype == np.float32 else 1e-5
    _check(session, eq, _feeds(shapes, dtype, seed=3), rtol=tol, atol=tol)


CHAINS = [("ij,jk,kl->il", [(9, 17), (17, 33), (33, 5)]), ("abc,cd,de->abe", [(3, 4, 16), (16, 7), (7, 5)]),
          ("bij,bjk,bkl->bil", [(2, 5, 6), (2, 6, 7), (2, 7, 3)]), ("bn,anm,bm->ba", [(4, 6), (3, 6, 5), (4, 5)]),
          ("ij,jk,kl->li", [(4, 5), (5, 6), (6, 7)]), ("i,i,i->", [(23,), (23,), (23,)]),
          ("ij,j,i->i", [(5, 19), (19,), (5,)]), ("ij,jk,ki->", [(5, 6), (6, 7), (7, 5)]),
          ("ab,bc,cd,de,ef->af", [(3, 4), (4, 5), (5, 6), (6, 7), (7, 2)]),
          ("ijk,jl,km->ilm", [(3, 4, 5), (4, 6), (5, 2)]),  # a label kept from the first, summed later
          ("ab,cd,ef->abcdef", [(2, 3), (3, 2), (2, 2)]),   # outer products only
          ("abc,bd,ce->", [(3, 4, 5), (4, 2), (5, 3)]),
          ("iab,ibc,icd->iad", [(2, 3, 4), (2, 4, 5), (2, 5, 3)]),
          ("ij,jk,kl", [(3, 4), (4, 5), (5, 6)]),            # implicit output
          ("...ij,...jk,...kl->...il", [(2, 3, 4), (2, 4, 5), (2, 5, 2)]),
          ("i,j,k->ijk", [(3,), (4,), (5,)]), ("ij,k->ijk", [(3, 4), (5,)]),
          # two operands with a label only one of them has, summed out of it first
          ("ij,jk->i", [(6, 7), (7, 5)]), ("bij,bjk->b", [(2, 3, 4), (2, 4, 5)]),
          ("abc,abd->ab", [(2, 3, 4), (2, 3, 5)]),
          ("ij,kl->", [(3, 4), (5, 6)]), ("bij,bjk->bk", [(2, 3, 4), (2, 4, 5)]), ("ij,kl->ki", [(3, 4), (5, 6)]),
          # not contracted pairwise (the loop nest runs): a diagonal, a broadcast dim, an empty dim
          ("ii,ij,jk->ik", [(4, 4), (4, 5), (5, 3)]), ("ij,jk,kl->il", [(4, 1), (3, 5), (5, 2)]),
          ("ij,jk,kl->il", [(3, 0), (0, 4), (4, 2)])]


@pytest.mark.parametrize("eq,shapes", CHAINS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.float16])
def test_einsum_contracted_pairwise(session, eq, shapes, dtype):
    """Three or more operands contracted a pair at a time (two GEMMs for "ij,jk,kl->il", not one loop over four
    labels), and a label only one operand has summed out of it first ("ij,jk->i"), where the terms allow it;
    integer sums wrap as the reference's do either way (products and sums modulo the type's width)."""
    feeds = _feeds(shapes, dtype, 17)
    if dtype == np.float16:  # the reference rounds every float16 partial sum, the twin sums in double: compare
        m = _einsum_model(eq, feeds)  # with the exact result, within float16's half ulp of its largest value
        exact = np.einsum(eq, *[f.astype(np.float64) for f in feeds])
        got = run_once(session, m, feeds)[0]
        assert got.dtype == np.float16
        np.testing.assert_allclose(got, exact, rtol=1e-3, atol=1e-3 * np.abs(exact).max(initial=1))
        return
    tol = 2e-4 if dtype == np.float32 else 1e-10
    _check(session, eq, feeds, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_einsum_chain_wraps_like_the_reference(session, dtype):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(4)
    feeds = [rng.integers(info.min, info.max, s, endpoint=True, dtype=dtype) for s in [(5, 9), (9, 7), (7, 3)]]
    m = _einsum_model("ij,jk,kl->il", feeds)
    with np.errstate(all="ignore"):
        want = reference(m, feeds)[0]
    np.testing.assert_array_equal(run_once(session, m, feeds)[0], want)


@pytest.mark.parametrize("rows", [1, 7, 8, 9, 17, 64])
@pytest.mark.parametrize("cols", [1, 3, 8, 9, 16, 31, 32, 33, 130])
def test_einsum_matrix_vector_rows_and_tails(session, rows, cols):
    """"ij,j->i" in float32 on the twin's FMA loop: eight rows at a time and single rows, whole 8-column steps and
    masked tails; edge values (infinities, NaN, signed zeros, denormals) in both operands."""
    a, v = _feeds([(rows, cols), (cols,)], np.float32, seed=rows * 100 + cols, edges=True)
    for f in (a, v):
        f[np.abs(f) > 1e3] = np.copysign(np.inf, f[np.abs(f) > 1e3])
    _check(session, "ij,j->i", [a, v], rtol=2e-4, atol=2e-4)
    a, v = _feeds([(rows, cols), (cols,)], np.float32, seed=rows * 100 + cols)
    _check(session, "ij,j->i", [a, v], rtol=2e-4, atol=2e-4)
    _check(session, "ji,j->i", [a.T.copy(), v], rtol=2e-4, atol=2e-4)  # A stored transposed: BLAS


@pytest.mark.parametrize("eq,shapes", [(eq, s) for eq, s in REDUCES + PRODUCTS if "0" not in str(s)])
def test_einsum_edge_values(session, eq, shapes):
    """NaN, infinities, signed zeros, denormals: sums of products that overflow float32 in the reference's own
    arithmetic (1e30 * 1e30) are not compared, so large values only go where nothing is multiplied."""
    feeds = _feeds(shapes, np.float32, seed=4, edges=True)
    if len(feeds) > 1:
        for f in feeds:
            f[np.abs(f) > 1e3] = np.copysign(np.inf, f[np.abs(f) > 1e3])
    tol = 2e-4 if len(feeds) > 1 else 1e-5  # products: GEMM rounding, as in test_einsum_products
    _check(session, eq, feeds, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64])
@pytest.mark.parametrize("eq,shapes", [("ij,ij->i", [(5, 301), (5, 301)]), ("ij->j", [(301, 9)]),
                                       ("i,i->", [(1000,), (1000,)])])
def test_einsum_integer_sums_wrap_like_the_reference(session, eq, shapes, dtype):
    """Products and sums past the type's range wrap modulo its width, as the reference's fixed-width sums do."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(9)
    feeds = [rng.integers(info.min, info.max, s, endpoint=True, dtype=dtype) for s in shapes]
    for f in feeds:
        f.reshape(-1)[:4] = [info.min, info.max, info.min, info.max][: f.size]
    m = _einsum_model(eq, feeds)
    want = reference(m, feeds)[0]
    got = run_once(session, m, feeds)[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("cols", [16, 64, 79, 200])
def test_einsum_row_sums_accumulate_in_double(session, cols):
    """1e8 + 1 + ... + 1 - 1e8 (the large terms in different vector lanes and in the scalar tail): a float32
    accumulator loses the ones, the double lanes keep them exactly."""
    x = np.ones((6, cols), np.float32)
    x[:, 0], x[:, cols // 2 + 1], x[1, -1], x[2, 3] = 1e8, -1e8, 3e8, -3e8
    want = np.sum(x.astype(np.float64), axis=1).astype(np.float32)
    got = run_once(session, _einsum_model("ij->i", [x]), [x])[0]
    np.testing.assert_array_equal(got, want)
    y = np.ones_like(x)
    got = run_once(session, _einsum_model("ij,ij->i", [x, y]), [x, y])[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("eq,shape", [("bij->bj", (3, 9, 19)), ("bij->bj", (2, 8, 64)), ("ij->j", (7, 37)),
                                       ("ij->j", (5, 8)), ("ij->i", (9, 128)), ("ij->i", (13, 72))])
def test_einsum_sums_accumulate_in_double_on_every_path(session, eq, shape):
    """Column sums (four rows a pass, 8- and 4-wide steps, scalar tails) and row sums (four rows' lanes reduced
    together): +-1e8 around ones in various rows and columns; only double accumulators keep the ones."""
    x = np.ones(shape, np.float32)
    axes = tuple(i for i, ch in enumerate(eq.split("->")[0]) if ch not in eq.split("->")[1])
    s = np.moveaxis(x, axes[0], 0)  # a view: the summed axis first
    s[0], s[-1] = 1e8, -1e8
    s[1][..., ::3], s[2][..., ::3] = 3e8, -3e8
    want = np.sum(x.astype(np.float64), axis=axes).astype(np.float32)
    got = run_once(session, _einsum_model(eq, [x]), [x])[0]
    np.testing.assert_array_equal(got, want)


def test_einsum_large_magnitudes_sum_like_the_reference(session):
    x = (np.random.default_rng(5).standard_normal((6, 45)) * 1e30).astype(np.float32)
    _check(session, "ij->i", [x], rtol=1e-5, atol=1e25)
    _check(session, "ij->j", [x], rtol=1e-5, atol=1e25)


@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_fallback_instruction_sets_pass_the_same_checks(isa):
    rerun_file_with_instruction_set(__file__, isa)


# ---- reductions: Max / Min folding a middle axis into kept columns, L1 / L2 / SumSquare of contiguous runs ----

def _reduce_model(op, x, axes, keepdims):
    inputs = [value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), list(x.shape))]
    inits, names = [], ["x"]
    if axes is not None:
        inits = [helper.make_tensor("axes", 7, [len(axes)], list(axes))]
        names.append("axes")
    node = helper.make_node(op, names, ["y"], keepdims=keepdims)
    return graph_model([node], inputs, [value_info("y", helper.np_dtype_to_tensor_dtype(x.dtype))], opset=18,
                       initializers=inits)


def _want(m, feeds):
    """The reference's answer; its own warnings (inf - inf, the mean of an empty tensor) are not failures."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return reference(m, feeds)


def _edge_array(shape, seed, dtype=np.float32, count=None):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    if x.size:
        flat = x.reshape(-1)
        pick = rng.choice(flat.size, size=count or max(1, flat.size // 50), replace=False)
        flat[pick] = rng.choice(EDGE, size=pick.size).astype(dtype)
    return x


REDUCE_SHAPES = [((4, 7, 5), [1]), ((3, 9, 16), [1]), ((2, 5, 37), [1]), ((2, 33, 48), [1]), ((1, 1, 17), [1]),
                 ((6, 3, 18), [0]), ((5, 40), [0]), ((3, 4, 5, 19), [1, 2]), ((2, 6, 33), [2]), ((0, 5, 7), [1]),
                 ((3, 1, 16), [1]), ((2, 8, 3), [0, 1])]


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("shape,axes", REDUCE_SHAPES)
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("edges", [False, True])
def test_reduce_extremum_middle_axes(session, op, shape, axes, keepdims, edges):
    x = _edge_array(shape, seed=6) if edges else (np.random.default_rng(6).standard_normal(shape)).astype(np.float32)
    m = _reduce_model(op, x, axes, keepdims)
    want = _want(m, [x])
    assert_close(run_once(session, m, [x]), want, rtol=0, atol=0)


def test_reduce_extremum_nan_in_a_column_wins_whatever_follows(session):
    x = np.full((2, 9, 20), -1.0, np.float32)
    x[0, 3, 4] = np.nan
    x[0, 5, 4] = np.inf
    x[1, 0, 17] = np.nan
    x[1, 2, 19] = -np.inf
    x[1, 8, 0] = np.nan
    for op in ("ReduceMax", "ReduceMin"):
        m = _reduce_model(op, x, [1], 0)
        got = run_once(session, m, [x])[0]
        assert np.isnan(got[0, 4]) and np.isnan(got[1, 17]) and np.isnan(got[1, 0])
        assert np.isnan(got).sum() == 3
        assert_close([got], _want(m, [x]), rtol=0, atol=0)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("shape,axes", [((3, 11, 32), [1]), ((2, 9, 64), [1]), ((2, 7, 8), [1]), ((2, 13, 56), [1]),
                                        ((3, 4, 6, 40), [0, 2]), ((2, 5, 3, 32), [0, 2])])
def test_reduce_extremum_columns_nan_and_infinities(session, op, shape, axes):
    """Middle-axis Max / Min folded with a bare max / min and redone exactly for blocks holding a NaN: NaNs in
    the first, a middle and the last row and in each column block (also in an earlier pass over the same
    outputs, the [0, 2] cases), infinities of both signs in a column without NaN, signed zeros."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal(shape).astype(np.float32)
    r = x.reshape(-1, shape[-1])
    n, w = r.shape
    r[0, 1] = np.nan
    r[n // 2, w // 2] = np.nan
    r[n - 1, w - 1] = np.nan
    r[n // 3, w // 2] = np.nan  # a second NaN in a column may come first
    r[:, 2] = np.where(np.arange(n) % 2, np.inf, -np.inf)
    r[:, 3] = np.where(np.arange(n) % 3, 0.0, -0.0)
    r[:, 5] = np.inf
    r[1, 6] = -np.inf
    m = _reduce_model(op, x, axes, 1)
    got = run_once(session, m, [x])[0]
    want = _want(m, [x])[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert_close([got], [want], rtol=0, atol=0)


@pytest.mark.parametrize("op", ["ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceSum", "ReduceMean"])
@pytest.mark.parametrize("shape", [(1,), (7,), (16,), (33,), (1000,), (3, 5, 67), (0,)])
@pytest.mark.parametrize("edges", [False, True])
def test_reduce_sums_of_terms_over_everything(session, op, shape, edges):
    x = _edge_array(shape, seed=7) if edges else np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    if edges and op in ("ReduceL2", "ReduceSumSquare"):
        x[np.abs(x) > 1e3] = np.copysign(np.inf, x[np.abs(x) > 1e3])  # 1e30**2 overflows the reference's float32
    m = _reduce_model(op, x, None, 0)
    want = _want(m, [x])
    assert_close(run_once(session, m, [x]), want, rtol=1e-5, atol=1e-5)


# ---- Hardmax (last axis: vectorised maximum, first NaN wins like the reference's argmax), CumSum and Softmax
# over a middle axis ----

def _one_model(op, x, opset=18, extra=(), **attrs):
    inputs = [value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), list(x.shape))]
    inits = [helper.make_tensor(n, 7, [], [v]) for n, v in extra]
    node = helper.make_node(op, ["x"] + [n for n, _ in extra], ["y"], **attrs)
    return graph_model([node], inputs, [value_info("y", helper.np_dtype_to_tensor_dtype(x.dtype))], opset=opset,
                       initializers=inits)


@pytest.mark.parametrize("shape,axis", [((5, 7), -1), ((3, 4, 33), -1), ((2, 64), -1), ((4, 1), -1), ((6, 9, 5), 1),
                                        ((3, 5, 17), 0), ((0, 8), -1), ((4, 300), -1)])
@pytest.mark.parametrize("edges", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_hardmax(session, shape, axis, edges, dtype):
    rng = np.random.default_rng(8)
    x = _edge_array(shape, seed=8, dtype=dtype) if edges else rng.standard_normal(shape).astype(dtype)
    m = _one_model("Hardmax", x, axis=axis)
    assert_close(run_once(session, m, [x]), _want(m, [x]), rtol=0, atol=0)


def test_hardmax_ties_nan_and_zeros(session):
    x = np.array([[1, 3, 3, 2], [0, np.nan, 5, np.nan], [-0.0, 0.0, -1, -2], [np.nan, 1, 2, 3], [-np.inf] * 4,
                  [2, 2, 2, np.inf]], np.float32)
    x = np.concatenate([x, np.zeros((6, 40), np.float32) - 5], axis=1)
    m = _one_model("Hardmax", x, axis=-1)
    got = run_once(session, m, [x])[0]
    assert got.argmax(axis=1).tolist() == [1, 1, 0, 0, 4, 3]
    assert_close([got], _want(m, [x]), rtol=0, atol=0)


@pytest.mark.parametrize("n", [8, 9, 15, 16, 31, 32, 33, 40, 63, 64, 65, 100])
def test_hardmax_rows_every_position(session, n):
    """float32 rows on the vectorised path: the maximum at every position, tied with a later copy (the first
    wins), rows with one or two NaNs (the first wins), signed-zero and all -inf rows."""
    rng = np.random.default_rng(n)
    x = rng.uniform(-5, 5, (n + 5, n)).astype(np.float32)
    want = []
    for i in range(n):
        x[i, i] = 7.0
        if i + 3 < n:
            x[i, i + 3] = 7.0
        want.append(i)
    x[n, :] = -np.inf
    x[n + 1, :] = 0.0
    x[n + 1, n // 2] = -0.0
    x[n + 1, 1:] = np.minimum(x[n + 1, 1:], -0.0)
    x[n + 2, n - 1] = np.nan
    x[n + 3, [n // 3, n - 2]] = np.nan
    x[n + 4, 0] = np.nan
    m = _one_model("Hardmax", x, axis=-1)
    got = run_once(session, m, [x])[0]
    assert got.sum(axis=1).tolist() == [1.0] * (n + 5)
    assert got.argmax(axis=1).tolist() == want + [0, 0, n - 1, n // 3, 0]
    assert_close([got], _want(m, [x]), rtol=0, atol=0)


@pytest.mark.parametrize("shape,axis", [((3, 7, 5), 1), ((2, 9, 16), 1), ((2, 5, 37), 1), ((2, 6, 51), 1),
                                        ((4, 33, 3), 0), ((1, 1, 20), 1), ((3, 0, 5), 1), ((5, 4), 1)])
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("edges", [False, True])
def test_cumsum_axes(session, shape, axis, exclusive, reverse, edges):
    x = _edge_array(shape, seed=9) if edges else np.random.default_rng(9).standard_normal(shape).astype(np.float32)
    if edges:  # keeps the sums finite (tests/test_ops_axes.py checks the bits with large values too)
        x[np.abs(x) > 1e3] = np.copysign(np.inf, x[np.abs(x) > 1e3])
    m = _one_model("CumSum", x, extra=[("axis", axis)], exclusive=exclusive, reverse=reverse)
    assert_close(run_once(session, m, [x]), _want(m, [x]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape,axis", [((3, 7, 5), 1), ((2, 9, 16), 1), ((2, 5, 37), 1), ((4, 3, 2, 9), 1),
                                        ((5, 6), 0), ((2, 1, 19), 1), ((3, 8, 3), 1), ((2, 6, 15), 1),
                                        ((2, 4, 17), 1), ((2, 5, 64), 1), ((2, 3, 1000), 1), ((1, 5, 130), 1),
                                        ((3, 6, 65), 1), ((7, 3, 4, 2), 0), ((2, 3, 5, 1), 1)])
@pytest.mark.parametrize("edges", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_middle_axes(session, op, shape, axis, edges, dtype):
    rng = np.random.default_rng(10)
    x = _edge_array(shape, seed=10, dtype=dtype) if edges else (rng.standard_normal(shape) * 4).astype(dtype)
    if edges and op == "LogSoftmax":  # the reference's log(softmax) is -inf where x - logsumexp is a finite -1e30
        x[np.abs(x) > 1e3] = np.copysign(60, x[np.abs(x) > 1e3])
    m = _one_model(op, x, axis=axis)
    assert_close(run_once(session, m, [x]), _want(m, [x]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("inner", [1, 3, 16, 17, 70])
def test_softmax_middle_axis_edge_columns(session, op, inner):
    """Whole columns of edge values (each column's softmax is independent of its neighbours in the lanes):
    NaN anywhere, +inf, all -inf, signed zeros, denormals, huge spreads, one finite among -inf."""
    rng = np.random.default_rng(12)
    n = 9
    x = (rng.standard_normal((2, n, inner)) * 5).astype(np.float32)
    cols = [(3, np.nan), (0, np.inf), (n - 1, -np.inf), (4, 1e30), (2, -1e30), (5, 1e-40), (6, -0.0), (7, 88.0)]
    for j in range(inner):
        k, v = cols[j % len(cols)]
        x[j % 2, k, j] = v
    if inner > 8:
        x[1, :, 8] = -np.inf
        x[0, :, 8] = -np.inf
        x[0, 6, 8] = 2.5
        x[1, :, 1] = np.float32(1e-41) * np.arange(n)
        x[0, :, 2] = -0.0
    m = _one_model(op, x, axis=1)
    got = run_once(session, m, [x])
    want = _want(m, [x])
    if op == "LogSoftmax":  # the reference takes log(softmax): -inf or few bits where softmax is (sub)denormal
        with np.errstate(all="ignore"):
            x64 = x.astype(np.float64)
            shifted = x64 - x64.max(axis=1, keepdims=True)
            want = [(shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))).astype(np.float32)]
    np.testing.assert_array_equal(np.isnan(got[0]), np.isnan(want[0]))
    assert_close(got, want, rtol=1e-5, atol=1e-6)
