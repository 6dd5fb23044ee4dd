"""The quickstart and the studio in a real JupyterLab, in headless Chromium: every cell runs, widgets and
figures render, clicks change the page. Screenshots go to tests/screenshots/."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lab import available, browser, copy_clean, jupyterlab, open_notebook, run_all, wait_idle

ROOT = Path(__file__).resolve().parent.parent
SHOTS = Path(__file__).parent / "screenshots"

pytestmark = pytest.mark.skipif(not available() and not os.environ.get("CI"),
                                reason="Debian's chromium is not installed (scripts/dev test installs it)")


def test_quickstart_and_studio_in_jupyterlab(tmp_path: Path) -> None:
    SHOTS.mkdir(exist_ok=True)
    copy_clean(ROOT / "notebooks" / "01_quickstart.ipynb", tmp_path)
    with jupyterlab(tmp_path) as lab, browser() as page:
        open_notebook(page, lab, "01_quickstart.ipynb")
        run_all(page)
        wait_idle(page, 420)
        page.locator(".onnxnb-studio").first.wait_for(timeout=60_000)
        page.locator(".onnxnb-graph-node").first.wait_for(timeout=60_000)
        page.screenshot(path=str(SHOTS / "quickstart.png"), full_page=True)
        text = page.locator(".jp-Notebook").inner_text()
        assert "Loading widget" not in text and "Error displaying widget" not in text
        assert "Traceback" not in text, text[text.find("Traceback") - 500:][:2000]
        assert page.locator(".js-plotly-plot svg.main-svg").count() >= 2, "parity and latency figures"
        assert "Parity errors" in text and "Latency per variant and backend" in text
        assert page.locator(".onnxnb-parity input[type=range], .onnxnb-parity .widget-slider").count() >= 1

        # Graph view: expand a module group, then click an operator: its details come from the kernel.
        graph = page.locator(".onnxnb-graph").first
        shown = graph.locator(".onnxnb-graph-node").count()
        graph.locator(".onnxnb-graph-group").first.click()
        page.wait_for_function("n => document.querySelector('.onnxnb-graph').querySelectorAll("
                               "'.onnxnb-graph-node').length !== n", arg=shown, timeout=30_000)
        graph.locator(".onnxnb-graph-op").first.click()
        details = graph.locator(".onnxnb-graph-details")
        page.wait_for_function("() => { const d = document.querySelector('.onnxnb-graph-details');"
                               " return d && !d.textContent.includes('loading'); }", timeout=30_000)
        assert ":" in details.locator(".onnxnb-graph-details-title").inner_text()
        graph.screenshot(path=str(SHOTS / "graph_view.png"))

        # Studio: the export button runs the real export in the kernel and the panel shows its result.
        studio = page.locator(".onnxnb-studio").first
        assert "No export result yet" in studio.inner_text()
        studio.locator(".onnxnb-studio-run").click()
        page.wait_for_function("() => document.querySelector('.onnxnb-studio-status-text').textContent"
                               ".includes('export: done')", timeout=180_000)
        assert "Exported" in studio.locator(".onnxnb-studio-panel").inner_text()
        studio.locator(".onnxnb-studio-tab-parity").click()
        assert "No parity result yet" in studio.inner_text()
        studio.screenshot(path=str(SHOTS / "studio.png"))
