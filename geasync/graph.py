"""``Graph``: an ONNX model to add to a Session (GE parses it with ``aclgrphParseONNXFromMem``).

The model is parsed when it is first added, so corrupt bytes or unsupported operators are reported by
``Session.add_graph`` with GE's message. As in GE, one Graph object can be added once; add it again with
``Session.add_graph_clone`` or make a new Graph.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from . import _lib

__all__ = ["Graph"]


class Graph:
    """An ONNX graph. Build with :meth:`from_onnx`."""

    __slots__ = ("_model", "_name", "_native", "_lock")

    def __init__(self, model: bytes, name: str | None = None) -> None:
        if not isinstance(model, (bytes, bytearray, memoryview)):
            raise TypeError(f"model must be ONNX ModelProto bytes, got {type(model).__name__}")
        self._model = bytes(model)
        self._name = name
        self._native: Any = None
        self._lock = threading.Lock()

    @classmethod
    def from_onnx(cls, source: Any) -> "Graph":
        """A graph from an ONNX file path, ModelProto bytes, or an ``onnx.ModelProto`` (needs the onnx package)."""
        if isinstance(source, (bytes, bytearray, memoryview)):
            return cls(bytes(source))
        if isinstance(source, (str, os.PathLike)):
            path = os.fspath(source)
            with open(path, "rb") as f:
                return cls(_with_external_data(f.read(), path), name=os.path.basename(path))
        serialize = getattr(source, "SerializeToString", None)
        if callable(serialize) and type(source).__name__ == "ModelProto":
            return cls(serialize())
        raise TypeError(f"Graph.from_onnx() takes a path, bytes or an onnx.ModelProto, got {type(source).__name__}")

    @property
    def name(self) -> str | None:
        return self._name

    @property
    def model_bytes(self) -> bytes:
        return self._model

    def _handle(self, context: str) -> Any:
        """The native ge::Graph, parsed on first use (GE remembers that it was added)."""
        with self._lock:
            if self._native is None:
                _lib.ensure_initialized()
                self._native = _lib.graph_parse_onnx(self._model, context)
            return self._native

    def __repr__(self) -> str:
        return f"Graph(name={self._name!r}, {len(self._model)} bytes)"


def _with_external_data(model: bytes, path: str) -> bytes:
    """Initializers stored as external data, read from their files beside the model (ValueError if unsafe)."""
    from ._external_data import inline_external_data

    return inline_external_data(model, os.path.dirname(os.path.abspath(path)))
