"""Bad inputs give a clear exception naming the problem: never a crash, a hang or a silent wrong answer."""

from __future__ import annotations

import numpy as np
import pytest

import geasync as ga
from conftest import TensorProto, add_model, helper, make_mlp, make_model

F = TensorProto.FLOAT
pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def add_session():
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(add_model((3, 4))))
        yield s


def ok(shape=(3, 4), dtype=np.float32):
    return np.arange(np.prod(shape), dtype=np.float64).reshape(shape).astype(dtype)


def assert_still_usable(s, gid=1):
    (c,) = s.run_graph(gid, [ok(), ok()])
    np.testing.assert_array_equal(c.numpy(), 2 * ok())


# --- run-time input mismatches -------------------------------------------------------------------

@pytest.mark.parametrize("count", [0, 1, 3])
def test_wrong_input_count(add_session, count):
    with pytest.raises(ga.GeError) as ei:
        add_session.run_graph(1, [ok()] * count)
    msg = ei.value.error_message
    assert "expects 2 input" in msg and f"got {count}" in msg
    assert_still_usable(add_session)


def test_wrong_input_count_stream_mode():
    with ga.Session() as s, ga.Stream() as st:
        s.add_graph(1, ga.Graph.from_onnx(add_model((3, 4))))
        with pytest.raises(ga.GeError) as ei:
            s.run_graph_with_stream_async(1, st, [ok()])
        assert "expects 2 input" in ei.value.error_message and "got 1" in ei.value.error_message


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int64, np.float16, np.bool_])
def test_wrong_dtype(add_session, dtype):
    with pytest.raises(ga.GeError) as ei:
        add_session.run_graph(1, [ok(dtype=dtype), ok()])
    msg = ei.value.error_message
    assert "dtype" in msg and np.dtype(dtype).name in msg and "float32" in msg
    assert "input 0" in msg
    assert_still_usable(add_session)


def test_wrong_dtype_second_input_named(add_session):
    with pytest.raises(ga.GeError) as ei:
        add_session.run_graph(1, [ok(), ok(dtype=np.float64)])
    assert "input 1" in ei.value.error_message and "'b'" in ei.value.error_message


@pytest.mark.parametrize("shape", [(4, 3), (3,), (1, 3, 4), (3, 5), (12,)])
def test_wrong_shape(add_session, shape):
    with pytest.raises(ga.GeError) as ei:
        add_session.run_graph(1, [np.zeros(shape, np.float32), ok()])
    msg = ei.value.error_message
    assert "shape" in msg and str(list(shape)) in msg
    assert_still_usable(add_session)


def test_wrong_feature_dim_dynamic_batch():
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(make_mlp()))
        with pytest.raises(ga.GeError) as ei:
            s.run_graph(1, [np.zeros((2, 783), np.float32)])
        assert "783" in ei.value.error_message and "784" in ei.value.error_message
        (y,) = s.run_graph(1, [np.zeros((2, 784), np.float32)])
        assert y.shape == (2, 10)


def test_runtime_shape_mismatch_between_inputs_names_node():
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["y"], name="the_mm")],
                       [("a", F, ["M", "K"]), ("b", F, ["K2", "N"])], [("y", F, ["M", "N"])])
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        with pytest.raises(ga.GeError) as ei:
            s.run_graph(1, [np.ones((2, 3), np.float32), np.ones((4, 5), np.float32)])
        assert "the_mm" in ei.value.error_message and "MatMul" in ei.value.error_message


def test_unbroadcastable_shapes_names_node():
    model = make_model([helper.make_node("Add", ["a", "b"], ["y"], name="the_add")],
                       [("a", F, ["A"]), ("b", F, ["B"])], [("y", F, ["C"])])
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        with pytest.raises(ga.GeError) as ei:
            s.run_graph(1, [np.ones(3, np.float32), np.ones(4, np.float32)])
        assert "the_add" in ei.value.error_message and "broadcast" in ei.value.error_message


@pytest.mark.parametrize("gid", [0, 2, 99, 2**32 - 1])
def test_unknown_graph_id(add_session, gid):
    with pytest.raises(ga.GeError) as ei:
        add_session.run_graph(gid, [ok(), ok()])
    assert f"graph_id={gid}" in ei.value.error_message and "not exist" in ei.value.error_message


@pytest.mark.parametrize("gid", [-1, 2**32])
def test_graph_id_out_of_uint32_range(add_session, gid):
    with pytest.raises(ValueError, match="graph_id"):
        add_session.run_graph(gid, [ok(), ok()])
    with pytest.raises(ValueError, match="graph_id"):
        add_session.add_graph(gid, ga.Graph.from_onnx(add_model()))


# --- bad models at add_graph ---------------------------------------------------------------------

def _model_bytes():
    return add_model().SerializeToString()


@pytest.mark.parametrize("data,needle", [
    (np.random.default_rng(0).bytes(300), "corrupt"),
    (np.random.default_rng(1).bytes(4096), "corrupt"),
    (_model_bytes()[: len(_model_bytes()) // 2], "corrupt"),
    (_model_bytes()[:-3], "corrupt"),
    (b"", "empty"),
    (b"\x00" * 10, "corrupt"),
    (b"this is not an onnx model", "corrupt"),
], ids=["random300", "random4k", "truncated_half", "truncated_tail", "empty", "zeros", "text"])
def test_corrupt_onnx_bytes(data, needle):
    with ga.Session() as s:
        with pytest.raises(ga.GeError) as ei:
            s.add_graph(1, ga.Graph.from_onnx(data))
        assert needle in ei.value.error_message.lower()
        assert "add_graph" in ei.value.context
        # the failed id is free: a good graph can be added under it
        s.add_graph(1, ga.Graph.from_onnx(add_model((3, 4))))
        assert_still_usable(s)


@pytest.mark.parametrize("op,node_name", [("ImageDecoder", "dec"), ("FrobnicateOp", "frob_1"),
                                          ("SequenceConstruct", "seq")])
def test_unsupported_op_names_node_and_op(op, node_name):
    model = make_model([helper.make_node(op, ["x", "w"], ["y"], name=node_name)],
                       [("x", F, [1, 1, 4, 4]), ("w", F, [1, 1, 3, 3])], [("y", F, [1, 1, 2, 2])])
    with ga.Session() as s:
        with pytest.raises(ga.GeError) as ei:
            s.add_graph(1, ga.Graph.from_onnx(model))
        msg = ei.value.error_message
        assert node_name in msg and op in msg and "not supported" in msg


@pytest.mark.parametrize("domain", ["custom", ""])
def test_model_local_functions_are_named_with_what_to_do(domain):
    """GE's ONNX parser does not expand a model's local functions (nor does the twin): the error names the function
    and the inliner, and the inlined model runs."""
    import onnx
    import onnx.inliner

    fn = helper.make_function(domain, "SquarePlus", ["x"], ["y"],
                              [helper.make_node("Mul", ["x", "x"], ["t"]), helper.make_node("Add", ["t", "x"], ["y"])],
                              opset_imports=[helper.make_opsetid("", 17)])
    call = helper.make_node("SquarePlus", ["a"], ["b"], name="sq", domain=domain)
    then = helper.make_graph([helper.make_node("SquarePlus", ["a"], ["t_out"], name="inner", domain=domain)], "then",
                             [], [helper.make_tensor_value_info("t_out", F, [2, 3])])
    other = helper.make_graph([helper.make_node("Identity", ["a"], ["e_out"])], "else", [],
                              [helper.make_tensor_value_info("e_out", F, [2, 3])])
    branch = helper.make_node("If", ["c"], ["b"], name="the_if", then_branch=then, else_branch=other)
    imports = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    for nodes, inputs, feeds, where in [([call], [("a", F, [2, 3])], [a], "'sq'"),
                                        ([branch], [("a", F, [2, 3]), ("c", TensorProto.BOOL, [])],
                                         [a, np.array(True)], "'inner'")]:
        graph = make_model(nodes, inputs, [("b", F, [2, 3])]).graph
        model = helper.make_model(graph, opset_imports=imports, functions=[fn])
        with ga.Session() as s:
            with pytest.raises(ga.GeError) as ei:
                s.add_graph(1, ga.Graph.from_onnx(model))
            msg = ei.value.error_message
            name = f"{domain}.SquarePlus" if domain else "SquarePlus"
            assert where in msg and f"model-local function '{name}'" in msg and "inline_local_functions" in msg, msg
            s.add_graph(1, ga.Graph.from_onnx(onnx.inliner.inline_local_functions(model)))
            (b,) = s.run_graph(1, feeds)
            np.testing.assert_array_equal(b.numpy(), a * a + a)


def test_dangling_edge_input():
    model = make_model([helper.make_node("Relu", ["nowhere"], ["y"], name="r1")], [("x", F, [2])], [("y", F, [2])])
    with ga.Session() as s:
        with pytest.raises(ga.GeError) as ei:
            s.add_graph(1, ga.Graph.from_onnx(model))
        assert "nowhere" in ei.value.error_message and "r1" in ei.value.error_message


def test_dangling_graph_output():
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="r1")], [("x", F, [2])], [("missing", F, [2])])
    with ga.Session() as s:
        with pytest.raises(ga.GeError) as ei:
            s.add_graph(1, ga.Graph.from_onnx(model))
        assert "missing" in ei.value.error_message


def test_cycle():
    model = make_model([helper.make_node("Add", ["x", "b"], ["a"], name="n1"),
                        helper.make_node("Relu", ["a"], ["b"], name="n2")],
                       [("x", F, [2])], [("a", F, [2])])
    with ga.Session() as s:
        with pytest.raises(ga.GeError) as ei:
            s.add_graph(1, ga.Graph.from_onnx(model))
        assert "cycle" in ei.value.error_message
        assert "n1" in ei.value.error_message or "n2" in ei.value.error_message


@pytest.mark.parametrize("node,needle", [
    (helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=5), "axis"),
    (helper.make_node("Transpose", ["x"], ["y"], name="tp", perm=[0, 0]), "perm"),
    (helper.make_node("Flatten", ["x"], ["y"], name="fl", axis=7), "axis"),
], ids=["softmax_axis", "transpose_perm", "flatten_axis"])
def test_bad_attributes_fail_cleanly(node, needle):
    model = make_model([node], [("x", F, [2, 3])], [("y", F, None)])
    with ga.Session() as s:
        with pytest.raises(ga.GeError) as ei:
            s.add_graph(1, ga.Graph.from_onnx(model))
            s.run_graph(1, [np.ones((2, 3), np.float32)])
        assert node.name in ei.value.error_message and needle in ei.value.error_message


def test_bad_reshape_target():
    model = make_model([helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")], [("x", F, [2, 3])],
                       [("y", F, None)], initializers=[("s", np.array([4, 4], np.int64))])
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        with pytest.raises(ga.GeError) as ei:
            s.run_graph(1, [np.ones((2, 3), np.float32)])
        assert "rs" in ei.value.error_message and "reshape" in ei.value.error_message.lower()


def test_graph_constructor_rejects_non_bytes():
    with pytest.raises(TypeError, match="bytes"):
        ga.Graph("not bytes")  # type: ignore[arg-type]


# --- closed session ------------------------------------------------------------------------------

def test_closed_session_run():
    s = ga.Session()
    s.add_graph(1, ga.Graph.from_onnx(add_model((3, 4))))
    s.close()
    with pytest.raises(ga.SessionClosedError, match="closed"):
        s.run_graph(1, [ok(), ok()])


def test_twin_controls_on_a_closed_session_name_themselves():
    if ga.current_backend() != "twin":
        pytest.skip("fault injection is a twin-only control")
    s = ga.Session()
    s.add_graph(1, ga.Graph.from_onnx(add_model((3, 4))))
    s.close()
    for call in (lambda: ga.twin.inject_fault(s, 1, "fail_run"), lambda: ga.twin.unfired_faults(s, 1)):
        with pytest.raises(ga.SessionClosedError, match=r"geasync\.twin\.(inject|unfired)_fault"):
            call()
    ga.twin.release_stalled(s, 1)  # releasing what a closed session held is a no-op
    with ga.Session() as open_session, \
            pytest.raises(TypeError, match=r"geasync\.twin\.inject_fault: graph_id must be an int"):
        ga.twin.inject_fault(open_session, "1", "fail_run")  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["no", 0, 1, None, "False"])
def test_session_freeze_inputs_takes_a_bool_only(value):
    """bool("no") is True: a misspelt flag must not silently mean its opposite."""
    with pytest.raises(TypeError, match="freeze_inputs must be True or False"):
        ga.Session(freeze_inputs=value)


def test_closed_stream():
    st = ga.Stream()
    st.close()
    with pytest.raises(ga.SessionClosedError, match="closed"):
        st.synchronize()
    with pytest.raises(ga.SessionClosedError, match="closed"):
        int(st)
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(add_model((3, 4))))
        with pytest.raises(ga.SessionClosedError):
            s.run_graph_with_stream_async(1, st, [ok(), ok()])


# --- tensors -------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.complex64, np.complex128, "U3", object, "datetime64[s]"])
def test_unsupported_numpy_dtype(add_session, dtype):
    arr = np.zeros((3, 4), dtype=dtype)
    with pytest.raises(TypeError, match="dtype"):
        add_session.run_graph(1, [arr, ok()])
    with pytest.raises(TypeError, match="dtype"):
        ga.Tensor.from_numpy(arr)


def test_complex64_message_names_dtype():
    with pytest.raises(TypeError, match="complex64"):
        ga.Tensor.from_numpy(np.zeros(3, np.complex64))


@pytest.mark.parametrize("make", [
    lambda: ok((4, 3)).T,
    lambda: ok((3, 8))[:, ::2],
    lambda: ok((6, 4))[::2],
    lambda: np.asfortranarray(ok()),
    lambda: ok((3, 4, 2))[:, :, 1],
], ids=["transpose", "col_stride", "row_stride", "fortran", "last_axis_slice"])
def test_non_contiguous_inputs_work(add_session, make):
    a = make()
    assert a.shape == (3, 4) and not a.flags.c_contiguous
    b = ok() * 10
    (c,) = add_session.run_graph(1, [a, b])
    np.testing.assert_array_equal(c.numpy(), a + b)
    (c2,) = add_session.run_graph(1, [ga.Tensor.from_numpy(a), b])
    np.testing.assert_array_equal(c2.numpy(), a + b)


def test_tensor_constructor_direct_raises():
    with pytest.raises(TypeError, match="from_numpy"):
        ga.Tensor()


def test_device_tensor_numpy_raises_value_error():
    t = ga.Tensor.from_numpy(ok()).to_device()
    assert t.placement == "device"
    with pytest.raises(ValueError, match="device"):
        t.numpy()
    with pytest.raises(ValueError, match="to_host"):
        np.asarray(t)
    np.testing.assert_array_equal(t.to_host().numpy(), ok())


def test_too_many_dims():
    with pytest.raises(ValueError, match="25"):
        ga.Tensor.from_numpy(np.zeros((1,) * 26, np.float32))


# --- Graph.from_onnx -----------------------------------------------------------------------------

def test_from_onnx_nonexistent_path(tmp_path):
    with pytest.raises(FileNotFoundError):
        ga.Graph.from_onnx(tmp_path / "nope.onnx")
    with pytest.raises(FileNotFoundError):
        ga.Graph.from_onnx(str(tmp_path / "nope.onnx"))


@pytest.mark.parametrize("source", [5, 3.5, None, [b"x"], {"model": b""}])
def test_from_onnx_bad_type(source):
    with pytest.raises(TypeError, match="from_onnx"):
        ga.Graph.from_onnx(source)
