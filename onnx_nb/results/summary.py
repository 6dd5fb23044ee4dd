"""``ModelSummary`` (what a file is and what it costs, from ``onnx_nb.summary``) and ``GraphComparison`` (two
files matched node by node, from ``onnx_nb.compare``): the same numbers the JupyterLab viewer shows."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..render import CSS, esc, folded, html_table, human_bytes, human_count, text_table

TOP = "(top level)"
MARKS = ("same", "changed", "fused", "quantized", "added", "removed")


def grouping_depth(modules: list[str], budget: int = 24) -> int:
    """The deepest module-path depth at which ``modules`` fall into at most ``budget`` groups (at least 1)."""
    best = 1
    parts = [m.split(".") for m in modules if m and m != TOP]
    for depth in range(1, 1 + max((len(m) for m in parts), default=1)):
        if len({".".join(m[:depth]) for m in parts}) > budget:
            break
        best = depth
    return best


def grouped(modules: dict[str, dict[str, int]], depth: int) -> dict[str, dict[str, int]]:
    """Per-module numbers summed to the first ``depth`` parts of each module path."""
    out: dict[str, dict[str, int]] = {}
    for module, numbers in modules.items():
        key = module if module == TOP else ".".join(module.split(".")[:depth])
        into = out.setdefault(key, {})
        for k, v in numbers.items():
            into[k] = into.get(k, 0) + v
    return out


def overlay_from(source: Any) -> tuple[dict[str, float], str, str]:
    """(per-node values, label, node to highlight) from a ParityReport, ProfileTable or QuantDebugReport, the
    JSON a ParityReport or QuantDebugReport saved (``to_json``), or a dict node name -> value."""
    kind = type(source).__name__
    if kind == "ParityReport":
        d = source.divergence
        return (dict(d.node_errors) if d else {}), "parity max abs error", (d.node if d else "")
    if kind == "ProfileTable":
        runs = max(source.runs, 1)
        return {n["node"]: n["total_ms"] / runs for n in source.by_node}, "ms per run", ""
    if kind == "QuantDebugReport":
        source = source.to_dict()
    if isinstance(source, dict) and isinstance(source.get("layers"), list):  # a QuantDebugReport's JSON
        layers = [x for x in source["layers"] if isinstance(x, dict) and "node" in x and "drop_db" in x]
        worst = str(layers[0]["node"]) if layers else ""
        return {str(x["node"]): float(x["drop_db"]) + 1e-3 for x in layers}, "dB lost (quantization)", worst
    if isinstance(source, dict) and "rows" in source and "divergence" in source:  # a ParityReport's JSON
        d = source.get("divergence") or {}
        errors = d.get("node_errors") or {}
        return {str(k): float(v) for k, v in errors.items()}, "parity max abs error", str(d.get("node") or "")
    if isinstance(source, dict):
        return {str(k): float(v) for k, v in source.items()}, "value", ""
    return {}, "", ""


def _shape(dims: list[Any]) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


@dataclass
class ModelSummary:
    """What :func:`onnx_nb.summary` returns: a file's inputs and outputs, opsets, producer, size, nodes, parameters,
    the operator histogram, and parameters, MACs and FLOPs per module at the shapes given.

    Example::

        s = onnx_nb.summary("model.onnx", shapes={"batch": 1, "sequence": 128})
        s.macs, s.by_module()
    """

    path: Path
    ir_version: int
    opsets: dict[str, int]
    producer: str
    inputs: list[dict[str, Any]]
    outputs: list[dict[str, Any]]
    file_bytes: int
    external_bytes: int
    nodes: int
    params: int
    ops: dict[str, int]  # op type -> count, most frequent first
    modules: dict[str, dict[str, int]]  # module scope -> params (and macs, flops once costed)
    shapes: dict[str, list[int]] | None = None  # the input shapes the cost was counted at
    macs: int | None = None
    flops: int | None = None
    notes: list[str] = field(default_factory=list)

    def by_module(self, depth: int | None = None) -> list[dict[str, Any]]:
        """Parameters (and MACs and FLOPs when costed) per module, summed to ``depth`` levels (by default the
        deepest that gives at most 24 rows), largest first."""
        depth = grouping_depth(list(self.modules)) if depth is None else depth
        rows = [{"module": m, **v} for m, v in grouped(self.modules, depth).items()]
        return sorted(rows, key=lambda r: (-r.get("macs", 0), -r["params"]))

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "ir_version": self.ir_version, "opsets": self.opsets,
                "producer": self.producer, "inputs": self.inputs, "outputs": self.outputs,
                "file_bytes": self.file_bytes, "external_bytes": self.external_bytes, "nodes": self.nodes,
                "params": self.params, "ops": self.ops, "modules": self.modules, "shapes": self.shapes,
                "macs": self.macs, "flops": self.flops, "notes": list(self.notes)}

    def to_pandas(self, depth: int | None = None) -> Any:
        import pandas as pd

        return pd.DataFrame(self.by_module(depth))

    def _head(self) -> list[tuple[str, str]]:
        size = human_bytes(self.file_bytes) + (f" + {human_bytes(self.external_bytes)} external data"
                                               if self.external_bytes else "")
        rows = [("file", self.path.name), ("size", size), ("parameters", human_count(self.params)),
                ("nodes", str(self.nodes)), ("IR / opsets", f"{self.ir_version} / " + ", ".join(
                    f"{k} {v}" for k, v in self.opsets.items())), ("producer", self.producer or "-")]
        if self.macs is not None:
            at = ", ".join(f"{k} {_shape(v)}" for k, v in (self.shapes or {}).items())
            rows.append(("cost", f"{human_count(self.macs)} MACs, {human_count(self.flops or 0)} FLOPs at {at}"))
        return rows

    def _module_rows(self) -> list[list[str]]:
        costed = self.macs is not None
        return [[r["module"], human_count(r["params"])] + ([human_count(r.get("macs", 0)), human_count(
            r.get("flops", 0))] if costed else []) for r in self.by_module()[:20]]

    def _module_headers(self) -> list[str]:
        return ["module", "params"] + (["MACs", "FLOPs"] if self.macs is not None else [])

    def _repr_html_(self) -> str:
        io = [["in", i["name"], i["dtype"], _shape(i["shape"])] for i in self.inputs]
        io += [["out", o["name"], o["dtype"], _shape(o["shape"])] for o in self.outputs]
        ops = ", ".join(f"{esc(k)} {v}" for k, v in list(self.ops.items())[:12])
        return (f'{CSS}<div class="onnxnb"><h4>{esc(self.path.name)}</h4>'
                + html_table(["", ""], self._head()) + html_table(["", "name", "dtype", "shape"], io)
                + html_table(self._module_headers(), self._module_rows())
                + f"<div>ops: {ops}{' …' if len(self.ops) > 12 else ''}</div>"
                + folded("Notes", self.notes) + "</div>")

    def __repr__(self) -> str:
        lines = [f"{k}: {v}" for k, v in self._head()]
        lines += [f"{'in ' if x in self.inputs else 'out'} {x['name']} {x['dtype']} {_shape(x['shape'])}"
                  for x in [*self.inputs, *self.outputs]]
        lines.append(text_table(self._module_headers(), self._module_rows()))
        lines.append("ops: " + ", ".join(f"{k} {v}" for k, v in list(self.ops.items())[:12]))
        return "\n".join(lines + self.notes)


@dataclass
class GraphComparison:
    """Two files node by node: each node of ``a`` and ``b`` marked same, changed (other op or inputs), fused
    (replaced by a fused operator of ``b``), quantized, added or removed; ``matched`` pairs ``a``'s node names to
    ``b``'s; ``errors`` holds per-node error from a parity or quant_debug report when one was given or found.

    Example::

        c = onnx_nb.compare("model.onnx", "model.int8.onnx")
        c.counts(), c.fusions()
    """

    a: Path
    b: Path
    marks_a: dict[str, str]
    marks_b: dict[str, str]
    matched: dict[str, str]
    into: dict[str, str]  # a's fused or quantized node -> b's node that replaced it
    errors: dict[str, float] = field(default_factory=dict)
    error_label: str = ""
    notes: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, tuple[int, int]]:
        """mark -> (nodes of a, nodes of b) with it."""
        ca, cb = Counter(self.marks_a.values()), Counter(self.marks_b.values())
        return {m: (ca.get(m, 0), cb.get(m, 0)) for m in MARKS if ca.get(m) or cb.get(m)}

    def fusions(self) -> list[tuple[str, int]]:
        """b's fused or quantized nodes and how many of a's nodes each replaced, most first."""
        return Counter(self.into.values()).most_common()

    def to_dict(self) -> dict[str, Any]:
        return {"a": str(self.a), "b": str(self.b), "marks_a": self.marks_a, "marks_b": self.marks_b,
                "matched": self.matched, "into": self.into, "errors": self.errors, "error_label": self.error_label,
                "notes": list(self.notes)}

    def _rows(self) -> list[list[Any]]:
        return [[m, a, b] for m, (a, b) in self.counts().items()]

    def _repr_html_(self) -> str:
        top = [[n, k] for n, k in self.fusions()[:10]]
        return (f'{CSS}<div class="onnxnb"><h4>{esc(self.a.name)} → {esc(self.b.name)}</h4>'
                + html_table(["nodes", esc(self.a.name), esc(self.b.name)], self._rows())
                + (html_table([f"fused or quantized node of {self.b.name}", f"nodes of {self.a.name} it replaced"],
                              top) if top else "")
                + folded("Notes", self.notes) + "</div>")

    def __repr__(self) -> str:
        head = f"{self.a.name} -> {self.b.name}"
        return head + "\n" + text_table(["nodes", "a", "b"], self._rows())
