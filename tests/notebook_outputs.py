"""What an executed tutorial shows, read from the notebook as saved: each cell's text, figures and widgets (their
state from the notebook's metadata, as a reader of the saved file gets it, or from the kernel that drew them).
nbclient's runs (tests/test_notebooks.py) and JupyterLab's (tests/test_browser.py) are read alike, and the
quickstart's checks are here because either may run it: JupyterLab on the lock, nbclient on the lower bounds (no
browser there)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

WIDGET = "application/vnd.jupyter.widget-view+json"
PLOTLY = "application/vnd.plotly.v1+json"
WIDGET_STATE: dict[str, Any] = {}  # model id -> state, of the notebook read last (remember_widgets)


def remember_widgets(nb: Any, kernel: dict[str, Any] | None = None) -> None:
    """Keep the widget state ``nb`` was saved with (nbclient's store_widget_state), or ``kernel``'s: the state of
    every widget the kernel that ran it holds, by model id (JupyterLab saves none by default; tests/lab.py)."""
    WIDGET_STATE.clear()
    saved = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    WIDGET_STATE.update({k: v["state"] for k, v in saved.get("state", {}).items()})
    WIDGET_STATE.update(kernel or {})


def widget(cell: Any, key: str, having: str = "") -> dict[str, Any]:
    """The saved state of the widget the cell shows that has ``key`` (itself, or a child of a box), and whose
    ``key`` holds ``having`` when given (a cell can also show a progress bar, whose label is a ``value``
    too): what a reader of the saved notebook, or the page after a reload, gets."""
    todo = [o["model_id"] for o in outputs(cell, WIDGET)]
    while todo:
        state = WIDGET_STATE.get(todo.pop(0), {})
        if key in state and having in str(state[key]):
            return state
        todo += [c.removeprefix("IPY_MODEL_") for c in state.get("children", [])]
    raise AssertionError(f"no widget with {key!r} holding {having!r} in the cell's output")


def outputs(cell: Any, mime: str) -> list[Any]:
    return [o["data"][mime] for o in cell.outputs if "data" in o and mime in o["data"]]


def text(cell: Any) -> str:
    parts = []
    for o in cell.outputs:
        parts.append(o.get("text", ""))
        data = o.get("data", {})
        parts += [data.get("text/plain", ""), data.get("text/html", "")]
    return "\n".join(p if isinstance(p, str) else "".join(p) for p in parts)


def plotly_titles(cells: list[Any]) -> list[str]:
    return [json.loads(json.dumps(f))["layout"]["title"]["text"] for c in cells for f in outputs(c, PLOTLY)]


def by_source(cells: list[Any], start: str) -> Any:
    return next(c for c in cells if c.source.startswith(start))


def check_quickstart(cells: list[Any], folder: Path) -> None:
    """01_quickstart's cells, run in ``folder`` (its widgets remembered): what each step shows, and the report."""
    exported = by_source(cells, "result = onnx_nb.export")
    assert "Exported all-MiniLM-L6-v2 to ONNX" in text(exported)
    # progress is a plain output updated in place, not a widget (a closed widget read "model not found" after a
    # reload), and it is cleared once the step is done
    assert not outputs(exported, WIDGET) and "[5/5]" not in text(exported) and "<progress" not in text(exported)
    parity = by_source(cells, "report = onnx_nb.check_parity")
    assert outputs(parity, WIDGET) and "Parity PASSED" in text(parity)
    table = widget(parity, "value", having="<table")  # the sliders' live table, saved with the notebook
    assert "PASSED" in table["value"]
    assert "optimized(transformer)+unpad" in text(by_source(cells, "fast = onnx_nb.optimize"))
    assert "int8-dynamic(per-channel)" in text(by_source(cells, "int8 = onnx_nb.quantize"))
    assert "PyTorch eager" in text(by_source(cells, "import numpy as np"))
    titles = plotly_titles(cells)
    assert any(t.startswith("Parity errors") for t in titles) and "Latency per variant and backend" in titles
    graph = widget(by_source(cells, "graph = onnx_nb.GraphView"), "graph")
    shown = re.search(r"GraphView of model.onnx: (\d+) nodes", text(by_source(cells, "graph = onnx_nb.GraphView")))
    assert shown and int(shown[1]) > 250, "the text view counts the export's nodes (312 on the lock's exporter)"
    assert "onnx-nb studio: all-MiniLM-L6-v2 (ready" in text(by_source(cells, "studio = onnx_nb.Studio"))
    assert len(graph["graph"]["nodes"]) > 50 and graph["depth"] >= 1
    # the steps run above, gathered into one report (nothing run again): each with its result and its time
    gathered = text(by_source(cells, "full = onnx_nb.Report.of"))
    assert "Report for all-MiniLM-L6-v2: all steps passed" in gathered
    for step in ("export", "parity", "optimize", "quantize", "latency"):
        assert re.search(rf"^{step} +ok +[\d.]+ s|^{step} +ok +—", gathered, re.MULTILINE), (step, gathered)
    html = (folder / "onnx_nb_out" / "quickstart" / "report.html").read_text()
    assert "onnx-nb report: all-MiniLM-L6-v2" in html and "Plotly" in html and "<script src=" not in html
    assert html.count("<details") >= 5 and "int8-dynamic" in html
    studio = widget(by_source(cells, "studio = onnx_nb.Studio"), "steps")
    assert [k for k, _ in studio["steps"]] == ["export", "parity", "optimize", "quantize", "latency", "report", "web"]
    assert studio["methods"][0] == "auto" and studio["model_name"] and studio["sliders"]
