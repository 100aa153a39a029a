"""``Session``: a GE v2 ``GeSession`` with the synchronous contract of GE's ``ge`` Python package,
and its awaitable runs.

Clause by clause: wrong argument types raise ``TypeError``; runtime failures raise ``GeError`` with GE's message
and the API context; ``copy`` / ``deepcopy`` raise ``RuntimeError``. Beyond that package: compile/load, compiled-graph
summaries, ``session_id``, ``close()`` and use as a context manager, numpy arrays wherever Tensors are taken, and the
event-loop layer: ``await run_graph_async`` (completions through ``_hub``, pins from ``_pins``, the in-flight bound
from ``_inflight``), ``run_graph_in_thread``, ``statistics()``, ``async with`` / ``aclose()``.
"""

from __future__ import annotations

import copy
import gc
import math
import sys
import threading
import time
import warnings
import weakref
from _thread import get_ident
from bisect import bisect_left
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import (Any, Callable, Coroutine, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, TypeVar,
                    cast)

import numpy as np

import anyio

from . import _faults, _hub, _lib, _streams
from ._inputs import GraphSpec, declared_output_mismatches, no_graph_error
from ._metadata import ModelFormatError, TensorInfo
from ._options import GRAPH_OPTIONS, LOAD_OPTIONS, SESSION_OPTIONS, split_options
from ._stats import GraphCounters, SessionStatistics, logger, merged_histogram, now
from ._inflight import InFlightBound, WaitersByLoop
from ._loops import Timer, call_repeatedly, check_timeout, fail_after, require_loop, running_loop
from ._modes import RUN_GRAPH, RUN_GRAPH_ASYNC, RUN_GRAPH_WITH_STREAM_ASYNC, ModeRegistry
from ._pins import FREEZER, PinnedBytes, Pins
from .allocator import Allocator
from .errors import FAILED, GeError, SessionBrokenError, SessionClosedError
from .graph import Graph
from ._streams import has_allocator, mark_allocator, release_default_allocator, unmark_allocator
from .stream import stream_address, stream_in_use
from .tensor import TENSORS, InputRow, PreparedInputs, Tensor, input_rows, prepare_inputs
from ._types import Inputs, Options, StreamLike, TensorLike, TensorLikeList

_T = TypeVar("_T")

__all__ = ["Session", "CompiledGraphSummary"]


@dataclass(frozen=True)
class CompiledGraphSummary:
    """What GE reports about a compiled graph (``GetCompiledGraphSummary``)."""

    is_static: bool
    const_memory_size: int
    feature_memory_size: int
    stream_num: int
    event_num: int
    output_shapes: list[tuple[int, ...]]  # -1 marks a dim that depends on the inputs; (-2,) one whose rank does too
    output_dtypes: list[Optional[np.dtype[Any]]]  # None: a ge::DataType numpy lacks


def _check_graph_id(graph_id: Any, api: str = "") -> int:
    where = f"{api}: " if api else ""  # the call, so that a bad id in a larger program is found
    if not isinstance(graph_id, int) or isinstance(graph_id, bool):
        raise TypeError(f"{where}graph_id must be an int, got {type(graph_id).__name__} (pass int(graph_id))")
    if not 0 <= graph_id <= 0xFFFFFFFF:
        raise ValueError(f"{where}graph_id must fit in uint32, got {graph_id} (0 to 4294967295)")
    return graph_id


def _max_memory_bytes(options: Mapping[str, str]) -> int:
    """The "geasync.max_memory_bytes" session option: bytes one compiled graph may hold (its intermediates,
    folded constants and the outputs of a run); a model that needs more is refused with a GeError at compile.
    Default: the machine's physical memory."""
    text = options.get("geasync.max_memory_bytes")
    if text is None:
        return 0
    try:
        value = int(text, 0)
    except ValueError:
        value = -1
    if value <= 0:
        raise ValueError(f"Session(): option geasync.max_memory_bytes must be a positive number of bytes, got {text!r} "
                         "(pass an int as a str, e.g. {'geasync.max_memory_bytes': str(8 << 30)})")
    # The twin keeps the limit in a uint64: a larger one limits nothing more than the largest uint64 does
    return min(value, 2**64 - 1)


def _check_options(options: Any, what: str) -> Dict[str, str]:
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise TypeError(f"{what} must be a dict or None, got {type(options).__name__}")
    for k, v in options.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"{what} keys and values must be str, got {k!r}: {v!r} (GE takes every option as a "
                            "string: pass str(value))")
        for text in (k, v):
            # GE takes C strings: a NUL would cut the key or value short there (another option, silently), and
            # a lone surrogate has no UTF-8 form (a UnicodeEncodeError from deep inside the call)
            if "\0" in text or not text.isascii() and not _utf8_encodable(text):
                raise ValueError(f"{what}: option {k!r}: {v!r} holds a NUL character or a lone surrogate, which GE's "
                                 "C strings cannot carry; remove it")
    return options


def _utf8_encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


# Seconds aclose() waits for requests of event loops that are not running (stopped, not closed) before it logs a
# warning naming them; then again at doubling intervals (up to ACLOSE_WARN_MAX).
ACLOSE_WARN_AFTER = 10.0
ACLOSE_WARN_MAX = 300.0
DEFAULT_MAX_IN_FLIGHT = 512  # below GE's per-model queue (1024), so RunGraphAsync never fails or blocks for space
DYNAMIC_GRAPH_PENDING_LIMIT = 32  # GE's executor thread waits beyond 32 pending callbacks of a dynamic-shape graph
_UNKNOWN: Any = object()
_NOT_COUNTED: Any = object()  # a request started after aclose() began: not among those aclose() waits for
# A RunGraphAsync request's inputs as tensor.input_rows returns them: (rows, keep, arrays, nbytes)
AsyncInputs = Tuple[List[InputRow], Optional[List[Any]], Tuple[Any, ...], int]


class Session:
    """A GE v2 session: add graphs, then run them. Not copyable.

    Keyword-only, beyond GE's Python package: ``backend`` is "auto" (default: $GEASYNC_BACKEND, else CANN if this
    install has it, else the twin), "twin" or "cann" -- one backend per process; ``max_in_flight`` bounds the session's
    concurrent async requests (further ones wait without blocking the loop); ``freeze_inputs=False`` leaves numpy
    inputs writable while pinned; a run in flight for ``abandon_after`` seconds is counted as abandoned by
    ``statistics()`` and logged once (WARNING, logger "geasync"): while async runs are in flight, the loop checks
    for such runs about every ``abandon_after`` seconds, so nobody needs to call ``statistics()`` for the warning;
    a completed run (any mode) that took longer than ``slow_after`` seconds is logged at WARNING (at most one line
    a second per graph, counting the ones left out); None, the default, logs none.
    """

    def __init__(self, options: Optional[Options] = None, *, backend: Optional[str] = None,
                 max_in_flight: int = DEFAULT_MAX_IN_FLIGHT, freeze_inputs: bool = True,
                 abandon_after: float = 60.0, slow_after: Optional[float] = None) -> None:
        self._handle: Any = None
        # The threads inside a native call on the handle, one entry per call: close() destroys the handle only once
        # they have returned (another thread's submit or RunGraph would use a destroyed session). An entry is added
        # before the handle is read, so close() (which clears the handle first) sees every call that could use it.
        self._native_users: list[int] = []
        self._watchdog: Optional[Timer] = None  # the abandoned-run check, on the loop of _watch_hub (close cancels)
        self._watch_hub: Any = None
        self._default_allocators: set[int] = set()  # streams given geasync's device allocator by this session
        opts = _check_options(options, "Session(): options")
        # geasync's own options ("geasync.*") are checked here and never reach the runtime
        ge_opts, own_opts = split_options(opts, SESSION_OPTIONS, "Session() options")
        if not isinstance(max_in_flight, int) or isinstance(max_in_flight, bool) or max_in_flight < 1:
            raise ValueError(f"Session(): max_in_flight must be a positive int, got {max_in_flight!r}")
        if not isinstance(abandon_after, (int, float)) or isinstance(abandon_after, bool) or not abandon_after > 0:
            raise ValueError(f"Session(): abandon_after must be a positive number of seconds, got {abandon_after!r}")
        if slow_after is not None and (not isinstance(slow_after, (int, float)) or isinstance(slow_after, bool)
                                       or not slow_after > 0 or slow_after == math.inf):
            raise ValueError(f"Session(): slow_after must be a positive number of seconds or None, got {slow_after!r}")
        self._abandon_after = float(abandon_after)
        self._slow_after = math.inf if slow_after is None else float(slow_after)  # inf: one float compare per run
        self._graph_stats: dict[int, GraphCounters] = {}  # per graph id, every run mode
        # Removed graphs leave the per-graph statistics but stay in the session's totals: their counters wait in
        # _retiring (graph id, counters) while runs of theirs are in flight, then are folded into _retired. A
        # service that adds and removes graphs for ever keeps a bounded amount.
        self._retiring: list[tuple[int, GraphCounters]] = []
        self._retired = GraphCounters()
        self._stats_lock = threading.Lock()  # for runs counted off the loop's thread (sync, in-thread, stream)
        # Runs in flight that started at or before this time were logged abandoned already: a run turns abandoned
        # in start order, so one mark logs each once, without a set of the logged ones
        self._abandon_mark = -math.inf
        self._queue_stop_logged = False
        self._first_async_failure: Optional[str] = None  # what the first failed RunGraphAsync said, for that log
        # GE is initialised once per process, by the first session: its device becomes the process's default
        init_opts = {k: opts[k] for k in ("ge.exec.deviceId",) if k in opts}
        _lib.ensure_initialized(init_opts, backend=backend)
        self._lock = threading.RLock()
        self._slots = InFlightBound(max_in_flight)
        self._pinned = PinnedBytes()  # input bytes pinned by runs in flight, every mode
        if not isinstance(freeze_inputs, (bool, np.bool_)):  # bool("no") is True: a typo must not pass silently
            raise TypeError(f"Session(): freeze_inputs must be True or False, got {freeze_inputs!r}")
        self._freeze_inputs = bool(freeze_inputs)
        self._closing = False
        self._unawaited = 0  # requests in flight whose awaiting task gave up (cancelled / timed out)
        self._async_failures = 0  # failed RunGraphAsync completions: GE may have stopped the async queue
        self._graph_caps: dict[int, Optional[InFlightBound]] = {}  # per-graph bound of dynamic-shape graphs
        self._outputs_checked: set[int] = set()  # graphs whose compiled outputs were compared with the declaration
        self._specs: dict[int, GraphSpec] = {}  # per graph: declared inputs/outputs, for the input check
        self._spec_errors: dict[int, ModelFormatError] = {}  # graphs GE took whose metadata geasync cannot read
        self._modes = ModeRegistry(added=(self._specs, self._spec_errors))  # either holds every added graph
        self._compiling = WaitersByLoop()  # requests waiting for their graph's compile before the first RunGraphAsync
        self._compile_threads: set[object] = set()  # compiles running, some maybe left by cancelled requests
        self._compile_gates: dict[int, _CompileGate] = {}  # per graph, while requests wait for its first compile
        self._gates_lock = threading.Lock()  # a session's loops may run in several threads
        self._starting = WaitersByLoop()  # requests started before aclose() that hold no session slot yet
        self._generation = _lib.generation
        max_memory = _max_memory_bytes(own_opts)
        self._handle = _lib.session_create(ge_opts, "Session.__init__()")
        self._id = _lib.session_id(self._handle)  # for twin controls while closing (the handle may be gone)
        logger.debug("session %s created (backend %s, max_in_flight %d)", self._id, _lib.BACKEND, max_in_flight)
        if max_memory:
            _lib.set_memory_limit(self._id, max_memory)
        if "geasync.twin.faults" in own_opts:
            try:
                _faults.apply_option(self.session_id, own_opts["geasync.twin.faults"])
            except BaseException:
                self.close()
                raise

    # --- lifetime ---
    def _live(self, context: str) -> Any:
        handle = self._handle
        if handle is None or self._closing:
            raise SessionClosedError(FAILED, "the session is closed; create a new Session", "geasync", context)
        if self._generation != _lib.generation:
            raise SessionBrokenError(FAILED, "GE was finalized (geasync.finalize / GEFinalizeV2) after this "
                                     "session was created, which made it unusable; create a new Session",
                                     "GEFinalizeV2", context)
        _lib.check_process(context)
        return handle

    @contextmanager
    def _native(self, context: str) -> Iterator[Any]:
        """The live handle, kept from close() until the block ends (for every native call on it)."""
        users = self._native_users
        me = get_ident()
        users.append(me)
        try:
            yield self._live(context)
        finally:
            users.remove(me)

    def _ask(self, call: Callable[..., _T], *args: Any) -> Optional[_T]:
        """``call(handle, *args)``, the handle kept from close() meanwhile; None if the session is closed."""
        users = self._native_users
        me = get_ident()
        users.append(me)
        try:
            handle = self._handle
            return None if handle is None else call(handle, *args)
        finally:
            users.remove(me)

    def _unclaim_if_unbuilt(self, handle: Any, graph_id: int, mode: str) -> None:
        """After the first run in ``mode`` failed: GE's RunGraph and RunGraphWithStreamAsync compile and load an
        unloaded graph before they set its run mode, so a graph still unbuilt after the failure has no mode, and
        another mode may run it (geasync fixed the mode before the call, to name both modes in a conflict)."""
        try:
            unbuilt = _lib.is_graph_need_rebuild(handle, graph_id)
        except Exception:  # noqa: BLE001 - closed meanwhile: nothing more can run the graph
            return
        if unbuilt:
            self._modes.release(graph_id, mode)

    def _wait_for_native_calls(self) -> bool:
        """close(): until the native calls other threads make on the handle have returned. False if some still run
        while the interpreter exits (a daemon thread's call, whose thread never takes the GIL back to say so)."""
        users = self._native_users
        while users:
            if sys.is_finalizing():
                return False
            time.sleep(0.0005)
        return True

    def _broken_queue(self, error: GeError) -> GeError:
        """GE answers every RunGraphAsync with FAILED once a compile failure stopped the session's async queue, or
        once GE was finalised: say so, rather than leave the caller to guess from a bare FAILED."""
        if isinstance(error, (SessionBrokenError, SessionClosedError)) or error.status != FAILED:
            return error
        if self._generation != _lib.generation:
            why = "GE was finalized (GEFinalizeV2) after this session was created; create a new Session"
        elif self._async_failures:
            why = ("GE stops a session's RunGraphAsync queue for good after a RunGraphAsync fails to compile, and an "
                   "earlier request of this session failed; create a new Session (and check the failing graph or "
                   "inputs)")
        else:
            return error
        if not self._queue_stop_logged:  # once: every later request of the session fails the same way
            self._queue_stop_logged = True
            logger.error("session %s: the RunGraphAsync queue is stopped, every further run_graph_async fails "
                         "(SessionBrokenError): %s. GE refused %s with: %s. The first failed request: %s",
                         self._id, why, error.context, error.error_message, self._first_async_failure or "none")
        broken = SessionBrokenError(error.status, f"{error.error_message} -- {why}", error.api_name, error.context)
        broken.__cause__ = error
        return broken

    async def _refused(self, error: GeError) -> GeError:
        """A refused submit. GE stops the async queue before it calls back the request whose compile failed, so a
        submit can be refused before that failure reaches this loop: give it a moment to arrive (bounded), so the
        caller learns the session is broken rather than a bare FAILED."""
        if (error.status == FAILED and not self._async_failures and self._generation == _lib.generation
                and not isinstance(error, SessionClosedError)):
            deadline = time.monotonic() + 0.5
            while not self._async_failures and self._slots.in_flight and time.monotonic() < deadline:
                _hub.drain_current()
                await anyio.sleep(0.001)
        return self._broken_queue(error)

    @property
    def closed(self) -> bool:
        return self._handle is None

    def close(self) -> None:
        """Release the session now: its graphs are unloaded and GE's threads joined. Idempotent, and callable from any
        thread: calls other threads have in progress on the session (a ``run_graph``, a submit) return first.

        Async requests still queued in GE are dropped by it; their awaiting tasks get SessionBrokenError.
        Use ``await aclose()`` (or ``async with``) to let in-flight work finish first.
        """
        if get_ident() in self._native_users:  # an allocator callback of one of its runs: the run needs the session
            raise RuntimeError("Session.close() was called from inside a native call of the same session (an "
                               "allocator callback?); close it after that call has returned")
        if self._handle is not None and _lib.same_process():
            for address in list(self._default_allocators):  # they would outlive the session in GE's map
                try:
                    release_default_allocator(address)
                except GeError:
                    pass  # best effort: the session is going away anyway
        with self._lock:
            handle, self._handle = self._handle, None
        watchdog, self._watchdog, self._watch_hub = self._watchdog, None, None
        if watchdog is not None:
            watchdog.cancel()
        if handle is not None and _lib.same_process():
            in_flight = sum(len(c.live) for _, c in self._all_counters())
            logger.debug("session %s closing with %d runs in flight", self._id, in_flight)
            # another thread's submit, RunGraph, compile... still uses the handle; at exit, left to the process's end
            if self._wait_for_native_calls():
                _lib.session_destroy(handle)  # GE's threads are joined; jobs it dropped are reported abandoned
            _hub.drain_current()
        _hub.reap_orphans()
        _streams.reap()

    async def aclose(self) -> None:
        """Stop taking requests, wait (without blocking the loop) for the in-flight requests someone still awaits,
        then close(). Requests nobody awaits any more (cancelled, timed out) do not hold the close up: closing
        releases them (GE drops what it has not started)."""
        self._closing = True
        try:
            collect_in, collect_at = 0.05, time.monotonic() + 0.05
            started = time.monotonic()
            warn_in = ACLOSE_WARN_AFTER
            warn_at = started + warn_in
            # a forked child: the parent's runs complete in the parent only, and the child has nothing to wait for
            # A request whose loop was closed while it waited (for a compile or a slot) never resumes, and is not
            # waited for: the collector runs its cleanup when it frees its task (if the application lets it go).
            while _lib.same_process() and (
                    self._slots.in_flight - self._unawaited > 0 or self._slots.waiting_on_live_loops()
                    or self._compiling.on_live_loops() or self._compile_threads or self._starting.on_live_loops()
                    or any(cap is not None and cap.waiting_on_live_loops() for cap in self._graph_caps.values())):
                self._recover_lost_grants()
                if (self._compiling or self._starting) and time.monotonic() >= collect_at:
                    # now and then (backing off: a CANN compile really takes minutes), so that such a request's
                    # cleanup is not left to chance
                    gc.collect()
                    collect_in = min(collect_in * 2, 5.0)
                    collect_at = time.monotonic() + collect_in
                if time.monotonic() >= warn_at:
                    self._warn_stopped_loops(time.monotonic() - started)
                    warn_in = min(warn_in * 2, ACLOSE_WARN_MAX)
                    warn_at = time.monotonic() + warn_in
                await anyio.sleep(0.002)
        finally:
            self.close()

    def _warn_stopped_loops(self, waited: float) -> None:
        """aclose() still waits: if requests it waits for belong to asyncio loops that are stopped (not closed), say
        so, naming the loops and graphs. Such a loop keeps its requests (run again, they complete), so aclose() does
        not give them up; only the application can run or close the loop, or cancel aclose() to drop them."""
        loops: list[Any] = list(self._slots.waiting_loops())
        for cap in list(self._graph_caps.values()):
            if cap is not None:
                loops.extend(cap.waiting_loops())
        loops.extend(self._compiling.loops())
        loops.extend(self._starting.loops())
        loops.extend(_hub.loops_with_requests(lambda r: getattr(r, "session", None) is self))
        stopped: dict[int, Any] = {}
        for loop in loops:
            if loop is not None and not loop.is_running() and not loop.is_closed():
                stopped[id(loop)] = loop
        if not stopped:
            return
        graphs = sorted(gid for gid, c in list(self._graph_stats.items()) if c.live or c.waiters)
        names = ", ".join(f"{type(loop).__name__} at {id(loop):#x}" for loop in stopped.values())
        logger.warning(
            "session %s: aclose() has waited %.0f s for requests of graph(s) %s; some belong to event loop(s) that are "
            "stopped but not closed (%s): they complete when their loop runs again, or are given up when it is "
            "closed. Cancel aclose() (e.g. with asyncio.timeout) to close the session now and drop them",
            self._id, waited, ", ".join(map(str, graphs)) or "-", names)

    def _recover_lost_grants(self) -> None:
        """Takes back the slots, places and compile turns granted to requests whose loop was closed before they
        resumed (a closed loop's waiters are not waited for, so nobody else may look)."""
        self._slots.recover()
        for cap in list(self._graph_caps.values()):
            if cap is not None:
                cap.recover()
        with self._gates_lock:
            gates = list(self._compile_gates.values())
        for gate in gates:
            gate.turn.recover()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> "Session":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    def __del__(self) -> None:
        if getattr(self, "_handle", None) is not None:
            warnings.warn(f"unclosed {self!r}; use 'with Session()' or call close()", ResourceWarning, stacklevel=2,
                          source=self)
            try:
                self.close()
            except Exception:
                pass

    def __copy__(self) -> "Session":
        raise RuntimeError("Session does not support copy")

    def __deepcopy__(self, memo: Any) -> "Session":
        raise RuntimeError("Session does not support deepcopy")

    def __reduce__(self) -> Any:
        raise RuntimeError("Session cannot be pickled")

    @property
    def session_id(self) -> int:
        with self._native("Session.session_id") as handle:
            return _lib.session_id(handle)

    def __repr__(self) -> str:
        if self._handle is None:
            return "<geasync.Session closed>"
        try:
            return f"<geasync.Session id={self.session_id} backend={_lib.BACKEND!r}>"
        except GeError as exc:  # never raise from repr (it is used by __del__'s warning, after GE was finalized)
            return f"<geasync.Session unusable: {type(exc).__name__}>"

    # --- graphs ---
    def add_graph(self, graph_id: int, graph: Graph, options: Optional[Options] = None) -> None:
        """Add ``graph`` under ``graph_id`` (GE parses it now: corrupt or unsupported models raise GeError)."""
        self._add(graph_id, graph, options, clone=False)

    def add_graph_clone(self, graph_id: int, graph: Graph, options: Optional[Options] = None) -> None:
        """Add a copy of ``graph`` (GE's AddGraphClone): the same Graph may be added any number of times this way."""
        self._add(graph_id, graph, options, clone=True)

    def _add(self, graph_id: Any, graph: Any, options: Any, clone: bool) -> None:
        _check_graph_id(graph_id, f"Session.{'add_graph_clone' if clone else 'add_graph'}()")
        if not isinstance(graph, Graph):
            raise TypeError(f"graph must be a geasync.Graph, got {type(graph).__name__}")
        api = "add_graph_clone" if clone else "add_graph"
        opts, _ = split_options(_check_options(options, f"Session.{api}(): options"), GRAPH_OPTIONS,
                                  f"Session.{api}() options")
        context = f"Session.{api}(graph_id={graph_id})"
        with self._native(context) as handle:
            _lib.add_graph(handle, graph_id, graph._handle(context), opts, clone, context)
        logger.debug("session %s, graph %d added (%s)", self._id, graph_id, graph.name or "unnamed")
        self._modes.reset(graph_id)  # a fresh graph under this id has no run mode yet
        self._graph_caps.pop(graph_id, None)
        self._outputs_checked.discard(graph_id)
        self._set_spec(graph_id, graph)

    def remove_graph(self, graph_id: int) -> None:
        """Remove a graph; a running graph is removed once its runs finish (GE defers it)."""
        _check_graph_id(graph_id, "Session.remove_graph()")
        context = f"Session.remove_graph(graph_id={graph_id})"
        with self._native(context) as handle:
            _lib.remove_graph(handle, graph_id, context)
        logger.debug("session %s, graph %d removed", self._id, graph_id)
        with self._stats_lock:
            counters = self._graph_stats.pop(graph_id, None)
            if counters is not None:
                self._retiring.append((graph_id, counters))
            self._fold_retired()
        self._modes.reset(graph_id)
        self._graph_caps.pop(graph_id, None)
        self._outputs_checked.discard(graph_id)
        self._specs.pop(graph_id, None)
        self._spec_errors.pop(graph_id, None)

    def compile_graph(self, graph_id: int, inputs: Optional[Inputs] = None) -> None:
        """Compile now (runs compile on demand). ``inputs`` (Tensors/arrays, a list or a ``{name: array}`` mapping)
        set the Data nodes' shapes and dtypes: later runs must then match them (GE fixes the Data nodes)."""
        _check_graph_id(graph_id, "Session.compile_graph()")
        context = f"Session.compile_graph(graph_id={graph_id})"
        self._live(context)
        spec = self._specs.get(graph_id)
        if inputs is not None and spec is not None and isinstance(inputs, Mapping):
            inputs = spec.order(inputs, "compile_graph")
        prepared = None if inputs is None else prepare_inputs(inputs, spec=spec, api="compile_graph",
                                                              graph_id=graph_id)
        with self._native(context) as handle:
            needed = _lib.is_graph_need_rebuild(handle, graph_id)
            fixes_inputs = prepared is not None and spec is not None and needed
            started = now()
            _lib.compile_graph(handle, graph_id, prepared, context)
            self._check_outputs(handle, graph_id)
        if needed:
            logger.info("session %s, graph %d compiled in %.3f s (compile_graph)", self._id, graph_id, now() - started)
        self._graph_caps.pop(graph_id, None)
        if fixes_inputs:  # GE ignores the inputs of a graph already compiled
            assert spec is not None
            ordered = cast(Sequence[Any], inputs)  # a mapping was put in the graph's input order above
            self._specs[graph_id] = spec.compiled(ordered, "fixed by compile_graph with inputs")

    def load_graph(self, graph_id: int, options: Optional[Options] = None, stream: Optional[StreamLike] = None) -> None:
        """Load now (compiling first if needed); runs load on demand."""
        _check_graph_id(graph_id, "Session.load_graph()")
        opts, _ = split_options(_check_options(options, "Session.load_graph(): options"), LOAD_OPTIONS,
                                  "Session.load_graph() options")
        if stream is not None:
            stream_address(stream, f"Session.load_graph(graph_id={graph_id}): stream")  # before the session is asked
        context = f"Session.load_graph(graph_id={graph_id})"
        with self._native(context) as handle, \
                (nullcontext(0) if stream is None else stream_in_use(stream, "stream")) as address:
            _lib.load_graph(handle, graph_id, opts, address, context)
            self._check_outputs(handle, graph_id)

    def is_graph_need_rebuild(self, graph_id: int) -> bool:
        _check_graph_id(graph_id, "Session.is_graph_need_rebuild()")
        with self._native("Session.is_graph_need_rebuild()") as handle:
            return _lib.is_graph_need_rebuild(handle, graph_id)

    def get_compiled_graph_summary(self, graph_id: int) -> CompiledGraphSummary:
        """GE's summary of a compiled graph; GeError (GE_GRAPH_NOT_BUILT) if it is not compiled yet."""
        _check_graph_id(graph_id, "Session.get_compiled_graph_summary()")
        context = f"Session.get_compiled_graph_summary(graph_id={graph_id})"
        with self._native(context) as handle:
            s = _lib.compiled_graph_summary(handle, graph_id, context)
        return CompiledGraphSummary(
            is_static=s["is_static"], const_memory_size=s["const_memory_size"],
            feature_memory_size=s["feature_memory_size"], stream_num=s["stream_num"], event_num=s["event_num"],
            output_shapes=[shape for shape, _ in s["outputs"]], output_dtypes=[dt for _, dt in s["outputs"]])

    # --- graph metadata and names (inputs by name, outputs by name) ---
    def graph_inputs(self, graph_id: int) -> Tuple[TensorInfo, ...]:
        """The inputs runs of ``graph_id`` take, in order (see ``Graph.inputs``); after ``compile_graph`` with
        inputs, the dtypes and shapes it fixed."""
        return self._spec(graph_id, "graph_inputs").inputs

    def graph_outputs(self, graph_id: int) -> Tuple[TensorInfo, ...]:
        """The outputs runs of ``graph_id`` return, in this order (the graph's ``graph.output`` order)."""
        return self._spec(graph_id, "graph_outputs").outputs

    def input_list(self, graph_id: int, feeds: Mapping[str, TensorLike]) -> List[TensorLike]:
        """A ``{input name: array}`` mapping as the list runs take (every run method but the stream mode, whose
        GE contract is a list, also takes the mapping itself). InputError for unknown or missing names."""
        if not isinstance(feeds, Mapping):
            raise TypeError(f"feeds must be a mapping of input name to Tensor, got {type(feeds).__name__}")
        return self._spec(graph_id, "input_list").order(feeds, "input_list")

    def output_dict(self, graph_id: int, outputs: Sequence[_T]) -> Dict[str, _T]:
        """A run's outputs keyed by the graph's output names (in output order):
        ``y = session.output_dict(1, session.run_graph(1, feeds))["logits"]``."""
        spec = self._spec(graph_id, "output_dict")
        names = [o.name for o in spec.outputs]
        if len(outputs) != len(names):
            raise ValueError(f"Session.output_dict(graph_id={graph_id}): the graph has {len(names)} output(s) "
                             f"({', '.join(map(repr, names))}), got {len(outputs)}")
        return dict(zip(names, outputs, strict=True))

    def _spec(self, graph_id: Any, api: str) -> GraphSpec:
        _check_graph_id(graph_id, api if "." in api else f"Session.{api}()")
        spec = self._specs.get(graph_id)
        if spec is None:
            error = self._spec_errors.get(graph_id)
            if error is not None:
                raise error
            raise no_graph_error(graph_id, f"Session.{api}(graph_id={graph_id})")
        return spec

    def _first_async(self, graph_id: int, spec: GraphSpec, inputs: Any) -> None:
        """The graph's first run_graph_async. geasync compiles a graph nobody compiled from its declared inputs before
        that run (``_first_async_run``), so symbolic dims stay free and the input check keeps the declaration."""
        spec.async_seen = True

    def _set_spec(self, graph_id: int, graph: Graph) -> None:
        """Remembers an added graph's declared inputs and outputs (read from its bytes, once per Graph)."""
        self._spec_errors.pop(graph_id, None)
        try:
            self._specs[graph_id] = GraphSpec(graph_id, graph.inputs, graph.outputs)
        except ModelFormatError as exc:  # GE took bytes geasync cannot read: its runs go unchecked
            self._specs.pop(graph_id, None)
            self._spec_errors[graph_id] = exc

    # --- runs ---
    def run_graph(self, graph_id: int, inputs: Inputs) -> List[Tensor]:
        """Run synchronously (GE RunGraph); returns host output Tensors. The first run fixes the graph's mode.

        ``inputs``: Tensors / numpy arrays in the graph's input order (``graph_inputs``), or a ``{name: array}``
        mapping. They are checked against the graph's declared inputs first (``InputError``). The outputs come in the
        graph's output order (``graph_outputs``; ``output_dict`` keys them by name)."""
        if type(graph_id) is not int or not 0 <= graph_id <= 0xFFFFFFFF:
            _check_graph_id(graph_id, "Session.run_graph()")  # raises with the reason
        # rows describe the inputs; keep (Tensors and their owners) and the rows' buffers stay alive until return
        rows, keep, _, _ = input_rows(inputs, "inputs", False, self._specs.get(graph_id), "run_graph", graph_id)
        context = "Session.run_graph(graph_id={graph_id})"  # formatted only where it is raised with
        # This is the path whose per-call cost users measure against other runtimes, so the common case is inlined:
        # a live session (else _live raises the reason), a graph already in this mode (else claim decides), and
        # _count_start / _count_finish, and _native (close() from another thread waits for the run to return).
        users = self._native_users
        me = get_ident()
        users.append(me)
        try:
            handle = self._handle
            if handle is None or self._closing or self._generation != _lib.generation or _lib.forked:
                handle = self._live(context.format(graph_id=graph_id))
            claimed = False
            if self._modes.established.get(graph_id) != RUN_GRAPH:
                claimed = self._modes.claim(graph_id, RUN_GRAPH, context.format(graph_id=graph_id))
            counters = self._graph_stats.get(graph_id) or self._counters(graph_id)
            live = counters.live
            key = object()
            stats_lock = self._stats_lock
            stats_lock.acquire()  # acquire/release in try/finally: ~0.7k instructions fewer than `with`
            try:
                counters.submitted += 1
                live[key] = start = now()
            finally:
                stats_lock.release()
            try:
                outputs = _lib.run_graph(handle, graph_id, rows, context, TENSORS)
            except BaseException:
                with stats_lock:
                    counters.finish(key, "failed")
                if claimed:
                    self._unclaim_if_unbuilt(handle, graph_id, RUN_GRAPH)
                raise
            if graph_id not in self._outputs_checked:  # the first run compiled the graph: its outputs' declaration
                self._check_outputs(handle, graph_id)
        finally:
            users.remove(me)
        latency = 0.0
        stats_lock.acquire()
        try:
            counters.completed += 1
            if live.pop(key, None) is not None:
                latency = now() - start
                hist = counters.latency  # Histogram.observe, inlined (a method call is a tenth of this wrapper)
                hist.counts[bisect_left(hist.bounds, latency)] += 1
                hist.total += latency
                hist.count += 1
        finally:
            stats_lock.release()
        if latency > counters.slow_after:  # logged without the lock (a handler may read statistics())
            counters.report_slow(latency)
        return outputs

    def run_graph_with_stream_async(self, graph_id: int, stream: StreamLike,
                                    inputs: TensorLikeList) -> List[Tensor]:
        """Enqueue a run on ``stream`` (GE RunGraphWithStreamAsync) and return its device output Tensors at once.

        ``inputs`` is a list, in the graph's input order (GE's contract; ``input_list`` makes one from a mapping),
        checked against the graph's declared inputs first (``InputError``). The outputs are valid once the stream is
        synchronized. The inputs are pinned (and numpy inputs read-only) until the stream has passed the run. Output
        memory comes from the allocator registered for the stream; a stream with none gets geasync's device
        allocator.
        """
        _check_graph_id(graph_id, "Session.run_graph_with_stream_async()")
        if not stream_address(stream, f"Session.run_graph_with_stream_async(graph_id={graph_id}): stream"):
            # (checked before the inputs.) A null stream would first meet the default allocator's registration and
            # fail as a RegisterExternalAllocator error the caller never made, after fixing the graph's run mode.
            raise ValueError(f"Session.run_graph_with_stream_async(graph_id={graph_id}): stream is null (0); pass a "
                             "geasync.Stream, or the address of a stream created by aclrtCreateStream")
        prepared = prepare_inputs(inputs, require_list=True, spec=self._specs.get(graph_id),
                                  api="run_graph_with_stream_async", graph_id=graph_id)
        context = f"Session.run_graph_with_stream_async(graph_id={graph_id})"
        self._live(context)
        claimed = self._modes.claim(graph_id, RUN_GRAPH_WITH_STREAM_ASYNC, context)
        _streams.reap()
        # The stream no longer uses the inputs, nor the outputs' memory, once it has passed the run: output memory
        # dropped by the caller before then is freed only at that point, on a Python thread.
        owners: list[Any] = []
        with self._native(context) as handle, stream_in_use(stream, "stream") as address:
            if not has_allocator(address):
                try:
                    _lib.register_default_allocator(handle, address, context)
                except BaseException:
                    if claimed:  # no run was made: the graph has no mode
                        self._modes.release(graph_id, RUN_GRAPH_WITH_STREAM_ASYNC)
                    raise
                self._default_allocators.add(address)
                mark_allocator(address, _allocator_release(self, address))
            pins = self._pin(prepared)
            key = self._count_start(graph_id)

            def passed() -> None:
                pins.unpin()
                owners.clear()
                self._count_finish(graph_id, key, "completed")

            try:
                outs = _streams.runs.run(handle, graph_id, address, prepared, context, TENSORS, passed)
            except BaseException:
                pins.unpin()
                self._count_finish(graph_id, key, "failed")
                if claimed:
                    self._unclaim_if_unbuilt(handle, graph_id, RUN_GRAPH_WITH_STREAM_ASYNC)
                raise
        owners.extend(t._owner for t in outs)
        return outs

    def run_graph_async(self, graph_id: int, inputs: Inputs, *,
                        timeout: Optional[float] = None) -> Coroutine[Any, Any, List[Tensor]]:
        """Run on GE's runtime threads (RunGraphAsync) and await the outputs without blocking the event loop:
        ``outputs = await session.run_graph_async(graph_id, inputs)``.

        ``inputs`` and outputs as in ``run_graph`` (a list or a ``{name: array}`` mapping; checked against the graph's
        declared inputs at once, so a bad request raises ``InputError`` and never reaches GE). Works under asyncio,
        uvloop and trio. At most ``max_in_flight`` requests of the session are submitted at once; further ones wait
        here. Cancelling the awaiting task (or ``timeout``, in seconds) raises at once, but the inputs stay pinned
        until the runtime reports completion. A ``timeout`` of 0 or less is a deadline already past: awaiting raises
        TimeoutError at once on every loop, and nothing is submitted (counted cancelled in ``statistics()``).
        Arguments are checked when it is called (a TypeError, an InputError, a closed session or a run-mode conflict
        raises at once), the run starts when it is awaited.
        """
        # every run takes this path: the checks are inlined and the context string is made only for an error
        if type(graph_id) is not int or not 0 <= graph_id <= 0xFFFFFFFF:
            _check_graph_id(graph_id, "Session.run_graph_async()")
        if timeout is not None:
            timeout = check_timeout(timeout, "Session.run_graph_async")
        spec = self._specs.get(graph_id)
        # (rows, keep, arrays, nbytes): the request holds them until its completion; the descriptors are made from the
        # rows when it is submitted (RunGraphAsync reads them only then)
        prepared = input_rows(inputs, "inputs", False, spec, "run_graph_async", graph_id)
        if spec is not None and not spec.async_seen:
            self._first_async(graph_id, spec, inputs)
        if self._handle is None or self._closing or self._generation != _lib.generation or _lib.forked:
            self._live(_async_context(graph_id))
        if self._modes.established.get(graph_id) is not RUN_GRAPH_ASYNC:
            self._modes.claim(graph_id, RUN_GRAPH_ASYNC, _async_context(graph_id))
        if timeout is None:
            return self._run_async(graph_id, prepared)  # awaited directly: one coroutine per request
        if timeout <= 0:
            return self._expired(graph_id, timeout)
        return self._run_async_with_timeout(graph_id, prepared, timeout)

    async def _expired(self, graph_id: int, timeout: float) -> List[Tensor]:
        # A deadline already past: TimeoutError when awaited, nothing submitted, on every loop. Left to the loop's
        # timeout, asyncio and trio both submitted the run and then raised, and counted it cancelled on one and
        # completed on the other.
        counters = self._counters(graph_id)
        counters.submitted += 1
        counters.cancelled += 1
        raise TimeoutError(f"{_async_context(graph_id)}: no result within {timeout} s (the request's timeout, "
                           "already expired: nothing was submitted)")

    async def _run_async_with_timeout(self, graph_id: int, prepared: AsyncInputs, timeout: float) -> List[Tensor]:
        if running_loop() is None:  # (trio's is None too: checked there)
            require_loop(_async_context(graph_id))
        deadline = fail_after(timeout)
        try:
            async with deadline:
                return await self._run_async(graph_id, prepared)
        except TimeoutError:
            if deadline.expired():  # this request's own timeout, not a caller's deadline around it
                raise TimeoutError(f"{_async_context(graph_id)}: no result within {timeout} s (the request's "
                                   "timeout; its inputs stay pinned until the runtime completes the run)") from None
            raise

    def _graph_cap(self, graph_id: int) -> Optional[InFlightBound]:
        """GE keeps at most 32 RunGraphAsync callbacks pending for a dynamic-shape graph; beyond that its session
        executor thread waits, stalling every other graph of the session. Such graphs get their own bound of 32, so
        GE never waits and the session's other graphs keep running."""
        cap: Optional[InFlightBound] = self._graph_caps.get(graph_id, _UNKNOWN)
        if cap is not _UNKNOWN:
            return cap
        if self._ask(_lib.is_graph_need_rebuild, graph_id) is not False:
            return None  # not compiled (the first async run compiles it), or closed: asked again next time
        try:
            summary = self._ask(_lib.compiled_graph_summary, graph_id, "Session.run_graph_async")
        except GeError:
            return None
        if summary is None:
            return None
        cap = None if summary["is_static"] else InFlightBound(DYNAMIC_GRAPH_PENDING_LIMIT)
        self._graph_caps[graph_id] = cap
        return cap

    def _check_outputs(self, handle: Any, graph_id: int) -> None:
        """Once per added graph, after a compile geasync asked for or the first run_graph: warns (the geasync
        logger) of outputs whose compiled dtype or shape contradicts the model's declaration. GE's ONNX parser reads
        only the names of graph.output, so such a model runs on GE and on the twin (onnxruntime refuses a dtype
        contradiction and warns of a shape one), but Graph.outputs and graph_outputs() report the declaration, not
        what runs return."""
        if graph_id in self._outputs_checked:
            return
        spec = self._specs.get(graph_id)
        if spec is None:  # no metadata (geasync could not read the model): nothing to compare
            self._outputs_checked.add(graph_id)
            return
        try:
            summary = _lib.compiled_graph_summary(handle, graph_id, "geasync output declaration check")
        except GeError:  # not compiled (GE compiles at the first run of some modes): checked at the next compile
            return
        self._outputs_checked.add(graph_id)
        found = declared_output_mismatches(spec.outputs, summary["outputs"])
        if found:
            logger.warning("session %s, graph %d: %s; runs return what the graph computes, while Graph.outputs and "
                           "graph_outputs() report the declaration: fix the model's declared outputs (graph.output)",
                           self._id, graph_id, "; ".join(found))

    def _compile_declared(self, graph_id: int, context: str) -> None:
        # On a worker thread, which runs on when the request that started it is cancelled (aclose() waits for it).
        # Under the session's lock, so close() cannot destroy the handle meanwhile.
        me = object()
        self._compile_threads.add(me)
        try:
            with self._lock:
                handle = self._handle
                if handle is not None and _lib.is_graph_need_rebuild(handle, graph_id):
                    # On CANN this takes seconds to minutes, and the first requests wait for it: say so
                    logger.info("session %s, graph %d: compiling for its first run_graph_async", self._id, graph_id)
                    started = now()
                    _lib.compile_graph(handle, graph_id, None, context)
                    logger.info("session %s, graph %d compiled in %.3f s (first run_graph_async)", self._id,
                                graph_id, now() - started)
                    self._check_outputs(handle, graph_id)
        finally:
            self._compile_threads.discard(me)

    def _watch(self, hub: _hub.Hub) -> None:
        """An async run starts on ``hub``'s loop, and the abandoned-run check runs on no loop of it (the last check
        found nothing in flight, or that loop is gone): arms it here. A check that finds nothing in flight stops,
        so an idle session has no timer, and a busy one arms it once."""
        watchdog = self._watchdog
        if watchdog is not None and watchdog.active:
            return  # another loop's check covers this session's runs
        ref = weakref.ref(self)  # the timer must not keep the session alive

        def tick() -> Optional[float]:
            session = ref()
            if session is None or session._watch_hub is not hub:  # gone, closed, or another loop's check took over
                return None
            delay = session._check_abandoned()
            if delay is None:
                session._watchdog = session._watch_hub = None
            return delay

        self._watch_hub = hub
        self._watchdog = call_repeatedly(self._abandon_after, tick)

    def _check_abandoned(self) -> Optional[float]:
        """Logs (WARNING) the runs in flight that turned abandoned since the last check, each once, per graph.
        Returns when to check next (when the next run could turn abandoned; at most every abandon_after / 8
        seconds), or None if nothing is in flight. Off the hot path: the loop's timer and statistics() call it."""
        after = self._abandon_after
        found = []
        due = math.inf
        in_flight = False
        with self._stats_lock:
            t = now()
            mark = self._abandon_mark
            for graph_id, counters in self._all_counters():
                starts = list(counters.live.values())
                in_flight = in_flight or bool(starts)
                fresh = [s for s in starts if mark < s <= t - after]
                if fresh:
                    found.append((graph_id, len(fresh), t - min(fresh)))
                    self._abandon_mark = max(self._abandon_mark, max(fresh))
                due = min([due, *(s + after - t for s in starts if s > t - after)])
        for graph_id, count, age in found:
            logger.warning("session %s, graph %d: %d run(s) abandoned, in flight with no completion for %.3g s "
                           "(oldest) and over abandon_after (%g s): the runtime's completion callback was probably "
                           "lost; they stay counted in flight (and abandoned) until it comes",
                           self._id, graph_id, count, age, after)
        if not in_flight:
            return None
        return max(min(due, after), after / 8)

    async def _first_async_run(self, graph_id: int, counters: GraphCounters,
                               since: float) -> Optional[InFlightBound]:
        """GE's RunGraphAsync compiles a graph from its first request's shapes (a static model: a later request of
        another size fails) and any pre-run failure stops the session's async queue for good. So before the first
        RunGraphAsync of a graph nobody compiled, geasync compiles it from its declared inputs (CompileGraph), off
        the event loop: symbolic dims give a dynamic-shape model that takes any size, and a request that does not
        fit the graph fails alone at run time instead of stopping the session."""
        # a request that arrives while others still wait for the compile queues behind them: runs reach the
        # runtime in the order they were asked for
        if graph_id in self._compile_gates or self._ask(_lib.is_graph_need_rebuild, graph_id):
            loop = self._compiling.add()  # aclose() waits for these requests too
            key = object()
            counters.waiters[key] = since  # counted waiting meanwhile, and failed or cancelled if it ends here
            try:
                await self._compile_once(graph_id)
            except BaseException as exc:
                if isinstance(exc, Exception):
                    counters.failed += 1
                else:
                    counters.cancelled += 1
                raise
            finally:
                del counters.waiters[key]
                self._compiling.remove(loop)
        return self._graph_cap(graph_id)

    async def _compile_once(self, graph_id: int) -> None:
        """The graph's first compile, on one worker thread however many requests arrive during it: they queue in
        arrival order on the graph's gate (whatever their loops), holding no thread. On CANN a compile takes
        seconds to minutes, and a thread per request would hold the thread pool's tokens, which the application's
        other ``to_thread`` work needs, all that time. The requests that waited for a failed compile fail with its error
        (each its own copy); one that arrives after the failure tries again."""
        with self._gates_lock:
            gate = self._compile_gates.get(graph_id)
            if gate is None:
                gate = self._compile_gates[graph_id] = _CompileGate()
            gate.users += 1
            seen = gate.finished  # a compile that finishes after this arrived is one it waited for
        try:
            # One turn at a time, in arrival order; a turn granted to a request whose loop is gone passes on, and so
            # does one whose loop was closed after its compile ended (after the worker thread looked): that request
            # never resumes to pass it on, and the application may keep its task from the collector. Arrivals and
            # the requests waiting on live loops look for both (_GateTurn.recover).
            await gate.turn.acquire()
            turn = gate.holder = _Turn(gate, running_loop())
            try:
                if gate.failure is not None and gate.failure[0] > seen:
                    raise _error_copy(gate.failure[1])
                if not self._ask(_lib.is_graph_need_rebuild, graph_id):
                    return  # compiled while it waited
                # The session by weak reference: a worker thread reports its result before it drops its call's
                # arguments, and a session dropped right after its first run must be collected (and warned about).
                # A request cancelled meanwhile raises at once; the compile runs on (aclose() waits for it), and the
                # next request in line waits for it on the session's lock, in a thread of its own.
                await _off_loop(_compile_in_turn, turn, gate.finished + 1, weakref.ref(self), graph_id,
                                _async_context(graph_id))
            finally:
                turn.pass_on()
        finally:
            with self._gates_lock:
                gate.users -= 1
                if not gate.users:
                    del self._compile_gates[graph_id]

    async def _run_async(self, graph_id: int, prepared: AsyncInputs) -> List[Tensor]:
        counters = self._graph_stats.get(graph_id)
        if counters is None:
            counters = self._counters(graph_id)
        counters.submitted += 1
        started_open = not self._closing  # aclose() lets the requests started before it finish
        cap = self._graph_caps.get(graph_id, _UNKNOWN)
        if self._compile_gates:  # requests still wait for a first compile: this one may have to queue behind them
            cap = _UNKNOWN
        slots = self._slots
        if cap is not None or not slots.try_acquire():  # the usual case (a slot at once, no await) skips this
            # Until it holds a session slot (in_flight), a request started before aclose() is counted here, so
            # aclose() also waits for one that was just granted a place under the graph's bound and has not resumed.
            if running_loop() is None:  # (trio's is None too: checked there)
                try:
                    require_loop(_async_context(graph_id))
                except RuntimeError:
                    counters.failed += 1
                    raise
            loop = self._starting.add() if started_open else _NOT_COUNTED
            try:
                since = 0.0  # when it began to wait, for the oldest waiting age (across every wait)
                if cap is _UNKNOWN:
                    since = now()
                    cap = await self._first_async_run(graph_id, counters, since)
                if cap is not None and not cap.try_acquire():
                    since = since or now()
                    await self._wait_for(cap, counters, since)
                try:
                    if not slots.try_acquire():
                        # backpressure: wait without blocking the loop
                        await self._wait_for(slots, counters, since or now())
                except BaseException:
                    if cap is not None:
                        cap.release()
                    raise
            finally:
                if loop is not _NOT_COUNTED:
                    self._starting.remove(loop)
        try:
            if self._handle is None or (self._closing and not started_open):  # closed while it waited for a slot
                self._live(_async_context(graph_id))
            hub = _hub.current_hub()
            if self._watch_hub is not hub:  # one compare per run: the check is armed on this loop already
                self._watch(hub)
            request = _RunRequest(self, prepared, graph_id, hub.new_waiter(), cap, counters)
        except BaseException:
            counters.failed += 1
            slots.release()
            if cap is not None:
                cap.release()
            require_loop(_async_context(graph_id))  # (current_hub's own error names no API)
            raise
        try:
            hub.start(request)
        except BaseException as exc:
            if hub.holds(request):  # submitted, then interrupted (e.g. KeyboardInterrupt during the submit's poll)
                request.waiter.cancel()  # never awaited (no callbacks to schedule): its completion is unwanted
                self._give_up(request)  # the hub releases it at its completion, as a cancelled request
                raise
            if request.objects is None:  # completed and released during the poll, then interrupted
                raise
            counters.finish(request, "failed")  # refused at submit
            request.release(True)
            if isinstance(exc, GeError):
                raise (await self._refused(exc)) from None
            raise
        try:
            outputs: List[Tensor] = await request.waiter  # the future itself on asyncio: no extra frame
            return outputs
        except BaseException:
            self._give_up(request)
            raise

    def _give_up(self, request: _RunRequest) -> None:
        """Nobody waits for ``request`` any more (its waiter is done, or was never awaited); if still in flight,
        its completion is only released."""
        if request.objects is not None:
            request.unawaited = True
            self._unawaited += 1

    @staticmethod
    async def _wait_for(slots: InFlightBound, counters: GraphCounters, since: float) -> None:
        """Waits for one of ``slots``, counted as waiting since ``since``; a caller that gives up meanwhile is
        counted cancelled."""
        key = object()
        counters.waiters[key] = since
        try:
            await slots.acquire()
        except BaseException:
            counters.cancelled += 1
            raise
        finally:
            del counters.waiters[key]

    async def run_graph_in_thread(self, graph_id: int, inputs: Inputs) -> List[Tensor]:
        """``run_graph`` (RunGraph mode) in a worker thread, for async code that wants RunGraph semantics.

        Cancelling waits for the worker to finish the run (the inputs are in use until then).
        """
        require_loop(f"Session.run_graph_in_thread(graph_id={graph_id})")
        return await anyio.to_thread.run_sync(self.run_graph, graph_id, inputs)

    def statistics(self) -> SessionStatistics:
        """The session's runs in every mode, in total and per graph (see SessionStatistics): in flight, waiting
        for a slot, completed, failed, cancelled, abandoned, the oldest run's age and the longest wait, latencies;
        pinned input bytes and the in-flight bound. Runs newly abandoned are logged, as the loop's check does."""
        _hub.reap_orphans()
        _streams.reap()
        self._check_abandoned()
        with self._stats_lock:
            self._fold_retired()
            graphs = {gid: c.snapshot(gid, self._abandon_after) for gid, c in list(self._graph_stats.items())}
            removed = [c.snapshot(gid, self._abandon_after) for gid, c in [(0, self._retired), *self._retiring]]
        per = [*graphs.values(), *removed]  # the totals include removed graphs' runs
        ages = [g.oldest_age for g in per if g.oldest_age is not None]
        waits = [g.oldest_waiting_age for g in per if g.oldest_waiting_age is not None]
        return SessionStatistics(
            in_flight=sum(g.in_flight for g in per), waiting=sum(g.waiting for g in per),
            completed=sum(g.completed for g in per), failed=sum(g.failed for g in per),
            cancelled=sum(g.cancelled for g in per), pinned_bytes=self._pinned.total,
            max_in_flight=self._slots.limit, submitted=sum(g.submitted for g in per),
            abandoned=sum(g.abandoned for g in per), oldest_age=max(ages) if ages else None,
            latency=merged_histogram([g.latency for g in per]), graphs=graphs,
            oldest_waiting_age=max(waits) if waits else None)

    def _all_counters(self) -> list[tuple[int, GraphCounters]]:
        """Every graph's counters that may have runs in flight: the added graphs', and removed ones' not yet
        folded into the totals."""
        return [*self._graph_stats.items(), *self._retiring]

    def _fold_retired(self) -> None:
        """Folds the removed graphs' counters whose runs have all ended into the totals (under _stats_lock). A run
        that took its graph's counters just before the removal and counts itself just after it is lost from the
        totals: it fails anyway, as its graph is gone."""
        keep = []
        for graph_id, counters in self._retiring:
            if counters.drained():
                self._retired.absorb(counters)
            else:
                keep.append((graph_id, counters))
        self._retiring = keep

    def _pending_runs(self, graph_ids: Sequence[int]) -> list[int]:
        """Per graph id: its runs waiting or in flight, in every mode (0 for a graph without counters yet). For
        GraphPool's pick, once per request: one call for all its instances, lock-free like the loop's own counting
        (a count read mid-update is off by one run at most, which only sways a pick)."""
        stats = self._graph_stats
        out = []
        for graph_id in graph_ids:
            counters = stats.get(graph_id)
            out.append(0 if counters is None else counters.pending())
        return out

    def _counters(self, graph_id: int) -> GraphCounters:
        counters = self._graph_stats.get(graph_id)
        if counters is None:
            with self._stats_lock:
                counters = self._graph_stats.get(graph_id)
                if counters is None:
                    counters = GraphCounters(f"session {self._id}, graph {graph_id}", self._slow_after)
                    if graph_id in self._specs or graph_id in self._spec_errors:
                        self._graph_stats[graph_id] = counters
                    else:  # no such graph: its run fails, counted in the totals only (ids tried stay unbounded)
                        self._fold_retired()
                        self._retiring.append((graph_id, counters))
        return counters

    def _count_start(self, graph_id: int) -> object:
        """A run off the loop's hot path (sync, in-thread, stream mode) is submitted and in flight: its key."""
        key = object()
        counters = self._counters(graph_id)
        with self._stats_lock:
            counters.submitted += 1
            counters.live[key] = now()
        return key

    def _count_finish(self, graph_id: int, key: object, outcome: str) -> None:
        counters = self._counters(graph_id)
        with self._stats_lock:
            latency = counters.finish(key, outcome)
        counters.check_slow(latency)  # logged without the lock (a handler may read statistics())

    def _pin(self, prepared: PreparedInputs) -> Pins:
        return Pins(prepared, prepared.arrays, prepared.nbytes, self._freeze_inputs, self._pinned)

    # --- allocators ---
    def register_external_allocator(self, stream: StreamLike, allocator: Allocator) -> None:
        """Use ``allocator`` for output memory of runs on ``stream`` (process-wide, the last registration wins)."""
        address = stream_address(stream, "Session.register_external_allocator(): stream")
        if not isinstance(allocator, Allocator):
            raise TypeError(f"allocator must be a geasync.Allocator instance, got {type(allocator).__name__}")
        context = "Session.register_external_allocator()"
        with self._native(context) as handle:
            _lib.register_external_allocator(handle, address, allocator, context)
        self._default_allocators.discard(address)
        mark_allocator(address, None)

    def unregister_external_allocator(self, stream: StreamLike) -> None:
        address = stream_address(stream, "Session.unregister_external_allocator(): stream")
        context = "Session.unregister_external_allocator()"
        with self._native(context) as handle:
            _lib.unregister_external_allocator(handle, address, context)
        self._default_allocators.discard(address)
        unmark_allocator(address)

    def _release_default_allocator(self, address: int) -> None:
        # the stream (or this session) closes: drop the device allocator geasync registered for it
        self._default_allocators.discard(address)
        self._ask(_lib.unregister_external_allocator, address, "Stream.close()")


async def _off_loop(call: Callable[..., None], *args: Any) -> None:
    """``call(*args)`` in a worker thread, awaited; a caller cancelled meanwhile raises at once and the call runs on.
    On asyncio (uvloop included) in the loop's default executor, which closing the loop (``asyncio.run`` returning,
    ``loop.close()``) shuts down: anyio's asyncio worker threads hold the loop's root task (and, through its
    coroutine, whatever it references: a session), and once their loop is closed with that task still pending they
    wait for more work for good."""
    loop = running_loop()
    if loop is not None:
        await loop.run_in_executor(None, call, *args)
    else:
        await anyio.to_thread.run_sync(call, *args, abandon_on_cancel=True)


def _compile_declared(ref: "weakref.ref[Session]", graph_id: int, context: str) -> None:
    session = ref()
    if session is not None:
        session._compile_declared(graph_id, context)


class _Turn:
    """A request's turn at a graph's first compile. The request passes it on when it resumes after the compile, so
    requests reach the runtime in arrival order. If its loop was closed meanwhile it never resumes (until the
    collector frees its task): then the worker thread that ran the compile passes it on, so the requests of other
    loops do not wait for the collector."""

    __slots__ = ("_gate", "_loop", "_lock", "_started", "_passed", "compiled")

    def __init__(self, gate: "_CompileGate", loop: Any) -> None:
        self._gate = gate
        self._loop = loop  # the request's asyncio loop; None on trio, whose runs end only once their tasks have
        self._lock = threading.Lock()
        self._started = self._passed = False
        self.compiled = False  # the worker thread is done with the compile

    def start(self) -> bool:
        """The worker thread takes up the compile: False if the request gave up (and passed the turn on) first."""
        with self._lock:
            self._started = not self._passed
            return self._started

    def pass_on(self) -> None:
        with self._lock:
            if self._passed:
                return
            self._passed = True
        self._gate.turn.release()

    def orphaned(self) -> bool:
        return self._loop is not None and self._loop.is_closed()


def _compile_in_turn(turn: _Turn, attempt: int, ref: "weakref.ref[Session]", graph_id: int, context: str) -> None:
    # On a worker thread: the compile of the request holding ``turn`` (unless it gave up before this started)
    if not turn.start():
        return
    gate = turn._gate
    try:
        _compile_declared(ref, graph_id, context)
    except Exception as exc:
        gate.failure = (attempt, exc)
        raise
    finally:
        gate.finished = attempt
        turn.compiled = True
        if turn.orphaned():
            turn.pass_on()


class _CompileGate:
    """A graph's first compile: the requests that wait for it, in arrival order, whatever their loops."""

    __slots__ = ("turn", "holder", "users", "finished", "failure")

    def __init__(self) -> None:
        self.turn = _GateTurn(self)
        self.holder: Optional[_Turn] = None  # the request whose turn it is (or was last)
        self.users = 0
        self.finished = 0  # compiles tried, counted as each ends
        self.failure: Optional[Tuple[int, Exception]] = None  # the last failed one, by its count


class _GateTurn(InFlightBound):
    """A compile gate's single turn."""

    def __init__(self, gate: _CompileGate) -> None:
        super().__init__(1)
        self._gate = gate  # (a cycle: the gate holds this)

    def recover(self) -> None:
        super().recover()
        holder = self._gate.holder
        if holder is not None and holder.compiled and holder.orphaned():
            holder.pass_on()


def _error_copy(error: Exception) -> Exception:
    """One compile's error for one more request: one exception object raised in several tasks would pile up their
    tracebacks."""
    try:
        return copy.copy(error).with_traceback(None)
    except Exception:  # an exception type that cannot be rebuilt from its args
        return error


class _RunRequest(Pins, _hub.RunRequest):
    """A RunGraphAsync request in flight: its own input pins, and how its completion becomes Tensors or an
    exception. One object per request (plus its waiter), as it is made on every run's hot path."""

    __slots__ = ("session", "graph_id", "waiter", "unawaited", "cap", "counters")

    def __init__(self, session: Session, prepared: AsyncInputs, graph_id: int, waiter: Any,
                 cap: Optional[InFlightBound], counters: GraphCounters) -> None:
        # Pins.__init__(self, prepared, arrays, nbytes, False, session._pinned), inlined: frozen by guard(), only if
        # the loop runs other code while the run is in flight (not for one that completes during its submit's poll:
        # a freeze and a thaw are a fifth of a tiny run's latency). ``prepared`` (rows, keep, arrays, nbytes) holds
        # everything the rows point into.
        self.objects = prepared
        self.nbytes = nbytes = prepared[3]
        self.ledger = ledger = session._pinned
        ledger.total += nbytes
        self.frozen = None
        self.session = session
        self.graph_id = graph_id
        self.waiter = waiter
        self.unawaited = False
        self.cap = cap
        self.counters = counters
        counters.live[self] = now()  # in flight from here: completed, failed or cancelled at its completion

    @property
    def context(self) -> str:
        return _async_context(self.graph_id)

    @property
    def handle(self) -> Any:
        return self.session._handle

    @property
    def rows(self) -> Sequence[InputRow]:
        return self.objects[0]  # type: ignore[no-any-return]  # (the request is pinned until it completes)

    @property
    def users(self) -> list[int]:
        return self.session._native_users

    def guard(self) -> None:
        prepared = self.objects
        if prepared is not None and self.frozen is None and self.session._freeze_inputs:
            arrays = prepared[2]
            if arrays:
                self.frozen = FREEZER.freeze(arrays)

    def complete(self, status: int, kind: int, outputs: Any, text: str, orphaned: bool) -> bool:
        waiter = self.waiter
        if status == 0 and type(outputs) is list and not orphaned and not waiter.done():
            # the common case, on every run's hot path: resolve now, release with the rest of the drained batch
            # (release_batch; the task resumes only after the drain)
            counters = self.counters
            counters.completed += 1
            started = counters.live.pop(self, None)
            if started is not None:
                latency = now() - started
                counters.latency.observe(latency)
                if latency > counters.slow_after:
                    counters.report_slow(latency)
            waiter.set_result(outputs)
            return True
        return super().complete(status, kind, outputs, text, orphaned)

    def release_batch(self, requests: list[_hub.Request]) -> None:
        """Releases run requests (the ones resolved in one drain, or one through ``release``): their inputs thawed
        under one lock, their slots freed in one step per session."""
        frozen = []
        freed: dict[InFlightBound, int] = {}
        caps = []
        for request in cast("list[_RunRequest]", requests):
            slots = request.session._slots
            if request.objects is not None:
                request.ledger.total -= request.nbytes
                if request.frozen:
                    frozen.append(request.frozen)
                    request.frozen = None
                request.objects = None
            freed[slots] = freed.get(slots, 0) + 1
            if request.cap is not None:
                caps.append(request.cap)
        try:
            if frozen:
                FREEZER.thaw_batch(frozen)
        finally:
            for slots, n in freed.items():
                slots.release(n)
            for cap in caps:
                cap.release()

    def settle(self, status: int, kind: int, outputs: Any, text: str) -> tuple[Any, Optional[BaseException]]:
        if status == 0 and type(outputs) is list:
            self.counters.check_slow(self.counters.finish(self, "completed"))
            return outputs, None
        self.counters.finish(self, "failed")
        if isinstance(outputs, BaseException):  # the outputs could not be made into Tensors (a dtype numpy lacks)
            return None, outputs
        if kind == _lib.COMPLETION_ABANDONED:
            return None, SessionBrokenError(status, f"{text}; create a new Session", "GeSession::RunGraphAsync",
                                            self.context)
        error = GeError(status, text, "GeSession::RunGraphAsync", self.context)
        if kind == _lib.COMPLETION_REFUSED:  # a batched submit GE refused
            return None, self.session._broken_queue(error)
        session = self.session
        if not session._async_failures:
            session._first_async_failure = f"{self.context}: {text}"
        session._async_failures += 1
        return None, error

    def release(self, wanted: bool) -> None:
        session = self.session
        if self.unawaited:
            self.unawaited = False
            session._unawaited -= 1
        if not wanted and self in self.counters.live:
            self.counters.finish(self, "cancelled")
        self.release_batch([self])


def _allocator_release(session: Session, address: int) -> Callable[[], None]:
    ref = weakref.ref(session)  # the stream ledger must not keep the session alive

    def release() -> None:
        owner = ref()
        if owner is not None:
            owner._release_default_allocator(address)

    return release


def _async_context(graph_id: int) -> str:
    return f"Session.run_graph_async(graph_id={graph_id})"

