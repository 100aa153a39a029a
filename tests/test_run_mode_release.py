"""A first run that fails before the runtime fixed the graph's run mode leaves the graph free for any mode, as in GE:
RunGraph and RunGraphWithStreamAsync compile and load an unloaded graph before they set the mode, so a failed
implicit compile (or a stream refused before it) fixes nothing. A run that fails after the compile still fixes it."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import geasync as ga
from conftest import add_model

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120, method="thread")]

A = np.arange(16, dtype=np.float32).reshape(1, 16)


def bad_matmul() -> bytes:
    """Parses, but its compile fails (inner dims 3 and 4)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g", [x, w], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


BAD_INPUTS = [np.ones((2, 3), np.float32), np.ones((4, 5), np.float32)]


async def test_failed_compile_in_run_graph_fixes_no_mode():
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(bad_matmul()))
        for _ in range(2):
            with pytest.raises(ga.GeError, match="inner dimensions") as info:
                s.run_graph(1, BAD_INPUTS)
            assert not isinstance(info.value, ga.ExecutionModeError)
        # another mode meets the same compile error, not a run-mode conflict
        with pytest.raises(ga.GeError, match="inner dimensions") as info:
            await s.run_graph_async(1, BAD_INPUTS)
        assert not isinstance(info.value, ga.ExecutionModeError)


async def test_failed_compile_in_stream_run_fixes_no_mode():
    async with ga.Session() as s, ga.Stream() as stream:
        s.add_graph(1, ga.Graph.from_onnx(bad_matmul()))
        with pytest.raises(ga.GeError, match="inner dimensions") as info:
            s.run_graph_with_stream_async(1, stream, BAD_INPUTS)
        assert not isinstance(info.value, ga.ExecutionModeError)
        with pytest.raises(ga.GeError, match="inner dimensions") as info:
            s.run_graph(1, BAD_INPUTS)
        assert not isinstance(info.value, ga.ExecutionModeError)


@pytest.mark.parametrize("then", ["sync", "async"])
async def test_stream_refused_before_the_compile_fixes_no_mode(then):
    async with ga.Session() as s:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        with pytest.raises(ga.GeError, match="not a live stream"):
            s.run_graph_with_stream_async(1, 123456, [A, A])
        if then == "sync":
            (c,) = s.run_graph(1, [A, A])
        else:
            (c,) = await s.run_graph_async(1, [A, A])
        np.testing.assert_array_equal(c.numpy(), A + A)


async def test_run_failing_after_the_compile_fixes_the_mode():
    spec = f"graph_id=1,kind=fail_run,nth=1,status={ga.twin.INTERNAL_ERROR}"
    async with ga.Session({"geasync.twin.faults": spec}) as s:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        with pytest.raises(ga.GeError, match="fault injected"):
            s.run_graph(1, [A, A])
        with pytest.raises(ga.ExecutionModeError, match="RunGraph was already called"):
            await s.run_graph_async(1, [A, A])
        (c,) = s.run_graph(1, [A, A])
        np.testing.assert_array_equal(c.numpy(), A + A)


async def test_released_graph_then_takes_the_mode_of_its_first_successful_run():
    async with ga.Session() as s, ga.Stream() as stream:
        s.add_graph(1, ga.Graph.from_onnx(add_model()))
        with pytest.raises(ga.GeError):
            s.run_graph_with_stream_async(1, 123456, [A, A])
        (c,) = await s.run_graph_async(1, [A, A])
        np.testing.assert_array_equal(c.numpy(), A + A)
        for call in (lambda: s.run_graph(1, [A, A]), lambda: s.run_graph_with_stream_async(1, stream, [A, A])):
            with pytest.raises(ga.ExecutionModeError, match="RunGraphAsync was already called"):
                call()
