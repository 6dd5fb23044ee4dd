"""The interactive parity view: tolerance sliders re-judge the stored errors at once.

:func:`sliders` says which sliders a report gets (ranges, steps, starting values from its own tolerances); the
ipywidgets view here and the Studio's sliders (``js/src/studio.js``) are both built from it, and both re-judge
with :meth:`ParityReport.rejudge` under the sliders' keys.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..render import CSS

if TYPE_CHECKING:
    from .parity import ParityReport


def sliders(report: ParityReport | None) -> list[dict[str, Any]]:
    """The tolerance sliders for ``report`` (all four before any report): ``key`` (a ``rejudge`` argument),
    ``label``, ``min``/``max``/``step`` (powers of ten when ``log``), ``value`` and ``format`` ("exp", "fixed")."""
    rows = report.rows if report is not None else []
    elementwise = [r.tolerance for r in rows if r.tolerance and r.tolerance.mode == "elementwise"]
    task = [r.tolerance for r in rows if r.tolerance and r.tolerance.mode == "task"]
    first = next(iter(task or elementwise), None)
    specs = []
    if elementwise or report is None:
        tol = elementwise[0] if elementwise else None
        specs += [
            {"key": "atol", "label": "atol", "min": -9, "max": 0, "step": 0.25, "log": True, "format": "exp",
             "value": tol.atol if tol else 1e-4},
            {"key": "rtol", "label": "rtol", "min": -9, "max": 0, "step": 0.25, "log": True, "format": "exp",
             "value": tol.rtol if tol else 1e-3},
            {"key": "max_scaled", "label": "max err/RMS", "min": -7, "max": 1, "step": 0.25, "log": True,
             "format": "exp", "value": (tol.max_scaled if tol else None) or 1e-3},
        ]
    specs.append({"key": "min_cosine", "label": "min cosine", "min": 0.9, "max": 1.0, "step": 0.0005, "log": False,
                  "format": "fixed", "value": first.min_cosine if first is not None else 0.99})
    return specs


def view(report: ParityReport) -> Any:
    """A widget: the report's :func:`sliders` above the live pass/fail table."""
    import ipywidgets as widgets

    style = {"description_width": "90px"}
    layout = widgets.Layout(width="360px")
    controls = {}
    for spec in sliders(report):
        common = {"description": spec["label"], "step": spec["step"], "style": style, "layout": layout,
                  "readout_format": ".1e" if spec["format"] == "exp" else ".4f", "value": spec["value"]}
        controls[spec["key"]] = widgets.FloatLogSlider(base=10, min=spec["min"], max=spec["max"], **common) \
            if spec["log"] else widgets.FloatSlider(min=spec["min"], max=spec["max"], **common)
    table = widgets.HTML(CSS + report.html_body())
    table.add_class("onnxnb-parity-table")
    state = {"report": report}

    def update(_change: Any = None) -> None:
        judged = report.rejudge(**{key: control.value for key, control in controls.items()})
        state["report"] = judged
        table.value = CSS + judged.html_body()

    for control in controls.values():
        control.observe(update, names="value")
    row = list(controls.values())
    box = widgets.VBox([widgets.HBox(row[:2]), widgets.HBox(row[2:]), table])
    box.add_class("onnxnb-parity")
    box.state = state  # the latest judged report, for code that wants it
    return box
