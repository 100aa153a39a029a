"""``Allocator``: the external device-memory allocator of GE's Python package (``register_external_allocator``).

GE calls ``malloc`` for the outputs of ``run_graph_with_stream_async`` on the stream the allocator is registered
for, on the thread that called into the runtime (never on a runtime thread), and ``free`` when the output Tensor
is released.

The runtime keeps a registered allocator alive until every block it gave is freed. An allocator that keeps a
reference to such an output (directly, or through a stored exception whose traceback holds the frame of the run
that called ``malloc``) makes a cycle that Python's garbage collector cannot see through the runtime: neither is
ever freed. Keep plain data (sizes, addresses, messages) in an allocator.
"""

from __future__ import annotations

import abc
import threading

from . import _lib

__all__ = ["Allocator", "DeviceAllocator"]


class Allocator(abc.ABC):
    """Abstract base of external allocators."""

    @abc.abstractmethod
    def malloc(self, size: int) -> int:
        """Return the address of at least ``size`` bytes of device memory (32-byte aligned), or 0 on failure."""

    @abc.abstractmethod
    def free(self, address: int) -> None:
        """Release memory returned by :meth:`malloc`."""


class DeviceAllocator(Allocator):
    """An Allocator over ``aclrtMalloc`` / ``aclrtFree`` that counts what it hands out."""

    def __init__(self, device_id: int = -1) -> None:
        self._device_id = device_id
        self._lock = threading.Lock()
        self._live: dict[int, int] = {}
        self.total_allocations = 0

    def malloc(self, size: int) -> int:
        _lib.ensure_initialized()
        address = _lib.device_malloc(max(1, size), self._device_id, "DeviceAllocator.malloc()")
        with self._lock:
            self._live[address] = size
            self.total_allocations += 1
        return address

    def free(self, address: int) -> None:
        with self._lock:
            self._live.pop(address, None)
        _lib.device_free(address, "DeviceAllocator.free()")

    @property
    def live_allocations(self) -> int:
        with self._lock:
            return len(self._live)
