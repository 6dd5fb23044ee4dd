"""The ONNX graph as compact JSON for the graph view, per-node details, and overlays."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

MAX_ATTR = 80


def _attr_text(attr: Any) -> str:
    import onnx

    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, onnx.TensorProto):
        return f"tensor{list(value.dims)}"
    if isinstance(value, onnx.GraphProto):
        return f"graph({len(value.node)} nodes)"
    text = str(list(value) if isinstance(value, (list, tuple)) else value)
    return text if len(text) <= MAX_ATTR else text[: MAX_ATTR - 1] + "…"


def graph_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Nodes (name, op, module scope, inputs, outputs, attributes, shapes) and data edges."""
    from ..runtime.onnxfile import check_model
    from ..steps.parity.localize import module_of

    p = Path(path)
    proto = check_model(p, graph=False)  # external data that leaves the folder is refused before anything is shown
    _check_texts(proto, p)
    shapes: dict[str, str] = {}
    for v in [*proto.graph.input, *proto.graph.output, *proto.graph.value_info]:
        dims = v.type.tensor_type.shape.dim
        shapes[v.name] = "[" + ", ".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?")
                                         for d in dims) + "]"
    for init in proto.graph.initializer:
        shapes[init.name] = str(list(init.dims))
    producer: dict[str, str] = {}
    nodes = []
    for i, n in enumerate(proto.graph.node):
        name = n.name or f"{n.op_type}_{i}"
        for o in n.output:
            producer[o] = name
        nodes.append({"name": name, "op": n.op_type, "module": module_of(n), "inputs": list(n.input),
                      "outputs": list(n.output), "attrs": {a.name: _attr_text(a) for a in n.attribute},
                      "shapes": {t: shapes[t] for t in [*n.input, *n.output] if t in shapes}})
    edges = []
    for node in nodes:
        for t in node["inputs"]:
            if t in producer:
                edges.append({"source": producer[t], "target": node["name"], "tensor": t})
    return {"name": p.name, "nodes": nodes, "edges": edges}


def _check_texts(proto: Any, path: Path) -> None:
    """A damaged file can hold names that are not UTF-8 (protobuf then hands them over as bytes, and ONNX Runtime
    may never read them): say the file is damaged instead of failing on them."""
    from ..errors import InvalidModelError

    g = proto.graph
    values = [v.name for v in [*g.input, *g.output, *g.value_info, *g.initializer]]
    values += [d.dim_param for v in [*g.input, *g.output, *g.value_info] for d in v.type.tensor_type.shape.dim]
    for n in g.node:
        values += [n.name, n.op_type, *n.input, *n.output, *(a.name for a in n.attribute),
                   *(m.key for m in n.metadata_props), *(m.value for m in n.metadata_props)]
    if any(not isinstance(v, str) for v in values):
        raise InvalidModelError(f"{path} is damaged: some of its names are not UTF-8 text. Export the model again.")


def default_depth(graph: dict[str, Any], budget: int = 24) -> int:
    """The deepest module-scope grouping that draws at most ``budget`` module boxes (at least 1 level;
    operators outside any module are drawn on their own at every level)."""
    best = 1
    modules = [n["module"].split(".") for n in graph["nodes"] if n.get("module")]
    for depth in range(1, 1 + max((len(m) for m in modules), default=1)):
        if len({".".join(m[:depth]) for m in modules}) > budget:
            break
        best = depth
    return best


def node_details(path: str | os.PathLike[str], name: str, graph: dict[str, Any]) -> dict[str, Any]:
    """Values summary of a node's constant inputs (weights): shape, dtype, min, max, mean, std."""
    import onnx
    from onnx import numpy_helper

    from ..runtime.onnxfile import check_model

    node = next((n for n in graph["nodes"] if n["name"] == name), None)
    if node is None:
        return {"node": name, "values": ["not in this graph"]}
    proto = check_model(Path(path), graph=False)
    inits = {i.name: i for i in proto.graph.initializer if i.name in node["inputs"]}
    values = []
    for input_name in node["inputs"]:
        init = inits.get(input_name)
        if init is None:
            continue
        if onnx.external_data_helper.uses_external_data(init):
            onnx.external_data_helper.load_external_data_for_tensor(init, str(Path(path).parent))
        arr = numpy_helper.to_array(init)
        if arr.size and np.issubdtype(arr.dtype, np.number):
            a = arr.astype(np.float64)
            values.append(f"{input_name}: {arr.dtype}{list(arr.shape)} min {a.min():.4g} max {a.max():.4g} "
                          f"mean {a.mean():.4g} std {a.std():.4g}")
        else:
            values.append(f"{input_name}: {arr.dtype}{list(arr.shape)}")
    if not values:
        values.append("no constant inputs")
    return {"node": name, "values": values}


def overlay_from(source: Any) -> tuple[dict[str, float], str, str]:
    """(per-node values, label, node to highlight) from a ParityReport, ProfileTable or QuantDebugReport."""
    kind = type(source).__name__
    if kind == "ParityReport":
        d = source.divergence
        return (dict(d.node_errors) if d else {}), "parity max abs error", (d.node if d else "")
    if kind == "ProfileTable":
        runs = max(source.runs, 1)
        return {n["node"]: n["total_ms"] / runs for n in source.by_node}, "ms per run", ""
    if kind == "QuantDebugReport":
        worst = source.layers[0].node if source.layers else ""
        return {layer.node: layer.drop_db + 1e-3 for layer in source.layers}, "dB lost (quantization)", worst
    if isinstance(source, dict):
        return {str(k): float(v) for k, v in source.items()}, "value", ""
    return {}, "", ""
