"""Event-loop differences, in one place: which loop runs the calling task (asyncio -- uvloop included -- or trio),
what a task awaits for a result delivered on its loop's thread, how another thread wakes a waiting task, how
a task's await is bounded by a timeout, and how a check repeats on a loop (``call_repeatedly``).

Everything above (the completion hubs, the in-flight bound, the batcher) asks here instead of testing for trio
itself, so supporting another loop means changing this module only.
"""

from __future__ import annotations

import asyncio
import logging
import numbers
import sys
import threading
from typing import Any, Callable, Generator, Literal, Optional, Protocol

import anyio

Flavour = Literal["asyncio", "trio"]

# The asyncio (or uvloop) loop running in this thread, or None: asyncio's own C accessor, called on every run.
running_loop: Callable[[], Optional[asyncio.AbstractEventLoop]] = asyncio._get_running_loop


def trio_token() -> Any:
    """The trio token of the run in this thread, or None outside trio (trio is never imported here)."""
    trio = sys.modules.get("trio")
    if trio is None:
        return None
    try:
        return trio.lowlevel.current_trio_token()
    except (RuntimeError, AttributeError):  # AttributeError: another thread is importing trio
        return None


def loop_flavour() -> Flavour:
    """ "asyncio" (incl. uvloop) or "trio", for the calling task; RuntimeError outside both."""
    if running_loop() is not None:
        return "asyncio"
    if trio_token() is not None:
        return "trio"
    raise RuntimeError("geasync's async API must be awaited inside an asyncio (or uvloop) or trio event loop")


def require_loop(api: str) -> None:
    """RuntimeError naming ``api`` unless the calling thread runs an asyncio (or uvloop) or trio loop. For the
    error paths and first steps of the async API: a coroutine driven by hand, or by another framework, in a thread
    without a loop used to fail deep inside (anyio's NoEventLoopError, or a message naming no API)."""
    if running_loop() is None and trio_token() is None:
        raise RuntimeError(f"{api} must be awaited inside an asyncio (or uvloop) or trio event loop, and this "
                           "thread runs none; from another thread, hand the coroutine to the loop's thread (e.g. "
                           "asyncio.run_coroutine_threadsafe) or use the synchronous API (run_graph)")


class Deadline(Protocol):
    """What fail_after returns: an async context manager that knows whether it expired (so a TimeoutError it
    raised can be told from one raised inside it)."""

    async def __aenter__(self) -> Any: ...

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> Optional[bool]: ...

    def expired(self) -> bool: ...


# asyncio's own timeout (Python 3.11+): on asyncio and uvloop it costs a third of anyio's fail_after (whose cancel
# scope keeps per-task state), measured 6-11 us against 20-28 us a call; both raise TimeoutError and let other
# cancellations through. Services pass a timeout with every request, so this is per-request work.
_asyncio_timeout: Optional[Callable[[Optional[float]], Deadline]] = getattr(asyncio, "timeout", None)


class _AnyioFailAfter:
    """anyio's fail_after as an async context manager (trio, and asyncio before Python 3.11)."""

    __slots__ = ("_manager", "_scope")

    def __init__(self, seconds: float) -> None:
        self._manager = anyio.fail_after(seconds)
        self._scope: Optional[anyio.CancelScope] = None

    async def __aenter__(self) -> None:
        self._scope = self._manager.__enter__()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> Optional[bool]:
        return self._manager.__exit__(exc_type, exc, tb)

    def expired(self) -> bool:
        return self._scope is not None and self._scope.cancel_called


def check_timeout(timeout: object, api: str) -> float:
    """``timeout`` as a float number of seconds (inf: none), or TypeError / ValueError naming ``api``. NaN is
    refused (it would never expire on one loop and at once on another), and numpy scalars become floats: trio's
    own deadline arithmetic fails on them inside its run loop."""
    if type(timeout) is float:
        seconds = timeout
    elif isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError(f"{api}: timeout must be a number of seconds or None, got {timeout!r}")
    else:
        seconds = float(timeout)
    if seconds != seconds:
        raise ValueError(f"{api}: timeout must be a number of seconds or None, got NaN")
    return seconds


def fail_after(seconds: float) -> Deadline:
    """``async with fail_after(seconds):`` raises TimeoutError in the calling task when its body has not finished
    within ``seconds`` (a real number of seconds; inf: never, <= 0: at its first await)."""
    if _asyncio_timeout is not None and running_loop() is not None:
        return _asyncio_timeout(seconds)
    return _AnyioFailAfter(seconds)


class TrioWaiter:
    """What a trio task awaits for a result set on its run's thread: the subset of asyncio.Future geasync uses
    (``done``, ``set_result``, ``set_exception``), awaitable like one. A task that stops waiting (cancelled)
    marks it done, so whoever completes it later knows nobody wants the result."""

    __slots__ = ("event", "result", "error", "abandoned")

    def __init__(self) -> None:
        import trio

        self.event = trio.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.abandoned = False

    def done(self) -> bool:
        return self.abandoned or self.event.is_set()

    def set_result(self, result: Any) -> None:
        self.result = result
        self.event.set()

    def set_exception(self, error: BaseException) -> None:
        self.error = error
        self.event.set()

    def cancel(self) -> None:
        """Nobody will await it (as asyncio.Future.cancel() for a future never awaited)."""
        self.abandoned = True

    async def _wait(self) -> Any:
        try:
            await self.event.wait()
        except BaseException:
            self.abandoned = True
            raise
        if self.error is not None:
            raise self.error
        return self.result

    def __await__(self) -> Generator[Any, None, Any]:
        return self._wait().__await__()


def new_waiter(loop: Optional[asyncio.AbstractEventLoop] = None) -> "asyncio.Future[Any] | TrioWaiter":
    """A waiter for the calling task's loop (``loop``: its asyncio loop, when the caller knows it)."""
    if loop is None:
        loop = running_loop()
    if loop is not None:
        return loop.create_future()
    loop_flavour()  # a clear error outside any loop
    return TrioWaiter()


class WakeUp(Protocol):
    """A task parked until another thread (or its own) wakes it; see ``wake_up``."""

    def set(self) -> bool:
        """From any thread: wakes the task; False if it gave up already or its loop is gone."""

    async def wait(self, watch: Optional[Callable[[], Optional[float]]] = None) -> None:
        """Parks the calling task until ``set``; raises when it is cancelled. ``watch`` (if given) is called on the
        task's loop meanwhile, after a first delay, then after each delay it returns (None: no more)."""

    def abandon(self) -> bool:
        """After ``wait`` raised: True if a wake-up had been sent, delivered or not (what it granted now belongs to
        the caller); else False, and a wake-up that reaches the task later calls ``on_lost`` instead of waking it."""

    def in_transit(self) -> bool:
        """A wake-up was sent (from any thread, delivered or not) and its task has not resumed yet."""

    def orphaned(self) -> bool:
        """The task's loop is closed: it never resumes on its own."""

    @property
    def loop(self) -> Optional[asyncio.AbstractEventLoop]:
        """The task's asyncio loop (None on trio)."""

    def reclaim(self) -> bool:
        """From any thread: True (once) if a wake-up was sent to a task whose loop was closed before the task resumed
        (before the wake-up arrived, or after, before the task's next step): the task will never take what it
        granted, which now belongs to the caller."""


WATCH_FIRST = 0.05  # seconds before a waiter's first watch call


def wake_up(on_lost: Callable[[], None]) -> WakeUp:
    """A thread-safe wake-up for the calling task. ``on_lost`` runs (on the task's loop thread) if a wake-up
    reaches a task that gave up meanwhile, so what it granted can be passed on."""
    loop = running_loop()
    if loop is not None:
        return _AsyncioWakeUp(loop, on_lost)
    loop_flavour()
    return _TrioWakeUp()


# _AsyncioWakeUp's states. Who owns what a wake-up granted: the task once GRANTED (set on its loop, its next step
# due) or RESUMED; the caller of abandon() or reclaim() once TAKEN; on_lost once LOST; the waker while WAITING or
# GAVE_UP (set() refuses). A loop stopped between delivering a wake-up and the task's step, then closed, leaves the
# task GRANTED for good: reclaim() takes that back too.
_WAITING, _SENT, _GRANTED, _GAVE_UP, _TAKEN, _LOST, _RESUMED = range(7)


class _AsyncioWakeUp:
    __slots__ = ("_loop", "_future", "_on_lost", "_state", "_lock")

    def __init__(self, loop: asyncio.AbstractEventLoop, on_lost: Callable[[], None]) -> None:
        self._loop = loop
        self._future: asyncio.Future[None] = loop.create_future()
        self._on_lost = on_lost
        self._state = _WAITING
        self._lock = threading.Lock()  # set() from other threads races abandon() (on the loop, or the collector's)

    def set(self) -> bool:
        with self._lock:
            if self._state != _WAITING or self._future.done():
                return False
            if running_loop() is self._loop:
                self._state = _GRANTED
                self._future.set_result(None)
                return True
            try:
                self._loop.call_soon_threadsafe(self._deliver)
            except RuntimeError:  # its loop is closed: nobody will take what the wake-up grants
                return False
            self._state = _SENT
            return True

    def in_transit(self) -> bool:
        return self._state == _SENT or self._state == _GRANTED

    def orphaned(self) -> bool:
        return self._loop.is_closed()

    @property
    def loop(self) -> Optional[asyncio.AbstractEventLoop]:
        return self._loop

    def _deliver(self) -> None:
        with self._lock:
            if self._state != _SENT:
                return  # taken by abandon() or reclaim() meanwhile
            lost = self._future.done()  # the task gave up while the wake-up was in transit
            self._state = _LOST if lost else _GRANTED
            if not lost:
                self._future.set_result(None)
        if lost:
            self._on_lost()

    async def wait(self, watch: Optional[Callable[[], Optional[float]]] = None) -> None:
        if watch is None:
            await self._future
        else:
            timer = _AsyncioTimer(self._loop, WATCH_FIRST, watch)  # a loop timer: cheaper than a timeout's scope
            try:
                await self._future
            finally:
                timer.cancel()
        # on the loop's thread, so never while reclaim() sees the loop closed: it owns what was granted from now on
        self._state = _RESUMED

    def abandon(self) -> bool:
        with self._lock:
            if self._state in (_GRANTED, _SENT):
                self._state = _TAKEN  # reclaim() must not take it again (the collector may close a GRANTED task)
                return True
            if self._state == _WAITING:
                self._state = _GAVE_UP
        if self._loop.is_closed():
            # The collector is closing the task's coroutines (in any order): cancelling would clear the future's
            # callbacks, the task's last reference, and free the task's outer coroutine in the middle of closing this
            # one ("ValueError: coroutine already executing", reported as unraisable). Its callbacks never run anyway.
            return False
        try:
            self._future.cancel()
        except RuntimeError:  # its loop was closed meanwhile: cancelled all the same
            pass
        return False

    def reclaim(self) -> bool:
        with self._lock:
            if (self._state == _SENT or self._state == _GRANTED) and self._loop.is_closed():
                self._state = _TAKEN
                return True
            return False


class _TrioWakeUp:
    __slots__ = ("_event", "_token", "_thread", "_granted", "_abandoned", "_lock")

    def __init__(self) -> None:
        import trio

        self._event = trio.Event()
        self._token = trio.lowlevel.current_trio_token()
        self._thread = threading.get_ident()
        self._granted = False
        self._abandoned = False
        self._lock = threading.Lock()  # a wake-up from another loop's thread races the task's cancellation

    def set(self) -> bool:
        import trio

        with self._lock:
            if self._abandoned or self._granted:
                return False
            if threading.get_ident() == self._thread:
                self._event.set()
            else:
                try:
                    self._token.run_sync_soon(self._event.set)
                except trio.RunFinishedError:  # its run is over: nobody will take what the wake-up grants
                    return False
            self._granted = True
            return True

    def in_transit(self) -> bool:
        return False  # a trio run ends only once its tasks have: a task that parked here wakes, or is cancelled

    def orphaned(self) -> bool:
        return False

    @property
    def loop(self) -> Optional[asyncio.AbstractEventLoop]:
        return None

    async def wait(self, watch: Optional[Callable[[], Optional[float]]] = None) -> None:
        if watch is None:
            await self._event.wait()
            return
        import trio

        # waits in slices (a timer's system task per waiter costs far more than a cancel scope)
        delay: Optional[float] = WATCH_FIRST
        while True:
            if delay is None:
                await self._event.wait()
                return
            with trio.move_on_after(delay):
                await self._event.wait()
                return
            delay = watch()

    def abandon(self) -> bool:
        with self._lock:
            self._abandoned = not self._granted
            return self._granted

    def reclaim(self) -> bool:
        return False


class Timer(Protocol):
    """A repeating check on one loop, from ``call_repeatedly``."""

    def cancel(self) -> None:
        """From any thread: no further calls (one already under way on the loop's thread finishes)."""

    @property
    def active(self) -> bool:
        """Not stopped or cancelled, and its loop still runs."""


def call_repeatedly(delay: float, callback: Callable[[], Optional[float]]) -> Timer:
    """Calls ``callback()`` on the calling task's loop after ``delay`` seconds, then again after each delay it
    returns, until it returns None, the timer is cancelled or the loop ends (a trio run, or a closed asyncio loop,
    takes the timer with it). ``callback`` must not raise: on trio the timer is a system task, whose exception
    would end the whole run, so one that raises stops the timer and is logged."""
    loop = running_loop()
    if loop is not None:
        return _AsyncioTimer(loop, delay, callback)
    loop_flavour()
    return _TrioTimer(delay, callback)


def _report(callback: Callable[..., Any]) -> None:
    # the loops' layer has no logger of its own; geasync's is the one services configure
    logging.getLogger("geasync").exception("geasync: timer callback %r failed; it is not called again", callback)


class _AsyncioTimer:
    __slots__ = ("_loop", "_callback", "_handle")

    def __init__(self, loop: asyncio.AbstractEventLoop, delay: float, callback: Callable[[], Optional[float]]) -> None:
        self._loop = loop
        self._callback = callback
        self._handle: Optional[asyncio.TimerHandle] = loop.call_later(delay, self._fire)

    def _fire(self) -> None:
        if self._handle is None:  # cancelled from another thread while this call was already due
            return
        try:
            delay = self._callback()
        except Exception:
            _report(self._callback)
            delay = None
        # _handle is None if the callback cancelled the timer
        self._handle = None if delay is None or self._handle is None else self._loop.call_later(delay, self._fire)

    def cancel(self) -> None:
        handle, self._handle = self._handle, None
        if handle is None:
            return
        if running_loop() is self._loop:
            handle.cancel()
            return
        try:
            self._loop.call_soon_threadsafe(handle.cancel)  # a TimerHandle is cancelled on its loop's thread
        except RuntimeError:  # the loop is closed: its timers went with it
            pass

    @property
    def active(self) -> bool:
        return self._handle is not None and not self._loop.is_closed()


class _TrioTimer:
    __slots__ = ("_callback", "_scope", "_token", "_thread", "_done")

    def __init__(self, delay: float, callback: Callable[[], Optional[float]]) -> None:
        import trio

        self._callback = callback
        self._scope = trio.CancelScope()
        self._token = trio.lowlevel.current_trio_token()
        self._thread = threading.get_ident()
        self._done = False
        # a system task: trio has no call_later, and a system task cannot keep the run from ending
        trio.lowlevel.spawn_system_task(self._run, delay, name="geasync-timer")

    async def _run(self, delay: Optional[float]) -> None:
        import trio

        try:
            with self._scope:
                while delay is not None:
                    await trio.sleep(delay)
                    try:
                        delay = self._callback()
                    except Exception:
                        _report(self._callback)
                        delay = None
        finally:
            self._done = True

    def cancel(self) -> None:
        import trio

        self._done = True
        if threading.get_ident() == self._thread:
            self._scope.cancel()
            return
        try:
            self._token.run_sync_soon(self._scope.cancel)
        except trio.RunFinishedError:  # the run is over: its system tasks went with it
            pass

    @property
    def active(self) -> bool:
        return not self._done
