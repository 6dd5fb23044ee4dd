"""``LatencyTable``: latency rows per variant × backend × shape, with the PyTorch baseline."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..render import CSS, compact_table, esc, sig, svg_hbars, text_table

NOISY_SPREAD = 0.25  # (p90 - p50) / p50 above this flags a row as noisy
COLUMNS = ["variant", "backend", "shape", "status", "p50_ms", "p90_ms", "p99_ms", "mean_ms", "std_ms", "min_ms",
           "throughput", "speedup", "first_run_ms", "peak_mb", "size_mb", "cosine", "top1", "runs", "noisy", "options",
           "parent", "note", "node"]
# fits 1,000 px: speed, memory, the file's size and its accuracy (its own parity check) side by side
KEY = ["variant", "backend", "shape", "status", "p50_ms", "speedup", "peak_mb", "size_mb", "cosine"]
NUMERIC = [c for c in COLUMNS if c.endswith(("_ms", "_mb")) or c in ("throughput", "speedup", "runs", "cosine",
                                                                         "top1")]


@dataclass
class LatencyRow:
    variant: str
    backend: str
    shape: str
    status: str = "ok"  # ok, unavailable, error
    batch: int = 1
    p50_ms: float | None = None
    p90_ms: float | None = None
    p99_ms: float | None = None
    mean_ms: float | None = None
    std_ms: float | None = None
    min_ms: float | None = None
    throughput: float | None = None  # items (batch rows) per second, at p50
    speedup: float | None = None  # PyTorch eager p50 / this p50, same shape
    first_run_ms: float | None = None  # session creation + first inference; not in the statistics
    runs: int = 0
    noisy: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    remeasure_ms: float | None = None  # a brief second timing once every row was done (see ``noisy``)
    peak_mb: float | None = None  # resident memory the row needed at its peak: weights, session, activations, cache
    node: str = ""  # the cluster node that measured it (cluster=); '' for this machine
    hardware: dict[str, Any] = field(default_factory=dict)  # that node's CPU, cores, GPUs, library versions
    parent: str = ""  # the variant this row's file was made from, when it is in the table too
    slower: bool = False  # no faster than its parent's row (same backend, shape, node): never the best
    failed_parity: bool = False  # its file failed its parity check: timed, never the best
    size_mb: float | None = None  # the file with its external data (MB); None for PyTorch
    cosine: float | None = None  # the lowest cosine of the variant's own parity check against its reference
    top1: float | None = None  # the lowest argmax agreement of that check (logits, class scores)

    @classmethod
    def from_times(cls, variant: str, backend: str, shape: str, batch: int, times: list[float], first: float,
                   options: dict[str, Any]) -> LatencyRow:
        ms = np.asarray(times, dtype=np.float64) * 1e3
        p50, p90, p99 = (float(x) for x in np.percentile(ms, [50, 90, 99]))
        return cls(variant, backend, shape, "ok", batch, p50, p90, p99, float(ms.mean()),
                   float(ms.std(ddof=1)) if ms.size > 1 else 0.0, float(ms.min()),
                   batch / (p50 / 1e3) if p50 > 0 else None, None, first * 1e3, int(ms.size),
                   bool(p50 > 0 and (p90 - p50) / p50 > NOISY_SPREAD), dict(options))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def html_cells(self) -> list[str]:
        """The row for HTML: numbers to three significant digits, a noisy row says so beside its status."""
        cells = self.cells()
        for col in ("p50_ms", "p90_ms", "p99_ms", "mean_ms", "std_ms", "min_ms", "throughput", "first_run_ms",
                    "peak_mb", "size_mb"):
            cells[COLUMNS.index(col)] = sig(getattr(self, col))
        # short words in the key column (the note under "All columns" says against what and why)
        status = "slower" if self.slower else "✗ parity" if self.failed_parity else self.status
        cells[COLUMNS.index("status")] = f"{status} (noisy)" if self.noisy else status
        return cells

    def cells(self) -> list[str]:
        def f(v: float | None, spec: str = ".2f") -> str:
            return "-" if v is None else format(v, spec)

        return [self.variant, self.backend, self.shape, self.status, f(self.p50_ms), f(self.p90_ms),
                f(self.p99_ms), f(self.mean_ms), f(self.std_ms), f(self.min_ms), f(self.throughput, ".1f"),
                "-" if self.speedup is None else f"{self.speedup:.2f}x", f(self.first_run_ms, ".0f"),
                f(self.peak_mb, ".0f"), f(self.size_mb, ".3g"), f(self.cosine, ".5f"), f(self.top1, ".3f"),
                str(self.runs), "yes" if self.noisy else "",
                ", ".join(f"{k}={v}" for k, v in self.options.items()),
                self.parent, self.note, self.hardware.get("summary", self.node)]


def skips_padding(row: LatencyRow) -> bool:
    return row.options.get("runtime") == "skips padding"


def mark_slower(rows: list[LatencyRow], why: dict[str, str] | None = None) -> None:
    """A variant's row no faster than its parent's (same backend, shape and node) is marked and says so, with the
    reason when known (``why``: variant -> reason)."""
    by_key = {(r.variant, r.backend, r.shape, r.node): r for r in rows if r.status == "ok" and r.p50_ms}
    for r in rows:
        parent = by_key.get((r.parent, r.backend, r.shape, r.node)) if r.parent else None
        if parent is None or not r.p50_ms or r.status != "ok" or r.p50_ms < (parent.p50_ms or 0.0):
            continue
        r.slower = True
        reason = (why or {}).get(r.variant, "")
        r.note = (f"slower than its parent {parent.variant} ({sig(r.p50_ms)} vs {sig(parent.p50_ms)} ms)"
                  + (f": {reason}" if reason else "") + (f". {r.note}" if r.note else ""))


def summarize(rows: list[LatencyRow], profiles: dict[str, Any], notes: list[str],
              why: dict[str, str] | None = None) -> LatencyTable:
    """Fill in speed-ups against the PyTorch row of the same shape (and the same node, on a cluster), and flag
    noise."""
    base: dict[tuple[str, str, bool], float] = {}
    for r in rows:  # the first PyTorch row of each shape is the baseline (others, e.g. "no cache", are compared);
        # rows that skip padding are compared with the PyTorch row given the same skip, when there is one
        key = (r.shape, r.node, skips_padding(r))
        if r.backend.startswith("torch") and r.p50_ms and key not in base:
            base[key] = r.p50_ms
    for r in rows:
        baseline = base.get((r.shape, r.node, skips_padding(r))) or base.get((r.shape, r.node, False))
        if r.p50_ms and baseline:
            r.speedup = baseline / r.p50_ms
    mark_slower(rows, why)
    if any(skips_padding(r) and r.backend.startswith("torch") for r in rows):
        notes.append("Rows that skip padding (runtime=skips padding) are compared with 'PyTorch eager, padding "
                     "skipped': the same length buckets, run trimmed in PyTorch. The other rows run the padded "
                     "batch as a plain session would.")
    if any(r.noisy for r in rows):
        notes.append(f"Some rows are noisy (p90 more than {NOISY_SPREAD:.0%} above p50, or a brief re-measure after "
                     "all rows more than 1.3x away from p50): the machine was busy; re-run on a quiet machine before "
                     "trusting their ratios.")
    return LatencyTable(rows, profiles, notes)


@dataclass
class LatencyTable:
    """What :func:`onnx_nb.benchmark` returns: one row per model, backend and shape (p50/p90/p99, throughput, speed-up
    against the PyTorch eager row of the same shape, first run, noisy flag, session options), per-operator profiles
    when asked, and notes. Truthy when a row ran and none failed with an error.

    Example::

        table = onnx_nb.benchmark([result, int8], reference=result)
        table.best(), table.to_pandas(), table.figure()
    """

    rows: list[LatencyRow]
    profiles: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return any(r.status == "ok" for r in self.rows) and not any(r.status == "error" for r in self.rows)

    def best(self, exclude_torch: bool = True) -> LatencyRow | None:
        ok = [r for r in self.rows if r.status == "ok" and r.p50_ms and not r.slower and not r.failed_parity
              and not (exclude_torch and r.backend.startswith("torch"))]
        return min(ok, key=lambda r: r.p50_ms or 0.0) if ok else None

    def to_dict(self) -> dict[str, Any]:
        return {"rows": [r.to_dict() for r in self.rows], "notes": list(self.notes),
                "profiles": {k: v.to_dict() for k, v in self.profiles.items()}}

    def to_pandas(self) -> Any:
        import pandas as pd

        return pd.DataFrame([r.to_dict() for r in self.rows], columns=[*COLUMNS, "batch", "hardware"])

    def figure(self) -> Any:
        """p50 bars with whiskers to p90 and p99 per variant and backend; with several shapes, latency
        against batch size."""
        import plotly.graph_objects as go

        ok = [r for r in self.rows if r.status == "ok" and r.p50_ms is not None]
        shapes = list(dict.fromkeys(r.shape for r in ok))
        fig = go.Figure()
        if len(shapes) > 1 and len({r.batch for r in ok}) > 1:
            for key in dict.fromkeys((r.variant, r.backend) for r in ok):
                pts = sorted((r for r in ok if (r.variant, r.backend) == key), key=lambda r: r.batch)
                fig.add_trace(go.Scatter(x=[r.batch for r in pts], y=[r.p50_ms for r in pts], mode="lines+markers",
                                         name=f"{key[0]} · {key[1]}",
                                         error_y={"type": "data", "symmetric": False,
                                                  "array": [(r.p90_ms or 0) - (r.p50_ms or 0) for r in pts],
                                                  "arrayminus": [0] * len(pts)}))
            fig.update_layout(xaxis_title="batch size", yaxis_title="p50 latency (ms), whisker to p90")
        else:  # horizontal bars: long variant names read on the left instead of squashing the bars
            labels = [f"{r.variant} · {r.backend}" + (f" · {r.shape}" if len(shapes) > 1 else "") +
                      (" (slower than parent)" if r.slower else "") for r in ok]
            fig.add_trace(go.Bar(y=labels, x=[r.p50_ms for r in ok], name="p50", orientation="h",
                                 marker_color=["#d93025" if r.slower or (r.speedup and r.speedup < 1) else "#1a73e8"
                                               for r in ok],
                                 error_x={"type": "data", "symmetric": False,
                                          "array": [(r.p90_ms or 0) - (r.p50_ms or 0) for r in ok],
                                          "arrayminus": [0] * len(ok), "color": "#333"},
                                 hovertemplate="%{y}<br>p50 %{x:.3g} ms<extra></extra>"))
            fig.add_trace(go.Scatter(y=labels, x=[r.p99_ms for r in ok], mode="markers", name="p99",
                                     marker={"symbol": "line-ns-open", "size": 14, "color": "#b3261e"}))
            # the speed-up in a column of its own at the right, clear of bars and whiskers
            fig.add_trace(go.Scatter(y=labels, x=[1.0] * len(ok), xaxis="x2", mode="text", showlegend=False,
                                     text=[f"{r.speedup:.2f}x" if r.speedup else "" for r in ok],
                                     textposition="middle left", hoverinfo="skip"))
            fig.update_layout(xaxis={"title": "latency (ms): bar p50, whisker p90, mark p99", "domain": [0, 0.86]},
                              xaxis2={"domain": [0.88, 1.0], "range": [0, 1.05], "visible": False},
                              # every row labelled (plotly drops category labels that do not fit)
                              yaxis={"autorange": "reversed", "automargin": True, "dtick": 1},
                              annotations=[{"text": "vs eager", "x": 0.99, "xref": "paper", "y": 1.0,
                                            "yref": "paper", "showarrow": False, "xanchor": "right",
                                            "yanchor": "bottom", "font": {"size": 11}}],
                              height=max(260, 170 + 30 * len(ok)))  # ~30 px a row besides title, legend, axis
        fig.update_layout(legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0})
        fig.update_layout(title="Latency per variant and backend", template="plotly_white")
        if not fig.layout.height:
            fig.update_layout(height=420)
        return fig

    def svg(self) -> str:
        """p50 per row as horizontal bars (whisker to p90, speed-up after it): the chart for places without
        plotly's script (the Studio's tab)."""
        ok = [r for r in self.rows if r.status == "ok" and r.p50_ms]
        several = len({r.shape for r in ok}) > 1
        items = [{"label": f"{r.variant} · {r.backend}" + (f" · {r.shape}" if several else ""), "value": r.p50_ms,
                  "hi": r.p90_ms, "text": f"{r.speedup:.2f}x" if r.speedup else "",
                  "bad": bool(r.slower or (r.speedup and r.speedup < 1.0))} for r in ok]
        return svg_hbars(items, axis="p50 latency, ms (whisker to p90; speed-up vs PyTorch after it)",
                         title="Latency")

    def __repr__(self) -> str:
        cols = ["variant", "backend", "shape", "status", "p50_ms", "p90_ms", "p99_ms", "std_ms", "throughput",
                "speedup", "first_run_ms", "peak_mb", "size_mb", "cosine", "runs", "noisy"]
        idx = [COLUMNS.index(c) for c in cols]
        lines = ["LatencyTable", text_table(cols, [[r.cells()[i] for i in idx] for r in self.rows])]
        lines += [f"{r.variant} on {r.backend}: {r.note}" for r in self.rows if r.note]
        lines += [f"note: {n}" for n in self.notes]
        for key, prof in self.profiles.items():
            lines += ["", f"profile {key}", repr(prof)]
        return "\n".join(lines)

    __str__ = __repr__

    def html_body(self) -> str:
        """Key columns first (status, p50, speed-up) in a table that fits a notebook column; rows of providers
        this machine lacks folded into one line each; every column (options, spread, runs) behind a toggle."""
        shown = [r for r in self.rows if r.status != "unavailable"]
        table = compact_table(COLUMNS, [r.html_cells() for r in shown], KEY, numeric=NUMERIC,
                              abbreviate=("variant", "shape"), wrap=("options", "note"), width=20,
                              details="All columns: spread, first run, options, notes")
        folded: dict[str, list[LatencyRow]] = {}
        for r in self.rows:
            if r.status == "unavailable":
                folded.setdefault(r.backend, []).append(r)
        lines = "".join(f'<div class="fold">{esc(b)}: not available here ({len(rs)} row{"s" if len(rs) > 1 else ""})'
                        f'{": " + esc(rs[0].note) if rs[0].note else ""}</div>' for b, rs in folded.items())
        notes = "".join(f'<div class="warn">{esc(n)}</div>' for n in self.notes)
        profiles = "".join(f"<h4>Profile: {esc(k)}</h4>{p.html_body()}" for k, p in self.profiles.items())
        return f'<div class="onnxnb"><h4>Latency</h4>{table}{lines}{notes}{profiles}</div>'

    def _repr_html_(self) -> str:
        return CSS + self.html_body()
