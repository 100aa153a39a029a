"""Loads the shared libraries the native extension links against before it is imported.

Called by ``geasync._lib`` right before importing the extension. Nothing to load yet: the twin's kernels
are self-contained.
"""

from __future__ import annotations


def preload() -> None:
    return None
