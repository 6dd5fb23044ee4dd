"""The interactive parity view: tolerance sliders re-judge the stored errors at once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from ..render import CSS

if TYPE_CHECKING:
    from .parity import ParityReport


def view(report: ParityReport) -> Any:
    """A widget: atol, rtol and min-cosine sliders above the live pass/fail table."""
    elementwise = [r.tolerance for r in report.rows if r.tolerance and r.tolerance.mode == "elementwise"]
    task = [r.tolerance for r in report.rows if r.tolerance and r.tolerance.mode == "task"]
    style = {"description_width": "90px"}
    layout = widgets.Layout(width="360px")
    atol = widgets.FloatLogSlider(value=elementwise[0].atol if elementwise else 1e-4, base=10, min=-9, max=0,
                                  step=0.25, description="atol", readout_format=".1e", style=style, layout=layout)
    rtol = widgets.FloatLogSlider(value=elementwise[0].rtol if elementwise else 1e-3, base=10, min=-9, max=0,
                                  step=0.25, description="rtol", readout_format=".1e", style=style, layout=layout)
    first = next(iter(task or elementwise), None)
    cosine = widgets.FloatSlider(value=first.min_cosine if first is not None else 0.99, min=0.9, max=1.0,
                                 step=0.0005, description="min cosine", readout_format=".4f", style=style,
                                 layout=layout)
    scaled = widgets.FloatLogSlider(value=(elementwise[0].max_scaled or 1e-3) if elementwise else 1e-3, base=10,
                                    min=-7, max=1, step=0.25, description="max err/RMS", readout_format=".1e",
                                    style=style, layout=layout)
    table = widgets.HTML(CSS + report.html_body())
    table.add_class("onnxnb-parity-table")
    state = {"report": report}

    def update(_change: Any = None) -> None:
        judged = report.rejudge(atol=atol.value, rtol=rtol.value, min_cosine=cosine.value,
                                max_scaled=scaled.value if elementwise else None)
        state["report"] = judged
        table.value = CSS + judged.html_body()

    for slider in (atol, rtol, cosine, scaled):
        slider.observe(update, names="value")
    controls = [s for s, use in ((atol, elementwise), (rtol, elementwise), (scaled, elementwise),
                                 (cosine, task or elementwise)) if use]
    box = widgets.VBox([widgets.HBox(controls[:2]), widgets.HBox(controls[2:]), table])
    box.add_class("onnxnb-parity")
    box.state = state  # the latest judged report, for code that wants it
    return box
