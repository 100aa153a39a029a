"""``Stream``: an ACL stream (``aclrtCreateStream``), an in-order queue of device work.

``int(stream)`` is its address, which is what seed 002's ``run_graph_with_stream_async`` and the allocator methods
take; geasync also accepts the Stream itself there.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

from . import _lib
from .errors import SessionClosedError

__all__ = ["Stream", "stream_address"]


class Stream:
    """An ACL stream on a device (default: the device GE was initialised with, else 0)."""

    def __init__(self, device_id: int = -1) -> None:
        if not isinstance(device_id, int) or isinstance(device_id, bool):
            raise TypeError(f"device_id must be an int, got {type(device_id).__name__}")
        _lib.ensure_initialized()
        self._lock = threading.Lock()
        self._address = 0
        self._address = _lib.stream_create(device_id, "Stream()")
        self._device_id = device_id

    @property
    def address(self) -> int:
        if not self._address:
            raise SessionClosedError(0xFFFFFFFF, "the stream is closed; create a new Stream", "geasync", "Stream")
        return self._address

    def __int__(self) -> int:
        return self.address

    def __index__(self) -> int:
        return self.address

    @property
    def closed(self) -> bool:
        return not self._address

    def synchronize(self, timeout: float | None = None) -> None:
        """Block until every task enqueued so far has finished (aclrtSynchronizeStream, GIL released).

        ``timeout`` in seconds; on expiry a GeError with ACL_ERROR_RT_STREAM_SYNC_TIMEOUT is raised.
        """
        ms = -1 if timeout is None else max(1, int(timeout * 1000))
        _lib.stream_synchronize(self.address, ms, "Stream.synchronize()")

    def query(self) -> bool:
        """True when every task enqueued so far has finished (aclrtStreamQuery; never blocks)."""
        return _lib.stream_query(self.address, "Stream.query()")

    def close(self) -> None:
        """Wait for queued work, then destroy the stream. Idempotent."""
        with self._lock:
            address, self._address = self._address, 0
        if address:
            _lib.stream_destroy(address, "Stream.close()")

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_address", 0):
            warnings.warn(f"unclosed {self!r}; use 'with Stream()' or call close()", ResourceWarning, stacklevel=2)
            try:
                self.close()
            except Exception:
                pass

    def __repr__(self) -> str:
        state = f"0x{self._address:x}" if self._address else "closed"
        return f"<geasync.Stream {state}>"


def stream_address(stream: Any, what: str) -> int:
    """The address of a stream given as an int (seed 002) or a Stream; TypeError otherwise."""
    if isinstance(stream, Stream):
        return stream.address
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    raise TypeError(f"{what} must be an int (stream address) or a geasync.Stream, got {type(stream).__name__}")
