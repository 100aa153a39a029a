"""The lifetime guard: per-request input pins, per-graph run-mode exclusivity, the in-flight bound and statistics.

GE borrows input memory until it reports completion (RunGraphAsync: its callback; stream mode: the stream passing
the run). A request's pins hold every input object until then, even when the awaiting task was cancelled, and
numpy inputs are made read-only for the flight so that a write mid-flight raises instead of racing the runtime.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional, Sequence

import numpy as np

from . import _loops
from ._stats import GraphStatistics, HistogramSnapshot, empty_histogram
from .errors import FAILED, ExecutionModeError

RUN_GRAPH = "RunGraph"
RUN_GRAPH_ASYNC = "RunGraphAsync"
RUN_GRAPH_WITH_STREAM_ASYNC = "RunGraphWithStreamAsync"

_PYTHON_API = {
    RUN_GRAPH: "Session.run_graph / run_graph_in_thread",
    RUN_GRAPH_ASYNC: "Session.run_graph_async",
    RUN_GRAPH_WITH_STREAM_ASYNC: "Session.run_graph_with_stream_async",
}
# What GE returns for a conflicting call in each mode (ge_v2_contract.md §3).
_CONFLICT_STATUS = {RUN_GRAPH: 1343225956, RUN_GRAPH_ASYNC: 1343225956, RUN_GRAPH_WITH_STREAM_ASYNC: FAILED}


class ModeRegistry:
    """GE's per-graph run-mode exclusivity, checked before the runtime is called so the error can say more."""

    def __init__(self) -> None:
        self.established: dict[int, str] = {}  # graph id -> its mode (read without the lock on the hot path)
        self._lock = threading.Lock()

    def claim(self, graph_id: int, mode: str, context: str) -> None:
        established = self.established.setdefault(graph_id, mode)  # atomic: the first caller's mode wins
        if established == mode:
            return
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


class _Freezer:
    """Marks numpy arrays read-only while any request pins them and restores the flag after the last one."""

    def __init__(self) -> None:
        # re-entrant: a finalizer (an unclosed Session collected mid-freeze) may release pins in the same thread
        self._lock = threading.RLock()
        self._frozen: dict[int, list[Any]] = {}  # id(array) -> its entry (see _pin)

    def freeze(self, arrays: Sequence[np.ndarray]) -> list[list[Any]]:
        """Pins ``arrays`` and the numpy arrays they view (their ``base`` chain: a write through the array that
        owns the memory would race the runtime as much as one through the view); returns their entries, which
        ``thaw`` takes (no lookups on the way back), owners before their views.

        Not reachable, so not frozen: other views of the same memory made before the run, and memory owned by a
        non-numpy object (a bytearray, an mmap) written through that object."""
        entries: list[list[Any]] = []
        with self._lock:
            for a in arrays:
                if isinstance(a.base, np.ndarray):
                    chain = [a]
                    while isinstance(chain[-1].base, np.ndarray):
                        chain.append(chain[-1].base)
                    for array in reversed(chain):  # the owner first
                        entries.append(self._pin(array))
                else:
                    entries.append(self._pin(a))
        return entries

    def _pin(self, a: np.ndarray) -> list[Any]:
        entry = self._frozen.get(id(a))
        if entry is None:
            was_writeable = a.flags.writeable
            if was_writeable:
                a.flags.writeable = False
            elif isinstance(a.base, np.ndarray):  # read-only only because it waits for its base to thaw
                was_writeable = self._unpark(a)
            # [array, pin count, was writeable, views thawed while this array was still pinned]
            entry = self._frozen[id(a)] = [a, 1, was_writeable, None]
        else:
            entry[1] += 1
        return entry

    def _unpark(self, a: np.ndarray) -> bool:
        base_entry = self._frozen.get(id(a.base))
        parked: list[list[Any]] = (base_entry[3] if base_entry is not None else None) or []
        for i, entry in enumerate(parked):
            if entry[0] is a:
                del parked[i]
                return True
        return False

    def thaw(self, entries: list[list[Any]]) -> None:
        self.thaw_batch((entries,))

    def thaw_batch(self, groups: Sequence[list[list[Any]]]) -> None:
        """Thaws the entries of several requests under one lock."""
        with self._lock:
            for entries in groups:
                for entry in entries:
                    entry[1] -= 1
                    if entry[1] == 0:
                        del self._frozen[id(entry[0])]
                        if entry[2]:
                            self._make_writeable(entry)

    def _make_writeable(self, entry: list[Any]) -> None:
        a = entry[0]
        base_entry = self._frozen.get(id(a.base)) if isinstance(a.base, np.ndarray) else None
        if base_entry is not None:  # numpy refuses a writeable view of a read-only base: wait for the base
            if base_entry[3] is None:
                base_entry[3] = []
            base_entry[3].append(entry)
            return
        try:
            a.flags.writeable = True
        except ValueError:  # its base was made read-only by its owner meanwhile: it stays as numpy allows
            return
        for view in entry[3] or ():
            self._make_writeable(view)
        entry[3] = None


FREEZER = _Freezer()


class PinnedBytes:
    """The ledger of a session's pinned input memory, in every run mode (``SessionStatistics.pinned_bytes``):
    only ``Pins`` (and the batched release of run requests, which unpins several at once) change it."""

    __slots__ = ("total",)

    def __init__(self) -> None:
        self.total = 0


class Pins:
    """Everything a request's native memory depends on, held until the runtime reports completion (``unpin``).

    ``objects`` holds what the native descriptors point into; numpy ``arrays`` are frozen read-only meanwhile
    unless ``freeze`` is false; ``nbytes`` count in ``ledger`` until then. A request in flight can be its own pins
    (subclass), one object fewer per run.
    """

    __slots__ = ("objects", "frozen", "nbytes", "ledger")

    def __init__(self, objects: Any, arrays: Sequence[np.ndarray], nbytes: int, freeze: bool,
                 ledger: PinnedBytes) -> None:
        self.objects = objects
        self.nbytes = nbytes
        self.ledger = ledger
        ledger.total += nbytes
        self.frozen = FREEZER.freeze(arrays) if freeze and arrays else None  # the arrays' freezer entries

    def unpin(self) -> None:
        """Idempotent."""
        if self.objects is None:
            return
        self.ledger.total -= self.nbytes
        self.objects = None
        if self.frozen:
            frozen, self.frozen = self.frozen, None
            FREEZER.thaw(frozen)


@dataclass(frozen=True)
class SessionStatistics:
    """A snapshot of a session's runs in every mode (``Session.statistics()``), totals of ``graphs``.

    ``submitted == completed + failed + cancelled + in_flight + waiting``: a run is submitted when geasync takes it
    (after its arguments and run mode are checked); ``waiting`` is for a slot (``max_in_flight``, or the 32-callback
    bound of a dynamic-shape graph); ``in_flight`` is with the runtime (RunGraphAsync, stream-mode runs until the
    stream passes them, synchronous and in-thread runs while they run); ``failed`` includes runs the runtime
    refused at submit; ``cancelled`` counts runs whose caller gave up (cancelled, timed out) before they ran or
    before their completion arrived. ``abandoned`` counts runs in flight for longer than the session's
    ``abandon_after`` seconds (a callback that never came); they stay in ``in_flight``. ``oldest_age`` is the
    age in seconds of the oldest run in flight, ``latency`` the histogram of completed runs' latencies.
    """

    in_flight: int
    waiting: int
    completed: int
    failed: int
    cancelled: int
    pinned_bytes: int
    max_in_flight: int
    submitted: int = 0
    abandoned: int = 0
    oldest_age: Optional[float] = None
    latency: HistogramSnapshot = field(default_factory=empty_histogram)
    graphs: dict[int, GraphStatistics] = field(default_factory=dict)  # graph id -> GraphStatistics

    def as_dict(self) -> dict[str, Any]:
        """Plain data (JSON-serialisable): histograms as bounds and counts, graphs keyed by their id."""
        return asdict(self)


class Slots:
    """The in-flight bound of a session. Waiters park without blocking their loop; a released slot goes to the
    oldest waiter, woken on its own loop (directly when that is the current thread's loop)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0
        self._lock = threading.Lock()
        self._waiters: collections.deque[Callable[[], bool]] = collections.deque()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def try_acquire(self) -> bool:
        with self._lock:
            if self.in_flight < self.limit and not self._waiters:
                self.in_flight += 1
                return True
            return False

    async def acquire(self) -> None:
        if self.try_acquire():
            return
        wake_up = _loops.wake_up(on_lost=self.release)  # a slot granted to a waiter that gave up passes on
        if self._park(wake_up.set):
            return
        try:
            await wake_up.wait()
        except BaseException:
            if wake_up.abandon():
                self.release()  # granted, but the task was cancelled before it could use the slot
            else:
                self._unpark(wake_up.set)
            raise

    def _park(self, grant: Callable[[], bool]) -> bool:
        """Queues a waiter; returns True if a slot was free after all (no wait needed)."""
        with self._lock:
            if self.in_flight < self.limit and not self._waiters:
                self.in_flight += 1
                return True
            self._waiters.append(grant)
            return False

    def _unpark(self, grant: Callable[[], bool]) -> None:
        """A waiter gave up: forget it now, so ``waiting`` does not count it."""
        with self._lock:
            try:
                self._waiters.remove(grant)
            except ValueError:  # already granted
                pass

    def release(self, n: int = 1) -> None:
        """Frees ``n`` slots: each goes to the oldest waiter, else back to the pool."""
        while n:
            with self._lock:
                if not self._waiters:
                    self.in_flight -= n
                    return
                grant = self._waiters.popleft()
            # The slot passes to the waiter (in_flight unchanged); skip waiters that gave up.
            if grant():
                n -= 1
