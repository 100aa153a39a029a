"""Input pins: GE borrows input memory until it reports completion (RunGraphAsync: its callback; stream mode: the
stream passing the run). A request's pins hold every input object until then, even when the awaiting task was
cancelled; numpy inputs are made read-only for the flight (so a write mid-flight raises instead of racing the
runtime), and their bytes count in the session's pinned-bytes ledger. A RunGraphAsync request freezes its inputs only
once the loop may run other code (``RunRequest.guard``): one that completes during its submit's poll never is."""

from __future__ import annotations

import threading
from typing import Any, Sequence

import numpy as np

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
        frozen = self._frozen
        with self._lock:
            for a in arrays:
                base = a.base
                if base is not None and isinstance(base, np.ndarray):
                    chain = [a]
                    while isinstance(chain[-1].base, np.ndarray):
                        chain.append(chain[-1].base)
                    for array in reversed(chain):  # the owner first
                        entries.append(self._pin(array))
                    continue
                # an array owning its memory (or viewing a non-numpy buffer): _pin inlined, on every run's path
                entry = frozen.get(id(a))
                if entry is None:
                    if a.flags.writeable:
                        a.setflags(write=False)
                        entry = frozen[id(a)] = [a, 1, True, None]
                    else:
                        entry = frozen[id(a)] = [a, 1, False, None]
                else:
                    entry[1] += 1
                entries.append(entry)
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
        frozen = self._frozen
        with self._lock:
            for entries in groups:
                for entry in entries:
                    entry[1] -= 1
                    if entry[1] == 0:
                        a = entry[0]
                        del frozen[id(a)]
                        if entry[2]:
                            if a.base is None and entry[3] is None:  # an owner no view waits for: the usual case
                                try:
                                    a.setflags(write=True)
                                except ValueError:  # as _make_writeable: it stays as numpy allows
                                    pass
                            else:
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
