"""``Batcher``: dynamic batching of small requests into runs of a graph with a symbolic batch dim.

    batcher = ga.Batcher(session, graph_id, max_batch_size=64, max_delay=0.002)
    (probs,) = await batcher.run([x])          # x: (1, 784) -> probs: (1, 10), this request's rows only

Policy: a request that finds the graph idle (no batch of this batcher in flight) runs at once, alone: at one
request in flight, batching costs nothing. Requests arriving while batches are in flight are queued and coalesced;
the queue is flushed when a batch completes (after the tasks that batch woke have had a turn to send their next
requests), when it holds ``max_batch_size`` rows, or when its oldest request has waited ``max_delay`` seconds --
then into the runtime's queue behind the running batch, at most one such batch at a time: while the graph is
saturated, flushing on a timer would only split batches and lengthen the queue.

Requests are concatenated along ``batch_axis`` (0) only with requests of the same dtypes and other dims; each gets
its rows of every output, split where the output declares the batch dim. A graph whose declared inputs or outputs
do not all carry the batch dim is refused when the Batcher is made: its requests would get values computed from
other requests' rows (rows must be independent, as for any dynamic batcher). A batch that fails is split in
halves and retried, so one bad request fails alone (a broken or closed session fails every request at once). A
cancelled request leaves its batch running; its rows are dropped. Works under asyncio, uvloop and trio; one
batcher belongs to one event loop.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import functools
import itertools
import math
import os
import time
import weakref
from _thread import get_ident
from dataclasses import asdict, dataclass
from typing import Any, Awaitable, Callable, Coroutine, Literal, Mapping, Optional, Sequence, Union

import anyio
import numpy as np
from numpy.typing import NDArray

from . import _lib, session as _session
from ._loops import TrioWaiter, check_timeout, fail_after, running_loop, trio_token
from ._inputs import no_graph_error
from ._metadata import TensorInfo
from ._stats import Histogram, HistogramSnapshot, logger, now
from ._types import Inputs
from ._modes import RUN_GRAPH_ASYNC
from .errors import FAILED, PARAM_INVALID, GeError, InputError, InputTypeError, SessionBrokenError, SessionClosedError
from .pool import GraphPool
from .session import Session
from .tensor import Tensor, _not_an_array

__all__ = ["Batcher", "BatcherClosedError", "BatcherStatistics"]

# Queueing-delay buckets (seconds) and batch-size buckets (rows).
_DELAY_BUCKETS = (10e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 1.0)
_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
_Arrays = list[NDArray[Any]]  # a request's inputs, or a batch's
_Key = tuple[Any, ...]  # a request's signature: (dtype, shape without the batch dim) per input


class BatcherClosedError(RuntimeError):
    """The batcher was closed (``aclose``) before this request ran."""


@dataclass(frozen=True)
class BatcherStatistics:
    """A batcher's activity. ``submitted == completed + failed + cancelled + queued + running`` (requests);
    ``batch_size`` is the distribution of rows per batch run, ``queue_delay`` the seconds requests spent queued
    (those that ran at once count 0), ``retries`` the extra runs made to isolate failing requests."""

    submitted: int
    completed: int
    failed: int
    cancelled: int
    queued: int
    running: int
    batches: int
    batches_in_flight: int
    retries: int
    batch_size: HistogramSnapshot
    queue_delay: HistogramSnapshot

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Request:
    __slots__ = ("arrays", "rows", "key", "waiter", "enqueued", "state", "timeout")
    timeout: float  # set only for a request that waits with a timeout on asyncio / uvloop (see _expire_later)

    def __init__(self, arrays: _Arrays, rows: int, key: _Key, waiter: Any) -> None:
        self.arrays = arrays
        self.rows = rows
        self.key = key
        self.waiter = waiter
        self.enqueued = now()
        self.state = _QUEUED


_new_request = object.__new__

# A queued request's life; _DONE once counted completed, failed or cancelled. _DELIVERED: its rows were handed to its
# waiter and it counts completed, unless its caller is cancelled before taking them (then it counts cancelled).
_QUEUED, _RUNNING, _DONE, _DELIVERED = 0, 1, 2, 3


class Batcher:
    """Coalesces concurrent requests to one graph into batch runs (see the module docstring).

    ``graph`` is a graph id of ``session`` or a :class:`geasync.GraphPool` (its instances then run batches side by
    side). ``max_batch_size`` bounds the rows of one run (a larger request is refused with ValueError; about half
    the requests expected in flight at peak lets two batches alternate, see docs/serving.md);
    ``max_delay`` (seconds) bounds how long a request waits for a batch to fill while the graph is busy;
    ``max_concurrent_batches`` (default: one per graph instance) is how many batches may run before requests queue;
    ``batch_sizes`` pads every batch with zero rows up to the next listed size. By default ("auto") the sizes are
    the powers of two below ``max_batch_size`` and ``max_batch_size`` itself: the runtime builds (and caches, a
    bounded number per graph) one executable per input shape of a dynamic-shape graph, so unbucketed batches of
    every size from 1 to 64 would keep rebuilding them. Give the sizes a graph was compiled for (a static graph:
    its one batch size), or None to run batches unpadded. The largest listed size also bounds ``max_batch_size``.
    """

    def __init__(self, session: Session, graph: Union[int, GraphPool], *, max_batch_size: int = 64,
                 max_delay: float = 0.002, batch_axis: int = 0, max_concurrent_batches: Optional[int] = None,
                 batch_sizes: Union[Sequence[int], Literal["auto"], None] = "auto",
                 timeout: Optional[float] = None) -> None:
        if not isinstance(session, Session):
            raise TypeError(f"Batcher: session must be a geasync.Session, got {type(session).__name__}")
        self._runner: Callable[[_Arrays], Awaitable[list[Tensor]]]
        if isinstance(graph, GraphPool):
            self._runner = graph.run_graph_async
            graph_ids = list(graph.graph_ids)
        elif type(graph) is int:
            self._runner = functools.partial(session.run_graph_async, graph)  # (inputs) -> awaitable outputs
            graph_ids = [graph]
        else:
            raise TypeError(f"Batcher: graph must be a graph id (int) or a geasync.GraphPool, got "
                            f"{type(graph).__name__}")
        self.graph = graph
        # a closed (or broken) session is said here, naming the Batcher, rather than by the compile check below
        session._live(f"Batcher(graph_id={graph})")
        instances = len(graph_ids)
        if type(max_batch_size) is not int or max_batch_size < 1:
            raise ValueError(f"Batcher: max_batch_size must be a positive int, got {max_batch_size!r}")
        if not isinstance(max_delay, (int, float)) or isinstance(max_delay, bool) or not 0 <= max_delay < math.inf:
            raise ValueError(f"Batcher: max_delay must be a number of seconds >= 0, got {max_delay!r}")
        if max_concurrent_batches is None:
            max_concurrent_batches = instances
        if type(max_concurrent_batches) is not int or max_concurrent_batches < 1:
            raise ValueError(f"Batcher: max_concurrent_batches must be a positive int, got {max_concurrent_batches!r}")
        explicit_sizes = batch_sizes is not None and batch_sizes != "auto"
        self._bound_by = f"max_batch_size={max_batch_size}"  # what bounds a request's rows, for its refusal
        if batch_sizes == "auto":
            batch_sizes = [1 << k for k in range(max_batch_size.bit_length()) if 1 << k < max_batch_size]
            batch_sizes.append(max_batch_size)
        if batch_sizes is not None:
            sizes = sorted(set(batch_sizes))
            if not sizes or any(type(n) is not int or n < 1 for n in sizes):
                raise ValueError(f"Batcher: batch_sizes must be positive ints, got {batch_sizes!r}")
            if max_batch_size > sizes[-1]:
                max_batch_size = sizes[-1]
                # a request over it is refused saying so: raising max_batch_size would not help
                self._bound_by = f"the largest of batch_sizes ({sizes[-1]}), which bounds max_batch_size"
            self._sizes: Optional[list[int]] = sizes
        else:
            self._sizes = None
        self._size_set = frozenset(self._sizes or ())
        if type(batch_axis) is not int or batch_axis < 0:
            raise ValueError(f"Batcher: batch_axis must be an int >= 0 (the axis of every input that counts its "
                             f"rows), got {batch_axis!r}")
        for graph_id in graph_ids:
            if graph_id not in session._specs and graph_id not in session._spec_errors and not session.closed:
                # said here, naming the Batcher, rather than by the compile it would start
                raise no_graph_error(graph_id, f"Batcher(graph_id={graph_id})")
            session._modes.check(graph_id, RUN_GRAPH_ASYNC, f"Batcher(graph_id={graph_id})")
        self._graph_id = graph_ids[0]
        self._inputs, self._output_axes = _layout(session, graph_ids[0], batch_axis, self._sizes, explicit_sizes)
        for graph_id in graph_ids:
            _compile_for_batches(session, graph_id, explicit_sizes)
        # every output's rows are along axis 0: a batch's results are handed out in one pass (_deliver_rows)
        self._rows_first = batch_axis == 0 and all(axis == 0 for axis in self._output_axes or ())
        # request signatures (dtypes, non-batch dims) known to fit the declared inputs, each to its one key object
        self._fitting: dict[_Key, _Key] = {}
        # a one-input request's signature as last seen (batch axis 0): its dtype, other dims and key
        self._last_dtype: Any = None
        self._last_tail: Any = None
        self._last_key: _Key = ()
        self._last_shape: Any = None  # and its whole shape (a valid request's)
        self.session = session
        self._max_batch_size = max_batch_size
        self.max_delay = float(max_delay)
        self._batch_axis = batch_axis
        self.max_concurrent_batches = max_concurrent_batches
        self._timeout = None if timeout is None else check_timeout(timeout, "Batcher")
        self._queue: collections.deque[_Request] = collections.deque()
        self._mixed = False  # requests of several signatures may be queued
        self._queued_rows = 0
        self._in_flight = 0  # batches (incl. a request running alone)
        self._closed = False
        self._loop: Any = None  # the asyncio loop or trio token it belongs to
        self._thread = -1  # the thread of its asyncio loop (-1 in a forked child: run() then checks the process)
        self._trio = False
        self._timer: Any = None
        # queued requests with a timeout (asyncio / uvloop) -> their deadline on the loop's clock, and the one loop
        # timer that expires them (armed for the earliest deadline; see _expire_later)
        self._deadlines: dict[_Request, float] = {}
        self._sweep_at = math.inf
        self._sweep_timer: Any = None
        self._new_waiter: Callable[[], Any] = _unbound
        _BATCHERS.add(self)  # for the fork hook
        self._tasks: set[Any] = set()  # batch tasks of an asyncio loop, kept until done
        self._submitted = self._completed = self._failed = self._cancelled = self._running = 0
        self._batches = self._retries = 0
        # Requests that found the graph idle and ran at once, alone (each a batch of its own, with no queueing delay):
        # counted apart, with the fewest updates on their path, and merged into statistics() (see _run)
        self._alone = 0  # started
        self._alone_done = 0  # finished, however
        self._alone_bad = 0  # of which failed or cancelled
        self._alone_ones = 0  # started with one row (other sizes go to _sizes_hist at once)
        self._sizes_hist = Histogram(_SIZE_BUCKETS)
        self._delay_hist = Histogram(_DELAY_BUCKETS)

    # --- public API ---
    # Read-only: the batch sizes, the declared inputs and the request fast path are derived from them at creation.
    @property
    def max_batch_size(self) -> int:
        return self._max_batch_size

    @property
    def batch_axis(self) -> int:
        return self._batch_axis

    @property
    def timeout(self) -> Optional[float]:
        """The timeout (seconds) of a request that gives none; None: requests wait for their batch however long."""
        return self._timeout

    @timeout.setter
    def timeout(self, value: Optional[float]) -> None:
        self._timeout = None if value is None else check_timeout(value, "Batcher.timeout")

    def run(self, inputs: Inputs, *, timeout: Optional[float] = None) -> Coroutine[Any, Any, list[Tensor]]:
        """This request's outputs (rows of the batch run it joined): ``outputs = await batcher.run(inputs)``.
        ``inputs`` as for ``run_graph_async`` (a list, or a ``{name: array}`` mapping), each with the same batch dim
        (>= 1) on ``batch_axis``; a request that does not fit the graph's declared inputs is refused with InputError
        before it joins a batch. Arguments are checked when it is called (as ``run_graph_async`` does). ``timeout``
        (seconds; default: the batcher's) raises TimeoutError; the request's rows are dropped from its batch. A
        timeout of 0 or less is a deadline already past: TimeoutError at once on every loop, no batch takes the
        request (counted cancelled)."""
        a: Any = inputs[0] if type(inputs) is list and len(inputs) == 1 else None
        # the common request: one array of the last signature seen (its key object is reused, so batching compares
        # keys by identity), most often of the last shape too
        shape = a.shape if type(a) is np.ndarray and a.dtype is self._last_dtype and not self._closed else None
        if shape is not None and (shape == self._last_shape or
                                  (shape[1:] == self._last_tail and shape and 0 < shape[0] <= self._max_batch_size)):
            arrays, rows, key = [a], shape[0], self._last_key
        else:
            arrays, rows, key = self._check(inputs)
        # bound to the loop running in this thread (the check current_hub makes; asyncio's accessor costs a system
        # call), else bound now or refused (trio has no asyncio loop: checked by _bind every time)
        if self._thread != get_ident() or not self._loop.is_running():
            self._bind()
        if timeout is None:
            timeout = self._timeout
            if timeout is None:
                return self._run(arrays, rows, key)  # awaited directly: one coroutine per request
        else:
            timeout = check_timeout(timeout, "Batcher.run")
        if timeout <= 0:
            return self._expired(timeout)
        if self._trio:
            return self._run_with_timeout(arrays, rows, key, timeout)
        return self._run(arrays, rows, key, timeout)

    async def _run_with_timeout(self, arrays: _Arrays, rows: int, key: _Key, timeout: float) -> list[Tensor]:
        return await self._within(self._run(arrays, rows, key), timeout)

    async def _within(self, run: Awaitable[list[Tensor]], timeout: float) -> list[Tensor]:
        """``run`` under a cancel scope of ``timeout`` seconds; its expiry raises the batcher's TimeoutError."""
        deadline = fail_after(timeout)
        try:
            async with deadline:
                return await run
        except TimeoutError:
            if deadline.expired():
                raise self._timed_out(timeout) from None
            raise

    async def _expired(self, timeout: float) -> list[Tensor]:
        # A deadline already past: TimeoutError when awaited, on every loop, and no batch takes the request (asyncio
        # ran it, and trio ran it and then raised)
        self._submitted += 1
        self._cancelled += 1
        raise self._timed_out(timeout)

    def _timed_out(self, timeout: float) -> TimeoutError:
        return TimeoutError(f"Batcher.run(graph_id={self.graph}): no result within {timeout} s (the request's timeout)")

    def statistics(self) -> BatcherStatistics:
        alone, done, ones = self._alone, self._alone_done, self._alone_ones
        sizes, delays = self._sizes_hist.snapshot(), self._delay_hist.snapshot()
        sizes = HistogramSnapshot(sizes.bounds, (sizes.counts[0] + ones, *sizes.counts[1:]), sizes.sum + ones,
                                  sizes.count + ones)
        delays = HistogramSnapshot(delays.bounds, (delays.counts[0] + alone, *delays.counts[1:]), delays.sum,
                                   delays.count + alone)
        return BatcherStatistics(self._submitted + alone, self._completed + done - self._alone_bad, self._failed,
                                 self._cancelled, len(self._queue), self._running + alone - done,
                                 self._batches + alone, self._in_flight, self._retries, sizes, delays)

    async def aclose(self) -> None:
        """Refuse new requests, run the queued ones now and wait for every batch in flight. Idempotent."""
        if not self._closed:
            self._closed = True
            logger.debug("session %s: batcher of graph %s closing: %d queued, %d batches in flight",
                         self.session._id, self.graph, len(self._queue), self._in_flight)
        if not _lib.same_process():
            return  # a forked child: its requests and batches are the parent's, and complete there only
        if not self._trio and self._loop is not None and self._loop.is_closed():
            # its loop was closed with requests in it, never to run: their tasks are gone (the garbage collector
            # finishes their coroutines, which settles the statistics), and so is any batch they were in
            return
        owner = self._loop
        if not self._trio and owner is not None and running_loop() is not owner:
            await self._aclose_elsewhere(owner)
            return
        self._dispatch()
        while self._in_flight or self._queue:
            self._dispatch()
            await anyio.sleep(0.001)

    async def _aclose_elsewhere(self, owner: asyncio.AbstractEventLoop) -> None:
        """aclose() awaited on another loop than the batcher's: the queue and the batches belong to the batcher's
        loop (its thread), so they are flushed there; this waits for them unless that loop is closed meanwhile
        (they are given up with it). Dispatching here used to create the batch's task on the other loop from this
        thread, and a close of that loop during the wait left aclose() waiting for good. A loop that is stopped (not
        closed) keeps its requests: waited for, with a warning as Session.aclose() logs."""
        try:
            owner.call_soon_threadsafe(self._dispatch)
        except RuntimeError:  # closed meanwhile
            return
        started = time.monotonic()
        warn_in = _session.ACLOSE_WARN_AFTER
        warn_at = started + warn_in
        while (self._in_flight or self._queue) and not owner.is_closed():
            if time.monotonic() >= warn_at:
                if not owner.is_running():
                    logger.warning("session %s: Batcher(graph_id=%s).aclose() has waited %.0f s for %d queued requests "
                                   "and %d batches of its event loop (%s at %#x), which is stopped but not closed: "
                                   "they run when it runs again, or are given up when it is closed",
                                   self.session._id, self.graph, time.monotonic() - started, len(self._queue),
                                   self._in_flight, type(owner).__name__, id(owner))
                warn_in = min(warn_in * 2, _session.ACLOSE_WARN_MAX)
                warn_at = time.monotonic() + warn_in
            await anyio.sleep(0.002)

    async def __aenter__(self) -> "Batcher":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # --- requests ---
    def _check(self, inputs: Any) -> tuple[_Arrays, int, _Key]:
        if type(inputs) is not list:
            if isinstance(inputs, Mapping):
                inputs = self.session._spec(self._graph_id, "Batcher.run").order(inputs, "Batcher.run")
            elif isinstance(inputs, Sequence) and not isinstance(inputs, (str, bytes, bytearray)):
                inputs = list(inputs)  # any other sequence (what the type hints say runs take)
        if not isinstance(inputs, (list, tuple)) or not inputs:
            raise TypeError(f"Batcher.run: inputs must be a non-empty list of arrays or Tensors, got "
                            f"{type(inputs).__name__}")
        if self._closed:
            raise BatcherClosedError(f"Batcher.run(graph_id={self.graph}): the batcher is closed")
        axis = self._batch_axis
        arrays = []
        rows = -1
        for i, x in enumerate(inputs):
            if isinstance(x, Tensor):
                if x.placement != "host":
                    raise ValueError(f"Batcher.run(graph_id={self.graph}): inputs[{i}] is a device Tensor; a batch is "
                                     "joined from the requests' rows in host memory: pass a host array (after "
                                     "the stream that produced it is synchronized, tensor.to_host())")
                x = x.numpy()
            a = x
            if isinstance(a, np.ndarray) and type(a) is not np.ndarray:
                a = np.asarray(a)  # a subclass (np.matrix, a memmap...) as its plain array, as Session runs take it
            if type(a) is not np.ndarray:
                # as Session runs say it: the graph, the input's name and the conversion to pass
                gid = self._graph_id
                raise _not_an_array(x, i, "inputs", self.session._specs.get(gid), "Batcher.run", gid)
            if not a.dtype.isnative:  # e.g. ">f4" read from a file: rows join in the machine's byte order, as runs take
                a = a.astype(a.dtype.newbyteorder("="))
            if a.ndim <= axis:
                raise ValueError(f"Batcher.run(graph_id={self.graph}): inputs[{i}] has shape {a.shape}, no batch axis "
                                 f"{axis}; give every input a batch dim (e.g. x[None])")
            n = a.shape[axis]
            if rows < 0:
                rows = n
            elif n != rows:
                raise ValueError(f"Batcher.run(graph_id={self.graph}): inputs disagree on the batch dim (axis {axis}): "
                                 f"{rows} rows in inputs[0], {n} in inputs[{i}]")
            arrays.append(a)
        if rows < 1:
            raise ValueError(f"Batcher.run(graph_id={self.graph}): a request needs at least one row on axis {axis}")
        key = tuple((a.dtype, a.shape[:axis] + a.shape[axis + 1:]) for a in arrays)
        known = self._fitting.get(key)
        if known is None:
            # before the row bound: an input missing its batch dim (x[0] for x[None]) is a shape error, whose
            # message says so, not a request of 784 "rows"
            if self._inputs is not None:
                self._check_declared(arrays)
            if len(self._fitting) < 64:
                self._fitting[key] = key  # requests of this signature fit: skip the check next time
        else:
            key = known
        if rows > self._max_batch_size:
            raise ValueError(f"Batcher.run(graph_id={self.graph}): {rows} rows exceed {self._bound_by}; split the "
                             "request or raise " + ("max_batch_size" if self._bound_by.startswith("max_batch_size")
                                                    else "the sizes of batch_sizes"))
        if len(arrays) == 1 and axis == 0:
            self._last_dtype, self._last_tail, self._last_key = key[0][0], key[0][1], key
            self._last_shape = arrays[0].shape
        return arrays, rows, key

    def _check_declared(self, arrays: _Arrays) -> None:
        """Refuses a request that does not fit the graph's declared inputs before it joins a batch."""
        declared = self._inputs
        assert declared is not None
        problem, index, error = None, None, InputError
        if len(arrays) != len(declared):
            problem = f"the graph takes {len(declared)} input(s), got {len(arrays)}"
        for i, (a, info) in enumerate(zip(arrays, declared, strict=False)):  # a count mismatch is the problem
            if problem:
                break
            index = i
            if info.dtype is not None and a.dtype != info.dtype:
                problem = f"input {i} ('{info.name}') is {a.dtype}, the graph declares {info.dtype}"
                error = InputTypeError
            elif info.shape is not None and len(info.shape) != a.ndim:
                problem = f"input {i} ('{info.name}') has rank {a.ndim}, the graph declares {list(info.shape)}"
            elif info.shape is not None:
                for d, (want, got) in enumerate(zip(info.shape, a.shape, strict=True)):
                    if d != self._batch_axis and type(want) is int and want != got:
                        problem = (f"input {i} ('{info.name}') has shape {list(a.shape)}, the graph declares "
                                   f"{list(info.shape)}")
                        break
        if problem:
            name = declared[index].name if index is not None and index < len(declared) else None
            raise error(PARAM_INVALID, problem, "Batcher.run", f"Batcher.run(graph_id={self.graph})",
                             graph_id=self._graph_id, input_index=index, input_name=name)

    def _bind(self) -> None:
        _lib.check_process(f"Batcher.run(graph_id={self.graph})")  # a forked child: GE's threads stayed in the parent
        loop = running_loop()
        owner: Any
        if loop is not None:
            owner, trio = loop, False
        else:
            owner, trio = trio_token(), True
            if owner is None:
                raise RuntimeError("Batcher.run must be awaited inside an asyncio (or uvloop) or trio event loop")
        if self._loop is None:
            self._loop, self._trio = owner, trio
            if trio:
                self._new_waiter = TrioWaiter
                return
            self._thread = get_ident()
            if type(owner).create_future is asyncio.BaseEventLoop.create_future:
                self._new_waiter = functools.partial(asyncio.Future, loop=owner)  # what create_future does, directly
            else:
                self._new_waiter = owner.create_future  # uvloop makes its futures its own way
        elif self._loop is not owner:
            raise RuntimeError(f"Batcher(graph_id={self.graph}) is used from another event loop than its first; make "
                               "one batcher per event loop")

    async def _run(self, arrays: _Arrays, rows: int, key: _Key, timeout: Optional[float] = None) -> list[Tensor]:
        """One request; ``timeout`` only on asyncio / uvloop (trio's requests are timed by _run_with_timeout)."""
        if self._in_flight < self.max_concurrent_batches and not self._queue:
            if timeout is not None or (self._sizes is not None and rows not in self._size_set):
                run = self._run_alone(arrays, rows)
                return await (run if timeout is None else self._within(run, timeout))
            # _run_alone inlined: most requests at low load take this path, and it is the whole of the batcher's cost
            # over an unbatched run (one coroutine and the counters of _run_alone; statistics() merges them)
            self._in_flight += 1
            self._alone += 1
            if rows == 1:
                self._alone_ones += 1
            else:
                self._sizes_hist.observe(rows)
            try:
                return await self._runner(arrays)  # no padding needed: the caller's own arrays and outputs
            except BaseException as exc:
                self._alone_failed(exc)
                if isinstance(exc, GeError):
                    raise self._named(exc).with_traceback(exc.__traceback__) from exc.__cause__
                raise
            finally:
                self._in_flight -= 1
                self._alone_done += 1
                if self._queue:
                    self._dispatch()
        self._submitted += 1
        waiter = self._new_waiter()
        request = _new_request(_Request)  # _Request(arrays, rows, key, waiter) without an __init__ call
        request.arrays, request.rows, request.key, request.waiter = arrays, rows, key, waiter
        request.enqueued = now()
        request.state = _QUEUED
        queue = self._queue
        if queue and key is not queue[0].key:
            self._mixed = True  # batches are taken one by one from the queue, not the whole queue at once
        queue.append(request)
        self._queued_rows += rows
        if timeout is not None and timeout < math.inf:
            self._expire_later(request, timeout)
        in_flight, limit = self._in_flight, self.max_concurrent_batches
        if in_flight < limit or self._queued_rows >= self._max_batch_size or \
                (in_flight == limit and self._timer is None):
            self._dispatch()  # else the armed max_delay timer or a batch's completion dispatches it
        try:
            outputs: list[Tensor] = await waiter
            return outputs
        except BaseException:
            if request.state == _QUEUED:  # it never runs
                self._queue.remove(request)
                self._queued_rows -= request.rows
                self._finish(request, "cancelled")
            elif request.state == _RUNNING:  # its batch runs on; its rows are dropped
                self._finish(request, "cancelled")
            elif request.state == _DELIVERED:  # its rows arrived as its caller gave up: the caller never got them
                request.state = _DONE
                self._completed -= 1
                self._cancelled += 1
            raise
        finally:
            if timeout is not None:
                self._deadlines.pop(request, None)  # done: it no longer needs expiring

    async def _run_alone(self, arrays: _Arrays, rows: int) -> list[Tensor]:
        """The graph is idle: this request runs now, in its caller's task (a cancellation affects it alone); with a
        timeout, or padded to a batch size (the common request takes the same path inlined in _run)."""
        self._in_flight += 1
        self._alone += 1
        if rows == 1:
            self._alone_ones += 1
        else:
            self._sizes_hist.observe(rows)
        try:
            if self._sizes is None or rows in self._size_set:
                return await self._runner(arrays)  # no padding needed: the caller's own arrays and outputs
            alone = [_Request(arrays, rows, (), None)]
            inputs, total = self._concatenate(alone)
            return self._split(alone, await self._runner(inputs), total)[0]
        except BaseException as exc:
            self._alone_failed(exc)
            if isinstance(exc, GeError):
                raise self._named(exc).with_traceback(exc.__traceback__) from exc.__cause__
            raise
        finally:
            self._in_flight -= 1
            self._alone_done += 1
            self._dispatch()

    def _named(self, exc: GeError) -> GeError:
        """The session's error for a run this batcher asked for, as one of this batcher's: its caller called
        Batcher.run, not Session.run_graph_async (a copy: one object raised in several tasks would pile up their
        tracebacks, and a compile's error is shared with the session's other requests)."""
        where = f"Batcher.run(graph_id={self.graph})"
        if exc.context.startswith("Batcher"):
            return exc
        try:
            named = copy.copy(exc)
        except Exception:  # an error type that cannot be rebuilt from its args: named as it is
            return exc
        named.context = f"{where} through {exc.context}" if exc.context else where
        named.args = (named._format(),)
        return named

    def _alone_failed(self, exc: BaseException) -> None:
        """A request run alone ended with ``exc``: an error fails it, anything else (a cancellation) cancels it."""
        self._alone_bad += 1
        if isinstance(exc, Exception):
            self._failed += 1
        else:
            self._cancelled += 1

    # --- batches ---
    def _dispatch(self) -> None:
        """Launches batches from the queue while the policy allows, else arms the max_delay timer."""
        queue = self._queue
        limit = self.max_concurrent_batches
        while queue:
            in_flight = self._in_flight
            if in_flight < limit or self._closed or self._queued_rows >= self._max_batch_size:
                self._launch(self._take_batch())
                continue
            if in_flight > limit:
                return  # a batch already waits behind the running ones: flushing more would only split batches
            # Busy: after max_delay, one more batch goes to wait in the runtime's queue (it then starts the moment
            # the graph frees up, without a round trip through the loop); until then the queue fills.
            wait = queue[0].enqueued + self.max_delay - now()
            if wait > 0:
                self._arm_timer(wait)
                return
            self._launch(self._take_batch())

    def _take_batch(self) -> list[_Request]:
        queue = self._queue
        limit = self._max_batch_size
        if not self._mixed and self._queued_rows <= limit:  # one signature, and it all fits: take the queue
            batch = list(queue)
            queue.clear()
            self._queued_rows = 0
            self._delay_hist.observe_since(now(), [r.enqueued for r in batch])
            return batch
        key = queue[0].key
        batch = []
        rows = 0
        kept: list[_Request] = []
        while queue and rows < limit:
            request = queue.popleft()
            if (request.key is key or request.key == key) and rows + request.rows <= limit:
                batch.append(request)
                rows += request.rows
            else:
                kept.append(request)
                if request.key == key:
                    break  # the next one of this key does not fit: it leads the next batch
        if kept:
            queue.extendleft(reversed(kept))
        if not queue:
            self._mixed = False
        self._queued_rows -= rows
        self._delay_hist.observe_since(now(), [r.enqueued for r in batch])
        return batch

    def _finish(self, request: _Request, outcome: str) -> None:
        if request.state == _RUNNING:
            self._running -= 1
        request.state = _DONE
        if outcome == "completed":
            self._completed += 1
        elif outcome == "failed":
            self._failed += 1
        else:
            self._cancelled += 1

    def _launch(self, batch: list[_Request]) -> None:
        self._in_flight += 1
        self._running += len(batch)
        for request in batch:
            request.state = _RUNNING
        self._batches += 1
        if self._trio:
            import trio

            trio.lowlevel.spawn_system_task(self._run_batch, batch, name="geasync-batch")
        else:
            run = self._run_batch(batch)
            try:
                task = self._loop.create_task(run)
            except RuntimeError:  # its loop is closed (the collector is finishing one of its batches): none runs
                run.close()
                self._in_flight -= 1
                self._batches -= 1
                self._fail(batch, BatcherClosedError(f"Batcher(graph_id={self.graph}): the event loop was closed "
                                                     "before this request's batch ran"))
                return
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _arm_timer(self, delay: float) -> None:
        if self._timer is not None:
            return
        if self._trio:
            import trio

            async def fire() -> None:
                await trio.sleep(max(delay, 0.0))
                self._timer = None
                self._dispatch()

            self._timer = True
            trio.lowlevel.spawn_system_task(fire, name="geasync-batch-timer")
        else:
            self._timer = self._loop.call_later(max(delay, 0.0), self._fire_timer)

    def _fire_timer(self) -> None:
        self._timer = None
        self._dispatch()

    # A request's timeout on asyncio / uvloop. asyncio.timeout() costs ~5 us a request (a timer of its own, armed and
    # cancelled, and a cancellation scope around the wait), a tenth of what a batched request costs the loop; here a
    # request costs a dict entry. One loop timer is armed for the earliest deadline; when it fires, every request
    # whose deadline has come gets TimeoutError set on its waiter (its caller's task then drops it from its queue
    # or batch, as for a cancellation) and the timer is re-armed for the earliest deadline left. Requests that got
    # their results leave the dict at once, so with one timeout for all requests the timer fires about once per
    # timeout, not per request.
    def _expire_later(self, request: _Request, timeout: float) -> None:
        deadline = self._loop.time() + timeout
        request.timeout = timeout
        self._deadlines[request] = deadline
        if deadline < self._sweep_at:
            self._arm_sweep(deadline)

    def _arm_sweep(self, deadline: float) -> None:
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
        self._sweep_at = deadline
        self._sweep_timer = self._loop.call_at(deadline, self._sweep)

    def _sweep(self) -> None:
        # Everything due by the deadline this timer was armed for expires, even if the loop's clock reads a bit
        # earlier (uvloop's timers have millisecond resolution), as asyncio.timeout() expires when its timer fires.
        due = max(self._sweep_at, self._loop.time())
        self._sweep_timer, self._sweep_at = None, math.inf
        deadlines = self._deadlines
        for request in [r for r, deadline in deadlines.items() if deadline <= due]:
            del deadlines[request]
            if not request.waiter.done():
                request.waiter.set_exception(self._timed_out(request.timeout))
        if deadlines:
            self._arm_sweep(min(deadlines.values()))

    async def _run_batch(self, batch: list[_Request]) -> None:
        try:
            await self._run_requests(batch, retry=False)
            if len(batch) > 1:
                # let the tasks this batch woke send their next requests first, so they coalesce
                await _checkpoint(self._trio)
        except Exception as exc:  # a bug of ours: the batch's requests get it, never a hang
            logger.exception("batch of graph %s failed unexpectedly", self.graph)
            self._fail(batch, exc)
        except BaseException:  # the loop is shutting down: fail what is left
            self._fail(batch, BatcherClosedError(f"Batcher(graph_id={self.graph}): the event loop stopped while this "
                                                 "request's batch ran"))
            if not self._trio:
                raise
        finally:
            self._in_flight -= 1
            self._dispatch()

    async def _run_requests(self, batch: list[_Request], retry: bool) -> None:
        """Runs ``batch`` as one graph run; on failure, retries its halves (a bad request fails alone)."""
        if all(r.state != _RUNNING or r.waiter.done() for r in batch):
            return  # every request of it was cancelled meanwhile
        if retry:
            self._retries += 1
        try:
            inputs, total = self._concatenate(batch)
            self._sizes_hist.observe(total)
            outputs = await self._runner(inputs)
        except (SessionBrokenError, SessionClosedError, BatcherClosedError) as exc:
            self._fail(batch, self._named(exc) if isinstance(exc, GeError) else exc)
            return
        except Exception as exc:
            if len(batch) == 1:
                self._fail(batch, self._named(exc) if isinstance(exc, GeError) else exc)
                return
            if not retry:
                logger.info("batch of %d requests to graph %s failed (%s); retrying its halves", len(batch),
                            self.graph, exc)
            half = len(batch) // 2
            await self._run_requests(batch[:half], retry=True)
            await self._run_requests(batch[half:], retry=True)
            return
        try:
            if self._deliver_rows(batch, outputs, total):
                return
            results = self._split(batch, outputs, total)
        except Exception as exc:
            self._fail(batch, exc)
            return
        delivered = 0
        for request, result in zip(batch, results, strict=True):
            # a waiter already done was cancelled: its task has yet to run, and will count it cancelled
            if request.state == _RUNNING and not request.waiter.done():
                request.waiter.set_result(result)
                request.state = _DELIVERED
                delivered += 1
        self._running -= delivered
        self._completed += delivered

    def _concatenate(self, batch: list[_Request]) -> tuple[_Arrays, int]:
        total = sum([r.rows for r in batch])
        padded = self._padded(total)
        axis = self._batch_axis
        if len(batch) == 1 and padded == total:
            return batch[0].arrays, total
        inputs = []
        for i in range(len(batch[0].arrays)):
            parts = [r.arrays[i] for r in batch]
            if padded > total:
                shape = list(parts[0].shape)
                shape[axis] = padded - total
                parts.append(np.zeros(shape, parts[0].dtype))
            inputs.append(_join(parts, axis, padded))
        return inputs, total

    def _deliver_rows(self, batch: list[_Request], outputs: list[Tensor], total: int) -> bool:
        """The common case in one pass: every output batched along axis 0, several requests. Each request still
        waiting gets views of its rows."""
        if not self._rows_first or len(batch) < 2:
            return False
        arrays = [o.numpy() for o in outputs]
        padded = self._padded(total)
        if any(a.ndim == 0 or a.shape[0] != padded for a in arrays):
            return False  # _split says which output
        per_output = [_row_tensors(batch, a, total) for a in arrays]
        results: Any = map(list, zip(*per_output, strict=True))
        if len(per_output) == 1:
            results = ([t] for t in per_output[0])
        delivered = 0
        for request, result in zip(batch, results, strict=True):
            # a waiter already done was cancelled: its task has yet to run, and will count it cancelled
            if request.state == _RUNNING and not request.waiter.done():
                request.waiter.set_result(result)
                request.state = _DELIVERED
                delivered += 1
        self._running -= delivered
        self._completed += delivered
        return True

    def _padded(self, total: int) -> int:
        """The rows a batch of ``total`` rows runs with."""
        sizes = self._sizes
        return total if sizes is None else next(n for n in sizes if n >= total)

    def _split(self, batch: list[_Request], outputs: list[Tensor], total: int) -> list[list[Tensor]]:
        padded = self._padded(total)
        if len(batch) == 1 and total == padded:
            return [outputs]  # the caller's own run
        axes = self._output_axes
        results: list[list[Tensor]] = [[] for _ in batch]
        for k, t in enumerate(outputs):
            a = t.numpy()
            axis = self._batch_axis if axes is None or k >= len(axes) else axes[k]
            if a.ndim <= axis or a.shape[axis] != padded:
                raise GeError(FAILED, f"output {k} has shape {list(a.shape)}, not the batch's {padded} rows on "
                              f"axis {axis}: it cannot be split per request (its values may mix the rows of the "
                              "batch's requests); run such a graph with session.run_graph_async",
                              "Batcher.run", f"Batcher.run(graph_id={self.graph})")
            start = 0
            if axis == 0:  # rows of a C-contiguous array are C-contiguous views: wrap them without checks
                make = Tensor._make
                dtype = a.dtype
                tail = a.shape[1:]
                row_bytes = a.nbytes // a.shape[0] if a.shape[0] else 0
                for result, request in zip(results, batch, strict=True):
                    n = request.rows
                    result.append(make(array=a[start:start + n], owner=None, address=0, nbytes=n * row_bytes,
                                       shape=(n, *tail), dtype=dtype, placement="host"))
                    start += n
                continue
            for result, request in zip(results, batch, strict=True):
                index = [slice(None)] * a.ndim
                index[axis] = slice(start, start + request.rows)
                result.append(Tensor.from_numpy(a[tuple(index)]))
                start += request.rows
        return results

    def _fail(self, batch: list[_Request], exc: BaseException) -> None:
        for request in batch:
            if request.state == _RUNNING and not request.waiter.done():
                try:
                    request.waiter.set_exception(exc)
                except RuntimeError:  # its loop is closed (this runs as the garbage collector finishes the batch)
                    pass
                self._finish(request, "failed")


def _join(parts: _Arrays, axis: int, rows: int) -> NDArray[Any]:
    """``np.concatenate(parts, axis)``; along axis 0 of C-contiguous parts, as one join of their bytes (about 3x
    faster for many small parts: numpy's per-part overhead is what a batch of single rows pays)."""
    first = parts[0]
    if axis == 0:
        buffers: list[Any] = parts  # numpy arrays are buffers (numpy's stubs do not say so)
        try:
            joined = bytearray().join(buffers)  # buffers: refused (BufferError/ValueError) unless C-contiguous
        except (BufferError, ValueError, TypeError):
            pass
        else:
            return np.frombuffer(joined, first.dtype).reshape((rows, *first.shape[1:]))
    return np.concatenate(parts, axis=axis)


def _row_tensors(batch: list[_Request], a: NDArray[Any], total: int) -> list[Tensor]:
    """Host Tensors over each request's rows of ``a`` (batch axis 0). Rows of a C-contiguous array are C-contiguous
    views, so they are wrapped without Tensor.from_numpy's checks; one row per request (the common case) takes the
    views by iterating the array, cheaper than slicing it per request."""
    tail, dtype = a.shape[1:], a.dtype
    row = a.nbytes // a.shape[0]
    if total == len(batch):
        views: Any = a[:total].reshape((total, 1) + tail)
        shapes: Any = itertools.repeat((1, *tail))
        sizes: Any = itertools.repeat(row)
    else:
        starts = itertools.accumulate([r.rows for r in batch], initial=0)
        views = [a[start:start + r.rows] for start, r in zip(starts, batch, strict=False)]  # starts: one more
        shapes = [(r.rows, *tail) for r in batch]
        sizes = [r.rows * row for r in batch]
    new = object.__new__
    tensors = []
    for view, shape, nbytes in zip(views, shapes, sizes, strict=False):  # shapes, sizes may repeat forever
        t = new(Tensor)  # one store per slot: cheaper than tuple assignments
        t._array = view
        t._owner = None
        t._output = False
        t._address = 0
        t._nbytes = nbytes
        t._shape = shape
        t._dtype = dtype
        t._placement = "host"
        tensors.append(t)
    return tensors


def _layout(session: Session, graph_id: int, axis: int, sizes: Optional[list[int]], explicit_sizes: bool
            ) -> tuple[Optional[tuple[TensorInfo, ...]], Optional[tuple[int, ...]]]:
    """The graph's declared inputs and, per output, the axis its rows are split along (each None if geasync cannot
    read them). Refuses graphs whose inputs and outputs do not all carry the batch dim: joining requests there would
    hand each one results computed from the others' rows."""
    where = f"Batcher(graph_id={graph_id})"
    try:
        inputs = session.graph_inputs(graph_id)
        outputs = session.graph_outputs(graph_id)
    except GeError:
        return None, None
    known = [i for i in inputs if i.shape is not None]
    for info in known:
        assert info.shape is not None
        if len(info.shape) <= axis:
            raise ValueError(f"{where}: input '{info.name}' is declared {list(info.shape)}, with no axis {axis} to "
                             f"batch along (batch_axis={axis}); a Batcher needs every input to carry the batch dim")
    at_axis = [info.shape[axis] for info in known if info.shape is not None]
    fixed = {d for d in at_axis if type(d) is int}
    if fixed and len(fixed) == len(set(at_axis)) == 1 and len(at_axis) == len(known):  # a fixed batch dim
        (batch,) = fixed
        if not explicit_sizes:
            raise ValueError(f"{where}: the graph's inputs have a fixed batch dim of {batch} on axis {axis} "
                             f"({_declared(known)}); give the model a symbolic batch dim, or pass "
                             f"batch_sizes=[{batch}] to pad every batch to it{_other_axis(known, axis)}")
        if sizes != [batch]:
            raise ValueError(f"{where}: the graph's inputs have a fixed batch dim of {batch} on axis {axis}, so "
                             f"every batch runs with {batch} rows: batch_sizes must be [{batch}], got {sizes}")
        symbols: set[Any] = {batch}
    elif fixed:
        info = next(i for i in known if i.shape is not None and type(i.shape[axis]) is int)
        raise ValueError(f"{where}: input '{info.name}' is declared {list(info.shape or ())}: its axis {axis} is "
                         f"not a batch dim ({_declared(known)}); a Batcher joins requests along batch_axis={axis}, "
                         f"so every input must carry the batch dim there{_other_axis(known, axis)}")
    else:
        symbols = {d for d in at_axis if type(d) is str}
    axes = []
    for out in outputs:
        if out.shape is None:  # any rank: split along the batch axis, checked when a batch completes
            axes.append(axis)
            continue
        named = [k for k, d in enumerate(out.shape) if d in symbols]
        if len(named) == 1:
            axes.append(named[0])
            continue
        if not named and len(out.shape) > axis and type(out.shape[axis]) is not int and not fixed:
            axes.append(axis)  # a dim of its own name (or none) where the rows should be: checked at run time
            continue
        why = ("the batch dim on several axes" if named else "no batch dim")
        raise ValueError(f"{where}: output '{out.name}' is declared {list(out.shape)}, with {why} "
                         f"({_declared(known)}): its values would mix the rows of every request of a batch (e.g. a "
                         "sum over the batch), so it cannot be split per request. Run such a graph with "
                         "session.run_graph_async, or give every output the batch dim")
    return inputs, tuple(axes)


def _declared(inputs: Sequence[TensorInfo]) -> str:
    return ", ".join(f"'{i.name}': {list(i.shape or ())}" for i in inputs)


def _other_axis(inputs: Sequence[TensorInfo], axis: int) -> str:
    """A hint: the axis where every input has a symbolic dim, if not ``axis``."""
    ranks = [len(i.shape) for i in inputs if i.shape is not None]
    for k in range(min(ranks, default=0)):
        if k != axis and all(type(i.shape[k]) is not int for i in inputs if i.shape is not None):
            return f"; or, if axis {k} counts the rows, pass batch_axis={k}"
    return ""


def _compile_for_batches(session: Session, graph_id: int, explicit_sizes: bool) -> None:
    """Compiles a graph not compiled yet from its declared input shapes (a symbolic batch dim stays symbolic: a
    first run would fix it to that run's size) and checks that batches of several sizes can run."""
    if session.is_graph_need_rebuild(graph_id):
        session.compile_graph(graph_id)
    if not explicit_sizes and session.get_compiled_graph_summary(graph_id).is_static:
        raise ValueError(f"Batcher: graph {graph_id} is compiled with static shapes, so its batch size is fixed; "
                         "give its inputs a symbolic batch dim (e.g. 'N'), or pass batch_sizes=[<its batch size>] "
                         "to pad every batch to it")


_BATCHERS: "weakref.WeakSet[Batcher]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # The thread that forked keeps its id in the child, and the parent's running loop still reads as running there:
    # without this, run()'s quick check would take the parent's loop for the child's
    for batcher in list(_BATCHERS):
        batcher._thread = -1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _unbound() -> Any:
    raise RuntimeError("Batcher: no event loop bound yet")


async def _checkpoint(trio: bool) -> None:
    if trio:
        import trio as trio_mod

        await trio_mod.lowlevel.cancel_shielded_checkpoint()
        await trio_mod.lowlevel.cancel_shielded_checkpoint()
    else:
        await asyncio.sleep(0)
