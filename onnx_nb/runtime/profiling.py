"""ONNX Runtime's per-operator profile (a Chrome-trace JSON file) as a table of top operators and nodes."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InvalidModelError
from ..render import esc, html_table, text_table


@dataclass
class ProfileTable:
    """Kernel time per operator type and per node, summed over the profiled runs."""

    by_op: list[dict[str, Any]]  # op_type, total_ms, share, calls, nodes
    by_node: list[dict[str, Any]]  # node, op_type, total_ms, share, calls
    total_ms: float
    runs: int
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"by_op": self.by_op, "by_node": self.by_node[:50], "total_ms": self.total_ms, "runs": self.runs}

    def to_pandas(self, by: str = "op") -> Any:
        import pandas as pd

        return pd.DataFrame(self.by_op if by == "op" else self.by_node)

    def figure(self, top: int = 15) -> Any:
        import plotly.graph_objects as go

        ops = self.by_op[:top][::-1]
        fig = go.Figure(go.Bar(x=[o["total_ms"] / max(self.runs, 1) for o in ops], y=[o["op_type"] for o in ops],
                               orientation="h", text=[f"{o['share']:.1%}" for o in ops], textposition="outside"))
        fig.update_layout(title="Time per operator type (per run)", xaxis_title="ms per run",
                          template="plotly_white", height=max(300, 24 * len(ops) + 120))
        return fig

    def __repr__(self) -> str:
        rows = [[o["op_type"], f"{o['total_ms'] / max(self.runs, 1):.3f}", f"{o['share']:.1%}", o["calls"]]
                for o in self.by_op[:10]]
        return text_table(["op_type", "ms/run", "share", "calls"], rows)

    def html_body(self, top: int = 12) -> str:
        ops = [[o["op_type"], f"{o['total_ms'] / max(self.runs, 1):.3f}", f"{o['share']:.1%}", o["calls"]]
               for o in self.by_op[:top]]
        nodes = [[n["node"], n["op_type"], f"{n['total_ms'] / max(self.runs, 1):.3f}", f"{n['share']:.1%}"]
                 for n in self.by_node[:top]]
        left = html_table(["op_type", "ms/run", "share", "calls"], ops)
        right = html_table(["node", "op_type", "ms/run", "share"], nodes)
        return (f'<div style="display:flex;gap:24px;flex-wrap:wrap"><div>{left}</div><div>{right}</div></div>'
                f"<div style='color:#666'>{esc(self.source)}</div>")


def parse_profile(path: str | Path) -> ProfileTable:
    """Aggregate the ``Node`` events (``*_kernel_time``) of an ORT profile file.

    Example::

        onnx_nb.parse_profile("onnxruntime_profile.json").to_pandas()
    """
    p = Path(path)
    try:
        events = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidModelError(f"{p} is not a readable ONNX Runtime profile: {exc}") from exc
    if isinstance(events, dict):
        events = events.get("traceEvents", [])
    per_node: dict[str, dict[str, Any]] = {}
    runs = sum(1 for e in events if e.get("cat") == "Session" and e.get("name") == "model_run")
    for e in events:
        if e.get("cat") != "Node" or not str(e.get("name", "")).endswith("_kernel_time"):
            continue
        node = str(e["name"])[: -len("_kernel_time")]
        args = e.get("args", {})
        entry = per_node.setdefault(node, {"node": node, "op_type": args.get("op_name", "?"), "total_ms": 0.0,
                                           "calls": 0, "provider": args.get("provider", "")})
        entry["total_ms"] += float(e.get("dur", 0)) / 1e3
        entry["calls"] += 1
    total = sum(n["total_ms"] for n in per_node.values()) or 1.0
    ops: dict[str, dict[str, Any]] = defaultdict(lambda: {"total_ms": 0.0, "calls": 0, "nodes": 0})
    for n in per_node.values():
        n["share"] = n["total_ms"] / total
        op = ops[n["op_type"]]
        op["total_ms"] += n["total_ms"]
        op["calls"] += n["calls"]
        op["nodes"] += 1
    by_op = sorted(({"op_type": k, **v, "share": v["total_ms"] / total} for k, v in ops.items()),
                   key=lambda o: -o["total_ms"])
    by_node = sorted(per_node.values(), key=lambda n: -n["total_ms"])
    return ProfileTable(by_op, by_node, total, max(runs, 1), source=p.name)
