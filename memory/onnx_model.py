"""A small ONNX model builder: graph nodes and tensors, serialized in protobuf's wire format.

The encoder's graph (`memory.minilm_export`) is a few dozen nodes of standard operators.
The `onnx` package would serialize it too, but it installs 31 MB (its reference runtime and
test data) for the twenty lines below, and the venv's budget is 600 MB. Only the fields an
inference graph needs are written; field numbers are those of onnx.proto (IR version 8).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

IR_VERSION = 8
# TensorProto.DataType
FLOAT, UINT8, INT8, INT64, FLOAT16 = 1, 2, 3, 7, 10
_DTYPES = {np.dtype(np.float32): FLOAT, np.dtype(np.int8): INT8, np.dtype(np.int64): INT64}
_DTYPES[np.dtype(np.float16)] = FLOAT16
_DTYPES[np.dtype(np.uint8)] = UINT8
# AttributeProto.AttributeType
_ATTR_FLOAT, _ATTR_INT, _ATTR_INTS = 1, 2, 7

Attribute = float | int | Sequence[int]


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64 values are ten bytes, two's complement
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(number: int, wire_type: int) -> bytes:
    return _varint(number << 3 | wire_type)


def _int(number: int, value: int) -> bytes:
    return _key(number, 0) + _varint(value)


def _bytes(number: int, value: bytes) -> bytes:
    return _key(number, 2) + _varint(len(value)) + value


def _str(number: int, value: str) -> bytes:
    return _bytes(number, value.encode())


def _attribute(name: str, value: Attribute) -> bytes:
    if isinstance(value, float):
        return _str(1, name) + _key(2, 5) + struct.pack("<f", value) + _int(20, _ATTR_FLOAT)
    if isinstance(value, int):
        return _str(1, name) + _int(3, value) + _int(20, _ATTR_INT)
    return _str(1, name) + b"".join(_int(8, v) for v in value) + _int(20, _ATTR_INTS)


@dataclass
class Graph:
    """Nodes and constant tensors in the order they are added; `model()` serializes them."""

    name: str
    _nodes: list[bytes] = field(default_factory=list)
    _initializers: list[bytes] = field(default_factory=list)
    _inputs: list[bytes] = field(default_factory=list)
    _outputs: list[bytes] = field(default_factory=list)
    _count: int = 0

    def constant(self, name: str, array: NDArray[np.generic]) -> str:
        """A weight or shape tensor stored in the model; returns its name."""
        data = np.ascontiguousarray(array)
        tensor = (
            b"".join(_int(1, d) for d in data.shape)
            + _int(2, _DTYPES[data.dtype])
            + _str(8, name)
            + _bytes(9, data.astype(data.dtype.newbyteorder("<"), copy=False).tobytes())
        )
        self._initializers.append(_bytes(5, tensor))
        return name

    def node(
        self,
        op: str,
        inputs: Iterable[str],
        *,
        domain: str = "",
        **attributes: Attribute,
    ) -> str:
        """Add one node; returns the name of its output. An input named "" is an omitted
        optional input."""
        self._count += 1
        output = f"{op.lower()}_{self._count}"
        proto = (
            b"".join(_str(1, i) for i in inputs)
            + _str(2, output)
            + _str(3, f"n{self._count}")
            + _str(4, op)
            + b"".join(_bytes(5, _attribute(k, v)) for k, v in attributes.items())
            + (_str(7, domain) if domain else b"")
        )
        self._nodes.append(_bytes(1, proto))
        return output

    def input(self, name: str, elem_type: int, shape: Sequence[int | str]) -> str:
        """A graph input; a str dimension is symbolic (batch, tokens)."""
        self._inputs.append(_bytes(11, _value_info(name, elem_type, shape)))
        return name

    def output(self, name: str, elem_type: int, shape: Sequence[int | str]) -> None:
        """Mark a node's output as a graph output (also for a value other nodes read)."""
        self._outputs.append(_bytes(12, _value_info(name, elem_type, shape)))

    def model(self, opsets: dict[str, int]) -> bytes:
        """The serialized ModelProto, importing `opsets` (domain → version; "" is ONNX)."""
        graph = (
            b"".join(self._nodes)
            + _str(2, self.name)
            + b"".join(self._initializers)
            + b"".join(self._inputs)
            + b"".join(self._outputs)
        )
        imports = b"".join(
            _bytes(8, (_str(1, domain) if domain else b"") + _int(2, version))
            for domain, version in opsets.items()
        )
        return _int(1, IR_VERSION) + _str(2, "raven-bot") + _bytes(7, graph) + imports


def _value_info(name: str, elem_type: int, shape: Sequence[int | str]) -> bytes:
    dims = b"".join(_bytes(1, _str(2, d) if isinstance(d, str) else _int(1, d)) for d in shape)
    tensor_type = _int(1, elem_type) + _bytes(2, dims)
    return _str(1, name) + _bytes(2, _bytes(1, tensor_type))
