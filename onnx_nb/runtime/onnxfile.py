"""Reading ONNX files: signature, operator histogram, parameters, and dynamic-axis names."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from ..errors import InvalidModelError, UnsafeModelError, first_line

TWO_GB = 2**31
EXTERNAL_DATA_BYTES = 2**31 - 2**27  # weights above this go to external data: room for the graph under 2 GB


@dataclass
class TensorInfo:
    name: str
    dtype: str
    shape: list[int | str | None]

    @property
    def dynamic_dims(self) -> dict[int, str]:
        return {i: d for i, d in enumerate(self.shape) if isinstance(d, str) or d is None}  # type: ignore[misc]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class NodeArg:
    """What ``get_inputs()`` / ``get_outputs()`` of an ORT session return: name, shape, type."""

    name: str
    shape: list[Any]
    type: str


def load_proto(path: str | Path, external: bool = False) -> Any:
    """Load an ONNX file (without its external data unless asked); clear errors otherwise."""
    import onnx

    p = _existing(path)
    try:
        proto = onnx.load(str(p), load_external_data=False)
    except Exception as exc:
        raise _unreadable(p, exc) from exc
    _has_graph(p, proto)
    if external:
        from onnx.external_data_helper import load_external_data_for_model

        check_external_data(p, proto)
        load_external_data_for_model(proto, str(p.parent))
    return proto


def _existing(path: str | Path) -> Path:
    p = Path(path)
    if not p.exists():
        raise InvalidModelError(f"No ONNX file at {p}. Check the path, or export a model first.")
    if p.is_dir():
        raise InvalidModelError(
            f"{p} is a folder; pass the path of its .onnx file. Generation folders read whole: transformers' "
            "exporter's (export.json), onnxruntime-genai's builder's (genai_config.json), Optimum's (model.onnx or "
            "decoder_model_merged.onnx beside config.json) and transformers.js's (config.json, the files in onnx/).")
    if p.stat().st_size == 0:
        raise InvalidModelError(f"{p} is empty (0 bytes); re-export the model.")
    if is_ort_format(p):
        raise InvalidModelError(
            f"{p} is an ORT-format file for ONNX Runtime Mobile; pass the .onnx it was made from "
            "(optimize(model, target='mobile') writes the .ort beside its .onnx).")
    return p


ORT_FILE_ID = b"ORTM"  # the ORT format's flatbuffer file identifier, at bytes 4..8


def is_ort_format(path: str | Path) -> bool:
    """Whether ``path`` is an ONNX Runtime ORT-format file (``.ort``): by its suffix, or by the flatbuffer's head (a
    small root offset, then the file identifier ``ORTM``), so a renamed one is told apart too. An ONNX protobuf
    starts with field tags, never with such an offset (a producer name "ORTM..." at byte 4 is not enough)."""
    p = Path(path)
    if p.suffix.lower() == ".ort":
        return True
    try:
        with open(p, "rb") as f:
            head = f.read(8)
    except OSError:
        return False
    root = int.from_bytes(head[:4], "little")
    return head[4:8] == ORT_FILE_ID and root % 4 == 0 and 8 <= root < 1 << 16


def _unreadable(p: Path, exc: BaseException) -> InvalidModelError:
    return InvalidModelError(f"{p} is not a readable ONNX model ({type(exc).__name__}); it may be truncated or "
                             "another kind of file. Re-export it.")


def _has_graph(p: Path, proto: Any) -> None:
    if not proto.graph.node and not proto.graph.output:
        raise InvalidModelError(f"{p} holds no ONNX graph; it is probably not an ONNX file.")


def read_structure(path: str | Path) -> tuple[Any, dict[str, tuple[int, int]]]:
    """An ONNX file's structure with the checks :func:`check_model` makes before showing a graph (it exists,
    parses, its external data stays in its folder, its names are text), its weights left where they are: the proto
    without initializer data, and where each initializer's data lies in the file (:mod:`runtime.skim`)."""
    from .skim import skim

    p = _existing(path)
    try:
        proto, offsets = skim(p)
    except Exception as exc:
        raise _unreadable(p, exc) from exc
    _has_graph(p, proto)
    check_external_data(p, proto)
    check_texts(proto, p)
    return proto, offsets


def stored_tensors(graph: Any) -> Iterator[Any]:
    """Every tensor stored in a graph: initializers, sparse ones, and constants in node attributes,
    subgraphs included."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from stored_tensors(attr.g)
            for g in attr.graphs:
                yield from stored_tensors(g)


def check_external_data(path: Path, proto: Any) -> None:
    """Refuse external data that leaves the model's folder, and data files too short for their tensors.

    A model from a stranger can name ``/etc/passwd`` or ``../../secret`` as a tensor's data file, or a
    link pointing anywhere; ONNX Runtime would read it. Only plain relative paths to regular files
    inside the folder are accepted.
    """
    import onnx

    folder = path.parent
    root = folder.resolve()
    for tensor in stored_tensors(proto.graph):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        where = info.get("location", "")
        what = f"{path.name}: tensor {tensor.name!r} keeps its data in {where!r}"
        parts = PurePosixPath(where.replace("\\", "/")).parts
        if not where or PurePosixPath(where).is_absolute() or PureWindowsPath(where).is_absolute() \
                or PureWindowsPath(where).drive or ".." in parts:
            raise UnsafeModelError(
                f"{what}, which is outside the model's folder. onnx-nb only reads data files beside the "
                "model; this file is malformed or hostile. Do not load it; ask its author for one saved "
                "with relative external data.")
        current = folder
        for part in parts:
            current = current / part
            if current.is_symlink():
                raise UnsafeModelError(
                    f"{what}, and {current} is a link. onnx-nb does not follow links out of a model's "
                    "folder; copy the real data file next to the model instead.")
        data = folder.joinpath(*parts)
        if not data.resolve().is_relative_to(root):
            raise UnsafeModelError(f"{what}, which resolves outside {root}. Do not load this model.")
        if not data.is_file():
            raise InvalidModelError(
                f"{what}, but {data} is missing. Copy the data file next to the .onnx (they travel together).")
        try:
            offset, length = int(info.get("offset", 0)), int(info.get("length", -1))
        except ValueError as exc:
            raise InvalidModelError(f"{what} with a non-numeric offset or length; the file is corrupt.") from exc
        size = data.stat().st_size
        if offset < 0 or offset > size or (length >= 0 and offset + length > size):
            raise InvalidModelError(
                f"{what} at bytes {offset}..{offset + max(length, 0)}, but that file has {size} bytes; it is "
                "truncated or belongs to another model. Re-export or re-copy it.")


PARSE_AGAIN_ABOVE = 256 * 2**20  # an .onnx file this large holds its weights: parsed again rather than held twice


def check_model(path: str | Path, graph: bool = True) -> Any:
    """Everything onnx-nb checks before ONNX Runtime sees a file: it exists, parses, its external data
    stays in its folder, and (``graph=True``) it is a valid ONNX graph (``onnx.checker``). Returns the
    proto (without external data).

    Example::

        proto = onnx_nb.check_model("from_a_stranger.onnx")   # raises InvalidModelError / UnsafeModelError
    """
    import onnx

    p = Path(path)
    proto = load_proto(p)
    check_external_data(p, proto)
    if not graph:
        return proto
    inline = p.stat().st_size > PARSE_AGAIN_ABOVE  # its weights inside: not held parsed while the checker loads it
    if inline:
        del proto
    try:
        # by path, so models over 2 GB are checked too; contrib-domain ops (com.microsoft) are skipped
        onnx.checker.check_model(str(p))
    except Exception as exc:
        if not _runtime_op(str(exc)):  # an ONNX Runtime operator in the default domain: ORT checks it on loading
            first = first_line(exc).rstrip(".")
            raise InvalidModelError(f"{p.name} is not a valid ONNX model: {first}. Re-export it, or fix the "
                                    "graph that produced it.") from exc
    if not inline:
        return proto
    proto = load_proto(p)
    check_external_data(p, proto)  # the proto returned is always one checked
    return proto


def _runtime_op(message: str) -> bool:
    """Whether ``onnx.checker`` only failed on an operator that ONNX Runtime registers in the default domain
    (its transformer optimizer writes ``SimplifiedLayerNormalization`` there for Llama-like models)."""
    import re

    match = re.search(r"No Op registered for (\w+) with domain_version", message)
    if not match:
        return False
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as ort_state
    except ImportError:  # pragma: no cover - onnxruntime is a dependency
        return False
    return any(s.name == match.group(1) and s.domain in ("", "ai.onnx") for s in ort_state.get_all_operator_schema())


def _dtype(elem_type: int) -> str:
    import onnx

    try:
        return str(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:  # noqa: BLE001 - types numpy has no name for (bfloat16, float8)
        return onnx.TensorProto.DataType.Name(elem_type).lower()


def _info(value: Any) -> TensorInfo:
    t = value.type.tensor_type
    shape: list[int | str | None] = []
    for d in t.shape.dim:
        shape.append(d.dim_value if d.HasField("dim_value") else (d.dim_param or None))
    return TensorInfo(value.name, _dtype(t.elem_type), shape)


def signature(proto: Any) -> tuple[list[TensorInfo], list[TensorInfo]]:
    inits = {i.name for i in proto.graph.initializer}
    inputs = [_info(v) for v in proto.graph.input if v.name not in inits]
    return inputs, [_info(v) for v in proto.graph.output]


def every_node(proto: Any) -> Iterator[Any]:
    """Every node of the model: the graph's, those inside subgraphs (an If's branches, a Loop's or a Scan's body) and
    local functions'."""

    def walk(nodes: Any) -> Iterator[Any]:
        for node in nodes:
            yield node
            for attr in node.attribute:
                if attr.g and attr.g.node:
                    yield from walk(attr.g.node)
                for g in attr.graphs:
                    yield from walk(g.node)

    yield from walk(proto.graph.node)
    for fn in proto.functions:
        yield from walk(fn.node)


def op_histogram(proto: Any) -> dict[str, int]:
    """Operator counts, including nodes inside subgraphs and local functions."""
    counts: Counter[str] = Counter(node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
                                   for node in every_node(proto))
    return dict(counts.most_common())


def parameter_count(proto: Any) -> int:
    return sum(math.prod(i.dims) for i in proto.graph.initializer)


def opset(proto: Any) -> int:
    for entry in proto.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    return 0


def files_of(path: Path, proto: Any) -> list[Path]:
    """The .onnx file and every external-data file it names."""
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data

    found = {path}
    for init in stored_tensors(proto.graph):
        if uses_external_data(init):
            found.add(path.parent / ExternalDataInfo(init).location)
    return sorted(found)


def total_file_size(path: Path, proto: Any) -> int:
    return sum(p.stat().st_size for p in files_of(Path(path), proto) if p.exists())


def file_bytes(path: str | Path) -> int:
    """An ONNX file's size with its external data (what a session loads, what a user ships); 0 when it cannot be
    read."""
    from .skim import skim

    try:  # its structure alone: a file holding its weights is not parsed whole for its size
        return int(total_file_size(Path(path), skim(path)[0]))
    except Exception:  # noqa: BLE001 - a file a session will refuse: the caller's row says why
        return 0


GQA_OP = "GroupQueryAttention"  # ONNX Runtime's contrib op that optimize(attention="gqa") writes for decoders


def gqa_node(proto: Any) -> Any:
    """The first ONNX Runtime GroupQueryAttention node of a decoder (onnx-nb's or another builder's), else None."""
    return next((n for n in proto.graph.node if n.op_type == GQA_OP and n.domain == "com.microsoft"), None)


def rotary_positions(proto: Any, gqa: Any) -> int | None:
    """Rows of a GroupQueryAttention node's rotary cos table (its 8th input, whatever a builder named it): the
    positions the file can encode; None when the op has no table."""
    table = gqa.input[7] if len(gqa.input) > 7 else ""
    return next((int(t.dims[0]) for t in proto.graph.initializer if table and t.name == table), None)


def contrib_ops(path: str | Path, microsoft_only: bool = False) -> list[str]:
    """Operator types outside ONNX's own domain (or, ``microsoft_only``, ONNX Runtime's com.microsoft ones): what a
    runtime other than ONNX Runtime (OpenVINO, ORT Web) may not read."""
    nodes = load_proto(path).graph.node
    return sorted({n.op_type for n in nodes
                   if (n.domain == "com.microsoft" if microsoft_only else n.domain not in ("", "ai.onnx"))})


def check_texts(proto: Any, path: Path) -> None:
    """A damaged file can hold names that are not UTF-8 (protobuf then hands them over as bytes, and ONNX Runtime
    may never read them): say the file is damaged instead of failing on them."""
    g = proto.graph
    values = [v.name for v in [*g.input, *g.output, *g.value_info, *g.initializer]]
    values += [d.dim_param for v in [*g.input, *g.output, *g.value_info] for d in v.type.tensor_type.shape.dim]
    for n in g.node:
        values += [n.name, n.op_type, *n.input, *n.output, *(a.name for a in n.attribute),
                   *(m.key for m in n.metadata_props), *(m.value for m in n.metadata_props)]
    if any(not isinstance(v, str) for v in values):
        raise InvalidModelError(f"{path} is damaged: some of its names are not UTF-8 text. Export the model again.")
