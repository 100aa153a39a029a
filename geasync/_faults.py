"""Twin fault injection addressed by (session id, graph id): what ``Session`` needs for its
``"geasync.twin.faults"`` option and what the public controls in ``geasync.twin`` build on. It sits below
``Session`` (which imports it), so arming faults never needs the Session class.
"""

from __future__ import annotations

import numbers

from . import _lib
from .errors import FAILED, INTERNAL_ERROR, PARAM_INVALID

# The twin's fault kinds (GEASYNC_TWIN_FAULT_<KIND> in twin_control.h)
KINDS = ("fail_run", "delay_run", "stall_callback", "drop_callback", "fail_alloc", "stall_compile", "fail_prerun")
_MAX_DELAY = 1e9  # seconds (~31 years): far past any test, well inside the twin's int64 milliseconds
__all__ = ["KINDS", "FAILED", "INTERNAL_ERROR", "PARAM_INVALID", "arm", "apply_option"]


def arm(session_id: int, graph_id: int, kind: str, *, nth: int = 1, status: int = INTERNAL_ERROR,
        delay: float = 0.0) -> None:
    """Arms one fault (see ``geasync.twin.inject_fault`` for the kinds)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if not isinstance(graph_id, int) or isinstance(graph_id, bool) or not 0 <= graph_id <= 0xFFFFFFFF:
        raise ValueError(f"graph_id must be an int from 0 to 4294967295 (uint32), got {graph_id!r}")
    if not isinstance(nth, int) or isinstance(nth, bool) or not 0 <= nth < 2**64:
        raise ValueError(f"nth must be an int >= 0 (0 = every run), got {nth!r}")
    # status: a GE status is a uint32; -1 is kept as 0xFFFFFFFF (FAILED), as GE's own signed constants are
    if not isinstance(status, int) or isinstance(status, bool) or not -(2**31) <= status <= 0xFFFFFFFF:
        raise ValueError(f"status must be a GE status (an int that fits in uint32), got {status!r}")
    # delay: seconds, a finite number >= 0 of whole milliseconds' worth the twin can hold (int64 ms)
    if not _is_delay(delay):
        raise ValueError(f"delay must be a number of seconds from 0 to {_MAX_DELAY:g}, got {delay!r}")
    if kind in ("fail_prerun", "stall_compile") and nth > 1:
        # the twin ignores nth for these: nth=2 hit the next run, where the test meant the one after
        raise ValueError(f"{kind} takes no nth (it hits every RunGraphAsync job of the graph from now on), got "
                         f"nth={nth}: arm it once the runs that should go through have")
    _lib.twin_fault_add(session_id, graph_id, kind, nth, int(status) & 0xFFFFFFFF, int(delay * 1000))


def _is_delay(value: object) -> bool:
    if type(value) is bool or not isinstance(value, numbers.Real):  # numpy floats are Real; str is not
        return False
    return 0 <= float(value) <= _MAX_DELAY  # False for nan


def apply_option(session_id: int, spec: str) -> None:
    """Arms the faults of a ``"geasync.twin.faults"`` session option:
    ``"graph_id=1,kind=fail_run,nth=3,status=1343225860;graph_id=2,kind=delay_run,delay=0.05"``."""
    for item in filter(None, (part.strip() for part in spec.split(";"))):
        try:
            graph_id, kind, nth, status, delay = _entry(item)
            arm(session_id, graph_id, kind, nth=nth, status=status, delay=delay)
        except ValueError as exc:
            raise ValueError(f"bad geasync.twin.faults entry {item!r}: {exc}. {_FORMAT}") from None


_FORMAT = ("Expected entries separated by ';', each comma-separated key=value pairs: graph_id=<int>,kind=<kind>, "
           "optionally nth=<int>, status=<int>, delay=<seconds>; e.g. "
           "'graph_id=1,kind=fail_run,nth=3;graph_id=2,kind=delay_run,delay=0.05'. Kinds: " + ", ".join(KINDS))


def _entry(item: str) -> tuple[int, str, int, int, float]:
    """(graph_id, kind, nth, status, delay) of one entry; ValueError saying what is wrong with it."""
    pairs = [kv.strip() for kv in item.split(",") if kv.strip()]
    loose = [kv for kv in pairs if "=" not in kv]
    if loose:
        raise ValueError(f"{', '.join(map(repr, loose))} is not key=value")
    fields = {k.strip(): v.strip() for k, v in (kv.split("=", 1) for kv in pairs)}
    missing = [k for k in ("graph_id", "kind") if k not in fields]
    if missing:
        raise ValueError(f"{' and '.join(missing)} missing")
    unknown = sorted(set(fields) - {"graph_id", "kind", "nth", "status", "delay"})
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(map(repr, unknown))}")
    key = "graph_id"
    try:  # (key names the field being read, for the message)
        graph_id = int(fields[key])
        key = "nth"
        nth = int(fields.get(key, "1"))
        key = "status"
        status = int(fields.get(key, str(INTERNAL_ERROR)), 0)
        key = "delay"
        delay = float(fields.get(key, "0"))
    except ValueError:
        raise ValueError(f"{key}={fields[key]!r} is not a number") from None
    return graph_id, fields["kind"], nth, status, delay
