"""A file over 2 GB quantized with its weights left on disk: ONNX Runtime's quantizers and fp16 conversion run on
its graph loaded without its external data, each weight read from its data file when they ask for it (one at a
time, never kept in the graph), and the file they save is then written with the weights they left alone copied
across a tensor at a time. The step holds the graph, the weight in hand and what it has made (INT8 weights: a
quarter of the fp32 ones, INT4 an eighth, fp16 a half), where ORT's own load, copies and save held the model two
or three times over (``benchmarks/big_steps.py``: 3.1x the weights for dynamic INT8, 2.3x for INT4, 1.8x for fp16).

A weight left on disk points at its source data file by that file's absolute path, and the path is registered
here: only a registered one counts as a reference (onnx refuses absolute locations in a file, and so does this
module for any it did not write). :func:`reading` makes ``onnx.numpy_helper.to_array`` read such a tensor from there
(ORT's INT8 quantizers and its HQQ / k-quant paths read weights through it; its round-to-nearest INT4 reads them with
onnx_ir, which maps the registered file itself), ORT's fp16 conversion reads it before it converts, and :func:`load`
(ORT's quantizer loading the prepared file) leaves it where it is. :func:`materialize` turns the saved file into one
self-contained file and data file."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from ...runtime.onnxedit import consolidate_external, external_bytes
from ...runtime.onnxfile import stored_tensors
from .swaps import Swap

INLINE_BYTES = 64 * 1024  # smaller external tensors are read into the graph at once: shapes, norms' scales, biases
_SOURCES: set[str] = set()  # the data files :func:`referenced` pointed weights at, by absolute path


def _info(tensor: Any) -> dict[str, str]:
    return {e.key: e.value for e in tensor.external_data}


def is_referenced(tensor: Any) -> bool:
    """Whether ``tensor`` is a weight left in its source data file (an absolute location, no data in the graph)."""
    from onnx import TensorProto

    return (tensor.data_location == TensorProto.EXTERNAL and not tensor.HasField("raw_data")
            and _info(tensor).get("location") in _SOURCES)


def _inline(tensor: Any, data: bytes) -> None:
    from onnx import TensorProto

    del tensor.external_data[:]
    tensor.data_location = TensorProto.DEFAULT
    tensor.raw_data = data


def referenced(path: Path) -> Any:
    """The model at ``path`` with each external weight over :data:`INLINE_BYTES` left in its data file (its
    location made absolute) and the smaller ones read in."""
    import onnx

    path = Path(path).resolve()
    proto = onnx.load(str(path), load_external_data=False)
    for tensor in stored_tensors(proto.graph):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = _info(tensor)
        if int(info.get("length", INLINE_BYTES + 1)) <= INLINE_BYTES:
            _inline(tensor, external_bytes(tensor, path.parent))
            continue
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = str((path.parent / entry.value).resolve())
                _SOURCES.add(entry.value)
    return proto


def read(tensor: Any) -> Any:
    """A referenced weight's values (a new array each call; the tensor is left as it was)."""
    import onnx

    copy = onnx.TensorProto()
    copy.CopyFrom(tensor)
    _inline(copy, external_bytes(tensor, Path("/")))
    return _TO_ARRAY.original(copy)


def _to_array(tensor: Any, base_dir: str = "") -> Any:
    return read(tensor) if is_referenced(tensor) else _TO_ARRAY.original(tensor, base_dir)


def _to_float16(tensor: Any, min_positive_val: float = 5.96e-08, max_finite_val: float = 65504.0) -> Any:
    """ORT's conversion of one tensor (its values through ORT's ``convert_np_to_float16``); a referenced one read
    and written as float16 at once (ORT's would retype it and leave the fp32 bytes; and bytes given to a protobuf
    message stay in its arena until the message goes, so its fp32 bytes are never put there)."""
    from onnx import TensorProto
    from onnxruntime.transformers import float16

    if not (is_referenced(tensor) and tensor.data_type == TensorProto.FLOAT):
        return _FLOAT16.original(tensor, min_positive_val, max_finite_val)
    half = float16.convert_np_to_float16(read(tensor), min_positive_val, max_finite_val)
    _inline(tensor, half.tobytes())
    tensor.data_type = TensorProto.FLOAT16
    return tensor


_TO_ARRAY, _FLOAT16 = Swap(_to_array), Swap(_to_float16)


@contextmanager
def reading() -> Iterator[None]:
    """While the block runs, referenced weights read where ONNX Runtime's quantizers and fp16 conversion ask for
    them (put back when the last such block, in any thread, ends)."""
    import onnx.numpy_helper
    from onnxruntime.transformers import float16

    with ExitStack() as stack:
        stack.enter_context(_TO_ARRAY.active(onnx.numpy_helper, "to_array"))
        stack.enter_context(_FLOAT16.active(float16, "convert_tensor_float_to_float16"))
        yield


def load(path: Path) -> Any:
    """``onnx.load(path)`` with referenced weights left where they are."""
    import onnx

    proto = onnx.load(str(path), load_external_data=False)
    folder = Path(path).parent
    for tensor in stored_tensors(proto.graph):
        if tensor.data_location == onnx.TensorProto.EXTERNAL and not is_referenced(tensor):
            _inline(tensor, external_bytes(tensor, folder))
    return proto


def materialize(path: Path) -> None:
    """The file at ``path`` (saved with referenced weights) made self-contained: every external weight, referenced or
    its own, copied into one page-aligned data file beside it, a tensor at a time (the sources of references are
    left as they are)."""
    import onnx

    proto = onnx.load(str(path), load_external_data=False)
    consolidate_external(proto, Path(path).parent, Path(path).name + ".data")
    onnx.save(proto, str(path))
