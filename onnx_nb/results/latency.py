"""``LatencyTable``: latency rows per variant × backend × shape, with the PyTorch baseline."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..render import CSS, compact_table, esc, sig, svg_hbars, text_table

NOISY_SPREAD = 0.25  # (p90 - p50) / p50 above this flags a row as noisy
COLUMNS = ["variant", "backend", "shape", "status", "p50_ms", "p90_ms", "p99_ms", "mean_ms", "std_ms", "min_ms",
           "throughput", "speedup", "interval", "baseline", "first_run_ms", "peak_mb", "size_mb", "cosine", "top1",
           "work_gops", "moved_gb", "of_peak", "runs", "noisy", "options", "parent", "note", "node"]
# fits 1,000 px: speed, memory, the file's size and its accuracy (its own parity check) side by side
KEY = ["variant", "backend", "shape", "status", "p50_ms", "speedup", "peak_mb", "size_mb", "cosine"]
NUMERIC = [c for c in COLUMNS if c.endswith(("_ms", "_mb")) or c in ("throughput", "speedup", "runs", "cosine",
                                                                         "top1", "work_gops", "moved_gb",
                                                                         "of_peak")]


def key_columns(rows: list[LatencyRow]) -> list[str]:
    """The columns always shown: :data:`KEY`, and the baseline beside the speed-up when rows of the table are
    against different PyTorch rows (padding skipped, no cache)."""
    several = len({r.baseline for r in rows if r.baseline}) > 1
    return [c for k in KEY for c in ([k, "baseline"] if k == "speedup" and several else [k])]


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
    remeasure_ms: float | None = None  # the median of ``rounds_ms``: far from p50, the row is ``noisy``
    peak_mb: float | None = None  # resident memory the row needed at its peak: weights, session, activations, cache
    node: str = ""  # the cluster node that measured it (cluster=); '' for this machine
    hardware: dict[str, Any] = field(default_factory=dict)  # that node's CPU, cores, GPUs, library versions
    parent: str = ""  # the variant this row's file was made from, when it is in the table too
    slower: bool = False  # no faster than its parent's row (same backend, shape, node): never the best
    failed_parity: bool = False  # its file failed its parity check: timed, never the best
    size_mb: float | None = None  # the file with its external data (MB); None for PyTorch
    baseline: str = ""  # the PyTorch row its speed-up is against
    speedup_low: float | None = None  # the speed-up's interval over the interleaved rounds (see ``rounds_ms``)
    speedup_high: float | None = None
    rounds_ms: list[float] = field(default_factory=list)  # its median in each interleaved round after all rows
    cosine: float | None = None  # the lowest cosine of the variant's own parity check against its reference
    top1: float | None = None  # the lowest argmax agreement of that check (logits, class scores)
    work_gops: float | None = None  # billions of operations one run does (2 x MACs of its products at this shape)
    moved_gb: float | None = None  # a decode step's bytes read (weights and cache), GB
    of_peak: float | None = None  # work_gops (moved_gb) over p50 against this machine's measured peak (bandwidth)

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

    @property
    def separable(self) -> bool:
        """Whether the run tells this row from its baseline: no interval (nothing to go by but p50), or one that
        stays on one side of 1.0."""
        return self.speedup_low is None or self.speedup_high is None or not (
            self.speedup_low <= 1.0 <= self.speedup_high)

    @property
    def supported(self) -> bool:
        """Whether the printed speed-up (the p50s' ratio) is one the rounds support: separable from 1.0 and inside
        its interval."""
        return self.separable and (self.speedup_low is None or self.speedup_high is None or self.speedup is None
                                   or self.speedup_low <= self.speedup <= self.speedup_high)

    @property
    def interval_text(self) -> str:
        """``2.31-2.66x``: the speed-up's interval over the rounds ('' when there is none)."""
        if self.speedup_low is None or self.speedup_high is None:
            return ""
        return f"{self.speedup_low:.2f}-{self.speedup_high:.2f}x"

    def speedup_text(self, short: bool = False) -> str:
        """``2.49x [2.31, 2.66]``: the speed-up and its interval over the rounds (``short``: ``2.49x``); only the
        interval when it includes 1.0 (the run cannot say which is faster, so it prints no ratio)."""
        if self.speedup is None:
            return "-" if not short else ""
        if self.speedup_low is None or self.speedup_high is None or not self.baseline:
            return f"{self.speedup:.2f}x"
        if not self.supported:
            return self.interval_text + (
                "?" if short else ", not separable" if not self.separable else ", rounds only")
        return f"{self.speedup:.2f}x" + ("" if short else f" [{self.speedup_low:.2f}, {self.speedup_high:.2f}]")

    def html_cells(self) -> list[str]:
        """The row for HTML: numbers to three significant digits, a noisy row says so beside its status."""
        cells = self.cells()
        for col in ("p50_ms", "p90_ms", "p99_ms", "mean_ms", "std_ms", "min_ms", "throughput", "first_run_ms",
                    "peak_mb", "size_mb"):
            cells[COLUMNS.index(col)] = sig(getattr(self, col))
        # short words in the key column (the note under "All columns" says against what and why)
        status = "slower" if self.slower else "✗ parity" if self.failed_parity else self.status
        cells[COLUMNS.index("status")] = f"{status} (noisy)" if self.noisy else status
        # every baseline is a PyTorch row: the key column keeps what tells them apart ("eager", "padding skipped")
        cells[COLUMNS.index("baseline")] = self.baseline.removeprefix("PyTorch eager, ").removeprefix("PyTorch ")
        # the key column fits 1,000 px with the ratio alone (or the interval alone where no ratio is supported);
        # the interval is its own column under "All columns"
        cells[COLUMNS.index("speedup")] = self.speedup_text(short=True) or "-"
        return cells

    def cells(self) -> list[str]:
        def f(v: float | None, spec: str = ".2f") -> str:
            return "-" if v is None else format(v, spec)

        return [self.variant, self.backend, self.shape, self.status, f(self.p50_ms), f(self.p90_ms),
                f(self.p99_ms), f(self.mean_ms), f(self.std_ms), f(self.min_ms), f(self.throughput, ".1f"),
                self.speedup_text(), self.interval_text, self.baseline, f(self.first_run_ms, ".0f"),
                f(self.peak_mb, ".0f"), f(self.size_mb, ".3g"), f(self.cosine, ".5f"), f(self.top1, ".3f"),
                f(self.work_gops, ".3g"), f(self.moved_gb, ".3g"),
                "-" if self.of_peak is None else f"{self.of_peak:.0%}",
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


INTERVAL = 0.9  # the speed-ups' intervals: at least this coverage of the median paired ratio


def median_interval(values: list[float], confidence: float = INTERVAL) -> tuple[float, float] | None:
    """A distribution-free interval for the median of ``values`` (order statistics, as a sign test gives): the
    j-th smallest and j-th largest, j as large as keeps ``confidence``; None when too few values for it (under 5 at
    90%)."""
    from math import comb

    v, n = sorted(values), len(values)
    best = None
    for j in range(n // 2):
        outside = 2 * sum(comb(n, i) for i in range(j + 1)) / 2**n  # P(the median lies outside [v[j], v[n-1-j]])
        if 1 - outside < confidence:
            break
        best = (v[j], v[n - 1 - j])
    return best


def baselines(rows: list[LatencyRow]) -> dict[int, tuple[LatencyRow, LatencyRow]]:
    """id(row) -> (row, its baseline): the first PyTorch row of its shape (and node, on a cluster); rows that skip
    padding have the PyTorch row given the same skip, when there is one."""
    first: dict[tuple[str, str, bool], LatencyRow] = {}
    for r in rows:
        key = (r.shape, r.node, skips_padding(r))
        if r.backend.startswith("torch") and r.p50_ms and key not in first:
            first[key] = r
    pairs = {}
    for r in rows:
        base = first.get((r.shape, r.node, skips_padding(r))) or first.get((r.shape, r.node, False))
        if base is not None and r.p50_ms:
            pairs[id(r)] = (r, base)
    return pairs


def paired_ratios(row: LatencyRow, other: LatencyRow) -> list[float]:
    """other / row per round where both were timed (how many times faster ``row`` ran in each round)."""
    return [b / r for b, r in zip(other.rounds_ms, row.rounds_ms, strict=False) if r > 0] if row is not other else []


def paired_interval(row: LatencyRow, base: LatencyRow) -> tuple[float, float] | None:
    """The interval of the speed-up from the rounds where both rows were timed: one ratio per round."""
    return median_interval(paired_ratios(row, base))


def unsettled(pairs: dict[int, tuple[LatencyRow, LatencyRow]]) -> bool:
    """Some row's interval against its baseline still includes 1.0 (or there are too few rounds for one)."""
    for row, base in pairs.values():
        if row is base:
            continue
        interval = paired_interval(row, base)
        if interval is None or interval[0] <= 1.0 <= interval[1]:
            return True
    return False


def summarize(rows: list[LatencyRow], profiles: dict[str, Any], notes: list[str],
              why: dict[str, str] | None = None) -> LatencyTable:
    """Fill in speed-ups against the PyTorch row of the same shape (and the same node, on a cluster) with their
    intervals over the interleaved rounds, and flag noise."""
    for row, base in baselines(rows).values():
        row.speedup, row.baseline = (base.p50_ms or 0.0) / (row.p50_ms or 1.0), "" if row is base else base.variant
        interval = paired_interval(row, base)
        if interval is None:
            continue
        row.speedup_low, row.speedup_high = interval
        if not interval[0] <= row.speedup <= interval[1]:  # p50s timed apart disagree with the paired rounds
            row.noisy = True
            row.note = (f"{row.note}; " if row.note else "") + (
                f"its p50 and the baseline's give {row.speedup:.2f}x, outside the interleaved rounds' interval: the "
                "machine was busy while one of them was timed")
    mark_slower(rows, why)
    if any(skips_padding(r) and r.backend.startswith("torch") for r in rows):
        notes.append("Rows that skip padding (runtime=skips padding) are compared with 'PyTorch eager, padding "
                     "skipped': the same length buckets, run trimmed in PyTorch. The other rows run the padded "
                     "batch as a plain session would.")
    rounds = max((len(r.rounds_ms) for r in rows), default=0)
    if any(r.speedup_low is not None for r in rows):
        notes.append(f"Speed-up: the baseline's p50 over the row's; in brackets its {INTERVAL:.0%} interval from "
                     f"{rounds} interleaved rounds (each round times every row in a new order, one ratio per round, "
                     "so a row and its baseline meet the same machine).")
    if not all(r.separable for r in rows):
        notes.append("A speed-up whose interval includes 1.0 is shown as that interval alone ('not separable'): "
                     "this run cannot tell the row from its baseline (a small difference, or a busy machine); "
                     "re-run on a quiet machine before reading a ratio.")
    if not all(r.supported or not r.separable for r in rows):
        notes.append("A speed-up whose p50s' ratio falls outside its interval is shown as the interval alone "
                     "('rounds only'): the row or its baseline was timed while the machine was busy, and the "
                     "interleaved rounds, which met both with the same machine, are what this run can support.")
    if any(r.noisy for r in rows):
        notes.append(f"Some rows are noisy (p90 more than {NOISY_SPREAD:.0%} above p50, or the interleaved rounds "
                     "more than 1.3x away from p50): the machine was busy; re-run on a quiet machine before "
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
                                 marker_color=["#d93025" if r.slower or (r.supported and r.speedup and r.speedup < 1)
                                               else "#1a73e8" for r in ok],
                                 error_x={"type": "data", "symmetric": False,
                                          "array": [(r.p90_ms or 0) - (r.p50_ms or 0) for r in ok],
                                          "arrayminus": [0] * len(ok), "color": "#333"},
                                 hovertemplate="%{y}<br>p50 %{x:.3g} ms<extra></extra>"))
            fig.add_trace(go.Scatter(y=labels, x=[r.p99_ms for r in ok], mode="markers", name="p99",
                                     marker={"symbol": "line-ns-open", "size": 14, "color": "#b3261e"}))
            # the speed-up in a column of its own at the right, clear of bars and whiskers
            fig.add_trace(go.Scatter(y=labels, x=[1.0] * len(ok), xaxis="x2", mode="text", showlegend=False,
                                     text=[r.speedup_text(short=True) for r in ok],
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
                  "hi": r.p90_ms, "text": r.speedup_text(short=True),
                  "bad": bool(r.slower or (r.supported and r.speedup and r.speedup < 1.0))} for r in ok]
        return svg_hbars(items, axis="p50 latency, ms (whisker to p90; speed-up vs PyTorch after it)",
                         title="Latency")

    def __repr__(self) -> str:
        cols = ["variant", "backend", "shape", "status", "p50_ms", "p90_ms", "p99_ms", "std_ms", "throughput",
                *(["speedup", "baseline"] if "baseline" in key_columns(self.rows) else ["speedup"]), "first_run_ms",
                "peak_mb", "size_mb", "cosine", "of_peak", "runs", "noisy"]
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
        table = compact_table(COLUMNS, [r.html_cells() for r in shown], key_columns(shown), numeric=NUMERIC,
                              abbreviate=("variant", "shape", "baseline"), wrap=("options", "note"), width=20,
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
