"""The quickstart and the studio in a real JupyterLab, in headless Chromium: every cell runs, widgets and
figures render, clicks change the page. Screenshots go to tests/screenshots/."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from lab import (
    available,
    browser,
    copy_clean,
    jupyterlab,
    kernel_peak_mb,
    kernel_widgets,
    mount,
    run_all,
    run_notebook,
    save,
    wait_idle,
    watch_console,
)
from notebook_memory import keep_peak
from notebook_outputs import check_quickstart, remember_widgets

ROOT = Path(__file__).resolve().parent.parent
SHOTS = Path(__file__).parent / "screenshots"

pytestmark = pytest.mark.skipif(not available() and not os.environ.get("CI"),
                                reason="Debian's chromium is not installed (scripts/dev test installs it)")


# every result table's key columns, at the notebook column's width: true when none overflows its output
KEY_TABLES_FIT = """() => [...document.querySelectorAll('.jp-OutputArea-output table.key')].map(t => {
    const out = t.closest('.jp-OutputArea-output');
    const first = t.rows.length > 1 ? t.rows[1].innerText : '';  // a row of it: what made it wide
    return [t.getBoundingClientRect().width, out.getBoundingClientRect().width, t.innerText.slice(0, 60), first];
})"""

# the graph view's labels that show, and their height on screen
GRAPH_LABELS = """() => [...document.querySelectorAll('.onnxnb-graph text')].filter(
    t => getComputedStyle(t).display !== 'none' && t.getBoundingClientRect().width > 0
).map(t => t.getBoundingClientRect().height)"""

# each plotly chart: whether its legend overlaps its x-axis title, and for bar charts the bars and the row labels shown
PLOT_LAYOUT = """() => [...document.querySelectorAll('.js-plotly-plot')].map(p => {
    const box = q => { const e = p.querySelector(q); return e ? e.getBoundingClientRect() : null; };
    const legend = box('.legend'), title = box('.xtitle');
    const overlap = !!(legend && title && legend.left < title.right && title.left < legend.right &&
                       legend.top < title.bottom && title.top < legend.bottom);
    return {title: (p.querySelector('.gtitle') || {}).textContent || '', overlap,
            bars: p.querySelectorAll('.bars .point').length, labels: p.querySelectorAll('.ytick text').length};
})"""


def fit_column(page: Any, width: int) -> None:
    """Resize the window so the notebook's output column is ``width`` px wide."""
    out = page.locator(".jp-OutputArea-output").first.bounding_box()
    view = page.viewport_size
    page.set_viewport_size({"width": int(view["width"] - (out["width"] - width)), "height": view["height"]})
    page.wait_for_timeout(500)


def test_quickstart_and_studio_in_jupyterlab(tmp_path: Path) -> None:
    """01_quickstart run in JupyterLab: the saved notebook shows what each step should (the checks nbclient's run
    makes on the lower bounds, notebook_outputs.check_quickstart) and is the documentation's copy; then the page
    itself, the graph view, and the Studio's "Run all steps" its last cell invites."""
    import executed

    SHOTS.mkdir(exist_ok=True)
    copy_clean(ROOT / "notebooks" / "01_quickstart.ipynb", tmp_path)
    with jupyterlab(tmp_path) as lab, browser() as page:
        problems = watch_console(page)
        run_notebook(page, lab, "01_quickstart.ipynb", 420)
        saved = save(page, tmp_path / "01_quickstart.ipynb", every_cell=False)
        remember_widgets(saved, kernel_widgets(lab, tmp_path, "01_quickstart.ipynb"))
        check_quickstart([c for c in saved.cells if c.cell_type == "code"], tmp_path)
        executed.keep(saved, "01_quickstart.ipynb", tmp_path)
        page.locator(".onnxnb-studio").first.wait_for(timeout=60_000)
        page.locator(".onnxnb-graph-node").first.wait_for(timeout=60_000)
        text = page.locator(".jp-Notebook").inner_text()
        assert "Loading widget" not in text and "Error displaying widget" not in text
        assert "Traceback" not in text, text[text.find("Traceback") - 500:][:2000]
        assert page.locator(".js-plotly-plot svg.main-svg").count() >= 2, "parity and latency figures"
        assert "Parity errors" in text and "Latency per variant and backend" in text
        assert page.locator(".onnxnb-parity input[type=range], .onnxnb-parity .widget-slider").count() >= 1

        # At a 1,000 px notebook column, every result table shows its key columns without scrolling.
        fit_column(page, 1000)
        page.screenshot(path=str(SHOTS / "quickstart.png"), full_page=True)
        tables = page.evaluate(KEY_TABLES_FIT)
        assert len(tables) >= 4, tables  # parity, the variants' parity, latency
        align = page.evaluate("() => [...document.querySelectorAll('.jp-OutputArea-output table.key td:first-child')]"
                              ".map(td => getComputedStyle(td).textAlign)")
        assert set(align) == {"left"}, align  # names read from the left (JupyterLab right-aligns output tables)
        for n, (width, column, head, _) in enumerate(tables):
            if width > column:
                page.locator(".jp-OutputArea-output table.key").nth(n).screenshot(path=str(SHOTS / "too_wide.png"))
            assert column <= 1010 and width <= column, f"{head!r}: {width:.0f} px in a {column:.0f} px column"

        # Graph view: labels that show are legible (>= 10 px) at the default zoom; expand a module group,
        # then click an operator: its details come from the kernel.
        graph = page.locator(".onnxnb-graph").first
        heights = page.evaluate(GRAPH_LABELS)
        assert heights and min(heights) >= 10, heights
        shown = graph.locator(".onnxnb-graph-node").count()
        graph.locator(".onnxnb-graph-group").first.click()
        page.wait_for_function("n => document.querySelector('.onnxnb-graph').querySelectorAll("
                               "'.onnxnb-graph-node').length !== n", arg=shown, timeout=30_000)
        heights = page.evaluate(GRAPH_LABELS)
        assert heights and min(heights) >= 10, heights  # re-fitted after the expand, still legible
        graph.locator(".onnxnb-graph-op").first.click()
        details = graph.locator(".onnxnb-graph-details")
        page.wait_for_function("() => { const d = document.querySelector('.onnxnb-graph-details');"
                               " return d && !d.textContent.includes('loading'); }", timeout=30_000)
        assert ":" in details.locator(".onnxnb-graph-details-title").inner_text()
        graph.screenshot(path=str(SHOTS / "graph_view.png"))

        # Studio: "Run all steps" runs the real pipeline in the kernel; every tab then shows its result, with
        # its chart where the step has one.
        studio = page.locator(".onnxnb-studio").first
        studio.scroll_into_view_if_needed()
        assert "No export result yet" in studio.inner_text()
        page.locator(".jp-OutputArea-output table.key", has_text="p50_ms").first.screenshot(
            path=str(SHOTS / "latency_table.png"))
        studio.locator(".onnxnb-studio-run-all").click()
        page.wait_for_function("() => document.querySelector('.onnxnb-studio-status-text').textContent"
                               ".includes('all: done')", timeout=480_000)
        # the kernel's peak with everything a reader ran: the notebook's cells, then the Studio's whole pipeline
        peak = kernel_peak_mb(lab, tmp_path, "01_quickstart.ipynb")
        keep_peak("01_quickstart-jupyterlab", "01_quickstart.ipynb", peak, ["Run All", "Studio: Run all steps"])
        for tab in ("export", "parity", "optimize", "quantize", "latency", "report"):
            studio.locator(f".onnxnb-studio-tab-{tab}").click()
            panel = studio.locator(".onnxnb-studio-panel")
            assert "result yet" not in panel.inner_text(), tab
            if tab in ("parity", "optimize", "quantize", "latency"):  # the variants: their own parity check
                assert panel.locator("svg.onnxnb-chart rect").count() >= 1, f"the {tab} chart in its tab"
                studio.screenshot(path=str(SHOTS / f"studio_{tab}.png"))
            if tab == "parity":  # rows that differ read differently, however their names are cut
                text = "els => els.map(e => e.textContent)"
                shown = panel.locator("svg.onnxnb-chart g > text[text-anchor=end]").evaluate_all(text)
                full = panel.locator("svg.onnxnb-chart g > title").evaluate_all(text)
                assert len(shown) == len(full) and len(set(shown)) == len(set(full)), (shown, full)
            if tab == "quantize":  # the ops this step made (its op table's Q* ops), none its parent already had;
                # QAttention where the eager route's INT8 file ran faster (VNNI CPUs), MatMulInteger alone where
                # the fused route's did (an AVX2 EPYC without VNNI)
                made = panel.locator("tr", has_text="quantized ops").first.inner_text()
                assert "MatMulInteger" in made and "BiasGelu" not in made, made
            if tab == "optimize":  # its time beside what it was spent on (optimized for the INT8 step after it)
                assert "for the INT8 step after it" in panel.inner_text()
        # "Run all" leaves the transformers.js tab; its own button writes the folder from the export and the INT8
        # file and has transformers.js's browser build check it (the Studio's steps run on a thread, from which the
        # notebook's page is not reached: a headless Chromium then, and the rows say so)
        studio.locator(".onnxnb-studio-tab-web").click()
        assert "No web result yet" in studio.inner_text()
        studio.locator(".onnxnb-studio-run").click()
        page.wait_for_function("() => document.querySelector('.onnxnb-studio-status-text').textContent"
                               ".includes('web: done')", timeout=240_000)
        web = studio.locator(".onnxnb-studio-panel").inner_text()
        assert "WASM in " in web and "model_quantized.onnx" in web and "passed" in web, web
        studio.screenshot(path=str(SHOTS / "studio_web.png"))
        tables = page.evaluate(KEY_TABLES_FIT)  # the Studio's tables too
        assert not [t for t in tables if t[0] > t[1]], [t for t in tables if t[0] > t[1]]

        # A reload with the kernel alive brings every widget back (saved first: the page reloads the file).
        page.locator(".jp-Notebook").first.click()
        page.keyboard.press("Control+s")
        page.wait_for_timeout(2000)
        page.reload()
        page.get_by_text("Python 3 (ipykernel) | Idle").first.wait_for(timeout=120_000)
        page.locator(".onnxnb-studio").first.wait_for(timeout=60_000)
        page.locator(".onnxnb-graph-node").first.wait_for(timeout=60_000)
        page.wait_for_timeout(3000)
        text = page.locator(".jp-Notebook").inner_text()
        assert "Error displaying widget" not in text and "Loading widget" not in text
        page.screenshot(path=str(SHOTS / "after_reload.png"), full_page=True)
        assert not problems, problems  # it once logged "widget model not found" and a page error

    # The HTML report the notebook writes (Report.of its steps) needs no horizontal scrolling at 1,400 px.
    with browser() as page:
        page.goto((tmp_path / "onnx_nb_out" / "quickstart" / "report.html").as_uri())
        page.wait_for_load_state("load")
        page.locator(".js-plotly-plot").first.wait_for(timeout=30_000)
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 1400, f"the report is {width} px wide"
        page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
        page.wait_for_timeout(1500)
        plots = page.evaluate(PLOT_LAYOUT)
        assert plots and not any(p["overlap"] for p in plots), plots  # no legend over an axis title
        bars = [p for p in plots if p["title"].startswith("Latency per variant") and p["bars"]]
        assert bars and all(p["labels"] == p["bars"] for p in bars), plots  # a label for every row
        # what a reader reads in the latency table: memory that holds the weights, and a variant no faster than its
        # parent (same backend and shape; the full table names the parent) marked "slower", and no other
        assert_memory_holds_the_weights(latency_rows(page))
        rows = latency_rows(page, "all")
        p50 = {(r["variant"], r["backend"], r["shape"]): float(r["p50_ms"]) for r in rows if r["status"] == "ok"}
        children = [r for r in rows if r["parent"]]
        assert len(children) >= 2, rows  # optimized of the export, INT8 of the optimized file
        for r in children:
            parent = p50.get((r["parent"], r["backend"], r["shape"]))
            if parent is None or r["status"].startswith("✗") or float(r["p50_ms"]) == parent:
                continue  # no parent row to compare with, or equal at the three digits shown
            assert r["status"].startswith("slower") == (float(r["p50_ms"]) > parent), r
        page.screenshot(path=str(SHOTS / "report.png"), full_page=True)


# each result table shown, as a reader reads it: the header and the rows' cell texts (tables found by
# a locator, which sees into widgets' shadow roots too)
KEY_TABLE_ROWS = """tables => tables.filter(t => t.getClientRects().length > 0).map(t =>
    [...t.querySelectorAll('tr')].map(r => [...r.querySelectorAll('th, td')].map(c => c.textContent.trim())))"""


def latency_rows(page: Any, which: str = "key") -> list[dict[str, str]]:
    """The rows of every latency table on the page as shown, one dict per row: the key columns (``which="key"``), or
    every column (``"all"``, the folded table)."""
    rows = []
    for table in page.locator(f"table.{which}").evaluate_all(KEY_TABLE_ROWS):
        if table and "p50_ms" in table[0] and "peak_mb" in table[0]:
            rows += [dict(zip(table[0], row)) for row in table[1:] if len(row) == len(table[0])]
    return rows


def assert_memory_holds_the_weights(rows: list[dict[str, str]]) -> None:
    """A file's row never shows less resident memory than the weights its session holds (it showed 0.07 MB for a
    21.9 MB INT8 file)."""
    files = [r for r in rows if r["size_mb"] not in ("-", "")]
    assert files, rows
    for r in files:
        assert float(r["peak_mb"]) >= 0.9 * float(r["size_mb"]), r  # the weights: 95% of MiniLM's files


def test_first_run_examples_run_verbatim_in_fresh_notebooks(tmp_path: Path) -> None:
    """The README's example (the getting-started page's is the same) in a fresh notebook; the Launcher's "Export a
    model…" notebook; then the README's magic block (its placeholder folder the demo model's) in the same folder as
    that notebook, as a reader trying both would: every cell runs (the magic's export goes to a folder of its own
    instead of failing on the notebook's), the latency tables' memory holds the weights, and the page logs no error
    (it once logged "widget model not found" and a page error)."""
    import re

    import nbformat

    readme = (ROOT / "README.md").read_text()
    start = (ROOT / "docs" / "getting-started.md").read_text()
    example = re.search(r"```python\n(.*?)```", readme, re.S).group(1)  # type: ignore[union-attr]
    assert example in start, "the README and the getting-started page give the same example"
    magic = re.search(r"```ipython\n(.*?)```", readme, re.S).group(1)  # type: ignore[union-attr]
    assert "path/to/hf-folder" in magic
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(example)]), tmp_path / "example.ipynb")
    (tmp_path / "launcher").mkdir()  # the Launcher's notebook and the magics share this folder
    setup = "import onnx_nb\nfolder = str(onnx_nb.default_model_path())"
    with jupyterlab(tmp_path) as lab:
        with browser() as page:  # a fresh page: the notebook opens alone, as a new user's would
            problems = watch_console(page)
            run_notebook(page, lab, "example.ipynb", 420)
            text = page.locator(".jp-Notebook").inner_text()
            page.screenshot(path=str(SHOTS / "first_run_example.png"), full_page=True)
            assert "Traceback" not in text and "Error" not in text, text[-3000:]
            rows = latency_rows(page)
            assert any(r["backend"].startswith("torch") for r in rows), rows  # PyTorch eager, the baseline
            assert_memory_holds_the_weights(rows)
            assert not problems, problems
        # The Launcher's "Export a model…" with an empty Ok: a notebook named after the demo model that checks
        # parity and times its files against PyTorch eager (its speed-ups once all read "-")
        with browser() as page:
            problems = watch_console(page)
            base, token = lab.split("|")
            page.goto(f"{base}/lab/tree/launcher?token={token}&reset")
            page.locator(".jp-BreadCrumbs", has_text="launcher").first.wait_for(timeout=120_000)
            page.get_by_role("menuitem", name="File", exact=True).click()
            page.get_by_text("New Launcher", exact=True).click()
            page.locator(".jp-Launcher").last.get_by_text("Export a model…", exact=True).click()
            page.locator(".jp-Dialog .jp-mod-accept").click()
            page.get_by_text("Python 3 (ipykernel) | Idle").first.wait_for(timeout=120_000)
            assert [p.name for p in (tmp_path / "launcher").glob("*.ipynb")] == ["onnx-nb export demo.ipynb"]
            run_all(page)
            wait_idle(page, 420)
            text = page.locator(".jp-Notebook").inner_text()
            page.screenshot(path=str(SHOTS / "first_run_launcher.png"), full_page=True)
            assert "Traceback" not in text and "Error" not in text, text[-3000:]
            assert "Parity PASSED" in text, text[:3000]
            rows = latency_rows(page)
            assert_memory_holds_the_weights(rows)
            files = [r for r in rows if r["backend"].startswith("ort")]
            assert len(files) == 3 and all(re.match(r"\d+\.\d\d(x|-)", r["speedup"]) for r in files), rows
            assert not problems, problems
            # within Binder's 2 GB as the tutorials (timed on every backend, OpenVINO's too, it once peaked at
            # 1,995 to 2,059 MB)
            keep_peak("launcher-export", "onnx-nb export demo.ipynb",
                      kernel_peak_mb(lab, tmp_path, "launcher/onnx-nb export demo.ipynb"), ["JupyterLab: Run All"])
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(setup), nbformat.v4.new_code_cell(
            magic.replace("path/to/hf-folder", "$folder"))]), tmp_path / "launcher" / "magic.ipynb")
        with browser() as page:
            problems = watch_console(page)
            run_notebook(page, lab, "launcher/magic.ipynb", 420)
            text = page.locator(".jp-Notebook").inner_text()
            page.screenshot(path=str(SHOTS / "first_run_magic.png"), full_page=True)
            assert "Traceback" not in text and "Error" not in text, text[-3000:]
            assert_memory_holds_the_weights(latency_rows(page))
            assert not problems, problems
        out = tmp_path / "launcher" / "onnx_nb_out"
        assert sorted(p.name for p in out.iterdir()) == ["all-MiniLM-L6-v2", "all-MiniLM-L6-v2-2"], \
            "the magic's export beside the notebook's, neither overwritten"


def test_graph_view_goes_to_the_diverging_node(tmp_path: Path) -> None:
    """The real bundle fed a real GraphView's state (a damaged weight, the parity report as overlay): the view opens
    with legible labels; 'go to diverging node' opens the groups that hold it, centres it and shows its details."""
    import onnx_nb
    import tiny_models
    from helpers import perturb

    good = onnx_nb.export(tiny_models.build("bert"), out=tmp_path / "good.onnx", progress=False)
    damaged = perturb(good.path, tmp_path / "bad.onnx", "bert.encoder.layer.1.attention.self.value")
    report = onnx_nb.check_parity(good, tmp_path / "bad.onnx", progress=False)
    graph = onnx_nb.GraphView(tmp_path / "bad.onnx", overlay=report)
    assert graph.highlight == damaged
    with browser() as page:
        mount(page, "graph", graph, (1000, 620))
        page.locator(".onnxnb-graph-node").first.wait_for(timeout=10_000)
        page.wait_for_timeout(300)
        heights = page.evaluate(GRAPH_LABELS)
        assert heights and min(heights) >= 10, heights
        assert page.locator(".onnxnb-graph-op.onnxnb-highlight").count() == 0, "inside a collapsed group at first"
        page.locator(".onnxnb-graph-goto-highlight").click()
        page.wait_for_timeout(300)
        node = page.locator(".onnxnb-graph-op.onnxnb-highlight")
        assert node.count() == 1
        box, view = node.bounding_box(), page.locator(".onnxnb-graph-svg").bounding_box()
        assert box and view and view["x"] <= box["x"] and box["x"] + box["width"] <= view["x"] + view["width"]
        assert view["y"] <= box["y"] and box["y"] + box["height"] <= view["y"] + view["height"], "centred in view"
        assert damaged in page.inner_text(".onnxnb-graph-details-title")
        page.screenshot(path=str(SHOTS / "graph_diverging.png"))
        page.locator(".onnxnb-graph-goto-top").click()  # the largest error: the damaged node or one after it
        page.wait_for_timeout(300)
        assert page.inner_text(".onnxnb-graph-details-title")


def test_browser_backend_in_the_notebooks_own_page(tmp_path: Path) -> None:
    """07_browser in a real JupyterLab: ONNX Runtime Web runs MiniLM inside the notebook's page (the kernel waits
    for the page's replies while the cell runs), its parity rows pass and its latency row comes from that page. The
    saved notebook is the documentation's copy (tests/executed.py), its kernel's peak kept against Binder's budget.
    (With no page open, the fallback: tests/test_notebooks.py.)"""
    import executed

    SHOTS.mkdir(exist_ok=True)
    copy_clean(ROOT / "notebooks" / "07_browser.ipynb", tmp_path)
    with jupyterlab(tmp_path) as lab, browser() as page:
        run_notebook(page, lab, "07_browser.ipynb", 420)
        keep_peak("07_browser", "07_browser.ipynb", kernel_peak_mb(lab, tmp_path, "07_browser.ipynb"),
                  ["JupyterLab: Run All"])
        text = page.locator(".jp-Notebook").inner_text()
        page.screenshot(path=str(SHOTS / "browser_backend.png"), full_page=True)
        assert "Traceback" not in text, text[text.find("Traceback") - 500:][:2000]
        assert "Parity PASSED" in text and "in the notebook's page" in text, text[text.find("browser:"):][:600]
        assert "headless Chromium (no notebook page" not in text  # the page answered: no fallback
        status = page.locator(".onnxnb-ortweb-status").first.inner_text()
        assert "ONNX Runtime Web 1.30.0 in this page (WASM, 1 thread: the page is not cross-origin isolated)" in status
        assert "browser p50" in text and "ort-web:wasm (HeadlessChrome" in text
        assert "IR version is 14" in text and "web(basic)" in text
        # transformers.js's browser build ran the folder to_transformers_js wrote, in this same page
        assert "WASM in the notebook's page" in text and "pooled embeddings cos" in text, \
            text[text.find("transformers.js folder"):][:800]
        # and on the page's WebGPU adapter: its rows name it, or the bundle says the page had none
        assert "WebGPU (adapter" in text or "transformers.js on WebGPU:" in text, text[text.find("int8 = "):][:3000]
        page.screenshot(path=str(SHOTS / "browser_backend.png"), full_page=True)
        executed.keep(save(page, tmp_path / "07_browser.ipynb"), "07_browser.ipynb", tmp_path)
