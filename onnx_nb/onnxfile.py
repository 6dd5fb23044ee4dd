"""Reading ONNX files: signature, operator histogram, parameters, and dynamic-axis names."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .errors import InvalidModelError

TWO_GB = 2**31


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


def load_proto(path: str | Path, external: bool = False) -> Any:
    """Load an ONNX file (without its external data unless asked); clear errors otherwise."""
    import onnx

    p = Path(path)
    if not p.exists():
        raise InvalidModelError(f"No ONNX file at {p}. Check the path, or export a model first.")
    if p.is_dir():
        raise InvalidModelError(f"{p} is a folder; pass the path of its .onnx file.")
    if p.stat().st_size == 0:
        raise InvalidModelError(f"{p} is empty (0 bytes); re-export the model.")
    try:
        proto = onnx.load(str(p), load_external_data=False)
    except Exception as exc:
        raise InvalidModelError(
            f"{p} is not a readable ONNX model ({type(exc).__name__}); it may be truncated or "
            "another kind of file. Re-export it."
        ) from exc
    if not proto.graph.node and not proto.graph.output:
        raise InvalidModelError(f"{p} holds no ONNX graph; it is probably not an ONNX file.")
    if external:
        from onnx.external_data_helper import load_external_data_for_model

        load_external_data_for_model(proto, str(p.parent))
    return proto


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


def op_histogram(proto: Any) -> dict[str, int]:
    """Operator counts, including nodes inside subgraphs and local functions."""
    counts: Counter[str] = Counter()

    def walk(nodes: Any) -> None:
        for node in nodes:
            key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
            counts[key] += 1
            for attr in node.attribute:
                if attr.g and attr.g.node:
                    walk(attr.g.node)
                for g in attr.graphs:
                    walk(g.node)

    walk(proto.graph.node)
    for fn in proto.functions:
        walk(fn.node)
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
    for init in proto.graph.initializer:
        if uses_external_data(init):
            found.add(path.parent / ExternalDataInfo(init).location)
    return sorted(found)


def name_dims(proto: Any, axes: dict[str, dict[int, str]]) -> None:
    """Give the graph's inputs and outputs the dynamic-axis names in ``axes``."""
    for value in [*proto.graph.input, *proto.graph.output]:
        spec = axes.get(value.name)
        if not spec:
            continue
        dims = value.type.tensor_type.shape.dim
        for axis, name in spec.items():
            if axis < len(dims) and not dims[axis].HasField("dim_value"):
                dims[axis].dim_param = name


def strip_prefix(proto: Any, prefix: str) -> None:
    """Rename initializers ``<prefix>encoder.weight`` -> ``encoder.weight`` (onnx-nb's wrapper
    modules add the prefix; users know their parameters by their own names)."""
    renames = {i.name: i.name[len(prefix):] for i in proto.graph.initializer if i.name.startswith(prefix)}
    taken = {v.name for v in [*proto.graph.input, *proto.graph.output]} | {
        o for n in proto.graph.node for o in n.output}
    renames = {k: v for k, v in renames.items() if v and v not in taken}
    if not renames:
        return
    for init in proto.graph.initializer:
        init.name = renames.get(init.name, init.name)
    for value in [*proto.graph.input, *proto.graph.value_info]:
        value.name = renames.get(value.name, value.name)
    for node in proto.graph.node:
        for i, name in enumerate(node.input):
            if name in renames:
                node.input[i] = renames[name]


def total_file_size(path: Path, proto: Any) -> int:
    return sum(p.stat().st_size for p in files_of(Path(path), proto) if p.exists())
