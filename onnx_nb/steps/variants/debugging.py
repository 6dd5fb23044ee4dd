"""``quant_debug()``: which layers of a quantized model lose the most accuracy, and what to exclude."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError
from ...render import CSS, esc, html_table, text_table
from ...runtime.memory import gives_memory_back

QUANT_COMPUTE = {"MatMulInteger", "QLinearMatMul", "MatMulNBits", "QAttention", "ConvInteger", "QLinearConv",
                 "DynamicQuantizeMatMul", "QGemm"}
SQNR_CAP = 120.0  # dB: an exact tensor


def sqnr(reference: np.ndarray, value: np.ndarray) -> float:
    """Signal-to-quantization-noise ratio in dB (capped at 120 for exact tensors)."""
    r = reference.astype(np.float64).ravel()
    noise = float(np.sum((r - value.astype(np.float64).ravel()) ** 2))
    signal = float(np.sum(r ** 2))
    if noise == 0 or signal == 0:
        return SQNR_CAP
    return float(min(10 * np.log10(signal / noise), SQNR_CAP))


@dataclass
class LayerError:
    node: str  # quantized node in the variant
    op_type: str
    parent_node: str  # the node's name before quantization (what ``exclude`` takes)
    output: str  # the compared tensor (present in both graphs)
    sqnr_db: float  # of the layer's output against the fp32 model
    input_sqnr_db: float  # of its input: the error it inherited
    drop_db: float  # what this layer itself lost
    cosine: float
    module_path: str | None = None


@dataclass
class QuantDebugReport:
    variant: Any
    layers: list[LayerError]  # ranked, worst drop first
    suggested: list[str]  # parent node names to keep in float
    notes: list[str] = field(default_factory=list)

    def requantize(self, exclude: list[str] | None = None, **overrides: Any) -> Any:
        """Quantize the same parent again, with the call that made the variant (method, calibration data,
        block size, operator types: every setting kept), and the suggested nodes (or ``exclude``) kept in float."""
        variant = self.variant
        remake = getattr(variant, "remake", None)
        if remake is None:
            raise InvalidArgumentError("This report has no variant made by quantize() to re-quantize; call "
                                       "quantize() yourself with exclude=[...].")
        before = [] if isinstance(remake.keywords.get("exclude"), str) else list(remake.keywords.get("exclude") or [])
        kept = sorted(set(before) | set(variant.recipe.get("exclude", [])) | set(exclude or self.suggested))
        return remake(**{"exclude": kept, **overrides})

    def to_dict(self) -> dict[str, Any]:
        return {"layers": [asdict(layer) for layer in self.layers], "suggested": self.suggested,
                "notes": self.notes}

    def to_json(self, path: str | os.PathLike[str] | None = None) -> str:
        """The report as JSON (written atomically to ``path`` if given). Saved as ``<model>.quant_debug.json``
        beside the quantized ``<model>.onnx``, the JupyterLab viewer overlays the dB lost per layer."""
        from ...runtime.report_file import json_text

        return json_text(self.to_dict(), path)

    def to_pandas(self) -> Any:
        import pandas as pd

        return pd.DataFrame([asdict(layer) for layer in self.layers])

    def figure(self, top: int = 20) -> Any:
        import plotly.graph_objects as go

        layers = self.layers[:top][::-1]
        colors = ["#b3261e" if layer.parent_node in self.suggested else "#5f6368" for layer in layers]
        fig = go.Figure(go.Bar(x=[layer.drop_db for layer in layers],
                               y=[layer.module_path or layer.parent_node for layer in layers],
                               orientation="h", marker_color=colors,
                               hovertext=[f"SQNR {layer.sqnr_db:.1f} dB" for layer in layers]))
        fig.update_layout(title="SQNR lost per quantized layer (red: suggested to keep in float)",
                          xaxis_title="dB lost in this layer", template="plotly_white",
                          height=max(300, 22 * len(layers) + 120))
        return fig

    def _rows(self, top: int) -> list[list[str]]:
        return [[layer.parent_node, layer.op_type, layer.module_path or "-", f"{layer.sqnr_db:.1f}",
                 f"{layer.drop_db:.1f}", f"{layer.cosine:.5f}",
                 "exclude" if layer.parent_node in self.suggested else ""] for layer in self.layers[:top]]

    def __repr__(self) -> str:
        head = ["layer", "op", "module", "sqnr_db", "drop_db", "cosine", "suggest"]
        lines = ["QuantDebugReport (worst layers first)", text_table(head, self._rows(12)),
                 f"suggested to keep in float: {', '.join(self.suggested) or 'none'}"]
        return "\n".join(lines + [f"note: {n}" for n in self.notes])

    __str__ = __repr__

    def html_body(self) -> str:
        head = ["layer", "op", "module", "SQNR dB", "dB lost here", "cosine", "suggest"]
        return (f'<div class="onnxnb"><h4>Quantization debug: worst layers first</h4>{html_table(head, self._rows(20))}'
                f"<div>Suggested to keep in float: <code>{esc(', '.join(self.suggested) or 'none')}</code>; "
                "<code>report.requantize()</code> quantizes again without them.</div></div>")

    def _repr_html_(self) -> str:
        return CSS + self.html_body()


@gives_memory_back
def quant_debug(reference: Any, variant: Any, sample: Any = None, *, max_suggestions: int = 3,
                gap_db: float = 10.0) -> QuantDebugReport:
    """Per-layer SQNR of a quantized ``variant`` against the fp32 ``reference`` ONNX model (its parent by
    default), each layer measured in isolation: its quantized block runs on the fp32 model's own input
    tensor, so error inherited from earlier layers does not count against it. Layers far below the median
    (``gap_db``) are suggested for ``exclude``; ``report.requantize()`` quantizes again without them.

    Example::

        debug = onnx_nb.quant_debug(None, int8)            # the variant's own reference
        debug.requantize()                                 # again, without the layers it suggests
    """
    from ...runtime.feeds import feed_for
    from ...runtime.onnxfile import load_proto
    from ..parity.localize import module_of, run_all

    for what, value in (("variant", variant), ("reference", reference)):
        if value is not None and not isinstance(getattr(value, "path", value), (str, os.PathLike)):
            raise InvalidArgumentError(
                f"quant_debug compares two ONNX files, and {what} is a {type(value).__name__}: pass the quantized "
                "variant (or its .onnx path) and the fp32 parent (.onnx) as reference.")
    cand_path = Path(getattr(variant, "path", variant))
    ref_path = Path(getattr(reference, "path", reference)) if reference is not None else None
    if ref_path is None or ref_path.suffix != ".onnx":
        ref_path = Path(getattr(variant, "parent", "") or "")
    if ref_path.suffix != ".onnx":
        raise InvalidArgumentError("quant_debug compares two ONNX files: pass the fp32 parent (.onnx) as reference.")
    feed, _axes = feed_for(ref_path, variant, sample)
    ref_vals = {**feed, **run_all(ref_path, feed)}
    proto = load_proto(cand_path)
    ref_producer = {o: n for n in load_proto(ref_path).graph.node for o in n.output}
    nodes = list(proto.graph.node)
    inits = {i.name: i for i in proto.graph.initializer}
    producer = {o: n for n in nodes for o in n.output}
    consumers: dict[str, list[Any]] = {}
    for n in nodes:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    dequant_weights = {n.output[0] for n in nodes if n.op_type == "DequantizeLinear" and n.input
                       and n.input[0] in inits}
    layers: list[LayerError] = []
    for node in nodes:
        qdq = node.op_type in ("MatMul", "Gemm", "Conv") and any(i in dequant_weights for i in node.input)
        if node.op_type not in QUANT_COMPUTE and not qdq:
            continue
        out = _forward_to_common(node, consumers, ref_vals)
        if out is None:
            continue
        block, inputs = _block(out, producer, ref_vals, inits)
        try:
            value = _run_block(proto, block, inputs, out, inits, ref_vals, cand_path.parent)
        except Exception:  # noqa: BLE001 - a block ORT cannot run alone is skipped, with a note
            continue
        if value.shape != ref_vals[out].shape:
            continue
        a, b = ref_vals[out].astype(np.float64).ravel(), value.astype(np.float64).ravel()
        denom = float(np.linalg.norm(a) * np.linalg.norm(b))
        parent = ref_producer.get(out)
        layers.append(LayerError(node.name, node.op_type, quantizer_name(node), out,
                                 sqnr(ref_vals[out], value), SQNR_CAP, 0.0, float(a @ b / denom) if denom else 1.0,
                                 module_of(parent) if parent is not None else None))
    if layers:
        median = float(np.median([layer.sqnr_db for layer in layers]))
        for layer in layers:
            layer.drop_db = max(median - layer.sqnr_db, 0.0)
    layers.sort(key=lambda layer: layer.sqnr_db)
    suggested = [layer.parent_node for layer in layers if layer.drop_db > gap_db][:max_suggestions]
    notes = [] if layers else ["No quantized layer with a float counterpart was found."]
    if layers:
        notes.append("Each layer is measured alone: its quantized block runs on the fp32 model's input tensor. "
                     "drop_db is how far it falls below the median layer.")
    return QuantDebugReport(variant if hasattr(variant, "recipe") else None, layers, suggested, notes)


def quantizer_name(node: Any) -> str:
    """The name ORT's quantizer knew the node by (what ``nodes_to_exclude`` takes): it names a quantized
    node ``<name>_quant`` (dynamic) or ``<name>_Q4`` (INT4), and keeps the name in QDQ models."""
    for suffix in ("_quant", "_Q4", "_Q8"):
        if node.name.endswith(suffix):
            return str(node.name[: -len(suffix)])
    return str(node.name)


def _block(out: str, producer: dict[str, Any], ref_vals: dict[str, Any],
           inits: dict[str, Any]) -> tuple[list[Any], list[str]]:
    """The variant-only nodes that compute ``out`` from tensors the fp32 model also has."""
    block: list[Any] = []
    inputs: list[str] = []
    stack = [out]
    seen: set[str] = set()
    first = True
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        if (name in ref_vals and not first) or name in inits or name == "":
            if name in ref_vals and name not in inits and name not in inputs:
                inputs.append(name)
            continue
        first = False
        node = producer.get(name)
        if node is None:
            continue
        if node not in block:
            block.append(node)
        stack += list(node.input)
    order = {id(n): i for i, n in enumerate(producer.values())}
    return sorted(block, key=lambda n: order.get(id(n), 0)), inputs


def _run_block(proto: Any, block: list[Any], inputs: list[str], out: str, inits: dict[str, Any],
               ref_vals: dict[str, np.ndarray], folder: Path | None = None) -> np.ndarray:
    """The block alone in a session; its weights read here when the file keeps them as external data (``folder``:
    the file's), a block at a time."""
    import onnx
    from onnx import numpy_helper

    from ...runtime.sessions import graph_session

    used = {i for n in block for i in n.input} & set(inits)
    tensors = [numpy_helper.from_array(numpy_helper.to_array(inits[i], base_dir=str(folder)), i)
               if inits[i].data_location == onnx.TensorProto.EXTERNAL and folder is not None else inits[i]
               for i in used]
    graph = onnx.helper.make_graph(
        block, "block",
        [onnx.helper.make_tensor_value_info(i, onnx.helper.np_dtype_to_tensor_dtype(ref_vals[i].dtype), None)
         for i in inputs],
        [onnx.ValueInfoProto(name=out)], tensors)
    model = onnx.helper.make_model(graph, opset_imports=list(proto.opset_import), ir_version=proto.ir_version)
    sess = graph_session(model)
    return np.asarray(sess.run([out], {i: ref_vals[i] for i in inputs})[0])


def _forward_to_common(node: Any, consumers: dict[str, list[Any]], ref_vals: dict[str, Any]) -> str | None:
    """The first tensor after ``node`` that the fp32 model also has (through Cast/Mul/Add of the block)."""
    frontier, seen = list(node.output), set()
    while frontier:
        name = frontier.pop(0)
        if name in ref_vals:
            return name
        if name in seen:
            continue
        seen.add(name)
        for c in consumers.get(name, []):
            frontier += list(c.output)
    return None
