"""Control flow on the twin: If, Loop, Scan (graph-valued attributes, outer-scope values, value-dependent shapes).

Each result is compared with onnx.reference on the same inputs, through geasync's public API; malformed subgraphs
must be refused at add_graph with a GeError naming the node and the problem.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import numpy as np
import pytest

import geasync as ga

import onnx  # noqa: E402  (a test dependency)
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnx_cases import check_against_reference, graph_model  # noqa: E402
from onnx_cases import refused as _refused  # noqa: E402
from onnx_cases import run_once as _run  # noqa: E402
from onnx_cases import value_info as _vi  # noqa: E402

F = TensorProto.FLOAT
I64 = TensorProto.INT64
B = TensorProto.BOOL


@pytest.fixture(scope="module")
def session():
    with ga.Session() as s:
        yield s


def _model(nodes, inputs, outputs, opset=17, initializers=()):
    return graph_model(nodes, inputs, outputs, opset=opset, initializers=initializers)


def _check(session, model, feeds):
    return check_against_reference(session, model, feeds, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------------------------
# If


def _if_model(then_shape=(3,), else_shape=(3,)):
    """y = If(sum(x) > 0): x * w (outer-scope x and w) else a Constant of else_shape."""
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["t"]),
                                helper.make_node("Reshape", ["t", "then_shape"], ["t_out"])],
                               "then", [], [_vi("t_out")],
                               initializer=[onnx.numpy_helper.from_array(np.array(then_shape, np.int64),
                                                                          "then_shape")])
    else_g = helper.make_graph([helper.make_node("Constant", [], ["e_out"], value=onnx.numpy_helper.from_array(
        np.arange(np.prod(else_shape), dtype=np.float32).reshape(else_shape)))], "else", [], [_vi("e_out")])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Constant", [], ["zero"], value=onnx.numpy_helper.from_array(np.float32(0))),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    return _model(nodes, [_vi("x", F, [3])], [_vi("y")],
                  initializers=[onnx.numpy_helper.from_array(np.array([2, 3, 4], np.float32), "w")])


def test_if_branch_follows_the_input(session):
    m = _if_model()
    pos = _check(session, m, [np.array([1, 2, 3], np.float32)])[0]
    neg = _check(session, m, [np.array([-1, -2, -3], np.float32)])[0]
    np.testing.assert_array_equal(pos, [2, 6, 12])
    np.testing.assert_array_equal(neg, [0, 1, 2])


def test_if_branches_of_different_shapes(session):
    m = _if_model(then_shape=(3, 1), else_shape=(2, 2))
    assert _check(session, m, [np.array([1, 2, 3], np.float32)])[0].shape == (3, 1)
    assert _check(session, m, [np.array([-1, 0, 0], np.float32)])[0].shape == (2, 2)


def test_nested_if(session):
    inner = helper.make_node("If", ["c2"], ["z"],
                             then_branch=helper.make_graph([helper.make_node("Neg", ["x"], ["a"])], "t2", [],
                                                           [_vi("a")]),
                             else_branch=helper.make_graph([helper.make_node("Abs", ["x"], ["b"])], "e2", [],
                                                           [_vi("b")]))
    outer = helper.make_node("If", ["c1"], ["y"],
                             then_branch=helper.make_graph([inner], "t1", [], [_vi("z")]),
                             else_branch=helper.make_graph([helper.make_node("Identity", ["x"], ["w"])], "e1", [],
                                                           [_vi("w")]))
    m = _model([outer], [_vi("c1", B, []), _vi("c2", B, []), _vi("x", F, [4])], [_vi("y", F, [4])])
    x = np.array([-1, 2, -3, 4], np.float32)
    for c1, c2 in itertools.product([True, False], repeat=2):
        _check(session, m, [np.array(c1), np.array(c2), x])


# ---------------------------------------------------------------------------------------------------------------
# Loop


def _loop_model(with_scan=True, cond_from_body=False):
    """Loop(M, cond, acc): acc += x * i each iteration (outer-scope x); optionally stops once acc[0] > limit."""
    body_nodes = [helper.make_node("Cast", ["i"], ["fi"], to=F),
                  helper.make_node("Mul", ["x", "fi"], ["xi"]),
                  helper.make_node("Add", ["acc_in", "xi"], ["acc_out"])]
    if cond_from_body:
        body_nodes += [helper.make_node("ReduceMax", ["acc_out"], ["mx"], keepdims=0),
                       helper.make_node("Less", ["mx", "limit"], ["cond_out"])]
    else:
        body_nodes.append(helper.make_node("Identity", ["cond_in"], ["cond_out"]))
    outs = [_vi("cond_out", B, []), _vi("acc_out", F, [2])]
    if with_scan:
        body_nodes.append(helper.make_node("Identity", ["acc_out"], ["step"]))
        outs.append(_vi("step", F, [2]))
    body = helper.make_graph(body_nodes, "body", [_vi("i", I64, []), _vi("cond_in", B, []), _vi("acc_in", F, [2])],
                             outs)
    node = helper.make_node("Loop", ["M", "cond", "acc0"], ["acc"] + (["steps"] if with_scan else []), body=body)
    inputs = [_vi("M", I64, []), _vi("cond", B, []), _vi("acc0", F, [2]), _vi("x", F, [2]), _vi("limit", F, [])]
    return _model([node], inputs, [_vi("acc")] + ([_vi("steps")] if with_scan else []))


@pytest.mark.parametrize("trips", [0, 1, 5])
def test_loop_trip_count_from_input(session, trips):
    m = _loop_model()
    feeds = [np.array(trips, np.int64), np.array(True), np.array([1, -1], np.float32),
             np.array([0.5, 2], np.float32), np.array(100, np.float32)]
    if trips == 0:  # the reference cannot stack zero scan outputs: the result is the initial value, no rows
        acc, steps = _run(session, m, feeds)
        np.testing.assert_array_equal(acc, feeds[2])
    else:
        acc, steps = _check(session, m, feeds)
    assert steps.shape == (trips, 2) and steps.dtype == np.float32


def test_loop_stopped_by_its_body(session):
    m = _loop_model(cond_from_body=True)
    for limit in (3.0, 20.0):
        feeds = [np.array(50, np.int64), np.array(True), np.zeros(2, np.float32), np.array([1, 0.5], np.float32),
                 np.array(limit, np.float32)]
        _check(session, m, feeds)


def test_loop_without_scan_outputs(session):
    m = _loop_model(with_scan=False)
    feeds = [np.array(4, np.int64), np.array(True), np.array([1, 2], np.float32), np.array([1, 1], np.float32),
             np.array(0, np.float32)]
    _check(session, m, feeds)


def test_loop_growing_state(session):
    """A loop-carried value that grows each iteration (Concat): its final shape depends on the trip count."""
    body = helper.make_graph([helper.make_node("Identity", ["c_in"], ["c_out"]),
                              helper.make_node("Cast", ["i"], ["fi"], to=F),
                              helper.make_node("Unsqueeze", ["fi", "ax"], ["fi1"]),
                              helper.make_node("Concat", ["v_in", "fi1"], ["v_out"], axis=0)],
                             "body", [_vi("i", I64, []), _vi("c_in", B, []), _vi("v_in", F, None)],
                             [_vi("c_out", B, []), _vi("v_out", F, None)],
                             initializer=[onnx.numpy_helper.from_array(np.array([0], np.int64), "ax")])
    m = _model([helper.make_node("Loop", ["M", "", "v0"], ["v"], body=body)],
               [_vi("M", I64, []), _vi("v0", F, [1])], [_vi("v")])
    # Not compared with onnx.reference: it runs no iteration when the optional 'cond' is omitted (ONNX: true).
    got = _run(session, m, [np.array(4, np.int64), np.array([9], np.float32)])[0]
    np.testing.assert_array_equal(got, np.array([9, 0, 1, 2, 3], np.float32))


# ---------------------------------------------------------------------------------------------------------------
# Scan


def _scan_expected(s0, xs, k, in_axis, in_dir, out_axis, out_dir):
    """numpy Scan (onnx.reference implements directions 0 only): s += x_t; y_t = s * k."""
    steps = np.moveaxis(xs, in_axis, 0)
    if in_dir:
        steps = steps[::-1]
    s, ys = s0.copy(), []
    for x in steps:
        s = s + x
        ys.append(s * k)
    if out_dir:
        ys = ys[::-1]
    return s, np.stack(ys, axis=out_axis)


@pytest.mark.parametrize("in_axis,in_dir,out_axis,out_dir", [(0, 0, 0, 0), (1, 1, 1, 0), (-1, 0, -1, 1)])
def test_scan_axes_and_directions(session, in_axis, in_dir, out_axis, out_dir):
    body = helper.make_graph([helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
                              helper.make_node("Mul", ["s_out", "k"], ["y_t"])],
                             "body", [_vi("s_in", F, [3]), _vi("x_t", F, [3])],
                             [_vi("s_out", F, [3]), _vi("y_t", F, [3])])
    node = helper.make_node("Scan", ["s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=1,
                            scan_input_axes=[in_axis], scan_input_directions=[in_dir],
                            scan_output_axes=[out_axis], scan_output_directions=[out_dir])
    xs_shape = [4, 3] if in_axis == 0 else [3, 4]
    m = _model([node], [_vi("s0", F, [3]), _vi("xs", F, xs_shape), _vi("k", F, [])], [_vi("s"), _vi("ys")])
    rng = np.random.default_rng(7)
    feeds = [rng.standard_normal(3).astype(np.float32), rng.standard_normal(xs_shape).astype(np.float32),
             np.array(0.5, np.float32)]
    if in_dir == 0 and out_dir == 0:
        _check(session, m, feeds)
    for got, want in zip(_run(session, m, feeds), _scan_expected(*feeds, in_axis, in_dir, out_axis, out_dir),
                         strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------------------------
# Refusals at add_graph


def test_if_missing_branch_refused(session):
    node = helper.make_node("If", ["c"], ["y"],
                            then_branch=helper.make_graph([helper.make_node("Identity", ["x"], ["a"])], "t", [],
                                                          [_vi("a")]))
    _refused(session, _model([node], [_vi("c", B, []), _vi("x", F, [2])], [_vi("y")]),
             r"op If\): graph attribute 'else_branch' is required")


def test_if_branch_output_count_mismatch_refused(session):
    t = helper.make_graph([helper.make_node("Identity", ["x"], ["a"])], "t", [], [_vi("a")])
    e = helper.make_graph([helper.make_node("Identity", ["x"], ["b"]), helper.make_node("Neg", ["x"], ["b2"])],
                          "e", [], [_vi("b"), _vi("b2")])
    node = helper.make_node("If", ["c"], ["y"], then_branch=t, else_branch=e)
    _refused(session, _model([node], [_vi("c", B, []), _vi("x", F, [2])], [_vi("y")]),
             r"op If\): subgraph 'else_branch' has 2 outputs, the node 1")


def test_subgraph_unknown_name_refused(session):
    t = helper.make_graph([helper.make_node("Identity", ["nowhere"], ["a"])], "t", [], [_vi("a")])
    e = helper.make_graph([helper.make_node("Identity", ["x"], ["b"])], "e", [], [_vi("b")])
    node = helper.make_node("If", ["c"], ["y"], then_branch=t, else_branch=e, name="the_if")
    _refused(session, _model([node], [_vi("c", B, []), _vi("x", F, [2])], [_vi("y")]),
             r"node 'the_if' \(op If\): its subgraphs read 'nowhere', which is not produced")


def test_subgraph_unsupported_op_refused(session):
    t = helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["a"], name="bad")], "t", [], [_vi("a")])
    e = helper.make_graph([helper.make_node("Identity", ["x"], ["b"])], "e", [], [_vi("b")])
    node = helper.make_node("If", ["c"], ["y"], then_branch=t, else_branch=e, name="the_if")
    _refused(session, _model([node], [_vi("c", B, []), _vi("x", F, [2])], [_vi("y")]),
             r"node 'the_if' \(op If\): subgraph 'then_branch': node 'bad' \(op NoSuchOp\): operator not supported")


def test_loop_body_arity_refused(session):
    body = helper.make_graph([helper.make_node("Identity", ["c_in"], ["c_out"])], "body",
                             [_vi("i", I64, []), _vi("c_in", B, [])], [_vi("c_out", B, [])])
    node = helper.make_node("Loop", ["M", "", "v0"], ["v"], body=body)
    _refused(session, _model([node], [_vi("M", I64, []), _vi("v0", F, [1])], [_vi("v")]),
             r"op Loop\): subgraph 'body' must have 3 inputs and 2 outputs")


def test_loop_without_end_refused(session):
    body = helper.make_graph([helper.make_node("Identity", ["c_in"], ["c_out"]),
                              helper.make_node("Identity", ["v_in"], ["v_out"])], "body",
                             [_vi("i", I64, []), _vi("c_in", B, []), _vi("v_in", F, [1])],
                             [_vi("c_out", B, []), _vi("v_out", F, [1])])
    node = helper.make_node("Loop", ["", "", "v0"], ["v"], body=body)
    m = _model([node], [_vi("v0", F, [1])], [_vi("v")])
    with pytest.raises(ga.GeError, match=r"op Loop\): the loop never ends"):  # found by shape inference (first run)
        _run(session, m, [np.zeros(1, np.float32)])


_ENDLESS_LOOP = """
import sys, time
import anyio
import numpy as np
import geasync as ga
from onnx import TensorProto, helper

def vi(name, t, shape):
    return helper.make_tensor_value_info(name, t, shape)

# no trip count, and a condition the body recomputes (Or(c, c)): always true, but not a pass-through that shape
# inference could refuse
body = helper.make_graph(
    [helper.make_node("Or", ["c_in", "c_in"], ["c_out"]), helper.make_node("Add", ["v_in", "v_in"], ["v_out"])],
    "body", [vi("i", TensorProto.INT64, []), vi("c_in", TensorProto.BOOL, []), vi("v_in", TensorProto.FLOAT, [1])],
    [vi("c_out", TensorProto.BOOL, []), vi("v_out", TensorProto.FLOAT, [1])])
loop = helper.make_node("Loop", ["", "cond", "v0"], ["v"], body=body)
graph = helper.make_graph([loop], "endless", [vi("cond", TensorProto.BOOL, []), vi("v0", TensorProto.FLOAT, [1])],
                          [vi("v", TensorProto.FLOAT, [1])])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

async def main():
    session = ga.Session()
    session.add_graph(1, ga.Graph.from_onnx(model))
    outcome = []

    async def run():
        try:
            await session.run_graph_async(1, [np.array(True), np.zeros(1, np.float32)])
            outcome.append("returned")
        except ga.GeError as e:
            outcome.append(f"{type(e).__name__}: {e}")

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await anyio.sleep(0.5)
        assert not outcome, outcome  # still looping
        t0 = time.monotonic()
        session.close()
        print(f"closed in {time.monotonic() - t0:.3f} s")
    print("run:", outcome[0])

backend = sys.argv[1]
anyio.run(main, backend=backend, backend_options={"use_uvloop": True} if len(sys.argv) > 2 else {})
"""


@pytest.mark.parametrize("backend", [("asyncio",), ("asyncio", "uvloop"), ("trio",)], ids=["asyncio", "uvloop", "trio"])
def test_endless_loop_does_not_hold_up_close(backend):
    """A Loop that never ends runs on (as in GE), but closing its session stops it between iterations."""
    p = subprocess.run([sys.executable, "-c", _ENDLESS_LOOP, *backend], capture_output=True, text=True, timeout=120,
                       cwd=os.path.dirname(os.path.abspath(__file__)))
    assert p.returncode == 0, p.stderr[-2000:]
    assert "closed in" in p.stdout, p.stdout
    run = p.stdout.split("run: ", 1)[1]
    assert "(op Loop): stopped after" in run and "the session is shutting down" in run, run


def _nested_if(depth):
    """If nodes nested `depth` deep in their then_branch (else_branch: Identity of x)."""
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y0"])], "leaf", [], [_vi("y0")])
    for d in range(1, depth + 1):
        other = helper.make_graph([helper.make_node("Identity", ["x"], [f"e{d}"])], f"e{d}", [], [_vi(f"e{d}")])
        node = helper.make_node("If", ["c"], [f"y{d}"], then_branch=graph, else_branch=other)
        graph = helper.make_graph([node], f"g{d}", [], [_vi(f"y{d}")])
    g = helper.make_graph(list(graph.node), "top", [_vi("c", B, []), _vi("x", F, [2])], [_vi(f"y{depth}")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_nesting_depth(session):
    m = _nested_if(6)
    x = np.array([1, 2], np.float32)
    np.testing.assert_array_equal(_run(session, m, [np.array(True), x])[0], x)
    _refused(session, _nested_if(20), r"nests subgraphs .* more than 16 levels deep")


_HOSTILE_NESTING = """
import geasync as ga
from onnx import helper, TensorProto
# 100,000 nested If nodes, encoded by hand, outermost prefix last (onnx's serialiser recurses too deeply).
leaf = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "leaf", [],
                         [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]).SerializeToString()
def header(num, n):
    out = bytearray()
    for v in ((num << 3) | 2, n):
        while v >= 0x80:
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        out.append(v)
    return bytes(out)
node_fields = header(1, 1) + b"c" + header(2, 1) + b"y" + header(4, 2) + b"If"
attr_fields = header(1, 11) + b"then_branch" + bytes([0xa0, 0x01, 0x05])
size, parts = len(leaf), []
for _ in range(100000):
    attr = attr_fields + header(6, size)
    node = node_fields + header(5, len(attr) + size) + attr
    part = header(1, len(node) + size) + node
    size += len(part)
    parts.append(part)
opset = header(1, 0) + bytes([0x10, 17])
model = bytes([0x08, 0x08]) + header(8, len(opset)) + opset + header(7, size) + b"".join(reversed(parts)) + leaf
with ga.Session() as s:
    try:
        s.add_graph(1, ga.Graph.from_onnx(model))
    except ga.GeError as e:
        print("refused:", str(e)[:300])
"""


def test_hostile_nesting_refused_without_crash():
    p = subprocess.run([sys.executable, "-c", _HOSTILE_NESTING], capture_output=True, text=True, timeout=120,
                       cwd=os.path.dirname(os.path.abspath(__file__)))
    assert p.returncode == 0, p.stderr[-2000:]
    assert "refused:" in p.stdout and "levels deep" in p.stdout, p.stdout


# ---------------------------------------------------------------------------------------------------------------
# Small operators of ops_misc2.cc (windows, NonZero, Compress, ReverseSequence) against onnx.reference


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.DOUBLE])
def test_windows_random_sizes(session, op, periodic, dtype):
    m = _model([helper.make_node(op, ["n"], ["w"], periodic=periodic, output_datatype=dtype)],
               [_vi("n", I64, [])], [_vi("w", dtype)])
    for n in (0, 1, 2, 7, 64) if periodic else (0, 2, 7, 64):  # the size is a graph input: specialised on it
        got = _run(session, m, [np.array(n, np.int64)])[0]
        want = ReferenceEvaluator(m).run(None, {"n": np.array(n, np.int64)})[0]
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_, np.float16])
def test_nonzero_random_and_edges(session, dtype):
    rng = np.random.default_rng(3)
    m = _model([helper.make_node("NonZero", ["x"], ["y"])],
               [_vi("x", onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), None)], [_vi("y", I64)])
    xs = [(rng.random((3, 4, 5)) < 0.3).astype(dtype), np.zeros((2, 3), dtype), np.ones((0, 4), dtype)]
    if np.issubdtype(dtype, np.floating):
        xs.append(np.array([0, np.nan, -0.0, np.inf], dtype))
    for x in xs:
        got = _run(session, m, [x])[0]
        np.testing.assert_array_equal(got, np.array(np.nonzero(x), np.int64).reshape(x.ndim, -1))


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_compress_random(session, axis):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    attrs = {} if axis is None else {"axis": axis}
    m = _model([helper.make_node("Compress", ["x", "c"], ["y"], **attrs)], [_vi("x", F, [4, 5]), _vi("c", B, None)],
               [_vi("y", F)])
    for n in (0, 3, 4):  # a condition shorter than the axis keeps only its own length
        _check(session, m, [x, rng.random(n) < 0.5])


@pytest.mark.parametrize("batch_axis,time_axis", [(0, 1), (1, 0)])
def test_reverse_sequence_random(session, batch_axis, time_axis):
    rng = np.random.default_rng(5)
    shape = [3, 4, 2] if batch_axis == 0 else [4, 3, 2]
    m = _model([helper.make_node("ReverseSequence", ["x", "lens"], ["y"], batch_axis=batch_axis, time_axis=time_axis)],
               [_vi("x", F, shape), _vi("lens", I64, [3])], [_vi("y", F)])
    _check(session, m, [rng.standard_normal(shape).astype(np.float32), np.array([4, 0, 2], np.int64)])
    with pytest.raises(ga.GeError, match=r"sequence_lens\[0\] = 9 is outside"):
        _run(session, m, [np.zeros(shape, np.float32), np.array([9, 1, 1], np.int64)])


@pytest.mark.parametrize("axes", [None, [0, 2], [-1]])
def test_center_crop_pad_random(session, axes):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((5, 4, 6)).astype(np.float32)
    attrs = {} if axes is None else {"axes": axes}
    m = _model([helper.make_node("CenterCropPad", ["x", "shape"], ["y"], **attrs)],
               [_vi("x", F, [5, 4, 6]), _vi("shape", I64, None)], [_vi("y", F)], opset=18)
    n = 3 if axes is None else len(axes)
    for target in ([3, 7, 6, 0, 9][:n], [8, 1, 5][:n], [5, 4, 6][:n]):  # crop, pad, both, unchanged, empty
        _check(session, m, [x, np.array(target, np.int64)])


def test_check_lists_unsupported_nodes_inside_subgraphs():
    from geasync import _check

    t = helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["a"], name="bad_then")], "t", [], [_vi("a")])
    e = helper.make_graph([helper.make_node("OtherOp", ["x"], ["b"], name="bad_else")], "e", [], [_vi("b")])
    node = helper.make_node("If", ["c"], ["y"], then_branch=t, else_branch=e, name="the_if")
    r = _check.check_model(_model([node], [_vi("c", B, []), _vi("x", F, [2])], [_vi("y")]))
    assert not r.runs_on_twin and len(r.problems) == 2, r.problems
    text = "\n".join(r.problems)
    assert "node 'the_if' (op If): subgraph 'then_branch': node 'bad_then' (op NoSuchOp)" in text
    assert "node 'the_if' (op If): subgraph 'else_branch': node 'bad_else' (op OtherOp)" in text
    good = _check.check_model(_if_model())
    assert good.runs_on_twin and good.problems == (), good.problems


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (5, 1, 1), (2, 0, 0), (0, 2, 2)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_det_random(session, shape, dtype):
    rng = np.random.default_rng(8)
    t = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    m = _model([helper.make_node("Det", ["x"], ["y"])], [_vi("x", t, list(shape))], [_vi("y", t)])
    x = rng.standard_normal(shape).astype(dtype)
    if shape == (3, 3):
        x[2] = x[0] + x[1]  # singular
    got = _run(session, m, [x])[0]
    want = np.linalg.det(x).astype(dtype) if x.size else np.ones(shape[:-2], dtype)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
