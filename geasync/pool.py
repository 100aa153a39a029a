"""``GraphPool``: several loaded instances of one graph, with requests spread over them.

GE runs one graph's RunGraphAsync jobs one after another (one model thread per loaded graph on the twin, one model
stream on an NPU), so a heavy model keeps one core (or stream) busy however many requests wait. Loading the same
model under several graph ids (``add_graph_clone``) and sending each request to the least busy instance runs them
side by side:

    pool = ga.GraphPool.add(session, ga.Graph.from_onnx("model.onnx"), graph_ids=[1, 2])
    outputs = await pool.run_graph_async([x])
    batcher = ga.Batcher(session, pool)         # batches run on both instances

Each instance holds its own weights and working memory. A pool built from graph ids (``GraphPool(session, ids)``)
checks that every id is added to the session and that all declare the same inputs and outputs (names, dtypes,
shapes): instances of different models would give different answers to the same request. Two models that
declare the same inputs and outputs pass that check, so add a pool's instances from one Graph (as ``add`` does).
"""

from __future__ import annotations

import copy
from typing import Any, Optional, Sequence

from ._inputs import GRAPH_NOT_EXIST
from ._metadata import ModelFormatError, TensorInfo
from ._stats import logger
from ._types import Inputs, Options
from .errors import GeError
from .graph import Graph
from .session import Session, _check_graph_id
from .tensor import Tensor

__all__ = ["GraphPool"]


class GraphPool:
    """Instances of one graph already added to ``session`` under ``graph_ids``; see the module docstring."""

    def __init__(self, session: Session, graph_ids: Sequence[int]) -> None:
        ids = _check_ids(session, graph_ids, "GraphPool")
        _check_same_model(session, ids)
        self._setup(session, ids)

    def _setup(self, session: Session, ids: Sequence[int]) -> None:
        self.session = session
        self.graph_ids = tuple(ids)
        # How busy an instance is, is the session's count of its runs waiting or in flight (Session._pending_runs).
        # A count of the pool's own, decremented when the awaiting task resumed, stayed up for good for a task whose
        # loop was closed before it resumed (the session's count drops when the runtime completes the run, the
        # reaper's work then), and the instance was shunned from then on.
        self._last = 0  # the instance picked last

    @classmethod
    def add(cls, session: Session, graph: Graph, *, graph_ids: Sequence[int], options: Optional[Options] = None,
            load: bool = False) -> "GraphPool":
        """Adds ``graph`` once per id of ``graph_ids`` (``add_graph_clone``: one Graph object serves them all)
        and returns the pool; ``load=True`` also loads every instance now. The ids must be distinct and not in use
        in the session; a call that fails adds nothing (instances added before the failure are removed)."""
        ids = _check_ids(session, graph_ids, "GraphPool.add")
        if not isinstance(graph, Graph):
            raise TypeError(f"GraphPool.add: graph must be a geasync.Graph, got {type(graph).__name__}")
        used = [g for g in ids if _is_added(session, g)]
        if used:
            raise ValueError(f"GraphPool.add: graph id(s) {_ids_text(used)} already in use in this session; pick "
                             "unused ids, or build the pool from graphs already added with GraphPool(session, ids)")
        added: list[int] = []
        try:
            for graph_id in ids:
                session.add_graph_clone(graph_id, graph, options)
                added.append(graph_id)
                if load:
                    session.load_graph(graph_id)
        except BaseException:
            for graph_id in reversed(added):  # the caller's error is the one worth seeing: the rollback stays quiet
                try:
                    session.remove_graph(graph_id)
                except GeError:
                    logger.debug("graph pool rollback: graph %d could not be removed", graph_id, exc_info=True)
            raise
        logger.debug("session %s: graph pool of %d instances added: ids %s", session._id, len(ids), ids)
        pool = cls.__new__(cls)  # one Graph under every id: the instances are the same model by construction
        pool._setup(session, ids)
        return pool

    def _pick(self) -> int:
        """The instance with the fewest requests in flight; of those, the one picked last, then the next ones in
        turn. At low load requests keep to one warm instance: on the twin its model thread watches for the next
        job after each run, and on 2 cores only one thread may, so taking turns between idle instances made every
        other request wake a sleeping thread (1 in flight, 2 instances: p50 42 us against 27 us for one)."""
        busy = self.session._pending_runs(self.graph_ids)
        n = len(busy)
        start = self._last
        best = start
        for k in range(1, n):
            i = (start + k) % n
            if busy[i] < busy[best]:
                best = i
        self._last = best
        return best

    async def run_graph_async(self, inputs: Inputs, *, timeout: Optional[float] = None) -> list[Tensor]:
        """``Session.run_graph_async`` on the least busy instance."""
        # the session counts the request as waiting or in flight before its task first suspends, so the next
        # request's pick sees it
        graph_id = self.graph_ids[self._pick()]
        try:
            return await self.session.run_graph_async(graph_id, inputs, timeout=timeout)
        except GeError as exc:  # name the call the caller made, and the instance that ran it
            raise _named(exc, f"GraphPool.run_graph_async(graph_ids=[{_ids_text(self.graph_ids)}])").with_traceback(
                exc.__traceback__) from exc.__cause__

    def remove(self) -> None:
        """Removes every instance from the session."""
        for graph_id in self.graph_ids:
            self.session.remove_graph(graph_id)

    def __len__(self) -> int:
        return len(self.graph_ids)

    def __repr__(self) -> str:
        return f"GraphPool(graph_ids={list(self.graph_ids)})"


def _named(exc: GeError, where: str) -> GeError:
    """``exc`` as the pool's error: "<where> through <the session call>" (a copy, as Batcher's: one error object
    can be raised in several tasks)."""
    try:
        named = copy.copy(exc)
    except Exception:  # an error type that cannot be rebuilt from its args: as it is
        return exc
    named.context = f"{where} through {exc.context}" if exc.context else where
    named.args = (named._format(),)
    return named


def _ids_text(ids: Sequence[int]) -> str:
    return ", ".join(map(str, ids))


def _check_ids(session: Any, graph_ids: Any, api: str) -> list[int]:
    if not isinstance(session, Session):
        raise TypeError(f"{api}: session must be a geasync.Session, got {type(session).__name__}")
    session._live(api)  # a closed (or broken) session, said naming the pool rather than the calls it makes
    if isinstance(graph_ids, (str, bytes)):
        raise TypeError(f"{api}: graph_ids must be a sequence of graph ids (ints), got {type(graph_ids).__name__}")
    try:
        given = list(graph_ids)
    except TypeError:
        raise TypeError(f"{api}: graph_ids must be a sequence of graph ids (ints), got "
                        f"{type(graph_ids).__name__}") from None
    try:
        ids = [_check_graph_id(g) for g in given]
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{api}: graph_ids {given!r}: {exc}") from None
    if not ids or len(set(ids)) != len(ids):
        raise ValueError(f"{api}: graph_ids must be distinct graph ids, at least one, got {given!r}")
    return ids


def _is_added(session: Session, graph_id: int) -> bool:
    try:
        session.graph_inputs(graph_id)
    except ModelFormatError:  # added; geasync only cannot read its declaration
        return True
    except GeError as exc:
        if exc.status == GRAPH_NOT_EXIST:
            return False
        raise
    return True


def _io(session: Session, graph_id: int) -> tuple[tuple[TensorInfo, ...], tuple[TensorInfo, ...]]:
    return session.graph_inputs(graph_id), session.graph_outputs(graph_id)


def _check_same_model(session: Session, ids: Sequence[int]) -> None:
    """ValueError unless every id is added and all declare the same inputs and outputs."""
    missing = [g for g in ids if not _is_added(session, g)]
    if missing:
        raise ValueError(f"GraphPool: graph id(s) {_ids_text(missing)} not added to this session; add each instance "
                         "first (session.add_graph_clone), or let GraphPool.add(session, graph, graph_ids=...) add "
                         "them")
    unread = []
    for g in ids:
        try:
            _io(session, g)
        except ModelFormatError:
            unread.append(g)
    if unread:
        raise ValueError(f"GraphPool: geasync cannot read the declared inputs and outputs of graph id(s) "
                         f"{_ids_text(unread)}, so it cannot check that the instances are one model; build the pool "
                         "with GraphPool.add(session, graph, graph_ids=...), which adds one Graph under every id")
    first = ids[0]
    want = _io(session, first)
    for g in ids[1:]:
        got = _io(session, g)
        if got != want:
            raise ValueError(f"GraphPool: graph {g} is not the model of graph {first}: "
                             f"{_difference(want, got, first, g)}; a pool's instances must be one model (the same "
                             "requests must give the same answers), so pool only ids added from one Graph")


def _difference(want: tuple[tuple[TensorInfo, ...], tuple[TensorInfo, ...]],
                got: tuple[tuple[TensorInfo, ...], tuple[TensorInfo, ...]], a: int, b: int) -> str:
    for kind, ws, gs in (("inputs", want[0], got[0]), ("outputs", want[1], got[1])):
        if len(ws) != len(gs):
            return f"graph {a} has {len(ws)} {kind}, graph {b} has {len(gs)}"
        for k, (w, g) in enumerate(zip(ws, gs, strict=True)):
            if w != g:
                return (f"{kind[:-1]} {k} is {_info_text(w)} in graph {a}, {_info_text(g)} in graph {b}")
    return "their declarations differ"  # (unreachable: the tuples differ in some field above)


def _info_text(info: TensorInfo) -> str:
    shape = "any shape" if info.shape is None else "[" + ", ".join("?" if d is None else str(d)
                                                                   for d in info.shape) + "]"
    return f"{info.name!r} ({shape} {info.dtype})"
