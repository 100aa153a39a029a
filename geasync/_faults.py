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
    if delay < 0:
        raise ValueError(f"delay must be >= 0 seconds, got {delay!r}")
    _lib.twin_fault_add(session_id, graph_id, kind, nth, int(status) & 0xFFFFFFFF, int(delay * 1000))


def apply_option(session_id: int, spec: str) -> None:
    """Arms the faults of a ``"geasync.twin.faults"`` session option:
    ``"graph_id=1,kind=fail_run,nth=3,status=1343225860;graph_id=2,kind=delay_run,delay=0.05"``."""
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
        arm(session_id, graph_id, kind, nth=nth, status=status, delay=delay)
