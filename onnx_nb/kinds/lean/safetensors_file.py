"""A Hugging Face checkpoint's safetensors weights read one tensor at a time, without memory-mapping them.

The lean decoder route (:mod:`~onnx_nb.kinds.lean.graph`) needs each weight once, converted as it is read. Reading
with ``pread`` into a fresh array (instead of mapping the file) keeps the process's resident memory at the tensor
being converted: pages of a mapped file count as resident while they stay mapped, so a mapped 13 GB checkpoint
shows 13 GB of peak memory by the time its last layer is read. bf16 and fp16 come out as float32.

The format: an 8-byte little-endian header length, a JSON header (``{name: {dtype, shape, data_offsets}}``) and
the data; sharded checkpoints add ``model.safetensors.index.json`` (``weight_map``: tensor name -> shard file).
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import ModelLoadError

_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F64": np.float64,
           "I64": np.int64, "I32": np.int32, "U8": np.uint8, "I8": np.int8, "BOOL": np.bool_}
INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"


@dataclass
class _Entry:
    file: Path
    dtype: str
    shape: tuple[int, ...]
    start: int  # absolute byte offset in the file
    end: int


def _header(path: Path) -> dict[str, _Entry]:
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ModelLoadError(f"{path} is not a safetensors file (shorter than its header).")
        (size,) = struct.unpack("<Q", head)
        if size > 100 * 2**20:
            raise ModelLoadError(f"{path} is not a safetensors file (its header claims {size} bytes).")
        try:
            meta = json.loads(f.read(size))
        except ValueError as exc:
            raise ModelLoadError(f"{path} is not a safetensors file: its header is not JSON ({exc}).") from exc
    base = 8 + size
    return {name: _Entry(path, spec["dtype"], tuple(int(d) for d in spec["shape"]),
                         base + int(spec["data_offsets"][0]), base + int(spec["data_offsets"][1]))
            for name, spec in meta.items() if name != "__metadata__"}


class Checkpoint:
    """The tensors of a folder's ``model.safetensors`` (or its shards): ``names``, ``shape(name)``,
    ``read(name)`` (float32 for floating weights), ``dtype(name)`` as stored, ``bytes`` in all."""

    def __init__(self, folder: Path) -> None:
        index, single = folder / INDEX, folder / SINGLE
        if index.is_file():
            files = sorted({folder / f for f in json.loads(index.read_text())["weight_map"].values()})
        elif single.is_file():
            files = [single]
        else:
            found = sorted(p.name for p in folder.glob("*.safetensors"))
            if not found:
                raise ModelLoadError(
                    f"{folder} has no safetensors weights (model.safetensors or {INDEX}); the lean route reads "
                    "those only. Save the model with save_pretrained(folder) (safetensors is its default), or "
                    "export it without precision= (the generic exporter reads any checkpoint).")
            files = [folder / f for f in found]
        self.entries: dict[str, _Entry] = {}
        for f in files:
            self.entries.update(_header(f))
        self.bytes = sum(e.end - e.start for e in self.entries.values())

    @property
    def names(self) -> list[str]:
        return list(self.entries)

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def shape(self, name: str) -> tuple[int, ...]:
        return self.entries[name].shape

    def dtype(self, name: str) -> str:
        return self.entries[name].dtype

    def stored_dtype(self) -> str:
        """The floating dtype most of the weights are stored in ("float32", "float16" or "bfloat16")."""
        sizes: dict[str, int] = {}
        for e in self.entries.values():
            sizes[e.dtype] = sizes.get(e.dtype, 0) + e.end - e.start
        kind = max(sizes, key=lambda k: sizes[k]) if sizes else "F32"
        return {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}.get(kind, "float32")

    def read(self, name: str) -> np.ndarray:
        """The tensor as float32 (floating kinds) or its own dtype, read with ``pread`` into a fresh array."""
        if name not in self.entries:
            raise ModelLoadError(f"the checkpoint has no tensor {name!r}; its names start with "
                                 f"{', '.join(sorted(self.entries)[:3])} ...")
        e = self.entries[name]
        if e.dtype not in _DTYPES:
            raise ModelLoadError(f"tensor {name!r} is stored as {e.dtype}, which the lean route does not read.")
        raw: np.ndarray = np.empty(int(np.prod(e.shape, dtype=np.int64)), _DTYPES[e.dtype])
        view = memoryview(raw).cast("B")  # type: ignore[arg-type]
        with open(e.file, "rb", buffering=0) as f:
            done = 0
            while done < len(view):
                got = os.preadv(f.fileno(), [view[done:]], e.start + done)
                if got <= 0:
                    raise ModelLoadError(f"{e.file} ended inside tensor {name!r}: the file is truncated.")
                done += got
        if e.dtype == "BF16":  # the high half of a float32
            out = raw.astype(np.uint32)
            del raw
            out <<= 16
            return out.view(np.float32).reshape(e.shape)
        if e.dtype in ("F16", "F64"):
            return raw.astype(np.float32).reshape(e.shape)
        return raw.reshape(e.shape)
