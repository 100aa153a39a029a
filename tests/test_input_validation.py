"""A run's inputs are checked against the graph's declared inputs before the runtime sees them: a bad request gets
an InputError (a ValueError; InputTypeError, also a TypeError, for a dtype) and never breaks the session."""

from __future__ import annotations

import pickle

import anyio
import numpy as np
import pytest

import geasync as ga
from conftest import TensorProto, add_model, helper, make_mlp, make_model

F = TensorProto.FLOAT
pytestmark = pytest.mark.timeout(120, method="thread")

A = np.ones((3, 4), np.float32)


def add34():
    return ga.Graph.from_onnx(add_model((3, 4)))


def assert_input_error(exc, cls, index, name, *needles, api="run_graph_async", graph_id=1):
    assert type(exc) is cls
    assert isinstance(exc, ValueError) and isinstance(exc, ga.GeError)
    assert (exc.graph_id, exc.input_index, exc.input_name) == (graph_id, index, name)
    text = str(exc)
    assert f"Session.{api}(graph_id={graph_id})" in text
    if index is not None:
        assert f"input {index} ('{name}')" in text
    for needle in needles:
        assert needle in text, (needle, text)


# --- the bug: one bad request used to stop the session's RunGraphAsync queue for good ---------------------

@pytest.mark.anyio
async def test_wrong_dtype_first_request_does_not_break_the_session(anyio_backend):
    async with ga.Session() as s:
        s.add_graph(1, add34())
        s.add_graph(2, add34())
        with pytest.raises(ga.InputTypeError) as ei:
            await s.run_graph_async(1, [A.astype(np.float64), A])
        assert_input_error(ei.value, ga.InputTypeError, 0, "a", "float64", "float32")
        assert isinstance(ei.value, TypeError)
        assert s.statistics().failed == 0  # it never reached the runtime
        for gid in (1, 2):
            (c,) = await s.run_graph_async(gid, [A, A])
            np.testing.assert_array_equal(c.numpy(), 2 * A)


@pytest.mark.anyio
async def test_bad_requests_among_good_ones(anyio_backend):
    bad = {3: [A, A.astype(np.int32)], 7: [A], 11: [A, np.ones((4, 3), np.float32)], 13: {"a": A}}
    results = {}

    async def one(k):
        x = np.full((3, 4), k, np.float32)
        try:
            (c,) = await s.run_graph_async(1, bad.get(k, [x, x]))
            results[k] = c.numpy().copy()
        except ga.InputError as exc:
            results[k] = exc

    async with ga.Session() as s:
        s.add_graph(1, add34())
        async with anyio.create_task_group() as tg:
            for k in range(40):
                tg.start_soon(one, k)
    for k, r in results.items():
        if k in bad:
            assert isinstance(r, ga.InputError), k
        else:
            np.testing.assert_array_equal(r, np.full((3, 4), 2 * k, np.float32))
    assert type(results[3]) is ga.InputTypeError and results[3].input_index == 1
    assert "expects 2 input(s), got 1" in str(results[7])
    assert "[4, 3]" in str(results[11]) and "[3, 4]" in str(results[11])
    assert "missing input(s) 'b'" in str(results[13])


# --- what is checked -------------------------------------------------------------------------------------

@pytest.mark.parametrize("api", ["run_graph", "run_graph_async", "run_graph_with_stream_async"])
@pytest.mark.parametrize("inputs, cls, index, needles", [
    ([A, A.astype(np.float16)], ga.InputTypeError, 1, ["float16", "float32"]),
    ([A, np.ones((3, 4, 1), np.float32)], ga.InputError, 1, ["[3, 4, 1]", "[3, 4]"]),
    ([np.ones(12, np.float32), A], ga.InputError, 0, ["[12]", "[3, 4]"]),
    ([np.ones((3, 5), np.float32), A], ga.InputError, 0, ["[3, 5]", "[3, 4]"]),
    ([A, A, A], ga.InputError, None, ["expects 2 input(s), got 3", "'a'", "'b'"]),
])
def test_each_api_refuses_before_the_runtime(api, inputs, cls, index, needles):
    with ga.Session() as s, ga.Stream() as st:
        s.add_graph(1, add34())
        with pytest.raises(ga.InputError) as ei:
            if api == "run_graph_async":
                anyio.run(lambda: s.run_graph_async(1, inputs))
            elif api == "run_graph":
                s.run_graph(1, inputs)
            else:
                s.run_graph_with_stream_async(1, st, inputs)
        assert_input_error(ei.value, cls, index, None if index is None else "ab"[index], *needles, api=api)
        if api == "run_graph_with_stream_async":
            (c,) = s.run_graph_with_stream_async(1, st, [A, A])
            st.synchronize()
            c = c.to_host()
        elif api == "run_graph":
            (c,) = s.run_graph(1, [A, A])
        else:
            (c,) = anyio.run(lambda: s.run_graph_async(1, [A, A]))
        np.testing.assert_array_equal(c.numpy(), 2 * A)


def run_on(api, s, st, inputs):
    if api == "run_graph_async":
        return anyio.run(lambda: s.run_graph_async(1, inputs))
    if api == "run_graph":
        return s.run_graph(1, inputs)
    (c,) = s.run_graph_with_stream_async(1, st, inputs)
    st.synchronize()
    return [c.to_host()]


@pytest.mark.parametrize("api", ["run_graph", "run_graph_async", "run_graph_with_stream_async"])
def test_big_endian_inputs_are_taken_in_native_byte_order(api):
    """An array of a dtype GE takes, in the other byte order (">f4" read from a file), is copied to the machine's
    order on the copying path: the right answer, not a TypeError."""
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    swapped = a.astype(a.dtype.newbyteorder(">" if np.little_endian else "<"))
    assert not swapped.dtype.isnative
    with ga.Session() as s, ga.Stream() as st:
        s.add_graph(1, add34())
        (c,) = run_on(api, s, st, [swapped, A])
        np.testing.assert_array_equal(c.numpy(), a + 1)
    t = ga.Tensor.from_numpy(swapped)
    assert t.dtype == np.float32 and t.dtype.isnative
    np.testing.assert_array_equal(t.numpy(), a)


@pytest.mark.parametrize("api", ["run_graph", "run_graph_async", "run_graph_with_stream_async"])
@pytest.mark.parametrize("bad, dtype", [(np.zeros((3, 4), object), "object"), (np.zeros((3, 4), "U1"), "<U1"),
                                        (np.zeros((3, 4), ">c8"), ">c8")], ids=["object", "str", "complex-swapped"])
def test_an_input_of_a_dtype_ge_lacks_names_the_call_and_the_input(api, bad, dtype):
    with ga.Session() as s, ga.Stream() as st:
        s.add_graph(1, add34())
        with pytest.raises(TypeError) as ei:
            run_on(api, s, st, [A, bad])
        text = str(ei.value)
        assert text.startswith(f"Session.{api}(graph_id=1): inputs[1] ('b'): dtype {dtype} has no GE equivalent")
        assert text.endswith("(convert it: array.astype(np.float32))"), text
        (c,) = run_on(api, s, st, [A, A])  # the session keeps serving
        np.testing.assert_array_equal(c.numpy(), 2 * A)


@pytest.mark.parametrize("api", ["run_graph", "run_graph_async", "run_graph_with_stream_async"])
@pytest.mark.parametrize("bad, what", [([[1.0] * 4] * 3, "list"), (2.5, "float"), (None, "NoneType"),
                                       (np.float32(1), "float32")], ids=["nested-list", "float", "None", "np-scalar"])
def test_an_input_that_is_no_array_names_the_call_and_the_input(api, bad, what):
    """Something else than a Tensor or an array (a nested list, a Python or numpy scalar, None) is a TypeError naming
    the call, the graph and the input, with what to pass instead (it named none of them)."""
    with ga.Session() as s, ga.Stream() as st:
        s.add_graph(1, add34())
        with pytest.raises(TypeError) as ei:
            run_on(api, s, st, [A, bad])
        text = str(ei.value)
        assert text.startswith(f"Session.{api}(graph_id=1): inputs[1] ('b') must be a geasync.Tensor or a "
                               f"numpy.ndarray, got {what}"), text
        assert "np.asarray" in text, text
        with pytest.raises(TypeError, match=rf"^Session\.{api}\(graph_id=1\): inputs must be a list"):
            run_on(api, s, st, None)
        (c,) = run_on(api, s, st, [A, A])  # the session keeps serving
        np.testing.assert_array_equal(c.numpy(), 2 * A)


def test_a_batcher_request_by_unknown_names_names_batcher_run():
    async def main():
        with ga.Session() as s:
            s.add_graph(1, ga.Graph.from_onnx(make_mlp()))
            async with ga.Batcher(s, 1) as b:
                with pytest.raises(ga.InputError, match=r"^Batcher\.run\(graph_id=1\): unknown input name"):
                    await b.run({"y": np.zeros((1, 784), np.float32)})

    anyio.run(main)


def test_symbolic_dims_take_any_size_fixed_dims_do_not():
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(make_mlp()))
        for n in (1, 5, 64):
            (y,) = s.run_graph(1, [np.zeros((n, 784), np.float32)])
            assert y.shape == (n, 10)
        with pytest.raises(ga.InputError, match=r"\[2, 783\].*\[N, 784\]") as ei:
            s.run_graph(1, [np.zeros((2, 783), np.float32)])
        assert ei.value.input_name == "x"


def test_device_and_non_contiguous_inputs_are_checked_too():
    with ga.Session() as s, ga.Stream() as st:
        s.add_graph(1, add34())
        dev = ga.Tensor.from_numpy(np.ones((4, 3), np.float32)).to_device()
        with pytest.raises(ga.InputError, match=r"\[4, 3\]"):
            s.run_graph_with_stream_async(1, st, [dev, ga.Tensor.from_numpy(A).to_device()])
        with pytest.raises(ga.InputTypeError, match="int64"):
            s.run_graph(1, [A, np.ones((3, 8), np.int64)[:, ::2]])
        (c,) = s.run_graph(1, [np.ones((3, 8), np.float32)[:, ::2], ga.Tensor.from_numpy(A)])
        np.testing.assert_array_equal(c.numpy(), 2 * A)


def test_first_run_graph_async_keeps_symbolic_dims_free():
    """geasync compiles a graph from its declared inputs before its first RunGraphAsync, so the first request's
    shapes fix nothing: later requests of other sizes run, and the check keeps the declaration."""
    async def main():
        async with ga.Session() as s:
            s.add_graph(1, ga.Graph.from_onnx(make_mlp()))
            for n in (2, 4, 9):
                (y,) = await s.run_graph_async(1, [np.zeros((n, 784), np.float32)])
                assert y.shape == (n, 10)
            assert s.graph_inputs(1)[0].shape == ("N", 784)
            with pytest.raises(ga.InputError, match=r"784"):
                await s.run_graph_async(1, [np.zeros((4, 783), np.float32)])
    anyio.run(main)


def test_compile_graph_inputs_are_checked():
    with ga.Session() as s:
        s.add_graph(1, add34())
        with pytest.raises(ga.InputTypeError, match="compile_graph"):
            s.compile_graph(1, [A, A.astype(np.int32)])
        s.compile_graph(1, [A, A])
        (c,) = s.run_graph(1, {"a": A, "b": A})
        np.testing.assert_array_equal(c.numpy(), 2 * A)


def test_remove_then_add_another_graph_under_the_same_id():
    with ga.Session() as s:
        s.add_graph(1, add34())
        s.remove_graph(1)
        s.add_graph(1, ga.Graph.from_onnx(make_mlp()))
        (y,) = s.run_graph(1, {"x": np.zeros((2, 784), np.float32)})
        assert y.shape == (2, 10)
        with pytest.raises(ga.InputError, match="expects 1 input"):
            s.run_graph(1, [A, A])


def test_input_errors_pickle():
    with ga.Session() as s:
        s.add_graph(1, add34())
        with pytest.raises(ga.InputTypeError) as ei:
            s.run_graph(1, [A, A.astype(np.float64)])
    again = pickle.loads(pickle.dumps(ei.value))
    assert type(again) is ga.InputTypeError and str(again) == str(ei.value) and again.input_name == "b"


def test_bfloat16_declared_input_is_checked_as_ml_dtypes_bfloat16():
    pytest.importorskip("ml_dtypes")
    model = make_model([helper.make_node("Cast", ["x"], ["y"], to=F)], [("x", TensorProto.BFLOAT16, [2])],
                       [("y", F, [2])])
    with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(model))
        with pytest.raises(ga.InputTypeError, match=r"does not match the graph's bfloat16 .*ml_dtypes\.bfloat16"):
            s.run_graph(1, [np.ones(2, np.float32)])


def test_float8_declared_input_is_not_dtype_checked_here():
    """numpy has no float8: the declaration is listed with dtype None, and the runtime has the last word (the twin
    refuses the type when the graph is added, naming it)."""
    model = make_model([helper.make_node("Cast", ["x"], ["y"], to=F)], [("x", TensorProto.FLOAT8E4M3FN, [2])],
                       [("y", F, [2])], opset=19)
    g = ga.Graph.from_onnx(model)
    assert g.inputs[0].dtype is None
    with ga.Session() as s:
        with pytest.raises(ga.GeError, match="FLOAT8E4M3FN") as ei:
            s.add_graph(1, g)
            s.run_graph(1, [np.ones(2, np.float32)])
        assert not isinstance(ei.value, ga.InputError)


def test_a_refused_request_fixes_no_run_mode():
    """GE records a graph's run mode on its first run, even a failed one; a request refused before GE is no run."""
    with ga.Session() as s, ga.Stream() as st:
        s.add_graph(1, add34())
        with pytest.raises(ga.InputError):
            s.run_graph(1, [A, np.zeros((2, 4), np.float32)])
        (c,) = s.run_graph_with_stream_async(1, st, [A, A])
        st.synchronize()
        np.testing.assert_array_equal(c.to_host().numpy(), 2 * A)
        with pytest.raises(ga.ExecutionModeError):
            s.run_graph(1, [A, A])
