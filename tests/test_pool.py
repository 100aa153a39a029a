"""ga.GraphPool's checks: a pool's ids are added graphs declaring the same inputs and outputs, and GraphPool.add
checks its ids before adding anything, so a refused call leaves the session as it was."""

from __future__ import annotations

import numpy as np
import pytest

import geasync as ga
from conftest import TensorProto, helper, make_model

pytestmark = pytest.mark.timeout(120, method="thread")


def unary(op: str, name: str = "x", elem: int = TensorProto.FLOAT, shape=("N", 2)):
    return make_model([helper.make_node(op, [name], ["y"])], [(name, elem, list(shape))],
                      [("y", elem, list(shape))])


def added_ids(s: ga.Session, ids) -> list[int]:
    found = []
    for gid in ids:
        try:
            s.graph_inputs(gid)
        except ga.GeError:
            continue
        found.append(gid)
    return found


def test_pool_refuses_graph_ids_not_added(session):
    session.add_graph(1, ga.Graph.from_onnx(unary("Relu")))
    with pytest.raises(ValueError, match=r"GraphPool: graph id\(s\) 999, 1000 not added to this session.*"
                                         r"add_graph_clone"):
        ga.GraphPool(session, [1, 999, 1000])


@pytest.mark.parametrize("other, difference", [
    (unary("Relu", name="z"), r"input 0 is 'x' \(\[N, 2\] float32\) in graph 1, 'z' \(\[N, 2\] float32\) in graph 2"),
    (unary("Relu", elem=TensorProto.INT64), r"input 0 is 'x' \(\[N, 2\] float32\) in graph 1, 'x' \(\[N, 2\] int64\)"),
    (unary("Relu", shape=("N", 3)), r"input 0 is 'x' \(\[N, 2\] float32\) in graph 1, 'x' \(\[N, 3\] float32\)"),
    (make_model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["w"])],
                [("x", TensorProto.FLOAT, ["N", 2])],
                [("y", TensorProto.FLOAT, ["N", 2]), ("w", TensorProto.FLOAT, ["N", 2])]),
     "graph 1 has 1 outputs, graph 2 has 2"),
], ids=["input-name", "dtype", "shape", "outputs"])
def test_pool_refuses_instances_of_different_models(session, other, difference):
    session.add_graph(1, ga.Graph.from_onnx(unary("Relu")))
    session.add_graph(2, ga.Graph.from_onnx(other))
    with pytest.raises(ValueError, match="GraphPool: graph 2 is not the model of graph 1: " + difference):
        ga.GraphPool(session, [1, 2])


def test_pool_refuses_an_instance_compiled_for_other_shapes(session):
    """compile_graph with inputs fixes one instance's shapes: the instances would no longer take the same requests."""
    graph = ga.Graph.from_onnx(unary("Relu"))
    session.add_graph_clone(1, graph)
    session.add_graph_clone(2, graph)
    session.compile_graph(2, [np.zeros((4, 2), np.float32)])
    with pytest.raises(ValueError, match=r"input 0 is 'x' \(\[N, 2\] float32\) in graph 1, 'x' \(\[4, 2\] float32\)"):
        ga.GraphPool(session, [1, 2])


def test_pool_of_clones_added_one_by_one_is_accepted(session):
    graph = ga.Graph.from_onnx(unary("Relu"))
    for gid in (3, 4):
        session.add_graph_clone(gid, graph)
    pool = ga.GraphPool(session, (3, 4))
    assert pool.graph_ids == (3, 4) and len(pool) == 2


@pytest.mark.parametrize("ids, match", [
    ([30, 30], "distinct"),
    ([], "at least one"),
    ([31, 32, 5], r"GraphPool.add: graph id\(s\) 5 already in use"),
    ([33, -1], r"GraphPool.add: graph_ids \[33, -1\]: graph_id must fit in uint32, got -1"),
])
def test_refused_add_adds_nothing(session, ids, match):
    session.add_graph(5, ga.Graph.from_onnx(unary("Relu")))
    with pytest.raises(ValueError, match=match):
        ga.GraphPool.add(session, ga.Graph.from_onnx(unary("Relu")), graph_ids=ids)
    assert added_ids(session, [30, 31, 32, 5]) == [5]


def test_add_that_fails_midway_removes_the_instances_it_added(session, monkeypatch):
    """A runtime failure on a later instance (here: the 2nd add_graph_clone) removes the earlier ones."""
    real = session.add_graph_clone
    calls = []

    def add_graph_clone(graph_id, graph, options=None):
        calls.append(graph_id)
        if len(calls) == 2:
            raise ga.GeError(ga.errors.FAILED, "injected", "GeSession::AddGraphClone")
        real(graph_id, graph, options)

    monkeypatch.setattr(session, "add_graph_clone", add_graph_clone)
    with pytest.raises(ga.GeError, match="injected"):
        ga.GraphPool.add(session, ga.Graph.from_onnx(unary("Relu")), graph_ids=[40, 41, 42], load=True)
    assert calls == [40, 41]
    assert added_ids(session, [40, 41, 42]) == []
    monkeypatch.undo()
    pool = ga.GraphPool.add(session, ga.Graph.from_onnx(unary("Relu")), graph_ids=[40, 41])  # the ids are free again
    assert pool.graph_ids == (40, 41)


def test_pool_argument_types(session):
    with pytest.raises(TypeError, match="GraphPool: session must be a geasync.Session"):
        ga.GraphPool(object(), [1])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="GraphPool.add: graph_ids must be a sequence"):
        ga.GraphPool.add(session, ga.Graph.from_onnx(unary("Relu")), graph_ids=7)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="GraphPool.add: graph must be a geasync.Graph"):
        ga.GraphPool.add(session, b"not a graph", graph_ids=[1])  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_checked_pool_answers_every_request_alike(anyio_backend):
    async with ga.Session() as s:
        graph = ga.Graph.from_onnx(unary("Neg"))
        s.add_graph_clone(1, graph)
        s.add_graph_clone(2, graph)
        pool = ga.GraphPool(s, [1, 2])
        x = np.array([[1.0, -2.0]], np.float32)
        for _ in range(4):
            (y,) = await pool.run_graph_async({"x": x})
            np.testing.assert_array_equal(y.numpy(), -x)
