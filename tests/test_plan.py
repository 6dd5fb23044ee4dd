"""One step plan (onnx_nb.steps.plan) behind pipeline() and the Studio: the same steps in the same order, the same
calls, the same records; the Studio's tabs and quantize choices come from it."""

from __future__ import annotations

from pathlib import Path

import torch

import onnx_nb
from onnx_nb.steps.plan import QUANTIZE_METHODS, Run, Settings, plan, tabs


class Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def test_plan_follows_the_settings() -> None:
    keys = lambda s: [(step.key, step.needs) for step in plan(s)]  # noqa: E731
    assert keys(Settings()) == [("export", ()), ("parity", ("export",)), ("optimize", ("export",)),
                                ("quantize", ("optimize",)), ("latency", ("export",))]
    assert keys(Settings(optimize=False, benchmark=False)) == [("export", ()), ("parity", ("export",)),
                                                               ("quantize", ("export",))]
    assert [t[0] for t in tabs(Settings(quantize=None))] == ["export", "parity", "optimize", "latency", "report", "web"]
    assert Settings(out="x").replace_variants is False and Settings().replace_variants is True
    assert Settings(out="x", overwrite=True).replace_variants is True


def test_run_needs_forgets_and_skips(tmp_path: Path) -> None:
    run = Run(Small(), Settings(sample=torch.randn(2, 8), out=tmp_path, benchmark=False, quantize="dynamic",
                                overwrite=True))
    assert run.missing("quantize") == ["export", "optimize"]
    assert run.missing("parity") == ["export"]
    for key in [*run.missing("quantize"), "quantize"]:
        run.run(key)
    assert [r.step for r in run.report().steps] == ["export", "optimize", "quantize"]
    assert all(r.status == "ok" and r.seconds > 0 for r in run.report().steps), run.report().steps
    # the same results gathered by Report.of (nothing run again): the same steps and times; a second variant of a
    # step is named apart, its figures in its own section
    made = run.values
    gathered = onnx_nb.Report.of(made["export"], made["optimize"], made["quantize"], made["quantize"])
    assert [s.step for s in gathered.steps] == ["export", "optimize", "quantize", f"quantize: {made['quantize'].name}"]
    assert gathered and gathered["quantize"] is made["quantize"] and gathered.model == run.report().model
    assert [s.seconds for s in gathered.steps][:3] == [made["export"].export_seconds, made["optimize"].seconds,
                                                       made["quantize"].seconds]
    run.run("export")  # again: what was built on the old export is stale and dropped
    assert set(run.values) == {"export"} and [r.step for r in run.report().steps] == ["export"]

    broken = Run(torch.nn.Identity(), Settings(sample="not a tensor", benchmark=False))
    assert broken.run("export") is None and broken.records["export"].status == "failed"
    assert broken.error is not None and broken.records["export"].error.startswith(type(broken.error).__name__)
    assert broken.run("parity") is None and broken.records["parity"].status == "skipped"


def test_studio_runs_the_pipelines_plan(tmp_path: Path, monkeypatch: object) -> None:
    monkeypatch.chdir(tmp_path)  # type: ignore[attr-defined]  # the Studio writes into onnx-nb's default folder
    monkeypatch.delenv("ONNX_NB_OUT", raising=False)  # type: ignore[attr-defined]
    sample = torch.randn(2, 8)
    studio = onnx_nb.Studio(Small(), sample, threaded=False)
    assert studio.panel.steps == tabs(Settings()) and studio.panel.methods == list(QUANTIZE_METHODS)
    studio.panel.quantize_method = "dynamic"
    studio.run("all")
    shown = studio.panel.html
    assert set(shown) == {"export", "parity", "optimize", "quantize", "latency", "report"}, set(shown)
    assert not any('class="bad"' in html for html in shown.values()), shown
    # each tab styled as in the notebook, with its chart (inline SVG) under the table where the step has one
    assert all(html.startswith("\n<style>") for html in shown.values())
    for step in ("parity", "optimize", "quantize", "latency"):
        assert '<svg class="onnxnb-chart"' in shown[step] and "<rect" in shown[step], step
    assert "onnxnb-chart" not in shown["export"]
    report = studio.plan.report()
    assert [s.step for s in report.steps] == ["export", "parity", "optimize", "quantize", "latency"]
    assert all(s.seconds > 0 for s in report.steps), "the Report tab shows each step's real time"
    assert studio.panel.status == "all: done" and studio.panel.progress == 1.0 and not studio.panel.running
    assert report.model == studio.panel.model_name == report["export"].source.name, "one name everywhere"

    # the parity sliders: the same specs as the ipywidgets view, and moving one re-judges the stored errors
    from onnx_nb.results.parity_view import sliders, view

    parity = studio.plan.values["parity"]
    assert studio.panel.sliders == sliders(parity) and {s["key"] for s in sliders(parity)} == \
        {"atol", "rtol", "max_scaled", "min_cosine"}
    assert sum(len(row.children) for row in view(parity).children[:2]) == len(sliders(parity))
    assert "✗ fail" not in shown["parity"]
    studio.panel.tolerances = {"atol": 1e-15, "rtol": 1e-15, "max_scaled": 1e-12, "min_cosine": 1.0}
    assert "✗ fail" in studio.panel.html["parity"]

    piped = onnx_nb.pipeline(Small(), sample, quantize="dynamic", out=tmp_path / "p", progress=False)
    assert [s.step for s in piped.steps] == [s.step for s in report.steps]
    assert [s.status for s in piped.steps] == [s.status for s in report.steps]

    # one step, its needs first; a bad shapes box is said in the tab of the step asked for
    fresh = onnx_nb.Studio(Small(), sample, threaded=False)
    fresh.run("parity")
    assert set(fresh.results) == {"export", "parity"} and fresh.panel.tab == "parity"
    fresh.panel.shapes = "batch=four"
    assert fresh.run("latency") is None
    assert "InvalidArgumentError" in fresh.panel.html["latency"] and "batch=four" in fresh.panel.status


def test_the_pipelines_report_keeps_no_copy_of_a_model_it_loaded(tiny_dirs: dict[str, Path], tmp_path: Path) -> None:
    """pipeline() given a folder loads its model; its report keeps the files, not that PyTorch model (a kernel on
    Binder's 2 GB held one copy per pipeline run), and a later step on its export loads the model again. A model the
    caller passed stays the caller's."""
    report = onnx_nb.pipeline(tiny_dirs["bert"], optimize=False, quantize=None, benchmark=False, out=tmp_path / "p",
                              progress=False)
    export = report["export"]
    assert report and export.source.model is None
    assert onnx_nb.check_parity(export, progress=False), "the model is loaded again from its folder"
    mine = Small()
    kept = onnx_nb.pipeline(mine, torch.randn(2, 8), optimize=False, quantize=None, benchmark=False,
                            out=tmp_path / "q", progress=False)
    assert kept["export"].source.model is mine
