"""An ONNX file's structure without its weights: the protobuf is walked field by field over a memory map and
every initializer's ``raw_data`` over 4 KB is skipped (its place in the file noted), so a 2 GB file with its
weights inside opens as fast as its graph is small, and one weight can be read on its own later. External data
files are never opened.

Protobuf wire format: a field is a varint key (number << 3 | wire type) then its value; wire type 2 values are a
varint length then that many bytes. ModelProto.graph is field 7, GraphProto.initializer field 5, TensorProto.raw_data
field 9 (onnx.proto)."""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MODEL_GRAPH, GRAPH_INITIALIZER, TENSOR_NAME, TENSOR_RAW = 7, 5, 8, 9
KEEP_BYTES = 4096  # small tensors keep their data: shapes, axes and scales that shape inference reads


def _varint(buf: Any, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _encode_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def fields(buf: Any, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """(field number, wire type, value start, value end, field start) of each field in ``buf[start:end]``."""
    pos = start
    while pos < end:
        head = pos
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, stop = _varint(buf, pos, end)
        elif wire == 1:
            stop = pos + 8
        elif wire == 2:
            length, pos = _varint(buf, pos, end)
            stop = pos + length
        elif wire == 5:
            stop = pos + 4
        else:
            raise ValueError(f"wire type {wire}")
        if stop > end or number == 0:
            raise ValueError("field runs past its message")
        yield number, wire, pos, stop, head
        pos = stop


def _message(number: int, body: bytes) -> bytes:
    return _encode_varint(number << 3 | 2) + _encode_varint(len(body)) + body


def _tensor(buf: Any, start: int, end: int) -> tuple[bytes, str, tuple[int, int] | None]:
    """A TensorProto's bytes without raw_data; its name; where its raw_data lies in the file."""
    kept = bytearray()
    name, where = "", None
    for number, _, vstart, vend, head in fields(buf, start, end):
        if number == TENSOR_RAW and vend - vstart > KEEP_BYTES:
            where = (vstart, vend - vstart)
            continue
        if number == TENSOR_NAME:
            name = bytes(buf[vstart:vend]).decode("utf-8", "replace")
        kept += buf[head:vend]
    return bytes(kept), name, where


def skim(path: str | Path) -> tuple[Any, dict[str, tuple[int, int]]]:
    """(the ModelProto with its initializers' raw_data left out, initializer name -> (offset, length) of that data
    in the file). Raises ``ValueError`` on malformed bytes and ``google.protobuf`` errors on the rest
    (:func:`~onnx_nb.runtime.onnxfile.read_structure` turns both into InvalidModelError)."""
    import onnx

    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        offsets: dict[str, tuple[int, int]] = {}
        model = bytearray()
        for number, wire, vstart, vend, head in fields(buf, 0, len(buf)):
            if number != MODEL_GRAPH or wire != 2:
                model += buf[head:vend]
                continue
            graph = bytearray()
            for gnum, gwire, gstart, gend, ghead in fields(buf, vstart, vend):
                if gnum == GRAPH_INITIALIZER and gwire == 2:
                    body, name, where = _tensor(buf, gstart, gend)
                    if where is not None:
                        offsets[name] = where
                    graph += _message(GRAPH_INITIALIZER, body)
                else:
                    graph += buf[ghead:gend]
            model += _message(MODEL_GRAPH, bytes(graph))
    proto = onnx.ModelProto()
    proto.ParseFromString(bytes(model))
    return proto, offsets


def raw_tensor(path: str | Path, tensor: Any, where: tuple[int, int]) -> Any:
    """One initializer skimmed away, read back from its place in the file as a numpy array."""
    import onnx

    offset, length = where
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(length)
    full = onnx.TensorProto()
    full.CopyFrom(tensor)
    full.raw_data = data
    return onnx.numpy_helper.to_array(full)
