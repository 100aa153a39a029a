"""The in-flight bound: at most ``max_in_flight`` requests of a session with the runtime (and the 32-callback bound of
a dynamic-shape graph). Waiters park without blocking their loop."""

from __future__ import annotations

import collections
import threading
from typing import Callable

from . import _loops


class InFlightBound:
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
