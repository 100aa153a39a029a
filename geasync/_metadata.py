"""A graph's declared inputs and outputs, read from ONNX ModelProto bytes without the onnx package.

The same bytes go to GE's parser, so the metadata is the same on every backend. Only the fields needed are decoded
(ModelProto.graph -> GraphProto.input / output / initializer names -> ValueInfoProto name, element type, shape); every
other field is skipped by its length. Reads are bounds-checked: corrupt or hostile bytes raise ``ModelFormatError``
(a ``ValueError``), never anything worse, and the work is linear in the size of the model.

What GE's ONNX parser does, and so what the metadata says:
- the inputs are ``graph.input`` in declaration order, minus those that also have an initializer: GE turns those
  into constants holding the initializer (they cannot be fed; onnxruntime, unlike GE, lets them be overridden);
- a dim is an int (``dim_value``), its name (``dim_param``) or None (neither, or an empty name); a ValueInfo with no
  ``shape`` field has shape None: any rank, any dims.
"""

from __future__ import annotations

from typing import Iterator, NamedTuple, Optional, Union

import numpy as np

from . import _dtypes

__all__ = ["TensorInfo", "ModelFormatError", "UnsupportedOpsetError", "read_io", "check_opsets"]

Dim = Union[int, str, None]
_Buffer = Union[bytes, memoryview]
_Value = Union[int, tuple[int, int], None]  # a field's value: see _fields

# TensorProto.DataType -> numpy (types numpy has no dtype for, e.g. float8 or string, map to None; bfloat16 maps to
# ml_dtypes' when that is installed: see _dtypes)
_ONNX_TO_NP: dict[int, np.dtype] = {
    1: np.dtype(np.float32), 2: np.dtype(np.uint8), 3: np.dtype(np.int8), 4: np.dtype(np.uint16),
    5: np.dtype(np.int16), 6: np.dtype(np.int32), 7: np.dtype(np.int64), 9: np.dtype(np.bool_),
    10: np.dtype(np.float16), 11: np.dtype(np.float64), 12: np.dtype(np.uint32), 13: np.dtype(np.uint64),
    14: np.dtype(np.complex64), 15: np.dtype(np.complex128),
}

_ONNX_BFLOAT16 = 16


class TensorInfo(NamedTuple):
    """A declared graph input or output.

    ``dtype``: a numpy dtype, or None when the model declares none or one numpy lacks (float8, string; bfloat16
    when ml_dtypes is not installed).
    ``shape``: a tuple with an int per fixed dim, the dim's name (str) per named symbolic dim and None per unnamed
    one; or None when the model gives no shape at all (any rank).
    """

    name: str
    dtype: Optional[np.dtype]
    shape: Optional[tuple[Dim, ...]]

    @property
    def rank(self) -> Optional[int]:
        return None if self.shape is None else len(self.shape)

    @property
    def is_static(self) -> bool:
        return self.shape is not None and all(type(d) is int for d in self.shape)


class ModelFormatError(ValueError):
    """The bytes are not a well-formed ONNX ModelProto (the message gives the byte offset)."""


class UnsupportedOpsetError(ValueError):
    """The model imports an operator set version newer than the runtime knows (GE's parser refuses it)."""


# The newest version of each ONNX operator-set domain the runtime knows: those of the onnx release the twin's operators
# and the conformance suite follow (onnx 1.23). A model importing a newer one is refused, as GE's parser does, rather
# than run with the semantics of an older version. Domains not listed (a vendor's custom ops) are not bounded here:
# an operator of theirs is refused by the parser when the model uses one.
MAX_OPSETS: dict[str, int] = {"": 28, "ai.onnx": 28, "ai.onnx.ml": 5, "ai.onnx.preview.training": 1,
                              "ai.onnx.preview": 1}

_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5


def _fail(what: str, pos: int) -> ModelFormatError:
    return ModelFormatError(f"corrupt ONNX model: {what} at byte {pos}")


def _varint(buf: _Buffer, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    start = pos
    while True:
        if pos >= end:
            raise _fail("truncated varint", start)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            if result >= 1 << 64:
                raise _fail("malformed varint", start)
            return result, pos
        shift += 7
        if shift >= 70:
            raise _fail("malformed varint", start)


def _fields(buf: _Buffer, pos: int, end: int) -> Iterator[tuple[int, int, _Value]]:
    """(field number, wire type, value) for each field of the message in buf[pos:end]: the value is an int for
    varints, a (start, end) span for length-delimited fields, None for fixed-size ones (skipped)."""
    while pos < end:
        start = pos
        key, pos = _varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise _fail("invalid field number", start)
        value: _Value
        if wire == _VARINT:
            value, pos = _varint(buf, pos, end)
        elif wire == _LEN:
            n, pos = _varint(buf, pos, end)
            if n > end - pos:
                raise _fail("length-delimited field runs past the end of its message", start)
            value = (pos, pos + n)
            pos += n
        elif wire == _FIXED64 or wire == _FIXED32:
            n = 8 if wire == _FIXED64 else 4
            if n > end - pos:
                raise _fail("truncated fixed-size field", start)
            value = None
            pos += n
        else:
            raise _fail(f"unsupported wire type {wire}", start)
        yield field, wire, value


def _span(wire: int, value: _Value, pos_hint: int) -> tuple[int, int]:
    if wire != _LEN or not isinstance(value, tuple):
        raise _fail(f"unexpected wire type {wire}", pos_hint)
    return value


def _text(buf: _Buffer, span: tuple[int, int]) -> str:
    return bytes(buf[span[0]:span[1]]).decode("utf-8", "replace")


def _int64(wire: int, value: _Value, pos_hint: int) -> int:
    if wire != _VARINT or not isinstance(value, int):
        raise _fail(f"unexpected wire type {wire}", pos_hint)
    return value - (1 << 64) if value >= 1 << 63 else value


def _dim(buf: _Buffer, start: int, end: int) -> Dim:
    dim: Dim = None
    for field, wire, value in _fields(buf, start, end):
        if field == 1:
            v = _int64(wire, value, start)
            dim = v if v >= 0 else None
        elif field == 2:
            dim = _text(buf, _span(wire, value, start)) or None  # an empty name names nothing: an unnamed dim
    return dim


def _tensor_type(buf: _Buffer, start: int, end: int) -> tuple[int, Optional[tuple[Dim, ...]]]:
    elem_type, shape = 0, None
    for field, wire, value in _fields(buf, start, end):
        if field == 1:
            elem_type = _int64(wire, value, start)
        elif field == 2:
            s, e = _span(wire, value, start)
            shape = tuple(_dim(buf, *_span(w, v, s)) for f, w, v in _fields(buf, s, e) if f == 1)
    return elem_type, shape


def _value_info(buf: _Buffer, start: int, end: int) -> TensorInfo:
    name, elem_type, shape = "", 0, None
    for field, wire, value in _fields(buf, start, end):
        if field == 1:
            name = _text(buf, _span(wire, value, start))
        elif field == 2:  # TypeProto: only tensor_type (1) has an element type and a shape
            s, e = _span(wire, value, start)
            for f, w, v in _fields(buf, s, e):
                if f == 1:
                    elem_type, shape = _tensor_type(buf, *_span(w, v, s))
    dtype = _dtypes.bfloat16() if elem_type == _ONNX_BFLOAT16 else _ONNX_TO_NP.get(elem_type)
    return TensorInfo(name, dtype, shape)


def _tensor_name(buf: _Buffer, start: int, end: int) -> str:
    name = ""
    for field, wire, value in _fields(buf, start, end):
        if field == 8:
            name = _text(buf, _span(wire, value, start))
    return name


def read_io(model: bytes) -> tuple[tuple[TensorInfo, ...], tuple[TensorInfo, ...]]:
    """(inputs, outputs) declared by ModelProto bytes; ModelFormatError if they are not one."""
    buf: _Buffer = memoryview(model).cast("B") if not isinstance(model, bytes) else model
    graph = None
    for field, wire, value in _fields(buf, 0, len(buf)):
        if field == 7:
            if graph is not None:
                raise _fail("more than one graph", value[0] if isinstance(value, tuple) else 0)
            graph = _span(wire, value, 0)
    if graph is None:
        raise ModelFormatError("ONNX model has no graph")
    inputs: list[TensorInfo] = []
    outputs: list[TensorInfo] = []
    initializers: set[str] = set()
    for field, wire, value in _fields(buf, *graph):
        if field in (5, 11, 12):
            s, e = _span(wire, value, graph[0])
            if field == 5:
                initializers.add(_tensor_name(buf, s, e))
            else:
                (inputs if field == 11 else outputs).append(_value_info(buf, s, e))
    initializers.discard("")  # GE matches inputs to named initializers only
    return tuple(i for i in inputs if i.name not in initializers), tuple(outputs)


def read_opsets(model: bytes) -> list[tuple[str, int]]:
    """The (domain, version) pairs ModelProto bytes import (``opset_import``), in order; ModelFormatError if the bytes
    are not a ModelProto."""
    buf: _Buffer = memoryview(model).cast("B") if not isinstance(model, bytes) else model
    opsets: list[tuple[str, int]] = []
    for field, wire, value in _fields(buf, 0, len(buf)):
        if field == 8:  # OperatorSetIdProto: domain (1), version (2)
            s, e = _span(wire, value, 0)
            domain, version = "", 0
            for f, w, v in _fields(buf, s, e):
                if f == 1:
                    domain = _text(buf, _span(w, v, s))
                elif f == 2:
                    version = _int64(w, v, s)
            opsets.append((domain, version))
    return opsets


def check_opsets(model: bytes, where: str) -> None:
    """UnsupportedOpsetError, naming ``where``, the domain, its version and the newest one supported, if the model
    imports an operator set newer than MAX_OPSETS. Bytes that are not a ModelProto pass: the parser says what is
    wrong with them when the graph is added."""
    try:
        opsets = read_opsets(model)
    except ModelFormatError:
        return
    for domain, version in opsets:
        newest = MAX_OPSETS.get(domain)
        if newest is not None and version > newest:
            hint = (f" (e.g. torch.onnx.export(..., opset_version={newest}), or onnx.version_converter)"
                    if domain in ("", "ai.onnx") else "")
            raise UnsupportedOpsetError(
                f"{where}: the model imports opset {version} of domain {domain or 'ai.onnx'!r}"
                f"{' (the default domain)' if not domain else ''}, newer than the highest supported, {newest}: "
                f"GE's ONNX parser refuses it. Export the model for an opset of at most {newest}{hint}")
