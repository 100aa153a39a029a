"""Twin-only controls for users' own test suites: deterministic fault injection.

On the twin backend, chosen runs of a graph can be made to fail with a given GE status, start late, hold their
completion (a "stalled" callback), lose their callback altogether, or fail to allocate their outputs -- the failures
a service meets on Ascend and rarely in a test. On a CANN backend every function here raises a GeError saying it is
twin-only.

    with ga.Session() as s:
        s.add_graph(1, graph)
        ga.twin.inject_fault(s, 1, "fail_run", nth=3, status=ga.twin.INTERNAL_ERROR)  # the 3rd run from now fails
        ...

Runs are counted per graph from the moment its first fault is armed (``nth=1`` is the next run; ``nth=0`` every
run), across all run modes. The same faults can be armed with the session option ``"geasync.twin.faults"``:
``"graph_id=1,kind=fail_run,nth=3,status=1343225860;graph_id=2,kind=delay_run,delay=0.05"``.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from . import _lib

__all__ = ["inject_fault", "release_stalled", "clear_faults", "fault_runs", "fault", "KINDS", "FAILED",
           "INTERNAL_ERROR", "PARAM_INVALID"]

KINDS = {"fail_run": 1, "delay_run": 2, "stall_callback": 3, "drop_callback": 4, "fail_alloc": 5, "stall_compile": 6}
FAILED = 0xFFFFFFFF
PARAM_INVALID = 1343225857
INTERNAL_ERROR = 1343225860


def _ids(session: Any, graph_id: int, *, closing: bool = False) -> tuple[int, int]:
    """closing=True: also for a session being closed (aclose() waits for the completions these release) or
    closed (its faults are gone: releasing them is a no-op)."""
    from .session import Session

    if not isinstance(session, Session):
        raise TypeError(f"session must be a geasync.Session, got {type(session).__name__}")
    if not isinstance(graph_id, int) or isinstance(graph_id, bool):
        raise TypeError(f"graph_id must be an int, got {type(graph_id).__name__}")
    if closing:
        return session._id, graph_id
    return session.session_id, graph_id


def inject_fault(session: Any, graph_id: int, kind: str, *, nth: int = 1, status: int = INTERNAL_ERROR,
                 delay: float = 0.0) -> None:
    """Arms a fault on ``graph_id`` of ``session``.

    kind: "fail_run" (the run fails with ``status``), "delay_run" (starts ``delay`` seconds late), "stall_callback"
    (its completion is held until :func:`release_stalled`), "drop_callback" (RunGraphAsync: no callback ever;
    stream mode: nothing executes), "fail_alloc" (its output allocation fails), "stall_compile" (RunGraphAsync's
    compile stage holds the graph's jobs until released, so the session's compile queue fills up; nth is ignored).
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if not isinstance(nth, int) or nth < 0:
        raise ValueError(f"nth must be an int >= 0 (0 = every run), got {nth!r}")
    if delay < 0:
        raise ValueError(f"delay must be >= 0 seconds, got {delay!r}")
    sid, gid = _ids(session, graph_id)
    _lib.twin_fault_add(sid, gid, KINDS[kind], nth, int(status) & 0xFFFFFFFF, int(delay * 1000))


def release_stalled(session: Any, graph_id: int) -> None:
    """Lets the held completions of ``graph_id`` (and later stalled ones) proceed."""
    _lib.twin_fault_release(*_ids(session, graph_id, closing=True))


def clear_faults(session: Any, graph_id: int) -> None:
    """Disarms every fault of ``graph_id`` and releases its held completions."""
    _lib.twin_fault_clear(*_ids(session, graph_id, closing=True))


def fault_runs(session: Any, graph_id: int) -> int:
    """Runs of ``graph_id`` counted since its first fault was armed."""
    return _lib.twin_fault_runs(*_ids(session, graph_id, closing=True))


@contextlib.contextmanager
def fault(session: Any, graph_id: int, kind: str, **kwargs: Any) -> Iterator[None]:
    """``inject_fault`` for the duration of a ``with`` block (cleared, and held completions released, after)."""
    inject_fault(session, graph_id, kind, **kwargs)
    try:
        yield
    finally:
        clear_faults(session, graph_id)


def apply_option(session: Any, spec: str) -> None:
    """Arms the faults of a ``"geasync.twin.faults"`` session option."""
    for item in filter(None, (part.strip() for part in spec.split(";"))):
        fields = dict(kv.split("=", 1) for kv in item.split(",") if "=" in kv)
        try:
            graph_id = int(fields.pop("graph_id"))
            kind = fields.pop("kind")
            nth = int(fields.pop("nth", "1"))
            status = int(fields.pop("status", str(INTERNAL_ERROR)), 0)
            delay = float(fields.pop("delay", "0"))
        except (KeyError, ValueError) as exc:
            raise ValueError(f"bad geasync.twin.faults entry {item!r}: {exc}") from None
        if fields:
            raise ValueError(f"bad geasync.twin.faults entry {item!r}: unknown keys {sorted(fields)}")
        inject_fault(session, graph_id, kind, nth=nth, status=status, delay=delay)
