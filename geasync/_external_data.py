"""ONNX external data: tensors whose bytes live in files beside the model (``data_location = EXTERNAL``).

``inline_external_data`` rewrites a ModelProto so that every tensor stored externally (initializers, Constant values
and tensor attributes, in the main graph and in subgraphs) carries its bytes as ``raw_data`` again, reading the files
named by its ``location`` relative to the model's directory, as ONNX defines. It works on the protobuf wire format
directly (no onnx package needed). A location that leaves the model's directory, a missing file, or an offset/length
beyond the file's end raises ValueError naming the tensor.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator

_WIRE_VARINT, _WIRE_I64, _WIRE_LEN, _WIRE_I32 = 0, 1, 2, 5


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("corrupt ONNX model: truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        out.append(b | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _fields(buf: bytes) -> Iterator[tuple[int, int, bytes, bytes | int]]:
    """(field number, wire type, whole field bytes, payload) for each field of a message."""
    pos = 0
    while pos < len(buf):
        start = pos
        key, pos = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == _WIRE_VARINT:
            value, pos = _varint(buf, pos)
            payload: bytes | int = value
        elif wire == _WIRE_I64:
            payload, pos = buf[pos:pos + 8], pos + 8
        elif wire == _WIRE_I32:
            payload, pos = buf[pos:pos + 4], pos + 4
        elif wire == _WIRE_LEN:
            n, pos = _varint(buf, pos)
            payload, pos = buf[pos:pos + n], pos + n
        else:
            raise ValueError(f"corrupt ONNX model: wire type {wire}")
        if pos > len(buf):
            raise ValueError("corrupt ONNX model: truncated field")
        yield field, wire, buf[start:pos], payload


def _len_field(field: int, payload: bytes) -> bytes:
    return _encode_varint(field << 3 | _WIRE_LEN) + _encode_varint(len(payload)) + payload


def _read_external(name: str, entries: dict[str, str], model_dir: str) -> bytes:
    location = entries.get("location", "")
    root = os.path.realpath(model_dir)
    # a NUL byte makes realpath raise a bare "embedded null byte": refuse it as any other location that is not a file
    path = "" if "\0" in location else os.path.realpath(os.path.join(root, location))
    if not path or not location or os.path.isabs(location) or os.path.commonpath([root, path]) != root:
        raise ValueError(f"tensor {name!r}: external data location {location!r} is not a file inside the model's "
                         f"directory {root!r}")
    try:
        offset = int(entries.get("offset", "0"))
        length = int(entries["length"]) if "length" in entries else None
    except ValueError:
        raise ValueError(f"tensor {name!r}: external data offset/length are not integers") from None
    try:
        # O_NONBLOCK: opening a FIFO (or a device) named by a hostile model must not wait for a writer forever; only
        # a regular file is read, and its size is taken from the file opened, not from the path
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            raise ValueError(f"tensor {name!r}: external data location {location!r} is not a regular file")
        with os.fdopen(fd, "rb") as f:
            size = info.st_size
            if offset < 0 or offset > size or (length is not None and (length < 0 or offset + length > size)):
                raise ValueError(f"tensor {name!r}: external data range offset={offset} length={length} lies beyond "
                                 f"the end of {location!r} ({size} bytes)")
            f.seek(offset)
            return f.read(size - offset if length is None else length)
    except OSError as exc:
        raise ValueError(f"tensor {name!r}: cannot read external data file {location!r}: {exc}") from None


def _inline_tensor(tensor: bytes, model_dir: str) -> bytes | None:
    external = False
    name = ""
    entries: dict[str, str] = {}
    kept = []
    for field, _wire, whole, payload in _fields(tensor):
        if field == 14 and payload == 1:
            external = True
        elif field == 13 and isinstance(payload, bytes):
            key = value = ""
            for f2, _w2, _whole2, p2 in _fields(payload):
                # a string field of the wrong wire type (a corrupt model) reads as empty, never as bytes(n)
                if f2 == 1 and isinstance(p2, bytes):
                    key = p2.decode("utf-8", "replace")
                elif f2 == 2 and isinstance(p2, bytes):
                    value = p2.decode("utf-8", "replace")
            entries[key] = value
        elif field != 14:
            if field == 8 and isinstance(payload, bytes):
                name = payload.decode("utf-8", "replace")
            kept.append(whole)
    if not external:
        return None
    return b"".join(kept) + _len_field(9, _read_external(name, entries, model_dir))


# Subgraphs nested deeper than this are left as they are: the twin refuses nesting past 16 levels anyway, and the
# recursion stays far from Python's limit on a hostile model.
_MAX_DEPTH = 32


def _rewrite(message: bytes, handlers: dict[int, Callable[[bytes], bytes | None]]) -> bytes | None:
    """The message with each length-delimited field whose number has a handler replaced by what the handler returns
    (None: unchanged); None when nothing changed."""
    parts, changed = [], False
    for field, wire, whole, payload in _fields(message):
        new = None
        handler = handlers.get(field)
        if handler is not None and wire == _WIRE_LEN and isinstance(payload, bytes):
            new = handler(payload)
        changed = changed or new is not None
        parts.append(whole if new is None else _len_field(field, new))
    return b"".join(parts) if changed else None


def _inline_attribute(attribute: bytes, model_dir: str, depth: int) -> bytes | None:
    def tensor(t: bytes) -> bytes | None:
        return _inline_tensor(t, model_dir)

    def graph(g: bytes) -> bytes | None:
        return _inline_graph(g, model_dir, depth + 1)

    # AttributeProto: t = 5, g = 6, tensors = 10, graphs = 11
    return _rewrite(attribute, {5: tensor, 6: graph, 10: tensor, 11: graph})


def _inline_graph(graph: bytes, model_dir: str, depth: int = 0) -> bytes | None:
    """Initializers (GraphProto field 5) and, through the nodes (field 1) and their attributes (NodeProto field 5),
    Constant values and subgraphs: onnx's external-data writer moves all of them out."""
    if depth > _MAX_DEPTH:
        return None

    def node(n: bytes) -> bytes | None:
        return _rewrite(n, {5: lambda a: _inline_attribute(a, model_dir, depth)})

    return _rewrite(graph, {5: lambda t: _inline_tensor(t, model_dir), 1: node})


def inline_external_data(model: bytes, model_dir: str) -> bytes:
    """The model with external initializer data read in; the same bytes when it has none."""
    if b"location" not in model:  # cheap precheck: every external tensor names its file under the key "location"
        return model
    parts, changed = [], False
    for field, wire, whole, payload in _fields(model):
        new = None
        if field == 7 and wire == _WIRE_LEN and isinstance(payload, bytes):
            new = _inline_graph(payload, model_dir)
        changed = changed or new is not None
        parts.append(whole if new is None else _len_field(7, new))
    return b"".join(parts) if changed else model
