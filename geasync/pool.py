"""``GraphPool``: several loaded instances of one graph, with requests spread over them.

GE runs one graph's RunGraphAsync jobs one after another (one model thread per loaded graph on the twin, one model
stream on an NPU), so a heavy model keeps one core (or stream) busy however many requests wait. Loading the same
model under several graph ids (``add_graph_clone``) and sending each request to the least busy instance runs them
side by side:

    pool = ga.GraphPool.add(session, ga.Graph.from_onnx("model.onnx"), graph_ids=[1, 2])
    outputs = await pool.run_graph_async([x])
    batcher = ga.Batcher(session, pool)         # batches run on both instances

Each instance holds its own weights and working memory.
"""

from __future__ import annotations

from typing import Optional, Sequence

from ._stats import logger
from ._types import Inputs, Options
from .graph import Graph
from .session import Session, _check_graph_id
from .tensor import Tensor

__all__ = ["GraphPool"]


class GraphPool:
    """Instances of one graph already added to ``session`` under ``graph_ids``; see the module docstring."""

    def __init__(self, session: Session, graph_ids: Sequence[int]) -> None:
        if not isinstance(session, Session):
            raise TypeError(f"GraphPool: session must be a geasync.Session, got {type(session).__name__}")
        ids = [_check_graph_id(g) for g in graph_ids]
        if not ids or len(set(ids)) != len(ids):
            raise ValueError(f"GraphPool: graph_ids must be distinct graph ids, at least one, got {graph_ids!r}")
        self.session = session
        self.graph_ids = tuple(ids)
        self._busy = [0] * len(ids)  # requests in flight per instance
        self._last = 0  # the instance picked last

    @classmethod
    def add(cls, session: Session, graph: Graph, *, graph_ids: Sequence[int], options: Optional[Options] = None,
            load: bool = False) -> "GraphPool":
        """Adds ``graph`` once per id of ``graph_ids`` (``add_graph_clone``: one Graph object serves them all)
        and returns the pool; ``load=True`` also loads every instance now."""
        for graph_id in graph_ids:
            session.add_graph_clone(graph_id, graph, options)
            if load:
                session.load_graph(graph_id)
        logger.debug("graph pool of %d instances added: ids %s", len(graph_ids), list(graph_ids))
        return cls(session, graph_ids)

    def _pick(self) -> int:
        """The instance with the fewest requests in flight; of those, the one picked last, then the next ones in
        turn. At low load requests keep to one warm instance: on the twin its model thread watches for the next
        job after each run, and on 2 cores only one thread may, so taking turns between idle instances made every
        other request wake a sleeping thread (1 in flight, 2 instances: p50 42 us against 27 us for one)."""
        busy = self._busy
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
        i = self._pick()
        self._busy[i] += 1
        try:
            return await self.session.run_graph_async(self.graph_ids[i], inputs, timeout=timeout)
        finally:
            self._busy[i] -= 1

    def remove(self) -> None:
        """Removes every instance from the session."""
        for graph_id in self.graph_ids:
            self.session.remove_graph(graph_id)

    def __len__(self) -> int:
        return len(self.graph_ids)

    def __repr__(self) -> str:
        return f"GraphPool(graph_ids={list(self.graph_ids)})"
