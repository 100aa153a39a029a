"""Twin-only controls for users' own test suites: deterministic fault injection.

On the twin backend, chosen runs of a graph can be made to fail with a given GE status, start late, hold their
completion (a "stalled" callback), lose their callback altogether, or fail to allocate their outputs -- the failures
a service meets on Ascend and rarely in a test. On a CANN backend every function here raises a GeError saying it is
twin-only.

    with ga.Session() as s:
        s.add_graph(1, graph)
        ga.twin.inject_fault(s, 1, "fail_run", nth=3, status=ga.twin.INTERNAL_ERROR)  # the 3rd run from now fails
        ...

``nth`` counts the graph's runs from the ``inject_fault`` call itself (``nth=1`` is the next run, ``nth=2`` the one
after; ``nth=0`` every run), across all run modes, so a fault armed later in a test still targets a run to come.
:func:`fault_runs` counts the graph's runs since its first fault was armed (reset by :func:`clear_faults`).
A one-shot fault whose run never came is reported rather than ignored: :func:`unfired_faults` counts them,
:func:`fault` raises :class:`FaultNeverFiredError` at the end of its block, and the pytest plugin's ``ga_faults``
fixture fails the test. The same faults can be armed with the session option ``"geasync.twin.faults"``:
``"graph_id=1,kind=fail_run,nth=3,status=1343225860;graph_id=2,kind=delay_run,delay=0.05"``.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from . import _lib
from ._faults import FAILED, INTERNAL_ERROR, KINDS, PARAM_INVALID, arm
from .session import Session

__all__ = ["inject_fault", "release_stalled", "clear_faults", "fault_runs", "unfired_faults", "fault",
           "FaultNeverFiredError", "KINDS", "FAILED", "INTERNAL_ERROR", "PARAM_INVALID"]

class FaultNeverFiredError(AssertionError):
    """A one-shot fault (``nth >= 1``) was disarmed before the run it targets: the test did not exercise it."""


def _ids(session: Session, graph_id: int, api: str, *, closing: bool = False) -> tuple[int, int]:
    """closing=True: also for a session being closed (aclose() waits for the completions these release) or
    closed (its faults are gone: releasing them is a no-op)."""
    if not isinstance(session, Session):
        raise TypeError(f"geasync.twin.{api}: session must be a geasync.Session, got {type(session).__name__}")
    if not isinstance(graph_id, int) or isinstance(graph_id, bool):
        raise TypeError(f"geasync.twin.{api}: graph_id must be an int, got {type(graph_id).__name__}")
    if closing:
        return session._id, graph_id
    session._live(f"geasync.twin.{api}(graph_id={graph_id})")  # closed, or unusable since GE was finalized
    return session._id, graph_id


def inject_fault(session: Session, graph_id: int, kind: str, *, nth: int = 1, status: int = INTERNAL_ERROR,
                 delay: float = 0.0) -> None:
    """Arms a fault on ``graph_id`` of ``session``.

    kind: "fail_run" (the run fails with ``status``), "delay_run" (starts ``delay`` seconds late), "stall_callback"
    (its completion is held until :func:`release_stalled`), "drop_callback" (RunGraphAsync: no callback ever;
    stream mode: nothing executes), "fail_alloc" (its output allocation fails), "stall_compile" (RunGraphAsync's
    compile stage holds the graph's jobs until released, so the session's compile queue fills up), "fail_prerun"
    (RunGraphAsync's pre-run stage fails the graph's jobs with ``status``, after which GE stops the session's async
    queue). These two hit the graph's jobs from now on: an ``nth`` above 1 is refused (ValueError).
    """
    sid, gid = _ids(session, graph_id, "inject_fault")
    try:
        arm(sid, gid, kind, nth=nth, status=status, delay=delay)
    except ValueError as exc:  # name the call: the message names only the argument
        raise ValueError(f"geasync.twin.inject_fault(graph_id={graph_id}): {exc}") from None


def release_stalled(session: Session, graph_id: int) -> None:
    """Lets the held completions of ``graph_id`` (and later stalled ones) proceed."""
    _lib.twin_fault_release(*_ids(session, graph_id, "release_stalled", closing=True))


def clear_faults(session: Session, graph_id: int) -> None:
    """Disarms every fault of ``graph_id`` and releases its held completions."""
    _lib.twin_fault_clear(*_ids(session, graph_id, "clear_faults", closing=True))


def fault_runs(session: Session, graph_id: int) -> int:
    """Runs of ``graph_id`` counted since its first fault was armed (0 after :func:`clear_faults`)."""
    return _lib.twin_fault_runs(*_ids(session, graph_id, "fault_runs", closing=True))


def unfired_faults(session: Session, graph_id: int) -> int:
    """One-shot faults (``nth >= 1``) armed on ``graph_id`` whose run has not come yet."""
    return _lib.twin_fault_unfired(*_ids(session, graph_id, "unfired_faults"))


def _raise_if_unfired(session: Session, graph_id: int, what: str) -> None:
    unfired = unfired_faults(session, graph_id)
    if unfired:
        raise FaultNeverFiredError(
            f"{what}: {unfired} fault(s) armed with nth >= 1 on graph {graph_id} never fired: the graph ran "
            f"{fault_runs(session, graph_id)} time(s) since its first fault was armed, fewer than the nth asked for "
            "(nth counts from each inject_fault call). Run the graph enough times, or use nth=0 for every run.")


@contextlib.contextmanager
def fault(session: Session, graph_id: int, kind: str, **kwargs: Any) -> Iterator[None]:
    """``inject_fault`` for the duration of a ``with`` block (cleared, and held completions released, after).

    A block that ends normally before the fault's run came raises :class:`FaultNeverFiredError`."""
    inject_fault(session, graph_id, kind, **kwargs)
    try:
        yield
    except BaseException:
        if not session.closed:
            clear_faults(session, graph_id)
        raise
    if session.closed:  # closing forgot the session's faults: nothing left to check or clear
        return
    try:
        _raise_if_unfired(session, graph_id, f"geasync.twin.fault({kind!r})")
    finally:
        clear_faults(session, graph_id)
