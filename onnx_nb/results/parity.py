"""``ParityReport``: one row per output × shape × provider, and where a failure starts."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..errors import ShapeMismatch, ToleranceExceeded
from ..render import CSS, compact_table, esc, sig, svg_hbars, text_table
from .tolerance import Errors, Tolerance

COLUMNS = ["output", "shape", "provider", "status", "max_abs", "max_rel", "mean_abs", "frac_out",
           "cosine", "argmax_agreement", "tolerance", "needed_atol", "note"]
KEY = ["output", "shape", "provider", "status", "max_abs", "cosine", "needed_atol", "tolerance"]


@dataclass
class Row:
    output: str
    shape: str
    provider: str
    status: str  # "pass", "fail", "inconclusive", "shape-mismatch", "error", "unavailable", "skipped"
    tolerance: Tolerance | None = None
    max_abs: float | None = None
    max_rel: float | None = None
    mean_abs: float | None = None
    frac_out: float | None = None
    cosine: float | None = None
    argmax_agreement: float | None = None
    needed_atol: float | None = None
    note: str = ""
    errors: Errors | None = field(default=None, repr=False, compare=False)

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    @property
    def failed(self) -> bool:
        return self.status in ("fail", "inconclusive", "shape-mismatch", "error")

    def rejudged(self, tol: Tolerance) -> Row:
        if self.errors is None or self.status not in ("pass", "fail", "inconclusive"):
            return self
        verdict = self.errors.judge(tol)
        return replace(self, tolerance=tol, frac_out=verdict["frac_out"], needed_atol=verdict["needed_atol"],
                       status=verdict["status"], note=verdict["note"])

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in asdict(self).items() if k not in ("errors", "tolerance")}
        data["tolerance"] = self.tolerance.to_dict() if self.tolerance else None
        return data

    def cells(self) -> list[str]:
        def f(v: float | None, spec: str = ".2e") -> str:
            return "-" if v is None else format(v, spec)

        return [self.output, self.shape, self.provider, self.status, f(self.max_abs), f(self.max_rel),
                f(self.mean_abs), f(self.frac_out, ".2%"), f(self.cosine, ".6f"),
                f(self.argmax_agreement, ".3f"), self.tolerance.describe() if self.tolerance else "-",
                f(self.needed_atol), self.note]


@dataclass
class DivergingNode:
    """The first node whose output departs from the reference."""

    node: str
    op_type: str
    output: str
    module_path: str | None
    max_abs: float
    cosine: float
    method: str  # how it was found
    inputs: list[str] = field(default_factory=list)
    block: list[str] = field(default_factory=list)  # variant-only nodes feeding it (e.g. a quantized MatMul)
    node_errors: dict[str, float] = field(default_factory=dict, repr=False)  # max abs error per compared node

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        worst = sorted(self.node_errors.items(), key=lambda kv: -kv[1])[:50]
        data["node_errors"] = dict(worst)
        return data

    def text(self) -> str:
        where = f" (module {self.module_path})" if self.module_path else ""
        return (f"first diverging node: {self.node} [{self.op_type}]{where}, output {self.output}: "
                f"max abs {self.max_abs:.3g}, cosine {self.cosine:.6f} ({self.method})")


@dataclass
class ParityReport:
    """What :func:`onnx_nb.check_parity` returns: one row per output, shape and provider (max abs and relative error,
    cosine, argmax agreement, the tolerance and ``needed_atol``), the first diverging node when localized
    (``divergence``), and notes. Truthy when every row passed; ``raise_for_failure()`` raises on request and
    ``rejudge()`` applies other tolerances to the stored errors without running the models again.

    Example::

        report = onnx_nb.check_parity(result)
        assert report                                      # truthy when every row passed
        report.failures                                    # the rows that did not
        report.rejudge(atol=1e-3)                          # other tolerances, same stored errors
        report.raise_for_failure()                         # ToleranceExceeded / ShapeMismatch
    """

    model: str
    reference: str
    precision: str
    rows: list[Row]
    shapes: dict[str, dict[str, list[int]]]
    divergence: DivergingNode | None = None
    notes: list[str] = field(default_factory=list)
    unverified: list[str] = field(default_factory=list)  # the export traced one branch: never "passed"
    generation: list[Any] = field(default_factory=list)  # parity.generation.TokenCheck per prompt (cache exports)
    cpu: str = ""  # the CPU the ONNX side ran on (its INT8 kernel named: results differ between instruction sets)

    def __bool__(self) -> bool:
        return not any(r.failed for r in self.rows) and any(r.passed for r in self.rows) and not self.unverified

    @property
    def passed(self) -> bool:
        return bool(self)

    @property
    def failures(self) -> list[Row]:
        return [r for r in self.rows if r.failed]

    @property
    def unavailable(self) -> list[Row]:
        return [r for r in self.rows if r.status == "unavailable"]

    def rejudge(self, atol: float | None = None, rtol: float | None = None, min_cosine: float | None = None,
                tolerances: dict[str, Tolerance] | None = None, max_scaled: float | None = None) -> ParityReport:
        """The same stored errors judged with other tolerances, by the same rule; no model is run again.

        ``atol``/``rtol``/``max_scaled`` change element-wise rows (``max_scaled``: the largest error as a
        fraction of the reference's RMS), ``min_cosine`` every row (the cosine floor of element-wise rows, the
        bound of task-level rows: fp16, INT8).
        """
        rows = []
        for row in self.rows:
            tol = (tolerances or {}).get(row.output) or row.tolerance
            if tol is not None and tol.mode == "elementwise" and (atol, rtol, max_scaled) != (None, None, None):
                tol = replace(tol, atol=tol.atol if atol is None else atol, rtol=tol.rtol if rtol is None else rtol,
                              max_scaled=tol.max_scaled if max_scaled is None else max_scaled)
            if tol is not None and min_cosine is not None:
                tol = replace(tol, min_cosine=min_cosine)
            rows.append(row.rejudged(tol) if tol else row)
        return replace(self, rows=rows)

    def raise_for_failure(self) -> None:
        if self.unverified:
            from ..errors import UnverifiedExport

            raise UnverifiedExport("The export is not verified: " + " ".join(self.unverified))
        mismatch = [r for r in self.rows if r.status == "shape-mismatch"]
        if mismatch:
            raise ShapeMismatch("; ".join(f"{r.shape}: {r.note}" for r in mismatch[:3]))
        failed = self.failures
        if failed:
            worst = max(failed, key=lambda r: r.max_abs or 0.0)
            where = f" {self.divergence.text()}." if self.divergence else ""
            limit = worst.tolerance.describe() if worst.tolerance else "?"
            raise ToleranceExceeded(
                f"{len(failed)} of {len(self.rows)} checks failed; worst: {worst.output} at {worst.shape} "
                f"on {worst.provider}: max abs {worst.max_abs or 0:.3g} outside {limit}"
                f" (would pass with atol={worst.needed_atol or 0:.3g}).{where}"
                + (f" Note: {worst.note}." if worst.note else "")
            )
        if not any(r.passed for r in self.rows):
            raise ToleranceExceeded("No check ran: every provider asked for is unavailable here.")

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "reference": self.reference, "precision": self.precision,
                "passed": bool(self), "rows": [r.to_dict() for r in self.rows], "shapes": self.shapes,
                "divergence": self.divergence.to_dict() if self.divergence else None, "notes": list(self.notes),
                "unverified": list(self.unverified), "cpu": self.cpu}

    def to_json(self, path: str | os.PathLike[str] | None = None) -> str:
        """The report as JSON (written atomically to ``path`` if given). Saved as ``<model>.parity.json`` beside
        ``<model>.onnx``, the JupyterLab viewer overlays its per-node errors on the graph."""
        from ..runtime.report_file import json_text

        return json_text(self.to_dict(), path)

    def to_pandas(self) -> Any:
        import pandas as pd

        rows = [r.to_dict() | {"tolerance": r.tolerance.describe() if r.tolerance else None} for r in self.rows]
        return pd.DataFrame(rows, columns=[c for c in COLUMNS])

    def figure(self) -> Any:
        """Distribution of absolute errors per output (log scale), tolerance marked."""
        import numpy as np
        import plotly.graph_objects as go

        fig = go.Figure()
        atols = set()
        for row in self.rows:
            if row.errors is None:
                continue
            d = np.maximum(row.errors.diff, 1e-12)
            fig.add_trace(go.Histogram(x=np.log10(d), name=f"{row.output} · {row.shape} · {row.provider}",
                                       opacity=0.6, nbinsx=60))
            if row.tolerance and row.tolerance.mode == "elementwise":
                atols.add(row.tolerance.atol)
        if len(fig.data) > 1:  # one colour per row: plotly's ten-colour cycle gave the 11th row the 1st's colour
            from plotly.colors import sample_colorscale

            for trace, colour in zip(fig.data, sample_colorscale("Turbo", [i / (len(fig.data) - 1)
                                                                          for i in range(len(fig.data))]),
                                     strict=True):
                trace.marker.color = colour
        for atol in atols:
            fig.add_vline(x=float(np.log10(atol)), line_dash="dash", line_color="#b3261e",
                          annotation_text=f"atol {atol:g}")
        # the legend below the plot (at the side it took ~40% of the width with long row names), in the figure's
        # bottom margin under the axis title rather than at a fraction of the plot's height, where a short plot
        # put it over the title
        rows = len(fig.data)  # long row names: one legend entry a line
        fig.update_layout(barmode="overlay", title=f"Parity errors: {self.model} vs {self.reference}",
                          xaxis_title="log10 |onnx - reference|", yaxis_title="elements", template="plotly_white",
                          height=430 + 20 * rows, margin={"b": 75 + 20 * rows},  # the plot itself ~260 px high
                          legend={"orientation": "h", "yref": "container", "yanchor": "bottom", "y": 0.01, "x": 0})
        return fig

    def svg(self) -> str:
        """Per row, the atol it would need to pass (log scale) with the tolerance's atol marked: the chart for
        places without plotly's script (the Studio's tab)."""
        items = [{"label": f"{r.output} · {r.shape} · {r.provider}", "value": r.needed_atol or r.max_abs or 0.0,
                  "mark": r.tolerance.atol if r.tolerance and r.tolerance.mode == "elementwise" else None,
                  # an exact row draws no bar (a bar at an arbitrary floor read as an error)
                  "text": r.status if (r.needed_atol or r.max_abs) else f"{r.status}: exact", "bad": r.failed}
                 for r in self.rows if r.max_abs is not None]
        return svg_hbars(items, axis="atol needed to pass (log); dashed: the tolerance's atol", log=True,
                         title="Parity: error against tolerance")

    def headline(self) -> str:
        """One line: the verdict, how many rows passed and failed, and what was compared on which CPU."""
        n_fail, n_pass = len(self.failures), sum(r.passed for r in self.rows)
        verdict = "PASSED" if self else "UNVERIFIED" if self.unverified and not n_fail else "FAILED"
        extra = f", {len(self.unavailable)} unavailable" if self.unavailable else ""
        where = f", on {self.cpu}" if self.cpu else ""
        return (f"Parity {verdict}: {n_pass} passed, {n_fail} failed{extra} ({self.precision} model vs "
                f"{self.reference}{where})")

    def __repr__(self) -> str:
        cols = ["output", "shape", "provider", "status", "max_abs", "cosine", "tolerance", "needed_atol"]
        idx = [COLUMNS.index(c) for c in cols]
        lines = [self.headline(), *(f"UNVERIFIED: {u}" for u in self.unverified),
                 text_table(cols, [[r.cells()[i] for i in idx] for r in self.rows])]
        if self.divergence:
            lines.append(self.divergence.text())
        lines += [f"note: {n}" for n in self.notes]
        lines += list(dict.fromkeys(f"{r.shape} on {r.provider}: {r.note}" for r in self.rows
                                    if r.note and not r.passed))[:6]
        return "\n".join(lines)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """In a live notebook: the interactive view (tolerance sliders); elsewhere plain HTML."""
        from ..progress import in_notebook

        bundle: dict[str, Any] = {"text/plain": repr(self), "text/html": self._repr_html_()}
        if in_notebook():
            try:
                from .parity_view import view
            except ImportError:  # ipywidgets missing: static HTML it is
                return bundle
            widget_bundle = view(self)._repr_mimebundle_(include=include, exclude=exclude)
            if widget_bundle:
                bundle.update(widget_bundle if isinstance(widget_bundle, dict) else widget_bundle[0])
        return bundle

    __str__ = __repr__

    def html_body(self) -> str:
        marks = {"pass": '<span class="ok">✓ pass</span>', "fail": '<span class="bad">✗ fail</span>',
                 "inconclusive": '<span class="bad">? inconclusive</span>',
                 "shape-mismatch": '<span class="bad">✗ shape</span>', "error": '<span class="bad">✗ error</span>'}
        rows = []
        for r in self.rows:
            cells = r.cells()
            for col in ("max_abs", "max_rel", "mean_abs", "needed_atol"):
                cells[COLUMNS.index(col)] = sig(getattr(r, col))
            cells[3] = marks.get(r.status, esc(r.status))
            rows.append(cells)
        table = compact_table(COLUMNS, rows, KEY, raw_cols=[3], abbreviate=("output", "shape", "tolerance"),
                              numeric=("max_abs", "max_rel", "mean_abs", "frac_out", "cosine", "argmax_agreement",
                                       "needed_atol"), wrap=("note",), width=26,
                              details="All columns: relative and mean error, share out of tolerance, notes")
        div = ""
        if self.divergence and not self:  # a report re-judged to pass no longer points at a failing node
            d = self.divergence
            div = (f'<div class="bad">First diverging node: <code>{esc(d.node)}</code> [{esc(d.op_type)}]'
                   + (f" in module <code>{esc(d.module_path)}</code>" if d.module_path else "")
                   + f", output <code>{esc(d.output)}</code>: max abs {d.max_abs:.3g}, cosine {d.cosine:.6f}"
                   f" <span style='color:#666'>({esc(d.method)})</span></div>")
        row_notes = dict.fromkeys(f"{r.output}, {r.shape} on {r.provider}: {r.note}"
                                  for r in self.rows if r.note and not r.passed)
        notes = "".join(f'<div class="warn">{esc(n)}</div>' for n in [*list(row_notes)[:6], *self.notes])
        unverified = "".join(f'<div class="bad">Unverified: {esc(u)}</div>' for u in self.unverified)
        cls = "ok" if self else "bad"
        return (f'<div class="onnxnb"><h4><span class="{cls}">{"✓" if self else "✗"}</span> '
                f"{esc(self.headline())}</h4>{unverified}{div}{table}{notes}</div>")

    def _repr_html_(self) -> str:
        return CSS + self.html_body()
