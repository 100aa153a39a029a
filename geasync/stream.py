"""``Stream``: an ACL stream (``aclrtCreateStream``), an in-order queue of device work.

``int(stream)`` is its address, which is what GE's Python package's ``run_graph_with_stream_async`` and the
allocator methods take; geasync also accepts the Stream itself there.
"""

from __future__ import annotations

import sys
import threading
import time
import warnings
from _thread import get_ident
from contextlib import contextmanager
from typing import Any, Iterator, Optional

import anyio

from . import _hub, _lib, _streams
from ._loops import check_timeout
from ._streams import release_default_allocator
from .errors import FAILED, GeError, SessionClosedError

__all__ = ["Stream", "stream_address"]

_MAX_SYNC_MS = 2**31 - 1  # aclrtSynchronizeStreamWithTimeout's timeout is an int32 of milliseconds


class Stream:
    """An ACL stream on a device (default: the device GE was initialised with, else 0)."""

    def __init__(self, device_id: int = -1) -> None:
        if not isinstance(device_id, int) or isinstance(device_id, bool):
            raise TypeError(f"device_id must be an int, got {type(device_id).__name__}")
        if device_id < -1:  # -1 is the default device; any other negative id would be taken for it silently
            raise ValueError(f"Stream(): device_id must be a device number >= 0, or -1 for the default device, got "
                             f"{device_id}")
        _lib.ensure_initialized()
        self._lock = threading.Lock()
        self._address = 0
        # Threads inside a native call on the stream, one entry per call: close() destroys it once they have
        # returned (added before the address is read, so close(), which clears it first, sees every such call).
        self._users: list[int] = []
        self._address = _lib.stream_create(device_id, "Stream()")
        self._device_id = device_id

    @property
    def address(self) -> int:
        _lib.check_process("Stream")  # a forked child cannot wait on its parent's streams: say so, never hang
        if not self._address:
            raise SessionClosedError(FAILED, "the stream is closed; create a new Stream", "geasync", "Stream")
        return self._address

    def __int__(self) -> int:
        return self.address

    def __index__(self) -> int:
        return self.address

    @property
    def closed(self) -> bool:
        return not self._address

    @contextmanager
    def _using(self) -> Iterator[int]:
        """The stream's address, kept from close() (in any thread) until the block ends."""
        users = self._users
        me = get_ident()
        users.append(me)
        try:
            yield self.address
        finally:
            users.remove(me)

    def _query_if_open(self, address: int, context: str) -> Optional[bool]:
        """aclrtStreamQuery of ``address`` if it is still this open stream's; None once it was closed."""
        users = self._users
        me = get_ident()
        users.append(me)
        try:
            if self._address != address:
                return None
            return _lib.stream_query(address, context)
        finally:
            users.remove(me)

    def synchronize(self, timeout: float | None = None) -> None:
        """Block until every task enqueued so far has finished (aclrtSynchronizeStream, GIL released).

        ``timeout`` in seconds (None or inf: no limit); on expiry a GeError with ACL_ERROR_RT_STREAM_SYNC_TIMEOUT is
        raised.
        """
        ms = -1
        if timeout is not None:
            seconds = check_timeout(timeout, "Stream.synchronize()")  # TypeError / ValueError (NaN) naming the API
            # ACL takes an int32 of milliseconds: a longer timeout (about 24 days) is as good as none
            if seconds * 1000 < _MAX_SYNC_MS:
                ms = max(1, int(seconds * 1000))
        with self._using() as address:
            _lib.stream_synchronize(address, ms, "Stream.synchronize()")
        _streams.reap()

    async def synchronize_async(self) -> None:
        """Wait until every task enqueued so far has finished, without blocking any thread: a host function
        enqueued on the stream (aclrtLaunchHostFunc) completes an awaitable on this event loop.

        Works under asyncio, uvloop and trio. Cancelling stops the wait only; the stream is unaffected. A stream
        closed meanwhile (close() waits for its queued work) ends the wait normally.
        """
        context = "Stream.synchronize_async()"
        self.address  # noqa: B018  (raises for a closed stream before a hub is made)
        hub = _hub.current_hub()
        token = hub.new_token()
        request = _SyncRequest(context, hub.new_waiter())
        hub.register(token, request)
        try:
            with self._using() as address:
                _lib.stream_launch_completion(address, hub.queue, token, context)
        except BaseException:
            hub.forget(token)
            raise
        await request.waiter
        # The host function has run, so everything enqueued before it is done; the stream counts the host function
        # itself as finished a moment after it returns: give it a few loop turns, so query() agrees with us.
        deadline = time.monotonic() + 0.02  # bounded: work enqueued after ours keeps query() False, rightly
        while self._query_if_open(address, context) is False and time.monotonic() < deadline:
            await anyio.sleep(0.0001)
        _streams.reap()

    def query(self) -> bool:
        """True when every task enqueued so far has finished (aclrtStreamQuery; never blocks)."""
        with self._using() as address:
            done = _lib.stream_query(address, "Stream.query()")
        if done:
            _streams.reap()
        return done

    def close(self) -> None:
        """Wait for queued work, then destroy the stream. Idempotent; calls other threads have in progress on the
        stream (``synchronize()``, a session's run on it) return first."""
        if get_ident() in self._users:  # an allocator callback of a run on this stream: the run needs the stream
            raise RuntimeError("Stream.close() was called from inside a call that uses the stream (an allocator "
                               "callback?); close it after that call has returned")
        with self._lock:
            address, self._address = self._address, 0
        if address and _lib.same_process():
            while self._users:  # another thread's synchronize(), query() or launch on the stream returns first
                if sys.is_finalizing():
                    return  # a daemon thread's call at exit, which never says it returned: left to the process's end
                time.sleep(0.0005)
            try:
                release_default_allocator(address)
            finally:
                _lib.stream_destroy(address, "Stream.close()")  # waits for the queued work
            _streams.reap()

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> "Stream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        # Destroying waits for queued work: wait for it on the loop first, so close() does not block it.
        if self._address:
            try:
                # shielded: leaving by cancellation must still not make close() wait for the work on the loop
                with anyio.CancelScope(shield=True):
                    await self.synchronize_async()
            finally:
                self.close()

    def __del__(self) -> None:
        if getattr(self, "_address", 0):
            warnings.warn(f"unclosed {self!r}; use 'with Stream()' or call close()", ResourceWarning, stacklevel=2,
                          source=self)
            try:
                self.close()
            except Exception:
                pass

    def __copy__(self) -> "Stream":
        # a copy would own the same ACL stream: closing (or collecting) it would destroy the stream under the original
        raise TypeError("a Stream cannot be copied: it owns its ACL stream; share the Stream object, or create another")

    def __deepcopy__(self, memo: Any) -> "Stream":
        raise TypeError("a Stream cannot be deep-copied: it owns its ACL stream; share the Stream object, or create "
                        "another")

    def __reduce__(self) -> Any:
        raise TypeError("a Stream cannot be pickled: its ACL stream belongs to this process; create a Stream in the "
                        "process that uses it")

    def __repr__(self) -> str:
        state = f"0x{self._address:x}" if self._address else "closed"
        return f"<geasync.Stream {state}>"


class _SyncRequest(_hub.Request):
    """synchronize_async: completed by a host function once the stream reaches it."""

    __slots__ = ("context", "waiter")
    context: str

    def __init__(self, context: str, waiter: Any) -> None:
        self.context = context
        self.waiter = waiter

    def settle(self, status: int, kind: int, outputs: Any, text: str) -> tuple[Any, BaseException | None]:
        if status != 0:
            return None, GeError(status, text, "aclrtLaunchHostFunc", self.context)
        return None, None


@contextmanager
def stream_in_use(stream: Any, what: str) -> Iterator[int]:
    """The address of ``stream`` (an int, or a Stream whose close() in another thread waits for the block)."""
    if isinstance(stream, Stream):
        with stream._using() as address:
            yield address
    else:
        yield stream_address(stream, what)


def stream_address(stream: Any, what: str) -> int:
    """The address of a stream given as an int (as GE's Python package takes it) or a Stream; TypeError otherwise."""
    if isinstance(stream, Stream):
        if not stream._address:  # closed: said naming the call it was passed to, not as "Stream"
            context = what.rsplit(": ", 1)[0]
            _lib.check_process(context)
            raise SessionClosedError(FAILED, "the stream is closed; create a new Stream", "geasync", context)
        return stream.address
    if isinstance(stream, int) and not isinstance(stream, bool):
        if not 0 <= stream < 2**64:  # the native side would take it modulo 2^64: another address, or a null stream
            raise ValueError(f"{what} must be a stream's address (int(stream) of a geasync.Stream, a pointer-sized "
                             f"int >= 0), got {stream}")
        return stream
    raise TypeError(f"{what} must be an int (stream address) or a geasync.Stream, got {type(stream).__name__}")
