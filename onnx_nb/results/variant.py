"""``Variant``: one optimized or quantized model file, how it was made, and its own parity report."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from ..render import CSS, esc, folded, html_table, human_bytes, peak_text, setting_text, text_table

FUSED_OPS = ("Attention", "MultiHeadAttention", "GroupQueryAttention", "SkipLayerNormalization",
             "EmbedLayerNormalization", "BiasGelu", "FastGelu", "FusedMatMul", "FusedConv", "FusedGemm",
             "SkipSimplifiedLayerNormalization", "SimplifiedLayerNormalization", "RotaryEmbedding",
             "MatMulNBits", "MatMulInteger", "DynamicQuantizeLinear", "QuantizeLinear", "DequantizeLinear",
             "QLinearMatMul", "BiasSplitGelu", "GemmFastGelu", "QAttention", "QEmbedLayerNormalization", "QGemm",
             "QLinearConv", "ConvInteger", "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "QOrderedMatMul", "QMoE",
             "QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearGlobalAveragePool", "QLinearConcat")


class Recipe(TypedDict, total=False):
    """How a variant was made, as ``variant.recipe`` holds it (and its file's metadata, and the report): every key
    ``optimize()``, ``quantize()`` and their helpers write, each read by name where later code reads it. A key
    ending in ``_rule`` says in words why the choice beside it was made; ``*_ms`` keys hold the timings it was made
    by."""

    # optimize(): the graph level and the routes
    level: str
    level_rule: str
    levels_ms: dict[str, float]
    simplify: bool
    unpad: bool
    then: str
    model_type: str | None
    num_heads: int
    hidden_size: int
    attention_route: str
    routes_int8_ms: dict[str, float]
    parent_ms: float  # the fp32 parent, timed in the route choice's run (quantize()'s own, not a variant's)
    routes_seconds: float
    route: str
    route_rule: str
    kv_cache: Any
    skip_layernorm: Any
    target: str
    format: str
    optimization_style: str
    target_platform: str
    runtime: str
    ir_version: int
    started_from: str
    # quantize(): the method and its settings
    method: str
    method_rule: str
    per_channel: bool
    exclude: list[str]
    exclude_rule: str
    float_rule: str
    op_types: list[str]
    op_types_rule: str
    calibration: str
    calibration_images: Any
    activation_type: str
    quantized_from: str
    # INT8: the scheme for the CPU, the attention route
    int8_cpu: str
    int8_scheme: str
    int8_scheme_rule: str
    int8_file: str  # where the INT8 file came from when not quantized again (the route choice had made it)
    outlier_channels: dict[str, Any]  # the MatMul input channels dynamic INT8 computes in float (outlier_channels.py)
    int8_schemes_ms: dict[str, float]
    int8_route: dict[str, Any]
    int8_timing: Any
    int8_timed_at: Any
    weight_type: str
    reduce_range: bool
    fp32_ms: float
    # INT4: the algorithm, the bits of each layer, the compute level
    int4_algorithm: str
    int4_algorithm_rule: str
    int4_errors: dict[str, Any]
    int4_task: dict[str, Any]  # quantize(data=...): each INT4 algorithm's task metric on that data
    symmetric: bool
    awq_alpha: dict[str, float]
    lm_head_bits: int
    lm_head_rule: str
    eight_bit_layers: Any
    mixed_precision: Any
    block_size: int
    accuracy_level: int | str | None
    accuracy_level_rule: str
    gemm_as_matmul: bool


@dataclass
class Variant:
    """What :func:`onnx_nb.optimize` and :func:`onnx_nb.quantize` return: the new file (``path``), how it was made
    (``recipe``), what changed (``nodes_before``/``nodes_after``, ``op_diff``, ``fused``, sizes) and its own parity
    report against the fp32 reference (``parity``). Truthy when that report passed; ``session()`` runs the file the
    way it was validated.

    Example::

        int8 = onnx_nb.quantize(onnx_nb.optimize(result))
        int8.recipe, int8.op_diff, int8.parity
        int8.session().run(None, feed)                     # as it was validated (padding skipped when chosen)
    """

    name: str  # e.g. "optimized(transformer)+unpad", "int8-dynamic(per-channel)"
    path: Path
    parent: Path
    recipe: Recipe
    nodes_before: int
    nodes_after: int
    op_diff: dict[str, tuple[int, int]]  # op -> (before, after), only the ops that changed
    fused: dict[str, int]
    size_before: int
    size_after: int
    seconds: float
    parity: Any = None  # ParityReport against the fp32 reference
    reference: Any = field(default=None, repr=False, compare=False)  # the fp32 reference (ExportResult or path)
    source: Any = field(default=None, repr=False, compare=False)  # ModelSource of the export, when known
    runtime: dict[str, Any] = field(default_factory=dict)  # e.g. {"unpad": True}
    origin: Any = field(default=None, repr=False, compare=False)  # what was optimized or quantized
    remake: Any = field(default=None, repr=False, compare=False)  # quantize(): the call that made it, to run again
    warnings: list[str] = field(default_factory=list)
    memory: dict[str, Any] = field(default_factory=dict)  # the step's peak: added_bytes, process_bytes, weights_bytes
    speed: dict[str, Any] = field(default_factory=dict)  # quantize(): ms against the fp32 parent's, cpu, shape
    layers: list[dict[str, Any]] = field(default_factory=list)  # INT4 mixed precision: per layer, its SQNR and bits

    @property
    def slower_than_parent(self) -> bool:
        """Timed on this CPU against its fp32 parent (``speed``) and no faster: never the one to pick."""
        return bool(self.speed) and self.speed["ms"] >= self.speed["parent_ms"]

    def __bool__(self) -> bool:
        return self.parity is None or bool(self.parity)

    @property
    def passed(self) -> bool:
        return bool(self)

    def session(self, provider: str = "cpu", **options: Any) -> Any:
        """An ONNX Runtime session as this variant is meant to run (skipping padding if its recipe says so)."""
        from ..runtime.padding import open_session
        from ..runtime.providers import providers_named

        return open_session(self, providers_named([provider])[0].name, **options)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "path": str(self.path), "parent": str(self.parent), "recipe": self.recipe,
                "nodes_before": self.nodes_before, "nodes_after": self.nodes_after,
                "op_diff": {k: list(v) for k, v in self.op_diff.items()}, "fused": self.fused,
                "size_before": self.size_before, "size_after": self.size_after, "seconds": round(self.seconds, 3),
                "runtime": self.runtime, "warnings": self.warnings, "memory": dict(self.memory),
                "speed": dict(self.speed), "layers": list(self.layers),
                "parity": self.parity.to_dict() if self.parity is not None else None}

    def to_pandas(self) -> Any:
        """The operator histogram diff: op, before, after, change."""
        import pandas as pd

        rows = [{"op": k, "before": b, "after": a, "change": a - b} for k, (b, a) in self.op_diff.items()]
        return pd.DataFrame(rows, columns=["op", "before", "after", "change"])

    def bits_figure(self, top: int = 40) -> Any:
        """An INT4 file's layers measured for mixed precision (``quantize(method="int4")``): each layer's SQNR alone
        at 4 and at 8 bits, most error lost per byte first; the layers kept at 8 bits marked."""
        import plotly.graph_objects as go

        from ..errors import InvalidArgumentError

        if not self.layers:
            raise InvalidArgumentError(f"{self.name} has no per-layer precision measurement: it is made by "
                                       "quantize(..., method='int4', mixed_precision='auto').")
        rows = self.layers[:top][::-1]
        seen: dict[str, int] = {}
        for r in rows:
            seen[r["module"]] = seen.get(r["module"], 0) + 1
        names = [f"{esc(r['module'])}{'' if seen[r['module']] == 1 else ' · ' + esc(r['node'])} ({r['bits']}-bit)"
                 for r in rows]
        fig = go.Figure([go.Bar(y=names, x=[r["sqnr_4bit_db"] for r in rows], orientation="h", name="at 4 bits",
                                marker_color=["#1a73e8" if r["bits"] == 4 else "#9aa0a6" for r in rows]),
                         go.Bar(y=names, x=[r["sqnr_8bit_db"] for r in rows], orientation="h", name="at 8 bits",
                                marker_color=["#b3261e" if r["bits"] == 8 else "#dadce0" for r in rows])])
        fig.update_layout(title=f"{esc(self.name)}: each layer's SQNR alone (higher is better); kept at 8 bits: "
                                f"{sum(r['bits'] == 8 for r in self.layers)} of {len(self.layers)}",
                          xaxis_title="SQNR of the layer's output, dB", barmode="group", template="plotly_white",
                          height=max(320, 30 * len(rows) + 140), legend={"orientation": "h", "y": -0.12})
        return fig

    def _routes_text(self) -> str:
        """optimize(then='int8') (the pipeline's and the Studio's optimize step): the time spent choosing the
        attention route its INT8 file runs fastest on, which a standalone optimize() does not spend."""
        if "routes_seconds" not in self.recipe:
            return ""
        return (f" ({self.recipe['routes_seconds']:.1f} s of it for the INT8 step after it: a re-export with eager "
                f"attention, then each attention route optimized, quantized and timed; kept: "
                f"{self.recipe.get('attention_route', '?')})")

    def _summary(self) -> list[tuple[str, str]]:
        verdict = "not checked" if self.parity is None else ("passed" if self.parity else "FAILED")
        rows = [("variant", self.name), ("file", str(self.path)),
                ("recipe", ", ".join(f"{k}={setting_text(v)}" for k, v in self.recipe.items())),
                ("nodes", f"{self.nodes_before} → {self.nodes_after}"),
                ("size", f"{human_bytes(self.size_before)} → {human_bytes(self.size_after)}"),
                ("fused / quantized ops", ", ".join(f"{k} {v}" for k, v in self.fused.items()) or "-"),
                ("made in", f"{self.seconds:.1f} s" + self._routes_text()), ("parity", verdict)]
        if self.memory.get("added_bytes") is not None:
            rows.insert(-1, ("peak memory", peak_text(self.memory["added_bytes"], self.memory["weights_bytes"],
                                                      "the parent file's")))
        if self.speed:
            ratio = self.speed["parent_ms"] / self.speed["ms"] if self.speed["ms"] else 0.0
            rows.append(("speed here", f"{self.speed['ms']:.3g} ms vs {self.speed['parent_ms']:.3g} ms fp32 parent "
                         f"({ratio:.2f}x{', SLOWER than its parent' if self.slower_than_parent else ''}) on "
                         f"{self.speed['cpu']}"))
        if self.layers:
            eight = sum(r["bits"] == 8 for r in self.layers)
            rows.append(("bits per layer", f"{len(self.layers) - eight} at 4 bits, {eight} at 8 (each measured "
                                           "alone at both: bits_figure())"))
        if self.runtime.get("unpad"):
            rows.append(("runtime", "skips padding (length buckets)"))
        if self.runtime.get("mobile"):
            rows.append(("ONNX Runtime Mobile", mobile_text(self.runtime["mobile"])))
        return rows

    def __repr__(self) -> str:
        diff = [(k, b, a) for k, (b, a) in list(self.op_diff.items())[:12]]
        parts = [f"Variant {self.name}: {self.path}", text_table(["", ""], self._summary()).split("\n", 2)[2]]
        if diff:
            parts += ["", text_table(["op", "before", "after"], diff)]
        parts += [f"warning: {w}" for w in self.warnings]
        if self.parity is not None:
            parts += ["", repr(self.parity)]
        return "\n".join(parts)

    __str__ = __repr__

    def svg(self) -> str:
        """The chart of the variant's own parity check (for the Studio's tab)."""
        return self.parity.svg() if self.parity is not None else ""

    def html_body(self) -> str:
        ok = bool(self)
        badge = f'<span class="{"ok" if ok else "bad"}">{"✓" if ok else "✗"}</span>'
        diff = html_table(["op", "before", "after"], [(k, b, a) for k, (b, a) in self.op_diff.items()][:15])
        warn = folded("Warnings", self.warnings)
        parity = self.parity.html_body() if self.parity is not None else ""
        return (f'<div class="onnxnb"><h4>{badge} Variant {esc(self.name)}</h4>'
                f'<div style="display:flex;gap:24px;flex-wrap:wrap"><div>{html_table(["", ""], self._summary())}'
                f"</div><div>{diff}</div></div>{warn}{parity}</div>")

    def _repr_html_(self) -> str:
        return CSS + self.html_body()


def mobile_text(mobile: dict[str, Any]) -> str:
    """A mobile variant's ``.ort`` file in one line: name, size, load time (against the .onnx's), operator config."""
    load = mobile.get("load_ms")
    onnx_load = mobile.get("onnx_load_ms")
    loads = "does not load" if load is None else f"loads in {load:.3g} ms" + (
        f" (the .onnx: {onnx_load:.3g} ms)" if onnx_load is not None else "")
    count = sum(len(line.split(";")[-1].split(",")) for line in mobile.get("operators") or [])
    config = Path(mobile.get("config_file", "")).name
    diff = mobile.get("max_abs_vs_onnx")
    same = "" if diff is None else "; outputs identical to the .onnx's" if diff == 0 else \
        f"; outputs within {diff:.3g} of the .onnx's"
    return (f"{Path(mobile.get('ort_file', '')).name}: {human_bytes(mobile.get('ort_bytes', 0))}, {loads}{same}; "
            f"reduced build: {config} ({count} operator{'s' if count != 1 else ''})")
