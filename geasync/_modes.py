"""GE's per-graph run-mode exclusivity (RunGraph / RunGraphAsync / RunGraphWithStreamAsync), checked before the
runtime is called, so the error can name both modes, the Python calls behind them and what to do."""

from __future__ import annotations

import threading
from typing import Container, NoReturn, Sequence

from .errors import FAILED, ExecutionModeError

RUN_GRAPH = "RunGraph"
RUN_GRAPH_ASYNC = "RunGraphAsync"
RUN_GRAPH_WITH_STREAM_ASYNC = "RunGraphWithStreamAsync"

_PYTHON_API = {
    RUN_GRAPH: "Session.run_graph / run_graph_in_thread",
    RUN_GRAPH_ASYNC: "Session.run_graph_async",
    RUN_GRAPH_WITH_STREAM_ASYNC: "Session.run_graph_with_stream_async",
}
# What GE returns for a conflicting call in each mode (its E10062 run-mode check).
_CONFLICT_STATUS = {RUN_GRAPH: 1343225956, RUN_GRAPH_ASYNC: 1343225956, RUN_GRAPH_WITH_STREAM_ASYNC: FAILED}


class ModeRegistry:
    """GE's per-graph run-mode exclusivity, checked before the runtime is called so the error can say more."""

    def __init__(self, added: Sequence[Container[int]] = ()) -> None:
        self.established: dict[int, str] = {}  # graph id -> its mode (read without the lock on the hot path)
        self._lock = threading.Lock()
        self._added = added  # a graph id in any of these is added to the session (empty: every id counts as added)

    def claim(self, graph_id: int, mode: str, context: str) -> bool:
        """Fixes ``graph_id``'s mode to ``mode`` or raises ExecutionModeError; True if this call fixed it (for
        ``release``), False if the graph already ran in ``mode``."""
        fresh = graph_id not in self.established
        established = self.established.setdefault(graph_id, mode)  # atomic: the first caller's mode wins
        if established == mode:
            return fresh
        if not self._exists(graph_id):
            with self._lock:
                self.established[graph_id] = mode
            return True
        self._conflict(graph_id, mode, established, context)

    def release(self, graph_id: int, mode: str) -> None:
        """Undoes a ``claim`` that fixed ``mode`` when the runtime did not: GE's RunGraph and
        RunGraphWithStreamAsync set the mode only after their implicit compile and load succeeded."""
        with self._lock:
            if self.established.get(graph_id) == mode:
                del self.established[graph_id]

    def check(self, graph_id: int, mode: str, context: str) -> None:
        """Raises as ``claim`` would, without fixing the mode (for what will run in ``mode`` later)."""
        established = self.established.get(graph_id, mode)
        if established != mode and self._exists(graph_id):
            self._conflict(graph_id, mode, established, context)

    def _exists(self, graph_id: int) -> bool:
        # GE looks the graph up before its mode: a call on a graph that is not there (never added, or removed)
        # fails as such, and the mode an earlier call on it claimed is no conflict
        return not self._added or any(graph_id in ids for ids in self._added)

    def _conflict(self, graph_id: int, mode: str, established: str, context: str) -> NoReturn:
        ge_text = (f"E10062: Failed to call {mode}. Reason: {established} was already called for the graph "
                   f"(graph_id={graph_id}). {mode} and {established} are mutually exclusive and cannot be used "
                   "together.")
        hint = (f"graph {graph_id} already runs in {established} mode ({_PYTHON_API[established]}), fixed by its "
                f"first run; {_PYTHON_API[mode]} needs {mode} mode. To change the mode, remove_graph({graph_id}) "
                f"and add_graph({graph_id}, <a fresh Graph>) again, or add the model under another graph id.")
        raise ExecutionModeError(_CONFLICT_STATUS[mode], f"{ge_text} {hint}", f"GeSession::{mode}", context)

    def reset(self, graph_id: int) -> None:
        with self._lock:
            self.established.pop(graph_id, None)
