"""The in-flight bound: at most ``max_in_flight`` requests of a session with the runtime (and the 32-callback bound of
a dynamic-shape graph). Waiters park without blocking their loop."""

from __future__ import annotations

import collections
import threading
from typing import Callable, Optional

from . import _loops

_WATCH_MAX = 1.0  # at most this many seconds between a waiter's looks for grants lost to closed loops
_SENT_SWEEP = 64


class InFlightBound:
    """The in-flight bound of a session. Waiters park without blocking their loop; a released slot goes to the
    oldest waiter, woken on its own loop (directly when that is the current thread's loop)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0
        self._lock = threading.Lock()
        self._waiters: collections.deque[_loops.WakeUp] = collections.deque()
        # wake-ups sent whose task has not resumed yet: a loop closed meanwhile would keep their slots for good
        self._sent: collections.deque[_loops.WakeUp] = collections.deque()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def waiting_on_live_loops(self) -> bool:
        """Someone waits whose loop can still resume it (a closed loop's tasks never do)."""
        with self._lock:
            return any(not w.orphaned() for w in self._waiters)

    def waiting_loops(self) -> list[object]:
        """The asyncio loops of the waiters (for aclose()'s warning; trio's are None)."""
        with self._lock:
            return [w.loop for w in self._waiters]

    def try_acquire(self) -> bool:
        with self._lock:
            if self.in_flight < self.limit and not self._waiters:
                self.in_flight += 1
                return True
            return False

    async def acquire(self) -> None:
        if self.try_acquire():
            return
        self.recover()
        wake_up = _loops.wake_up(on_lost=self.release)  # a slot granted to a waiter that gave up passes on
        if self._park(wake_up):
            return
        # While this waits (on any loop, trio's too) it looks now and then for what was granted to tasks of asyncio
        # loops closed before they resumed, so that waiting never depends on someone else arriving (or on aclose())
        # to notice them.
        try:
            await wake_up.wait(self._watch_tick())
        except BaseException:
            if wake_up.abandon():
                self.release()  # granted, but the task was cancelled before it could use the slot
            else:
                self._unpark(wake_up)
            raise

    def _watch_tick(self) -> Callable[[], Optional[float]]:
        delay = _loops.WATCH_FIRST

        def tick() -> Optional[float]:
            nonlocal delay
            self.recover()
            delay = min(delay * 2, _WATCH_MAX)  # backing off: a waiter may wait long, and thousands may wait
            return delay

        return tick

    def recover(self) -> None:
        """Takes back what was granted to tasks whose loop was closed before they resumed (overridden by the compile
        gate, which also passes on the turn of a compile whose request's loop is closed)."""
        if self._sent:
            self._reclaim()

    def _park(self, waiter: _loops.WakeUp) -> bool:
        """Queues a waiter; returns True if a slot was free after all (no wait needed)."""
        with self._lock:
            if self.in_flight < self.limit and not self._waiters:
                self.in_flight += 1
                return True
            self._waiters.append(waiter)
            return False

    def _unpark(self, waiter: _loops.WakeUp) -> None:
        """A waiter gave up: forget it now, so ``waiting`` does not count it."""
        with self._lock:
            try:
                self._waiters.remove(waiter)
            except ValueError:  # already granted
                pass

    def _reclaim(self) -> None:
        """Takes back the slots sent to waiters whose loop was closed before the wake-up arrived: their tasks never
        resume (an application may even keep them), and only the collector closing them would free the slots."""
        with self._lock:
            sent = [w for w in self._sent if w.in_transit()]
            self._sent = collections.deque(sent)
        lost = sum(w.reclaim() for w in sent)  # (a reclaimed one leaves _sent at the next look: in_transit() is False)
        if lost:
            self.release(lost)

    def release(self, n: int = 1) -> None:
        """Frees ``n`` slots: each goes to the oldest waiter, else back to the pool."""
        while n:
            with self._lock:
                if not self._waiters:
                    self.in_flight -= n
                    return
                waiter = self._waiters.popleft()
            # The slot passes to the waiter (in_flight unchanged); skip waiters that gave up.
            if waiter.set():
                n -= 1
                if waiter.in_transit():  # remembered until its task resumes (its loop may stop, then close)
                    with self._lock:
                        sent = self._sent
                        while sent and not sent[0].in_transit():
                            sent.popleft()
                        if len(sent) >= _SENT_SWEEP:  # one stuck at the head (its loop stopped) keeps no others
                            self._sent = sent = collections.deque(w for w in sent if w.in_transit())
                        sent.append(waiter)


class WaitersByLoop:
    """Requests counted by the loop they wait on, so that aclose() waits only for those a loop can still resume:
    a request whose loop was closed while it waited never ends (unless the collector frees its task, which the
    application may keep)."""

    __slots__ = ("_counts", "_lock")

    def __init__(self) -> None:
        self._counts: dict[object, int] = {}  # loop (None on trio) -> requests
        self._lock = threading.Lock()  # a session's loops may run in several threads

    def add(self) -> object:
        loop = _loops.running_loop()
        with self._lock:
            self._counts[loop] = self._counts.get(loop, 0) + 1
        return loop

    def remove(self, loop: object) -> None:
        with self._lock:
            left = self._counts[loop] - 1
            if left:
                self._counts[loop] = left
            else:
                del self._counts[loop]

    def __bool__(self) -> bool:
        return bool(self._counts)

    def loops(self) -> list[object]:
        with self._lock:
            return list(self._counts)

    def on_live_loops(self) -> bool:
        with self._lock:
            return any(loop is None or not loop.is_closed() for loop in self._counts)  # type: ignore[attr-defined]
