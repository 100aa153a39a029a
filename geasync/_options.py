"""The options geasync itself reads (keys starting with ``geasync.``), and the split of an options dict into those
and GE's own options.

GE options (any other key) go to the runtime unchanged, for GE to accept, ignore or refuse as it does. A ``geasync.``
key geasync does not know is refused with a ValueError listing the valid ones: a misspelt option must not be silently
ignored (``geasync.twin.fault`` for ``geasync.twin.faults`` used to be). docs/options.md lists them.
"""

from __future__ import annotations

import difflib
from typing import Mapping

__all__ = ["SESSION_OPTIONS", "GRAPH_OPTIONS", "LOAD_OPTIONS", "split_options"]

PREFIX = "geasync."

# key -> what it does (shown in errors); keep docs/options.md in step
SESSION_OPTIONS: dict[str, str] = {
    "geasync.twin.faults": "twin only: faults to arm when the session is created (see geasync.twin)",
    "geasync.max_memory_bytes": "twin only: bytes one compiled graph may commit (intermediates, folded constants, "
                                "outputs); a model needing more is refused at compile (default: physical memory)",
}
GRAPH_OPTIONS: dict[str, str] = {}  # add_graph / add_graph_clone
LOAD_OPTIONS: dict[str, str] = {}  # load_graph


def split_options(options: Mapping[str, str], known: Mapping[str, str],
                  what: str) -> tuple[dict[str, str], dict[str, str]]:
    """(GE's options, geasync's own) of ``options``; ValueError naming the valid ones for an unknown geasync key.
    ``what`` names the API, e.g. ``"Session.add_graph() options"``."""
    ge_options: dict[str, str] = {}
    own: dict[str, str] = {}
    for key, value in options.items():
        if not key.startswith(PREFIX):
            # "Geasync.twin.faults" or " geasync.twin.faults" would go to GE, which ignores what it does not know:
            # the same silent misspelling as an unknown geasync. key
            if isinstance(key, str) and key.strip().lower().startswith(PREFIX):
                raise ValueError(_unknown(key, known, what, normalized=key.strip().lower()))
            ge_options[key] = value
        elif key in known:
            own[key] = value
        else:
            raise ValueError(_unknown(key, known, what))
    return ge_options, own


def _unknown(key: str, known: Mapping[str, str], what: str, normalized: str = "") -> str:
    close = difflib.get_close_matches(normalized or key, list(known), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    valid = "; ".join(f"{k!r}: {doc}" for k, doc in known.items()) if known else "none"
    spelt = " (geasync option keys are lowercase, with no spaces)" if normalized else ""
    return (f"unknown geasync option {key!r}{spelt} in {what}{hint}. The geasync options valid here are: {valid}. "
            f"Keys not starting with {PREFIX!r} are GE options and go to GE unchanged (see docs/options.md).")
