"""What :func:`onnx_nb.evaluate` returns: every candidate's task metric on the same examples, with its interval, its
difference from the baseline (paired), its latency and size, the Pareto front, and the variant a task budget keeps."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..render import CSS, compact_table, esc, svg_hbars, text_table


@dataclass(frozen=True)
class Metric:
    """A metric as people read it: its name, whether higher is better, and its unit (``"%"``: points out of 100);
    the loss a task budget allows by default, in points of the metric or, ``relative``, in percent of it."""

    name: str
    higher_is_better: bool
    unit: str = "%"
    budget: float = 1.0
    relative: bool = False

    def loss(self, value: float, baseline: float) -> float:
        """How much worse ``value`` is than ``baseline`` in the budget's terms; negative when better."""
        worse = baseline - value if self.higher_is_better else value - baseline
        return 100.0 * worse / abs(baseline) if self.relative and baseline else worse

    def budget_text(self, budget: float) -> str:
        return f"{budget:g}% of {self.name}" if self.relative else \
            f"{budget:g} point{'' if budget == 1 else 's'} of {self.name}" if self.unit == "%" else \
            f"{budget:g} of {self.name}"


def pareto_front(points: list[tuple[str, float, float]], higher_is_better: bool) -> list[str]:
    """Names not dominated in (cost lower, metric better): latency or size against accuracy."""
    front = []
    for name, lat, met in points:
        dominated = any((l2 <= lat and (m2 >= met if higher_is_better else m2 <= met))
                        and (l2 < lat or m2 != met) for n2, l2, m2 in points if n2 != name)
        if not dominated:
            front.append(name)
    return front


@dataclass
class EvalRow:
    """One candidate: the main metric (``value``) and its 95% interval, every metric the task gives (``values``),
    the difference from the baseline with its paired interval, and what it costs."""

    name: str
    value: float | None = None
    low: float | None = None
    high: float | None = None
    values: dict[str, float] = field(default_factory=dict)
    delta: float | None = None  # value - baseline's value
    delta_low: float | None = None
    delta_high: float | None = None
    loss: float | None = None  # in the budget's terms (points, or percent when relative)
    within_budget: bool | None = None
    p50_ms: float | None = None
    size_mb: float | None = None  # the file with its external data, MB (10^6 bytes); None for PyTorch
    parent: str = ""
    slower: bool = False  # timed no faster than its parent: never the one kept
    pareto: bool = False  # on the front of latency (or size) against the metric
    seconds: float = 0.0  # how long its evaluation took
    error: str = ""
    per_example: list[float] = field(default_factory=list, repr=False)
    draws: Any = field(default=None, repr=False)  # the main metric's bootstrap draws, paired across rows


@dataclass
class Evaluation:
    """Every candidate measured on the task, the one a budget keeps (``best``), and the examples it was measured on.

    Example::

        ev = onnx_nb.evaluate([result, int8, int4], data="dev.jsonl")
        ev.best, ev.figure(), ev.to_pandas()
    """

    metric: Metric
    task: str
    rows: list[EvalRow]
    baseline: str
    budget: float
    data: str  # where the examples came from
    examples: list[str]  # one line per example (a text, an image's shape), in the order of ``per_example``
    measured_on: str = ""  # "78 examples", "5,120 tokens in 20 windows of 256 every 256"
    settings: dict[str, Any] = field(default_factory=dict)
    latency: Any = None  # the LatencyTable behind p50_ms
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.judge()

    def judge(self) -> None:
        """Each row's loss against the baseline and verdict in the budget; the Pareto front on latency (on size
        when nothing was timed)."""
        base = self.row(self.baseline)
        for r in self.rows:
            if r.value is None or base is None or base.value is None:
                continue
            r.delta = r.value - base.value
            r.loss = self.metric.loss(r.value, base.value)
            r.within_budget = r.loss <= self.budget + 1e-12
        cost = "p50_ms" if any(r.p50_ms is not None for r in self.rows) else "size_mb"
        # values to 6 significant digits: the fp32 file's 1e-7 from PyTorch's is a tie, not a better file
        pts = [(r.name, float(getattr(r, cost)), float(f"{r.value:.6g}")) for r in self.rows
               if r.value is not None and getattr(r, cost) is not None]
        front = set(pareto_front(pts, self.metric.higher_is_better))
        for r in self.rows:
            r.pareto = r.name in front

    def row(self, name: str) -> EvalRow | None:
        return next((r for r in self.rows if r.name == name), None)

    def tied(self, a: str, b: str) -> bool:
        """Whether the examples cannot tell rows ``a`` and ``b`` apart: the 95% interval of their paired difference
        holds zero."""
        import numpy as np

        ra, rb = self.row(a), self.row(b)
        if ra is None or rb is None or ra.draws is None or rb.draws is None or len(ra.draws) != len(rb.draws) \
                or len(ra.draws) == 0:  # one example: nothing to tell them apart by
            return a == b
        diff = np.asarray(ra.draws) - np.asarray(rb.draws)
        return bool(np.percentile(diff, 2.5) <= 0 <= np.percentile(diff, 97.5))

    @property
    def best(self) -> str | None:
        """The fastest file within the budget (the smallest when nothing was timed), never one slower than its parent;
        None when no file is within it."""
        ok = [r for r in self.rows if r.within_budget and not r.slower and r.size_mb is not None]
        if not ok:
            return None
        if all(r.p50_ms is not None for r in ok):
            return min(ok, key=lambda r: (r.p50_ms or 0.0, r.size_mb or 0.0)).name
        return min(ok, key=lambda r: (r.size_mb or 0.0)).name

    def why(self) -> str:
        """One sentence: which row is kept and why."""
        best = self.best
        budget = self.metric.budget_text(self.budget)
        if best is None:
            return f"No file is within {budget} of {self.baseline}; keep the export."
        row, base = self.row(best), self.row(self.baseline)
        assert row is not None and base is not None
        by = f"{row.p50_ms:.3g} ms" if row.p50_ms is not None else f"{row.size_mb:.3g} MB"
        return (f"{best}: the {'fastest' if row.p50_ms is not None else 'smallest'} file ({by}) within {budget} of "
                f"{self.baseline} ({self.metric.name} {_num(row.value)} against {_num(base.value)})")

    def __bool__(self) -> bool:
        """True when some file keeps the task within the budget."""
        return self.best is not None

    # -- views -------------------------------------------------------------------------------------------------------

    def svg(self) -> str:
        """The metric per candidate as bars (whisker to its interval's far end; latency and size after it): the
        chart for places without plotly's script (the Studio's tab)."""
        items = [{"label": r.name, "value": r.value,
                  "hi": r.high,
                  "text": " · ".join(t for t in (f"{r.p50_ms:.3g} ms" if r.p50_ms is not None else "",
                                                 f"{r.size_mb:.3g} MB" if r.size_mb is not None else "") if t),
                  "bad": r.within_budget is False or r.slower} for r in self.rows if r.value is not None]
        unit = f" ({self.metric.unit})" if self.metric.unit else ""
        return svg_hbars(items, axis=f"{self.metric.name}{unit}, whisker to the 95% interval's end; red: over budget",
                         title=f"Evaluate: {self.metric.name}")

    def _rows(self) -> list[list[str]]:
        unit = self.metric.unit
        best = self.best
        out = []
        for r in self.rows:
            interval = "" if r.low is None else f"[{_num(r.low)}, {_num(r.high)}]"
            points = " pts" if unit == "%" else ""
            diff = "" if r.delta is None or r.name == self.baseline else f"{r.delta:+.3g}{points}" + (
                f" [{r.delta_low:+.3g}, {r.delta_high:+.3g}]" if r.delta_low is not None else "")
            verdict = "" if r.within_budget is None or r.name == self.baseline else \
                ("yes" if r.within_budget else "no") + (" (slower than parent)" if r.slower else "")
            others = ", ".join(f"{k} {_num(v)}" for k, v in list(r.values.items())[1:])
            out.append([("★ " if r.name == best else "") + r.name, _num(r.value), interval, diff, verdict,
                        "-" if r.p50_ms is None else f"{r.p50_ms:.3g}",
                        "-" if r.size_mb is None else f"{r.size_mb:.3g}",
                        "yes" if r.pareto else "", others, r.parent, f"{r.seconds:.1f}", r.error])
        return out

    def _headers(self) -> list[str]:
        unit = f" ({self.metric.unit})" if self.metric.unit else ""
        return ["candidate", f"{self.metric.name}{unit}", "95% interval", f"vs {self.baseline}", "in budget",
                "p50 ms", "size MB", "Pareto", "other metrics", "parent", "eval s", "error"]

    def __repr__(self) -> str:
        head = (f"Evaluation: {self.metric.name} on {self._on()} ({self.data}); budget "
                f"{self.metric.budget_text(self.budget)} of {self.baseline}")
        return "\n".join([head, text_table(self._headers(), self._rows()), f"kept: {self.why()}"]
                         + [f"note: {n}" for n in self.notes])

    __str__ = __repr__

    def html_body(self) -> str:
        head = self._headers()
        table = compact_table(head, self._rows(), head[:8], abbreviate=("candidate",), wrap=("error", "other metrics"),
                              numeric=(head[1], "p50 ms", "size MB", "eval s"))
        notes = "".join(f'<div class="warn">{esc(n)}</div>' for n in self.notes)
        return (f'<div class="onnxnb"><h4>Evaluation: {esc(self.metric.name)} on {esc(self._on())}</h4>'
                f'<div class="muted">{esc(self.data)}; budget {esc(self.metric.budget_text(self.budget))} of '
                f'{esc(self.baseline)}</div>{table}<div><b>Kept</b>: {esc(self.why())}</div>{notes}</div>')

    def _repr_html_(self) -> str:
        return CSS + self.html_body()

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric.name, "higher_is_better": self.metric.higher_is_better, "task": self.task,
                "baseline": self.baseline, "budget": self.budget, "relative_budget": self.metric.relative,
                "data": self.data, "examples": self.examples, "best": self.best, "why": self.why(),
                "settings": {k: v for k, v in self.settings.items() if isinstance(v, (int, float, str, bool))},
                "rows": [{k: v for k, v in r.__dict__.items() if k != "draws"} for r in self.rows],
                "notes": self.notes}

    def to_pandas(self) -> Any:
        import pandas as pd

        return pd.DataFrame([{k: v for k, v in r.__dict__.items() if k not in ("per_example", "draws")}
                             for r in self.rows])

    def per_example(self) -> Any:
        """Each example's score per candidate (a DataFrame: the example, then a column per candidate)."""
        import pandas as pd

        measured = next((r for r in self.rows if r.per_example), None)
        frame = pd.DataFrame({"example": self.examples[:len(measured.per_example)] if measured else []})
        for r in self.rows:
            if len(r.per_example) == len(frame):
                frame[r.name] = r.per_example
        return frame

    def figure(self) -> Any:
        """The task metric against latency and against size, every candidate with its interval, the Pareto front
        joined, the baseline's value and the budget's edge marked."""
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots

        costs = [c for c in ("p50_ms", "size_mb") if any(getattr(r, c) is not None for r in self.rows)]
        titles = {"p50_ms": "p50 latency (ms)", "size_mb": "file size (MB)"}
        fig = make_subplots(rows=1, cols=max(len(costs), 1), shared_yaxes=True,
                            subplot_titles=[titles[c] for c in costs] or [""])
        for col, cost in enumerate(costs, 1):
            pts = [r for r in self.rows if r.value is not None and getattr(r, cost) is not None]
            front = [(r.name, float(getattr(r, cost)), float(f"{r.value or 0.0:.6g}")) for r in pts]
            on = set(pareto_front(front, self.metric.higher_is_better))
            fig.add_trace(go.Scatter(
                x=[getattr(r, cost) for r in pts], y=[r.value for r in pts], mode="markers+text",
                text=[r.name for r in pts], textposition="top center", name=titles[cost], showlegend=False,
                error_y={"type": "data", "symmetric": False,
                         "array": [(r.high - r.value) if r.high is not None and r.value is not None else 0
                                   for r in pts],
                         "arrayminus": [(r.value - r.low) if r.low is not None and r.value is not None else 0
                                        for r in pts]},
                marker={"size": 11, "color": ["#137333" if r.within_budget or r.name == self.baseline else "#b3261e"
                                              for r in pts], "symbol": ["star" if r.name in on else "circle"
                                                                        for r in pts]}), row=1, col=col)
            line = sorted((p for p in front if p[0] in on), key=lambda p: p[1])
            fig.add_trace(go.Scatter(x=[p[1] for p in line], y=[p[2] for p in line], mode="lines",
                                     line={"dash": "dot", "color": "#555"}, name="Pareto front",
                                     showlegend=col == 1), row=1, col=col)
        base = self.row(self.baseline)
        if base is not None and base.value is not None:
            edge = self._edge(base.value)
            fig.add_hline(y=base.value, line_dash="dash", line_color="#888",
                          annotation_text=f"{self.baseline} {_num(base.value)}")
            fig.add_hline(y=edge, line_dash="dot", line_color="#b3261e",
                          annotation_text=f"budget: {self.metric.budget_text(self.budget)}")
        fig.update_layout(title=f"{self.metric.name} against cost ({self._on()})",
                          yaxis_title=self.metric.name + (f" ({self.metric.unit})" if self.metric.unit else ""),
                          template="plotly_white", height=440)
        return fig

    def _on(self) -> str:
        return self.measured_on or f"{len(self.examples)} examples"

    def _edge(self, base: float) -> float:
        """The worst value the budget allows."""
        allowed = abs(base) * self.budget / 100 if self.metric.relative else self.budget
        return base - allowed if self.metric.higher_is_better else base + allowed


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"
