"""Twin fault injection addressed by (session id, graph id): what ``Session`` needs for its
``"geasync.twin.faults"`` option and what the public controls in ``geasync.twin`` build on. It sits below
``Session`` (which imports it), so arming faults never needs the Session class.
"""

from __future__ import annotations

from . import _lib
from .errors import FAILED, INTERNAL_ERROR, PARAM_INVALID

# The twin's fault kinds (GEASYNC_TWIN_FAULT_<KIND> in twin_control.h)
KINDS = ("fail_run", "delay_run", "stall_callback", "drop_callback", "fail_alloc", "stall_compile", "fail_prerun")
__all__ = ["KINDS", "FAILED", "INTERNAL_ERROR", "PARAM_INVALID", "arm", "apply_option"]


def arm(session_id: int, graph_id: int, kind: str, *, nth: int = 1, status: int = INTERNAL_ERROR,
        delay: float = 0.0) -> None:
    """Arms one fault (see ``geasync.twin.inject_fault`` for the kinds)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if not isinstance(nth, int) or isinstance(nth, bool) or nth < 0:
        raise ValueError(f"nth must be an int >= 0 (0 = every run), got {nth!r}")
    if kind in ("fail_prerun", "stall_compile") and nth > 1:
        # the twin ignores nth for these: nth=2 hit the next run, where the test meant the one after
        raise ValueError(f"{kind} takes no nth (it hits every RunGraphAsync job of the graph from now on), got "
                         f"nth={nth}: arm it once the runs that should go through have")
    if delay < 0:
        raise ValueError(f"delay must be >= 0 seconds, got {delay!r}")
    _lib.twin_fault_add(session_id, graph_id, kind, nth, int(status) & 0xFFFFFFFF, int(delay * 1000))


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
