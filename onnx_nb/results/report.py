"""``Report``: every step of a pipeline run, inline, as one self-contained HTML file, and as JSON."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..render import CSS, abbr, esc, html_table, text_table


@dataclass
class StepResult:
    step: str
    status: str  # ok, failed-check (ran, but its check failed), failed (raised), skipped
    result: Any
    error: str
    seconds: float | None  # None: the step ran before the report gathered it and its result keeps no time
    trace: str = field(default="", repr=False)

    def to_dict(self) -> dict[str, Any]:
        res = self.result.to_dict() if self.result is not None and hasattr(self.result, "to_dict") else None
        return {"step": self.step, "status": self.status, "error": self.error,
                "seconds": None if self.seconds is None else round(self.seconds, 2), "result": res}


@dataclass
class Report:
    """What :func:`onnx_nb.pipeline` returns: every step's result (or its error) by name, truthy when no step failed;
    ``save_html`` writes one self-contained file (plotly inside), ``to_json`` a file for CI.

    Example::

        report = onnx_nb.pipeline("path/to/bert-folder")
        report["parity"], report["quantize"]                # each step's own result
        report.save_html("report.html"); report.to_json("report.json")
    """

    model: str
    steps: list[StepResult]

    @classmethod
    def of(cls, *results: Any, model: str | None = None) -> Report:
        """The results of steps already run, gathered into one report as :func:`onnx_nb.pipeline` would have
        returned it, with nothing run again: an export, a parity report, optimized and quantized variants, a
        latency table, in the order given. ``model``: the name shown (default: the export's model).

        Example::

            full = onnx_nb.Report.of(result, report, fast, int8, table)
            full.save_html("report.html")
        """
        from ..errors import InvalidArgumentError

        if not results:
            raise InvalidArgumentError("Report.of() needs at least one result: pass the results of the steps you ran, "
                                       "e.g. Report.of(result, parity, variant, table)")
        steps: list[StepResult] = []
        for result in results:
            step = _step_of(result)
            if any(s.step == step for s in steps):  # a second variant of a step: named apart (its figures too)
                step = f"{step}: {getattr(result, 'name', len(steps) + 1)}"
            seconds = getattr(result, "export_seconds", getattr(result, "seconds", None))
            steps.append(StepResult(step, "ok" if bool(result) else "failed-check", result, "",
                                    seconds if isinstance(seconds, (int, float)) else None))
        if model is None:
            names = [getattr(getattr(r, "source", None), "name", None) or getattr(getattr(r, "folder", None), "name",
                                                                                  None) for r in results]
            model = next((str(n) for n in names if n), "model")
        return cls(model, steps)

    def __bool__(self) -> bool:
        return all(s.status == "ok" for s in self.steps)

    def __getitem__(self, step: str) -> Any:
        for s in self.steps:
            if s.step == step:
                return s.result
        raise KeyError(step)

    @property
    def failed(self) -> list[StepResult]:
        return [s for s in self.steps if s.status != "ok"]

    def summary_rows(self) -> list[list[str]]:
        rows = []
        for s in self.steps:
            detail = s.error or headline(s.result)
            rows.append([s.step, s.status, "—" if s.seconds is None else f"{s.seconds:.1f} s", detail])
        return rows

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "passed": bool(self), "steps": [s.to_dict() for s in self.steps]}

    def to_json(self, path: str | os.PathLike[str] | None = None) -> str:
        from ..runtime.report_file import json_text

        return json_text(self.to_dict(), path)

    def figures(self) -> list[Any]:
        return [f for s in self.steps for f in _figures(s)]

    def __repr__(self) -> str:
        head = f"Report for {self.model}: {'all steps passed' if self else f'{len(self.failed)} step(s) not ok'}"
        return head + "\n" + text_table(["step", "status", "time", "detail"], self.summary_rows())

    __str__ = __repr__

    def html_body(self, figures_html: dict[str, list[str]] | None = None, open_sections: bool = True) -> str:
        """The summary table, then a section per step with its result and, when given, its figures. Inline
        (``open_sections=False``) the sections start folded: the summary says it all, and each step's table
        was shown above the pipeline cell already."""
        marks = {"ok": '<span class="ok">✓ ok</span>', "failed": '<span class="bad">✗ failed</span>',
                 "failed-check": '<span class="bad">✗ check failed</span>',
                 "skipped": '<span class="warn">skipped</span>'}
        rows = [[esc(r[0]), marks.get(r[1], esc(r[1])), esc(r[2]), abbr(r[3], 160)] for r in self.summary_rows()]
        parts = [f'<div class="onnxnb"><h3>onnx-nb report: {esc(self.model)}</h3>',
                 html_table(["step", "status", "time", "detail"], rows, raw_cols=range(4))]
        for s in self.steps:
            body = ""
            if s.result is not None:
                body = s.result.html_body() if hasattr(s.result, "html_body") else s.result._repr_html_()
            elif s.error:
                body = f'<pre class="bad">{esc(s.error)}</pre>'
            body += "".join((figures_html or {}).get(s.step, []))
            parts.append(f"<details{' open' if open_sections else ''}><summary><b>{esc(s.step)}</b></summary>"
                         f"{body}</details>")
        parts.append("</div>")
        return "".join(parts)

    def _repr_html_(self) -> str:
        return CSS + self.html_body(open_sections=False)

    def save_html(self, path: str | os.PathLike[str], overwrite: bool = True) -> Path:
        """One self-contained HTML file (plotly included inline) that works offline; each step's figures sit
        in its section."""
        from ..runtime.files import check_target
        from ..runtime.report_file import atomic_write_text

        target = check_target(path, overwrite)
        figs = {s.step: _figures(s) for s in self.steps}
        script = ""
        figures_html: dict[str, list[str]] = {}
        if any(figs.values()):
            import plotly.offline

            script = f'<script type="text/javascript">{plotly.offline.get_plotlyjs()}</script>'
            figures_html = {step: [f.to_html(full_html=False, include_plotlyjs=False) for f in fs]
                            for step, fs in figs.items()}
        page = (f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>onnx-nb report: {esc(self.model)}'
                f"</title>{script}{CSS}</head><body style=\"margin:24px;max-width:1100px\">"
                f"{self.html_body(figures_html)}</body></html>")
        atomic_write_text(target, page)
        return target


STEPS = {"ExportResult": "export", "PartsExport": "export", "ParityReport": "parity", "DiffusionParity": "parity",
         "SamParity": "parity", "LatencyTable": "latency", "Evaluation": "evaluate"}


def _step_of(result: Any) -> str:
    """The pipeline step that made ``result`` (a variant: quantize when its recipe names a method, else optimize)."""
    from ..errors import InvalidArgumentError

    kinds = [c.__name__ for c in type(result).__mro__]  # a kind's own export class counts as its base's
    if "Variant" in kinds:
        return "quantize" if "method" in result.recipe else "optimize"
    step = next((STEPS[k] for k in kinds if k in STEPS), None)
    if step is None:
        raise InvalidArgumentError(f"Report.of() takes the results of onnx-nb's steps (an export, a parity report, "
                                   f"a variant, a latency table), not a {kinds[0]}: pass those results")
    return step


def _figures(step: StepResult) -> list[Any]:
    """The figures of one step's result (and of the parity report a variant carries)."""
    figs = []
    r = step.result
    for obj in (r, getattr(r, "parity", None)) if r is not None else ():
        if obj is not None and hasattr(obj, "figure"):
            try:
                figs.append(obj.figure())
            except Exception:  # noqa: BLE001 - a figure that cannot be drawn is left out
                continue
    return figs


def headline(result: Any) -> str:
    if result is None:
        return ""
    name = type(result).__name__
    if name == "ExportResult":
        return f"{result.exporter}, opset {result.opset}, {len(result.op_histogram)} op types"
    if name == "ParityReport":
        return result.headline()
    if name == "Variant":
        line = f"{result.name}: {result.nodes_before}→{result.nodes_after} nodes"
        if "routes_seconds" in result.recipe:  # optimize(then='int8'): why it took longer than alone
            line += (f"; {result.recipe['routes_seconds']:.0f} s of it choosing the attention route for the INT8 "
                     f"step: {result.recipe.get('attention_route', '?')}")
        if result.slower_than_parent:  # the pipeline keeps the fp32 parent, and says why
            line += (f"; slower than its fp32 parent on {result.speed['cpu']} ({result.speed['ms']:.3g} vs "
                     f"{result.speed['parent_ms']:.3g} ms): the fp32 file is the one to keep here")
        return line
    if name == "Evaluation":
        return result.why()
    if name == "LatencyTable":
        best = result.best()
        return f"best: {best.variant} on {best.backend}, {best.p50_ms:.1f} ms" + \
            (f" ({best.speedup_text(short=True)} eager)" if best and best.speedup else "") if best else ""
    return name
