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


def graph_json(path: str | os.PathLike[str], proto: Any = None) -> dict[str, Any]:
    """Nodes (name, op, module scope, inputs, outputs, attributes, shapes) and data edges (``proto``: the file
    already read and checked)."""
    from ..runtime.onnxfile import read_structure
    from ..steps.parity.localize import module_of

    p = Path(path)
    if proto is None:
        proto = read_structure(p)[0]  # external data leaving the folder is refused before anything is shown
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


def default_depth(graph: dict[str, Any], budget: int = 24) -> int:
    """The deepest module-scope grouping that draws at most ``budget`` module boxes (at least 1 level;
    operators outside any module are drawn on their own at every level)."""
    from ..results.summary import grouping_depth

    return grouping_depth([n["module"] for n in graph["nodes"] if n.get("module")], budget)


def node_details(path: str | os.PathLike[str], name: str, graph: dict[str, Any]) -> dict[str, Any]:
    """Values summary of a node's constant inputs (weights): shape, dtype, min, max, mean, std."""
    import onnx
    from onnx import numpy_helper

    from ..runtime.onnxfile import read_structure
    from ..runtime.skim import raw_tensor

    node = next((n for n in graph["nodes"] if n["name"] == name), None)
    if node is None:
        return {"node": name, "values": ["not in this graph"]}
    proto, offsets = read_structure(Path(path))
    inits = {i.name: i for i in proto.graph.initializer if i.name in node["inputs"]}
    values = []
    for input_name in node["inputs"]:
        init = inits.get(input_name)
        if init is None:
            continue
        if onnx.external_data_helper.uses_external_data(init):  # this tensor's bytes alone, from its data file
            onnx.external_data_helper.load_external_data_for_tensor(init, str(Path(path).parent))
            arr = numpy_helper.to_array(init)
        elif input_name in offsets:  # or from its place in the .onnx
            arr = raw_tensor(Path(path), init, offsets[input_name])
        else:
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
