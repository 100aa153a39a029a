"""Stream mode, in one place: runs enqueued on an ACL stream (RunGraphWithStreamAsync), what they pin until the
stream has passed them, and which streams have an output allocator.

Stream-mode runs are issued from synchronous code, so nothing here belongs to an event loop: the host function
the shim enqueues after each run (in the same native call, so no run goes without it) completes on one
process-wide queue, drained whenever geasync is next called about streams (a run, a synchronize, a query, a close,
statistics).
"""

from __future__ import annotations

import itertools
import os
import threading
from typing import Any, Callable, Optional

from . import _lib


class StreamRuns:
    """Runs in flight on streams: each one's release, called once the stream has passed it."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # re-entrant: a finalizer run inside reap() may reap again
        self._queue: _lib.CompletionQueue | None = None
        self._releases: dict[int, Callable[[], None]] = {}
        self._tokens = itertools.count(1)

    def run(self, handle: Any, graph_id: int, stream: int, prepared: _lib.PreparedInputs, context: str,
            make: _lib.OutputFactory[Any], passed: Callable[[], None]) -> list[Any]:
        """Enqueues the run and its completion; ``passed`` is called (from a later ``reap``) once the stream has
        passed the run. On failure nothing is enqueued any more and ``passed`` is never called."""
        with self._lock:
            if self._queue is None:
                self._queue = _lib.CompletionQueue()
            queue = self._queue
            token = next(self._tokens)
            self._releases[token] = passed  # before the run: another thread may reap its completion first
        try:
            return _lib.run_graph_with_stream_completion(handle, graph_id, stream, prepared, queue, token, context,
                                                         make)
        except BaseException:
            with self._lock:
                self._releases.pop(token, None)
            raise

    def reap(self) -> None:
        """Calls the release of every run the streams have passed."""
        with self._lock:
            queue = self._queue
            if queue is None or not self._releases:
                return
            records = queue.drain()
            releases = [self._releases.pop(token, None) for token, *_ in records]
        for release in releases:
            if release is not None:
                release()

    def after_fork_in_child(self) -> None:
        # the parent's streams and the queue's producers do not exist in a forked child
        self._lock = threading.RLock()
        self._queue = None
        self._releases = {}


runs = StreamRuns()
reap = runs.reap

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=runs.after_fork_in_child)


# GE keeps external allocators in a process-wide map keyed by stream address. This mirrors which streams have one:
# None for the caller's own, or how to unregister the device allocator geasync registered for a stream that had
# none (done when the stream or that session closes, so a stream's allocator does not outlive it).
_allocators: dict[int, Optional[Callable[[], None]]] = {}
_allocators_lock = threading.Lock()


def has_allocator(address: int) -> bool:
    with _allocators_lock:
        return address in _allocators


def mark_allocator(address: int, release: Optional[Callable[[], None]]) -> None:
    with _allocators_lock:
        _allocators[address] = release


def unmark_allocator(address: int) -> None:
    with _allocators_lock:
        _allocators.pop(address, None)


def release_default_allocator(address: int) -> None:
    """Unregister geasync's default allocator for ``address``, if it registered one (a caller's own stays)."""
    with _allocators_lock:
        if _allocators.get(address) is None:
            return
        release = _allocators.pop(address)
    assert release is not None
    release()
