"""Diagnostics for leak checks: live native objects, counted after settling what the runtime already delivered.

Above both the ffi chokepoint (``_lib``, which counts) and the completion hubs (``_hub``, whose orphaned queues may
hold completions that release native objects once drained), so neither has to import the other.
"""

from __future__ import annotations

from . import _hub, _lib, _streams


def live_counters() -> dict[str, int]:
    """Live native objects (shim handles, and on the twin its own objects) for leak checks in tests. Completions
    already delivered to the hub of an event loop that is gone or not running (a session closed outside its loop, as
    a test's fixture teardown closes it), and stream runs the streams have passed, are released first."""
    _lib.select_backend(None)
    _hub.drain_idle_loops()
    _hub.reap_orphans()
    _streams.reap()
    return _lib.native_live_counters()
