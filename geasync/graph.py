"""``Graph``: an ONNX model to add to a Session (GE parses it with ``aclgrphParseONNXFromMem``).

The model is parsed when it is first added, so corrupt bytes or unsupported operators are reported by
``Session.add_graph`` with GE's message; a model importing an operator set newer than the runtime supports (see
``geasync._metadata.MAX_OPSETS``) is refused when the Graph is made (``UnsupportedOpsetError``, a ValueError). As in
GE, one Graph object can be added once; add it again with ``Session.add_graph_clone`` or make a new Graph.

``Graph.inputs`` / ``Graph.outputs`` list the declared inputs and outputs (name, numpy dtype, shape) before any run,
read from the model bytes themselves (see ``geasync._metadata``), so they are the same on every backend.
"""

from __future__ import annotations

import os
import threading
from typing import IO, TYPE_CHECKING, Any

from . import _lib
from ._metadata import TensorInfo, check_opsets, read_io

if TYPE_CHECKING:
    from onnx import ModelProto  # optional: geasync reads ONNX bytes itself

__all__ = ["Graph"]


class Graph:
    """An ONNX graph. Build with :meth:`from_onnx`."""

    __slots__ = ("_model", "_name", "_native", "_lock", "_io")

    def __init__(self, model: bytes, name: str | None = None) -> None:
        if not isinstance(model, (bytes, bytearray, memoryview)):
            raise TypeError(f"model must be ONNX ModelProto bytes, got {type(model).__name__}")
        self._model = bytes(model)
        # refused now, not at add_graph: an opset newer than the runtime knows is the one model problem found
        # without parsing the graph (UnsupportedOpsetError, a ValueError)
        check_opsets(self._model, "Graph" if name is None else f"Graph.from_onnx({name!r})")
        self._name = name
        self._native: Any = None
        self._lock = threading.Lock()
        self._io: tuple[tuple[TensorInfo, ...], tuple[TensorInfo, ...]] | None = None

    @classmethod
    def from_onnx(
        cls, source: str | os.PathLike[str] | bytes | bytearray | memoryview | IO[bytes] | ModelProto
    ) -> "Graph":
        """A graph from an ONNX file path, ModelProto bytes, a binary file object (``open(path, "rb")``, whose
        external data is read beside the file it names) or an ``onnx.ModelProto`` (needs the onnx package)."""
        if isinstance(source, (bytes, bytearray, memoryview)):
            return cls(bytes(source))
        if isinstance(source, (str, os.PathLike)):
            path = os.fspath(source)
            if not isinstance(path, str) or "\0" in path:  # open() would say only "embedded null byte"
                shown = path if len(path) <= 60 else path[:60] + "..."
                raise ValueError(f"Graph.from_onnx({shown!r}): not a file path (a str path has no NUL byte; pass "
                                 "model bytes as bytes, not as str)")
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError as exc:  # keep the type (FileNotFoundError, IsADirectoryError, ...), name the call
                raise type(exc)(exc.errno, f"Graph.from_onnx({path!r}): {exc.strerror}: pass the path of an "
                                "ONNX file, its bytes or an onnx.ModelProto") from None
            return cls(_with_external_data(data, path), name=os.path.basename(path))
        read = getattr(source, "read", None)
        if callable(read):  # a file object, as onnx.load takes: external data beside the file it names, if any
            data = read()
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise TypeError(f"Graph.from_onnx(): the file object gave {type(data).__name__}, not bytes: open the "
                                "model in binary mode (open(path, 'rb'))")
            name = getattr(source, "name", None)
            if isinstance(name, str) and os.path.isfile(name):
                return cls(_with_external_data(bytes(data), name), name=os.path.basename(name))
            return cls(bytes(data))
        serialize = getattr(source, "SerializeToString", None)
        if callable(serialize) and type(source).__name__ == "ModelProto":
            return cls(serialize())
        raise TypeError(f"Graph.from_onnx() takes a path, bytes, a binary file object or an onnx.ModelProto, got "
                        f"{type(source).__name__}")

    @property
    def name(self) -> str | None:
        return self._name

    @property
    def model_bytes(self) -> bytes:
        return self._model

    @property
    def inputs(self) -> tuple[TensorInfo, ...]:
        """The inputs a run takes, in the order runs take them: ``graph.input`` minus the inputs that have an
        initializer (GE makes those constants). Each has ``.name``, ``.dtype`` (numpy) and ``.shape`` (an int per
        fixed dim, the name of a named symbolic dim, None for an unnamed one; None for no shape: any rank).
        ValueError (ModelFormatError) if the bytes are not an ONNX model."""
        return self._read_io()[0]

    @property
    def outputs(self) -> tuple[TensorInfo, ...]:
        """The outputs, in the order runs return them (``graph.output`` order); described like ``inputs``."""
        return self._read_io()[1]

    def _read_io(self) -> tuple[tuple[TensorInfo, ...], tuple[TensorInfo, ...]]:
        io = self._io
        if io is None:  # read once; a race only reads the same bytes twice
            io = self._io = read_io(self._model)
        return io

    def _handle(self, context: str) -> Any:
        """The native ge::Graph, parsed on first use (GE remembers that it was added)."""
        with self._lock:
            if self._native is None:
                _lib.ensure_initialized()
                self._native = _lib.graph_parse_onnx(self._model, context)
            return self._native

    def __reduce__(self) -> Any:
        # pickle (a Graph sent to a 'spawn' worker), copy and deepcopy: a fresh Graph of the same model, not yet
        # added anywhere (the native graph, which GE marks as added, stays with the original)
        return (Graph, (self._model, self._name))

    def __repr__(self) -> str:
        return f"Graph(name={self._name!r}, {len(self._model)} bytes)"


def _with_external_data(model: bytes, path: str) -> bytes:
    """Initializers stored as external data, read from their files beside the model (ValueError if unsafe)."""
    from ._external_data import inline_external_data

    try:
        return inline_external_data(model, os.path.dirname(os.path.abspath(path)))
    except ValueError as exc:  # name the call and the model: the message names only the tensor and its file
        raise type(exc)(f"Graph.from_onnx({path!r}): {exc}") from None
