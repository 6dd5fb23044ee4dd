"""The documentation site (docs/, Sphinx + MyST-NB) builds strictly, offline, and reads right in Chromium.

Warnings are errors: a broken link between pages (or to a heading), a docstring autodoc cannot read, a tutorial
that does not render all fail the build. The tutorials come from the executed copies the tests keep
(build/executed/, tests/executed.py: test_notebooks.py's, and 01_quickstart's and 07_browser's from test_browser.py;
this file runs last, and on two workers its build waits for the other's tutorials: tests/scheduling.py); a tutorial
without a copy of its current content is executed by the build itself. Screenshots of a guide, a tutorial and the
API page go to tests/screenshots/.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import scheduling
from lab import available, browser

ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT / "build" / "docs" / "html"
SHOTS = Path(__file__).parent / "screenshots"


@pytest.fixture(scope="module")
def site(request: pytest.FixtureRequest) -> Path:
    # the tutorials this run executes first (on either worker): the build renders their executed copies
    missing = scheduling.wait_for(request.session)
    if missing:
        print(f"built without waiting for {missing}: the build executes those tutorials itself")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("ONNX_NB_DOCS_EXECUTE", None)  # the test's build renders every tutorial executed
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-E", "-q", "-b", "html",
                           "-d", str(SITE.parent / "doctrees"), "docs", str(SITE)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    print(f"docs built in {time.perf_counter() - start:.1f} s")
    return SITE


# public functions whose docstrings live in files another change owns; their examples are in the hand-over
# (empty this once they carry an ``Example::``)
PENDING_DOCSTRINGS: set[str] = set()


def public_names() -> list[str]:
    import onnx_nb

    return [n for n in onnx_nb.__all__ if n != "__version__"]


def test_site_builds_strictly_with_every_public_name(site: Path) -> None:
    api = (site / "reference" / "api.html").read_text()
    missing = [n for n in public_names() if f'id="onnx_nb.{n}"' not in api]
    assert not missing, f"not in the API reference: {missing}"
    assert api.count("Example") >= 10  # the docstrings' examples are shown

    from onnx_nb.frontends import cli
    from onnx_nb.frontends.magics import OnnxMagics

    magics = (site / "reference" / "magics.html").read_text()
    for name in OnnxMagics.magics["line"]:
        assert f'id="{name.replace("_", "-")}"' in magics, name
    assert "--shapes" in magics and "--reference" in magics
    commands = (site / "reference" / "cli.html").read_text()
    sub = next(a for a in cli.parser()._actions if a.dest == "command")
    for name in sub.choices:
        assert f'id="onnx-nb-{name}"' in commands, name

    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        page = (site / "tutorials" / f"{notebook.stem}.html").read_text()
        assert "cell_output" in page, f"{notebook.name} rendered without its outputs"
    quickstart = (site / "tutorials" / "01_quickstart.html").read_text()
    assert "Plotly.newPlot" in quickstart and "Parity PASSED" in quickstart

    # offline: no page loads a script or a stylesheet from the network (plotly.js is served by the site itself)
    remote = [(p.name, m) for p in site.rglob("*.html")
              for m in re.findall(r'<(?:script|link)[^>]+(?:src|href)="(https?://[^"]+)"', p.read_text())]
    assert not remote, remote[:5]


def test_every_public_function_and_result_has_an_example(ip: object) -> None:
    """One style: a summary line, prose, then ``Example::`` (or doctest lines); what ``onnx_nb.export?`` and
    ``%onnx_export?`` show in Jupyter."""
    import inspect

    import onnx_nb

    lacking = []
    for name in public_names():
        obj = getattr(onnx_nb, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            continue  # an error's docstring says when it is raised; docs/bad-input.md has the messages
        doc = inspect.getdoc(obj) or ""
        if "Example::" not in doc and ">>>" not in doc:
            lacking.append(name)
    assert set(lacking) <= PENDING_DOCSTRINGS, sorted(set(lacking) - PENDING_DOCSTRINGS)
    for name in ("onnx_export", "onnx_parity", "onnx_bench", "onnx_optimize", "onnx_quantize", "onnx_autotune",
                 "onnx_evaluate", "onnx_generate", "onnx_pipeline"):
        shown = ip.find_line_magic(name).__doc__  # type: ignore[attr-defined]
        assert "Example::" in shown and f"%{name}" in shown, name


def test_readme_is_a_front_door() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 200
    assert "bash scripts/dev test" in readme and "bash scripts/dev demo" in readme
    for target in re.findall(r"\]\(((?:docs|notebooks)/[^)#]*)", readme):
        assert (ROOT / target).exists(), target


def test_the_three_questions_are_one_click_from_the_front_page(site: Path) -> None:
    front = (site / "index.html").read_text()
    for href in ("guides/optimize.html#quantize-a-vision-model", "guides/parity.html#reading-a-parity-failure",
                 "reference/magics.html#onnx-bench"):
        assert f'href="{href}"' in front, href
    assert 'id="quantize-a-vision-model"' in (site / "guides" / "optimize.html").read_text()
    assert 'id="reading-a-parity-failure"' in (site / "guides" / "parity.html").read_text()


@pytest.mark.skipif(not available() and not os.environ.get("CI"),
                    reason="Debian's chromium is not installed (scripts/dev test installs it)")
def test_site_in_chromium(site: Path) -> None:
    SHOTS.mkdir(exist_ok=True)
    with browser() as page:
        remote: list[str] = []

        def offline(route: object) -> None:
            url = route.request.url  # type: ignore[attr-defined]
            if url.startswith(("file:", "data:")):
                route.continue_()  # type: ignore[attr-defined]
            else:
                remote.append(url)
                route.abort()  # type: ignore[attr-defined]

        page.route("**/*", offline)
        page.set_viewport_size({"width": 1300, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))

        # a guide, reached from the front page in one click
        page.goto((site / "index.html").as_uri())
        page.get_by_role("link", name="Optimize and quantize, vision").click()
        page.wait_for_url("**/guides/optimize.html#quantize-a-vision-model")
        heading = page.locator("#quantize-a-vision-model h2")
        assert heading.is_visible() and "Quantize a vision model" in heading.inner_text()
        assert page.locator(".sidebar-tree").get_by_role("link", name="Parity", exact=True).is_visible()
        heading.scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / "docs_guide.png"))

        # a tutorial with its plotly charts drawn by the site's own plotly.js
        page.goto((site / "tutorials" / "01_quickstart.html").as_uri())
        page.locator(".js-plotly-plot svg.main-svg").first.wait_for(timeout=60_000)
        assert page.locator(".js-plotly-plot").count() >= 2, "parity and latency figures"
        chart = page.locator(".js-plotly-plot").nth(1)
        chart.scroll_into_view_if_needed()
        assert chart.bounding_box()["height"] > 200  # type: ignore[index]
        assert any("Latency per variant" in t for t in page.locator(".js-plotly-plot").all_inner_texts())
        page.screenshot(path=str(SHOTS / "docs_tutorial.png"))

        # the API page: every function with its signature and docstring
        page.goto((site / "reference" / "api.html").as_uri())
        export = page.locator('dt[id="onnx_nb.export"]')
        export.scroll_into_view_if_needed()
        assert export.is_visible() and "export(" in export.inner_text()
        page.screenshot(path=str(SHOTS / "docs_api.png"))
        assert not errors, errors
        assert not remote, remote
