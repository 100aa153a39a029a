"""Completion hubs: the single way runtime completions come back into an event loop.

One hub per event loop owns a native completion queue. Runtime threads (GE's model threads, ACL's callback thread)
push records there and write its eventfd once per batch; they never enter Python. The hub drains the queue on the
loop's thread -- ``loop.add_reader`` on asyncio and uvloop, a system task on ``trio.lowlevel.wait_readable`` on
trio -- and settles each request's waiter there, after checking it is still wanted. A lone request is submitted at
once and its completion polled for briefly; requests made while others are in flight are sent together, in one
native call, once the loop has run its other ready tasks.

When a loop goes away with requests in flight, its hub becomes an orphan: a Python reaper thread drains it until the
runtime has delivered every completion, releasing pins and outputs, and only then closes the queue (so a late
eventfd write never hits a reused descriptor).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import os
import select
import threading
import time
import weakref
from _thread import get_ident as _get_ident
from asyncio import AbstractEventLoop, Future
from typing import TYPE_CHECKING, Any, Callable, Sequence

from . import _lib
from ._loops import TrioWaiter, loop_flavour, running_loop as _running_loop, trio_token
from .errors import FAILED, SessionClosedError
from .tensor import TENSORS

class Request:
    """A piece of native async work a hub waits for. Subclasses have a ``waiter`` (from ``Hub.new_waiter``) and a
    ``context`` (the call, for error messages), and say how a completion record becomes a result (``settle``,
    called only if someone still waits) and what to release (``release``, called exactly once)."""

    __slots__ = ()
    waiter: Any
    if TYPE_CHECKING:
        @property
        def context(self) -> str: ...

    def settle(self, status: int, kind: int, outputs: Any, text: str) -> tuple[Any, BaseException | None]:
        raise NotImplementedError

    def release(self, wanted: bool) -> None:
        """Called once, when the completion arrives (wanted=False if nobody waits for it any more)."""

    def complete(self, status: int, kind: int, outputs: Any, text: str, orphaned: bool) -> bool:
        """The completion arrived (on the consumer's thread): settle if someone still waits, release, resolve.
        A failure while settling or releasing reaches the awaiting task, never native code; one nobody awaits is
        raised after the waiter is resolved, for the hub to report.

        A subclass may resolve the waiter and return True instead of releasing: the hub then releases every such
        request of the drained batch at once, with ``release_batch``."""
        waiter = self.waiter
        wanted = not orphaned and not waiter.done()
        result: Any = None
        error: BaseException | None = None
        stray: BaseException | None = None
        if wanted:
            try:
                result, error = self.settle(status, kind, outputs, text)
            except Exception as exc:
                error = exc
        try:
            self.release(wanted)
        except Exception as exc:
            if wanted and error is None:
                error = exc
            else:
                stray = exc
        if wanted:
            if error is not None:
                waiter.set_exception(error)
            else:
                waiter.set_result(result)
        if stray is not None:
            raise stray
        return False

    def release_batch(self, requests: list["Request"]) -> None:
        """Releases ``requests`` (this one's type, each resolved by a ``complete`` that returned True)."""
        raise NotImplementedError


class RunRequest(Request):
    """A RunGraphAsync request: it says what to submit (``handle``: its session's handle, None once the session is
    closed; ``graph_id``; ``rows``: its inputs' descriptor rows, see ``_lib.PreparedInputs``; the request keeps what
    they point to alive until its completion), so a hub submits it without knowing sessions."""

    __slots__ = ()
    graph_id: int

    @property
    def handle(self) -> Any:
        raise NotImplementedError

    @property
    def rows(self) -> Sequence[_lib.InputRow]:
        raise NotImplementedError

    @property
    def users(self) -> list[int]:
        """Its session's record of the native calls in progress on the handle: a submit adds its thread's id
        before it reads ``handle`` and removes it once the call returns, and the session's close() (which another
        thread may call) waits until none is left before it destroys the handle."""
        raise NotImplementedError

    def guard(self) -> None:
        """Other code of the loop is about to run while this request is in flight (it waits for a batched submit,
        or its submit returned without its completion): protect what the runtime reads from here on. Called at
        most once, on the loop's thread; not at all for a run that completed during its submit's poll, when the
        loop's thread never left geasync (as in a synchronous run)."""


# Nanoseconds a lone RunGraphAsync submit polls for its completion before the loop waits on the eventfd
# ($GEASYNC_SPIN_US, in microseconds; 0 turns it off).
SPIN_BUDGET_NS = int(float(os.environ.get("GEASYNC_SPIN_US", "50")) * 1000)
# A task whose runs complete during their submit's poll never suspends (it awaits a done future): after this many
# seconds of such runs without a turn of the loop, the next one waits for the eventfd, so other tasks run.
HOLD_LIMIT = 0.0005
_perf_counter = time.perf_counter


class Hub:
    """Base hub: token allocation, the request table, draining, the batched submit and the lone submit's poll.
    Subclasses attach the fd to their loop and decide when a batch goes out."""

    def __init__(self) -> None:
        self.queue = _lib.CompletionQueue(TENSORS)
        self._requests: dict[int, Request] = {}
        self._tokens = itertools.count(1)
        self._draining = threading.Lock()
        self.orphaned = False
        self._batch: list[tuple[int, RunRequest]] = []  # deferred requests, sent together by _flush
        self._sent_since_drain = False  # a request was submitted at once since the last drain (AsyncioHub._defer)
        self._spin_misses = 0
        self._spin_skip = 0 if SPIN_BUDGET_NS > 0 else -1

    # --- used by the session / stream layer, on the loop thread ---
    def new_token(self) -> int:
        return next(self._tokens)

    # The request table is touched by the loop's thread only, or by the reaper once the loop is gone (never both):
    # single dict operations, atomic under the GIL, need no lock.
    def register(self, token: int, request: Request) -> None:
        self._requests[token] = request

    def forget(self, token: int) -> None:
        """The submit failed: no completion will come for this token."""
        self._requests.pop(token, None)

    @property
    def outstanding(self) -> int:
        return len(self._requests)

    # --- draining ---
    def drain(self) -> None:
        # One drain at a time: the reaper and statistics() may both drain an orphan, and a finalizer run by the GC
        # inside a drain may close a session, which drains again. The drain under way takes what arrives.
        if not self._draining.acquire(blocking=False):
            return
        try:
            requests = self._requests
            orphaned = self.orphaned
            if orphaned:
                self._abandon_unsubmitted()
            resolved: list[Request] = []  # completed, their release batched (see Request.complete)
            for token, status, kind, outputs, text in self.queue.drain():
                request = requests.pop(token, None)
                if request is None:
                    continue  # outputs (if any) are freed with their Tensors
                try:
                    if request.complete(status, kind, outputs, text, orphaned):
                        resolved.append(request)
                except Exception as exc:  # never lose the rest of the batch to one failure
                    self._report(exc)
            if resolved:
                try:
                    resolved[0].release_batch(resolved)
                except Exception as exc:
                    self._report(exc)
        finally:
            self._sent_since_drain = False
            self._draining.release()

    def _abandon_unsubmitted(self) -> None:
        """The loop went away before sending requests it held for a batched submit: they never reach the runtime,
        so no completion will come; release them now (their pins and slots), as abandoned."""
        batch, self._batch = self._batch, []
        text = "the event loop was closed before this RunGraphAsync job was submitted"
        for token, _request in batch:
            request = self._requests.pop(token, None)
            if request is None:
                continue
            try:
                request.complete(FAILED, _lib.COMPLETION_ABANDONED, None, text, True)
            except Exception as exc:
                self._report(exc)

    def _flush(self) -> None:
        """Sends the requests deferred since the last flush in one native call (see ``_defer``)."""
        batch, self._batch = self._batch, []
        items = []
        me = _get_ident()
        held: list[list[int]] = []  # the sessions' records this call is in (once per run of one session's requests)
        try:
            for token, request in batch:
                if token not in self._requests:
                    continue
                users = request.users
                if not held or held[-1] is not users:
                    users.append(me)
                    held.append(users)
                handle = request.handle
                if handle is None or request.waiter.done():
                    # closed before submission, or nobody waits any more: never reaches the runtime
                    self._requests.pop(token, None)
                    text = "the session was closed before this RunGraphAsync job was submitted"
                    try:
                        request.complete(FAILED, _lib.COMPLETION_ABANDONED, None, text, False)
                    except Exception as exc:
                        self._report(exc)
                    continue
                items.append((handle, request.graph_id, request.rows, token))
            if items:
                _lib.run_graph_async_batch(items, self.queue)
        finally:
            for users in held:
                users.remove(me)

    def _poll(self) -> float:
        """Watches the queue for at most SPIN_BUDGET_NS after a lone submit (natively: no eventfd write or read
        when the run completes meanwhile); returns when it started if a completion arrived, which the caller drains
        at once (its task finds its result without waiting for the eventfd and a turn of the loop, most of a tiny
        run's latency), else 0.0. Runs that keep outlasting the budget turn polling off for a while."""
        start = _perf_counter()
        if self.queue.poll(SPIN_BUDGET_NS):
            self._spin_misses = 0
            return start
        self._spin_misses += 1
        if self._spin_misses >= 4:
            self._spin_misses = 0
            self._spin_skip = 256  # a slow graph: wait for the eventfd as usual for the next lone submits
        return 0.0

    def _report(self, exc: BaseException) -> None:
        """An exception nobody awaits (e.g. releasing a request whose task gave up): the loop's handler shows it."""
        loop = _running_loop()
        if loop is not None:
            loop.call_exception_handler({"message": "geasync: error while completing a request", "exception": exc})
        else:
            _report_unraisable(exc)

    def start(self, request: RunRequest) -> None:
        """Registers ``request`` and submits its RunGraphAsync (now, or with a batch a subclass sends later); on a
        refused submit, raises with nothing registered."""
        token = next(self._tokens)
        self._requests[token] = request
        try:
            if self._defer(token, request):
                return
            users = request.users
            me = _get_ident()
            users.append(me)
            try:
                handle = request.handle
                if handle is None:  # closed by another thread since its task checked
                    raise SessionClosedError(FAILED, "the session is closed; create a new Session", "geasync",
                                             request.context)
                _lib.run_graph_async_submit(handle, request.graph_id, request.rows, self.queue, token,
                                            request.context)
            finally:
                users.remove(me)
        except BaseException:
            del self._requests[token]  # refused (or never queued): no completion will come for it
            raise
        try:
            self._submitted_alone()
        except BaseException:
            # interrupted between a poll that found completions and their drain: the fd's reader takes them
            self.queue.signal()
            raise
        finally:
            if token in self._requests:  # still in flight (even if interrupted): guarded before the loop goes on
                request.guard()

    def holds(self, request: Request) -> bool:
        """``request`` was submitted and its completion has not been handled (for error paths: a linear search)."""
        return any(r is request for r in self._requests.values())

    def _defer(self, token: int, request: RunRequest) -> bool:
        """True if the subclass takes the request for a later batched submit (guarded first, see
        ``RunRequest.guard``; a guard that raises leaves it out of the batch)."""
        return False

    def _submitted_alone(self) -> None:
        """After a request was submitted on its own."""

    def new_waiter(self) -> Any:
        """What a request's task awaits (an asyncio future, or a TrioWaiter: both awaitable)."""
        raise NotImplementedError

    def orphan(self) -> None:
        """The loop is gone: hand the queue to the reaper (or close it if nothing is outstanding)."""
        if self.orphaned:
            return
        self.orphaned = True
        _reaper.adopt(self)


class _RaiseWhenCollected:
    """Raises its exception from __del__: the interpreter hands it to sys.unraisablehook with the arguments the
    hook expects (their type cannot be constructed from Python)."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __del__(self) -> None:
        raise self.error


def _report_unraisable(exc: BaseException) -> None:
    """Shows an exception nobody awaits (sys.unraisablehook); never raises, so a reaper batch goes on."""
    try:
        _RaiseWhenCollected(exc)
    except Exception:
        pass


class AsyncioHub(Hub):
    """asyncio and uvloop: a persistent add_reader on the queue's eventfd.

    Submissions made while other requests are in flight are batched until the loop's next iteration and sent
    in one native call: under load, one GIL release and one wake-up of GE's threads serve many requests.
    """

    def __init__(self, loop: AbstractEventLoop) -> None:
        super().__init__()
        self._loop_ref = weakref.ref(loop)  # weak: the loop owns the reader that owns this hub
        self.watched = False  # known to the reaper, which notices a loop closed with work in flight
        self._held_since = 0.0  # when runs completed in their poll started holding the loop (0.0: it turned since)
        # asyncio's own create_future is a Python method around Future(loop=loop): call that directly (once per
        # run); any other loop (uvloop) makes its futures its own way
        self._plain_futures = type(loop).create_future is asyncio.BaseEventLoop.create_future
        loop.add_reader(self.queue.fd, self.drain)

    def _defer(self, token: int, request: RunRequest) -> bool:
        """Submits now when the hub is idle (nothing to batch with, single-request latency stays low), else with the
        batch sent at the loop's next iteration."""
        if _reaper.idle or not self.watched:
            _reaper.watch(self)  # so a loop closed with this request in flight is noticed
        batch = self._batch
        if not batch:
            if len(self._requests) <= 1:
                return False  # the only request in flight: submitted now
            if not self._sent_since_drain:
                # The first request since completions were last drained goes now, without its completion polled
                # for: at a few requests in flight each one is the only submit of its loop iteration, and batching
                # it would only cost a callback and an iteration more. The others of this iteration are batched.
                self._sent_since_drain = True
                return False
        request.guard()  # raising, it stays out of the batch
        if not batch:  # the first of this iteration's batch
            loop = self._loop_ref()
            assert loop is not None
            loop.call_soon(self._flush)
        batch.append((token, request))
        return True

    def _submitted_alone(self) -> None:
        if len(self._requests) > 1:
            return  # others are in flight (see _defer): this one's completion comes with theirs, through the eventfd
        if self._spin_skip:
            self._spin_skip -= 1
        elif not self._held_since or _perf_counter() - self._held_since < HOLD_LIMIT:
            self._spin()
        # else: this run's task waits for the eventfd like any other, and the loop runs its other tasks meanwhile

    def _spin(self) -> None:
        """Polls for the lone run's completion (``_poll``) and settles it before its task awaits it.

        Its task does not suspend then (it awaits a done future); a callback on the loop notes the loop's next
        turn, and a task that kept the loop for HOLD_LIMIT without one waits for its next run's eventfd instead,
        letting others run."""
        start = self._poll()
        if start:
            if not self._held_since:
                loop = self._loop_ref()
                if loop is not None:
                    self._held_since = start
                    loop.call_soon(self._loop_turned)
            self.drain()

    def _loop_turned(self) -> None:
        self._held_since = 0.0

    @property
    def loop_gone(self) -> bool:
        loop = self._loop_ref()
        return loop is None or loop.is_closed()

    def register(self, token: int, request: Request) -> None:
        super().register(token, request)
        if _reaper.idle or not self.watched:
            _reaper.watch(self)  # so a loop closed with this request in flight is noticed

    def new_waiter(self) -> Future[Any]:
        loop = self._loop_ref()
        assert loop is not None
        if self._plain_futures:
            return asyncio.Future(loop=loop)
        return loop.create_future()

    def orphan(self) -> None:
        loop = self._loop_ref()
        if not self.orphaned and loop is not None and not loop.is_closed():
            try:
                loop.remove_reader(self.queue.fd)
            except Exception:
                pass
        super().orphan()


class TrioHub(Hub):
    """trio: one system task waiting on the queue's eventfd for the lifetime of the run, another sending batched
    submits.

    As on asyncio, a lone request is submitted at once and its completion polled for; requests made while others
    are in flight are sent together, once every task made runnable meanwhile has run its step.
    """

    def __init__(self) -> None:
        import trio

        super().__init__()
        self.token = trio.lowlevel.current_trio_token()
        self._flush_wanted = trio.Event()
        # The last eventfd drain settled several requests. trio runs the tasks it woke one after another, and each
        # would find nothing else in flight (all completed) and take the lone path: a serial submit-and-poll per
        # task. While this holds, their resubmits are batched instead.
        self._burst = False
        trio.lowlevel.spawn_system_task(self._dispatch, name="geasync-completion-hub")
        trio.lowlevel.spawn_system_task(self._flusher, name="geasync-batched-submit")

    async def _dispatch(self) -> None:
        import trio

        try:
            while True:
                await trio.lowlevel.wait_readable(self.queue.fd)
                before = len(self._requests)
                self.drain()
                self._burst = before - len(self._requests) > 1
        finally:
            _trio_hubs.pop(self.token, None)
            self.orphan()

    async def _flusher(self) -> None:
        import trio

        while True:
            # a task woken during trio's current batch of steps runs in the next one: after every task runnable
            # now has had its turn to add to the batch
            await self._flush_wanted.wait()
            self._flush_wanted = trio.Event()
            try:
                self._flush()
            except Exception as exc:  # raising, a system task would end the whole trio run
                self._report(exc)

    def _defer(self, token: int, request: RunRequest) -> bool:
        """As AsyncioHub._defer: now when idle, else with the batch the flusher sends."""
        batch = self._batch
        if not batch and len(self._requests) <= 1 and not self._burst:
            return False
        request.guard()  # raising, it stays out of the batch
        if not batch:
            self._flush_wanted.set()
        batch.append((token, request))
        return True

    def _submitted_alone(self) -> None:
        # No hold limit as on asyncio: awaiting its (already set) waiter is a checkpoint, where trio runs other tasks.
        if self._spin_skip:
            self._spin_skip -= 1
        elif self._poll():
            self.drain()

    def new_waiter(self) -> TrioWaiter:
        return TrioWaiter()


_asyncio_hubs: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncioHub]" = weakref.WeakKeyDictionary()
_trio_hubs: dict[Any, TrioHub] = {}
_hubs_lock = threading.Lock()


# the thread, loop and hub of the last asyncio call: every run asks for its hub
_last: tuple[int, Callable[[], Any], Hub | None] = (0, lambda: None, None)


def current_hub() -> Hub:
    """The hub of the running event loop, created on first use."""
    global _last
    thread, last_loop, hub = _last
    if thread == _get_ident() and hub is not None and not hub.orphaned:
        loop = last_loop()
        # One asyncio loop runs in a thread at a time: if this thread's last loop runs, it is the running loop (known
        # without asyncio's accessor, whose fork check is a getpid system call on CPython 3.11; a forked child
        # starts afresh, see _after_fork_in_child)
        if loop is not None and loop.is_running():
            return hub
    loop = _running_loop()
    if loop is not None:
        if last_loop() is loop and hub is not None and not hub.orphaned:
            _last = (_get_ident(), last_loop, hub)  # the loop runs in another thread than before
            return hub
        hub = _asyncio_hubs.get(loop)
        if hub is None or hub.orphaned:
            with _hubs_lock:
                hub = AsyncioHub(loop)
                _asyncio_hubs[loop] = hub
            weakref.finalize(loop, hub.orphan)
        _last = (_get_ident(), weakref.ref(loop), hub)
        return hub
    loop_flavour()  # raises a clear error outside any event loop
    token = trio_token()
    hub = _trio_hubs.get(token)
    if hub is None or hub.orphaned:
        hub = TrioHub()
        _trio_hubs[token] = hub
    return hub


class _Reaper:
    """A Python thread (never a native one) that finishes the requests of hubs whose loop has gone away.

    It also notices asyncio loops that were closed with requests in flight (asyncio has no close hook), checking
    a few times a second while any such hub has work outstanding, and sleeps otherwise.

    A hub is orphaned by its loop's weakref.finalize, which the GC may run at any allocation, in any thread, while
    that thread holds any lock -- even inside Thread.start() or Event.set(). So ``adopt`` takes no Python lock and
    starts no thread: it queues the hub and wakes the reaper through a pipe (a plain write). The reaper's thread is
    started from ordinary code (``watch``, or a trio hub ending), and its lock is held only for bookkeeping, never
    while blocking or starting a thread.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._adopted: collections.deque[Hub] = collections.deque()  # appended without the lock (atomic)
        self._orphans: list[Hub] = []
        self._watched: "weakref.WeakSet[AsyncioHub]" = weakref.WeakSet()
        self._thread: threading.Thread | None = None
        self._wake_r, self._wake_w = _nonblocking_pipe()
        self.idle = True  # nothing to poll for: the next request of any hub calls watch()

    def watch(self, hub: AsyncioHub) -> None:
        """From a loop's thread, ordinary code: ``hub`` has work in flight; notice if its loop closes."""
        hub.watched = True
        with self._lock:
            self._watched.add(hub)
            self.idle = False
        self._wake()
        self._ensure_thread()

    def adopt(self, hub: Hub) -> None:
        """The hub's loop is gone. Safe anywhere (see the class docstring)."""
        if hub.outstanding == 0 and hub.queue.pending() == 0:
            hub.queue.close()  # nothing will arrive any more
            return
        self._adopted.append(hub)
        self.idle = False
        self._wake()
        if isinstance(hub, TrioHub):
            self._ensure_thread()  # trio hubs end in their system task's finally (ordinary code); never watched

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"\0")
        except OSError:
            pass  # the pipe is full: the reaper has wake-ups pending already

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            thread = self._thread = threading.Thread(target=self._run, name="geasync-reaper", daemon=True)
        thread.start()  # outside the lock: the new thread may run finalizers before it counts as started

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            with self._lock:
                self._thread = None

    def _sleep(self, fds: list[int], timeout: float | None) -> None:
        """Until a wake-up, a completion on one of ``fds`` or ``timeout`` seconds."""
        try:
            readable, _, _ = select.select([self._wake_r, *fds], [], [], timeout)
        except (OSError, ValueError):
            return
        if self._wake_r in readable:
            try:
                os.read(self._wake_r, 4096)
            except OSError:
                pass

    def _loop(self) -> None:
        while True:
            with self._lock:
                while self._adopted:
                    hub = self._adopted.popleft()
                    if isinstance(hub, AsyncioHub):  # only those are watched
                        self._watched.discard(hub)
                    if hub not in self._orphans:
                        self._orphans.append(hub)
                for hub in list(self._watched):
                    if hub.outstanding and hub.loop_gone:
                        self._watched.discard(hub)
                        hub.orphaned = True
                        self._orphans.append(hub)
                orphans = list(self._orphans)
                busy = bool(orphans) or any(h.outstanding for h in self._watched)
                if not busy:
                    self.idle = True
            if not busy:
                self._sleep([], None)  # until watch() or adopt() writes to the pipe
                continue
            self._sleep([h.queue.fd for h in orphans], 0.2)
            for hub in orphans:
                try:
                    hub.drain()
                except Exception as exc:  # the reaper must outlive any one request's failure
                    _report_unraisable(exc)
                if hub.outstanding == 0:
                    with self._lock:
                        if hub in self._orphans:
                            self._orphans.remove(hub)
                    hub.queue.close()

    def reap_now(self) -> None:
        """Drain orphans from the calling thread (tests, statistics): completions already delivered are released."""
        with self._lock:
            orphans = list(self._orphans) + list(self._adopted)
        for hub in orphans:
            hub.drain()

    def after_fork_in_child(self) -> None:
        # Native threads and the eventfds' producers do not exist in a forked child: forget everything.
        self._lock = threading.Lock()
        self._adopted = collections.deque()
        self._orphans = []
        self._watched = weakref.WeakSet()
        self._thread = None
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._wake_r, self._wake_w = _nonblocking_pipe()
        self.idle = True


def _nonblocking_pipe() -> tuple[int, int]:
    r, w = os.pipe()
    for fd in (r, w):
        os.set_blocking(fd, False)
        os.set_inheritable(fd, False)
    return r, w


_reaper = _Reaper()


def _after_fork_in_child() -> None:
    global _last
    _last = (0, lambda: None, None)
    _asyncio_hubs.clear()
    _trio_hubs.clear()
    _reaper.after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def reap_orphans() -> None:
    _reaper.reap_now()


def drain_idle_loops() -> None:
    """Settles what was delivered to the hubs of asyncio loops that are not running: one that is paused (between two
    ``run_until_complete`` calls) is drained here, one closed since is handed to the reaper at once rather than when
    the reaper next looks. A session closed outside its loop (a test runner's fixture teardown) completes its
    dropped requests there; for leak checks (``live_counters``), which would otherwise count them. A loop that is
    not running touches none of its hub's state meanwhile."""
    for loop, hub in list(_asyncio_hubs.items()):
        if hub.orphaned or loop.is_running():
            continue
        if loop.is_closed():
            hub.orphan()  # drained by reap_orphans
        else:
            hub.drain()


def loops_with_requests(belongs: Callable[[Request], bool]) -> list[AbstractEventLoop]:
    """The asyncio loops whose hub holds a request for which ``belongs`` is true (from any thread: a snapshot, for
    a diagnostic)."""
    found = []
    for loop, hub in list(_asyncio_hubs.items()):
        if not hub.orphaned and any(belongs(r) for r in list(hub._requests.values())):
            found.append(loop)
    return found


def drain_current() -> None:
    """Settles what has already been delivered to the running loop's hub (no-op outside a loop or without a hub).
    Used after a session close, so the requests it abandoned fail in their tasks now, not one loop turn later."""
    loop = _running_loop()
    hub: Hub | None = None
    if loop is not None:
        hub = _asyncio_hubs.get(loop)
    else:
        token = trio_token()
        if token is not None:
            hub = _trio_hubs.get(token)
    if hub is not None and not hub.orphaned:
        hub.drain()


__all__ = ["Request", "RunRequest", "Hub", "current_hub", "drain_idle_loops", "reap_orphans"]
