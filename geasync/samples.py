"""Sample models that ship with geasync, for examples, ``help()``, ``python -m geasync demo`` and first tests.

    import numpy as np, geasync as ga
    with ga.Session() as s:
        s.add_graph(1, ga.samples.mlp())
        (y,) = s.run_graph(1, [np.random.rand(4, 784).astype(np.float32)])

The models are built here, in memory, as ONNX bytes (fixed-seed numpy weights, a few lines of protobuf encoding),
so they need neither the ``onnx`` package nor a file from the source repository. :func:`mlp_bytes` is byte for byte
the ``examples/models/mlp.onnx`` of the repository.
"""

from __future__ import annotations

import functools
from typing import Sequence

import numpy as np

from .graph import Graph

__all__ = ["mlp", "mlp_bytes", "MLP_INPUT", "MLP_OUTPUT"]

MLP_INPUT = "x"       # float32 [N, 784]
MLP_OUTPUT = "probs"  # float32 [N, 10], each row a softmax

# ONNX protobuf field numbers (onnx/onnx.proto) and enum values used below.
_FLOAT = 1         # TensorProto.DataType.FLOAT
_ATTR_INT = 2      # AttributeProto.AttributeType.INT


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(field: int, wire_type: int) -> bytes:
    return _varint(field << 3 | wire_type)


def _int(field: int, value: int) -> bytes:
    return _key(field, 0) + _varint(value & 0xFFFFFFFFFFFFFFFF)


def _bytes(field: int, value: bytes | str) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return _key(field, 2) + _varint(len(data)) + data


def _tensor(name: str, array: np.ndarray) -> bytes:  # TensorProto: dims=1, data_type=2, name=8, raw_data=9
    dims = b"".join(_int(1, d) for d in array.shape)
    return dims + _int(2, _FLOAT) + _bytes(8, name) + _bytes(9, np.ascontiguousarray(array, "<f4").tobytes())


def _value_info(name: str, dims: Sequence[int | str]) -> bytes:
    # ValueInfoProto{name=1, type=2}: TypeProto{tensor_type=1}: Tensor{elem_type=1, shape=2}: TensorShapeProto{dim=1}
    # Dimension{dim_value=1 | dim_param=2}
    shape = b"".join(_bytes(1, _bytes(2, d) if isinstance(d, str) else _int(1, d)) for d in dims)
    return _bytes(1, name) + _bytes(2, _bytes(1, _int(1, _FLOAT) + _bytes(2, shape)))


def _node(op: str, inputs: list[str], outputs: list[str], name: str, **int_attrs: int) -> bytes:
    # NodeProto: input=1, output=2, name=3, op_type=4, attribute=5 (AttributeProto: name=1, i=3, type=20)
    body = b"".join(_bytes(1, i) for i in inputs) + b"".join(_bytes(2, o) for o in outputs)
    body += _bytes(3, name) + _bytes(4, op)
    body += b"".join(_bytes(5, _bytes(1, k) + _int(3, v) + _int(20, _ATTR_INT)) for k, v in int_attrs.items())
    return body


def _mlp_weights(seed: int, d_in: int, d_hidden: int, d_out: int) -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((d_in, d_hidden)) / np.sqrt(d_in)).astype(np.float32)
    b1 = (rng.standard_normal(d_hidden) * 0.01).astype(np.float32)
    w2 = (rng.standard_normal((d_hidden, d_out)) / np.sqrt(d_hidden)).astype(np.float32)
    b2 = (rng.standard_normal(d_out) * 0.01).astype(np.float32)
    return [("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2)]


@functools.lru_cache(maxsize=4)
def mlp_bytes(seed: int = 0, d_in: int = 784, d_hidden: int = 256, d_out: int = 10) -> bytes:
    """An MLP classifier as ONNX bytes: x[N, d_in] -> Gemm -> Relu -> MatMul + Add -> Softmax -> probs[N, d_out].

    ``N`` is a symbolic batch dim (any batch size runs); weights are drawn from a fixed-seed generator, so the
    bytes are the same on every machine."""
    for name, value, least in (("seed", seed, 0), ("d_in", d_in, 1), ("d_hidden", d_hidden, 1), ("d_out", d_out, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ValueError(f"geasync.samples.mlp: {name} must be an int >= {least}, got {value!r}")
    nodes = [
        _node("Gemm", ["x", "w1", "b1"], ["h"], "fc1"),
        _node("Relu", ["h"], ["a"], "relu1"),
        _node("MatMul", ["a", "w2"], ["z0"], "fc2"),
        _node("Add", ["z0", "b2"], ["z"], "fc2_bias"),
        _node("Softmax", ["z"], ["probs"], "softmax", axis=-1),
    ]
    # GraphProto: node=1, name=2, initializer=5, input=11, output=12
    graph = b"".join(_bytes(1, n) for n in nodes) + _bytes(2, "mlp")
    graph += b"".join(_bytes(5, _tensor(n, a)) for n, a in _mlp_weights(seed, d_in, d_hidden, d_out))
    graph += _bytes(11, _value_info(MLP_INPUT, ["N", d_in])) + _bytes(12, _value_info(MLP_OUTPUT, ["N", d_out]))
    # ModelProto: ir_version=1, producer_name=2, graph=7, opset_import=8 (OperatorSetIdProto: domain=1, version=2)
    return (_int(1, 8) + _bytes(2, "geasync-examples") + _bytes(7, graph)
            + _bytes(8, _bytes(1, "") + _int(2, 17)))


def mlp(seed: int = 0, d_in: int = 784, d_hidden: int = 256, d_out: int = 10) -> Graph:
    """A fresh :class:`geasync.Graph` of :func:`mlp_bytes` (a Graph can be added to a session once: call again
    for another). Input ``"x"`` float32 [N, d_in], output ``"probs"`` float32 [N, d_out]."""
    return Graph.from_onnx(mlp_bytes(seed, d_in, d_hidden, d_out))


