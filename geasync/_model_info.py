"""The inputs and outputs an ONNX model declares (names, element types, shapes), read from its bytes.

For the command line (``python -m geasync run`` / ``bench``), which must name and make inputs without the ``onnx``
package. Reads only the few protobuf fields it needs (ModelProto.graph, GraphProto.input/output/initializer,
ValueInfoProto's tensor type) and skips everything else, without copying the weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

# TensorProto.DataType -> numpy (the types GE can carry)
ONNX_TO_NUMPY = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32, 7: np.int64,
                 9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32, 13: np.uint64}


class ModelInfoError(ValueError):
    """The bytes are not an ONNX model this reader understands."""


@dataclass(frozen=True)
class ValueInfo:
    name: str
    elem_type: int
    dims: tuple  # ints, or str for a symbolic dim, or None for an unknown one

    @property
    def dtype(self) -> np.dtype:
        try:
            return np.dtype(ONNX_TO_NUMPY[self.elem_type])
        except KeyError:
            raise ModelInfoError(f"input {self.name!r}: ONNX element type {self.elem_type} has no numpy "
                                 "equivalent here") from None

    def describe(self) -> str:
        dims = ", ".join("?" if d is None else str(d) for d in self.dims)
        try:
            dtype = str(self.dtype)
        except ModelInfoError:
            dtype = f"onnx type {self.elem_type}"
        return f"{self.name}: {dtype}[{dims}]"


@dataclass(frozen=True)
class ModelInfo:
    inputs: list
    outputs: list


def _varint(data: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ModelInfoError("truncated or malformed protobuf varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _fields(data: memoryview) -> Iterator[tuple[int, object]]:
    """(field number, int or memoryview) for each field of one protobuf message."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value, pos = int.from_bytes(data[pos:pos + 8], "little"), pos + 8
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise ModelInfoError("truncated protobuf field")
            value, pos = data[pos:pos + size], pos + size
        elif wire == 5:
            value, pos = int.from_bytes(data[pos:pos + 4], "little"), pos + 4
        else:
            raise ModelInfoError(f"unsupported protobuf wire type {wire}")
        yield field, value


def _text(value: object) -> str:
    return bytes(value).decode("utf-8", "replace")  # type: ignore[arg-type]


def _value_info(data: memoryview) -> ValueInfo:
    name, elem_type, dims = "", 0, []
    for field, value in _fields(data):
        if field == 1:
            name = _text(value)
        elif field == 2:  # TypeProto
            for tf, tv in _fields(value):  # type: ignore[arg-type]
                if tf != 1:  # only tensor_type
                    continue
                for f, v in _fields(tv):  # type: ignore[arg-type]
                    if f == 1:
                        elem_type = int(v)  # type: ignore[arg-type]
                    elif f == 2:  # TensorShapeProto
                        for df, dv in _fields(v):  # type: ignore[arg-type]
                            if df != 1:
                                continue
                            dim = None
                            for kf, kv in _fields(dv):  # type: ignore[arg-type]
                                dim = int(kv) if kf == 1 else _text(kv) if kf == 2 else dim  # type: ignore[arg-type]
                            dims.append(dim)
    return ValueInfo(name, elem_type, tuple(dims))


def read(model: bytes) -> ModelInfo:
    """The graph inputs (initializers excluded) and outputs that ``model`` (ONNX bytes) declares."""
    data = memoryview(model)
    graph = next((v for f, v in _fields(data) if f == 7), None)
    if graph is None:
        raise ModelInfoError("not an ONNX model: no graph in it")
    inputs, outputs, initializers = [], [], set()
    for field, value in _fields(graph):  # type: ignore[arg-type]
        if field == 11:
            inputs.append(_value_info(value))  # type: ignore[arg-type]
        elif field == 12:
            outputs.append(_value_info(value))  # type: ignore[arg-type]
        elif field == 5:
            initializers.update(_text(v) for f, v in _fields(value) if f == 8)  # type: ignore[arg-type]
    return ModelInfo([i for i in inputs if i.name not in initializers], outputs)
