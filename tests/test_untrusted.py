"""Models from strangers: text that tries to run script, external data that leaves the folder, pickled
checkpoints, and a runtime crash that must not take the caller with it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import onnx_nb
from hostile import PAYLOADS, RAW_MARKERS, external_data_model, hostile_text_model, linked, secret
from lab import available, browser, mount

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hostile_text_model(tmp_path_factory.mktemp("hostile") / "model.onnx")


def sample() -> dict[str, np.ndarray]:
    return {PAYLOADS["input"]: np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)}


@pytest.fixture(scope="module")
def views(hostile: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every result onnx-nb makes for the hostile model, and the report that gathers them."""
    from onnx_nb.results.report import Report, StepResult

    out = tmp_path_factory.mktemp("variants")
    parity = onnx_nb.check_parity(hostile, hostile, sample(), progress=False)
    variant = onnx_nb.optimize(hostile, level="extended", out=out / "opt.onnx")
    table = onnx_nb.benchmark({PAYLOADS["node"]: hostile}, sample=sample(), providers="cpu", runs=3, warmup=1,
                              profile=True, progress=False)
    report = Report(PAYLOADS["doc"], [StepResult("parity", "ok", parity, "", 0.1),
                                      StepResult("optimize", "ok", variant, "", 0.1),
                                      StepResult("benchmark", "ok", table, "", 0.1),
                                      StepResult(PAYLOADS["node"], "failed", None, PAYLOADS["input"], 0.0)])
    return {"parity": parity, "variant": variant, "latency": table, "report": report,
            "html_file": report.save_html(out / "report.html")}


def test_model_text_is_escaped_in_every_html_view(views: dict[str, Any]) -> None:
    pages = {name: obj._repr_html_() for name, obj in views.items() if hasattr(obj, "_repr_html_")}
    pages["report file"] = Path(views["html_file"]).read_text()
    for name, page in pages.items():
        for marker in RAW_MARKERS:
            assert marker not in page, f"{name} shows {marker!r} unescaped"
    # the names are there, escaped (so the test looks at the right text)
    assert "&lt;script&gt;window.__pwned" in pages["parity"]
    assert "&lt;img src=x" in pages["latency"] or "&quot;&gt;&lt;img" in pages["latency"]
    assert "&lt;iframe srcdoc" in pages["report file"]


@pytest.mark.skipif(not available() and not os.environ.get("CI"), reason="Debian's chromium is not installed")
def test_no_payload_runs_in_a_browser(views: dict[str, Any], hostile: Path) -> None:
    """The HTML report and the graph widget (the real bundle, fed the real widget state) in Chromium."""
    graph = onnx_nb.GraphView(hostile, overlay=views["parity"])
    with browser() as page:
        page.goto(Path(views["html_file"]).as_uri())
        page.wait_for_load_state("load")
        page.wait_for_timeout(500)
        assert page.evaluate("window.__pwned") is None
        assert PAYLOADS["input"] in page.inner_text("body"), "the name is shown as text"

        mount(page, "graph", graph)
        page.locator(".onnxnb-graph-node").first.wait_for(timeout=10_000)
        page.locator(".onnxnb-graph-op").first.click()
        page.wait_for_timeout(300)
        assert page.evaluate("window.__pwned") is None
        assert "MatMul" in page.inner_text("#root")

        # The Studio (its real bundle and state) showing an error that quotes a hostile name.
        mount(page, "studio", failed_studio().panel)
        page.locator("pre.bad").first.wait_for(timeout=10_000)
        page.wait_for_timeout(300)
        assert page.evaluate("window.__pwned") is None
        assert STUDIO_PAYLOAD in page.inner_text("pre.bad"), "the error is shown as text"


STUDIO_PAYLOAD = "<img src=x onerror=window.__pwned='studio'>"


def failed_studio() -> Any:
    """A Studio whose export failed with an error that quotes the (hostile) model name."""
    studio = onnx_nb.Studio(STUDIO_PAYLOAD, threaded=False)
    studio.run("export")
    return studio


def test_studio_escapes_error_text() -> None:
    studio = failed_studio()
    html = studio.panel.html["export"]
    assert "ModelNotFoundError" in html and "<img" not in html and "&lt;img src=x onerror=" in html
    assert studio.panel.tab == "export" and "failed" in studio.panel.status


# -- external data --------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["absolute", "dotdot", "link", "missing", "short"])
def test_external_data_must_stay_in_the_folder(tmp_path: Path, how: str) -> None:
    outside = secret(tmp_path / "outside")
    folder = tmp_path / "model"
    folder.mkdir()
    location = {"absolute": str(outside), "dotdot": "../outside/secret.bin", "missing": "gone.bin",
                "short": "short.bin"}.get(how) or linked(folder, outside)
    if how == "short":
        (folder / "short.bin").write_bytes(b"\0" * 20)
    path = external_data_model(folder / "model.onnx", location)
    expected = onnx_nb.InvalidModelError if how in ("missing", "short") else onnx_nb.UnsafeModelError
    hint = {"absolute": "outside the model's folder", "dotdot": "outside the model's folder", "link": "is a link",
            "missing": "is missing", "short": "truncated"}[how]
    for attempt in (lambda: onnx_nb.check_model(path),
                    lambda: onnx_nb.check_parity(path, path, {"x": np.ones((1, 4), np.float32)}, progress=False),
                    lambda: onnx_nb.optimize(path, level="basic"),
                    lambda: onnx_nb.GraphView(path)):
        with pytest.raises(expected, match=hint):
            attempt()
    table = onnx_nb.benchmark(path, providers="cpu", runs=2, progress=False)
    assert table.rows[0].status == "error" and type(expected(1)).__name__ in table.rows[0].note
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["model.onnx"] + (["weights.bin"] if how == "link" else ["short.bin"] if how == "short" else []))


# -- checkpoints ------------------------------------------------------------------------------------

class Boom:
    """Unpickling this runs a shell command: the classic hostile checkpoint."""

    def __init__(self, flag: Path) -> None:
        self.flag = flag

    def __reduce__(self) -> Any:
        return (os.system, (f"touch {self.flag}",))


def test_pickled_checkpoints_need_opt_in(tmp_path: Path) -> None:
    import tiny_models

    flag = tmp_path / "PWNED"
    torch.save({"w": torch.zeros(2), "payload": Boom(flag)}, tmp_path / "evil.pt")
    with pytest.raises(onnx_nb.UnsafeCheckpointError, match=r"posix\.system.*allow_pickle=True"):
        onnx_nb.export(tmp_path / "evil.pt", torch.randn(1, 3), out=tmp_path / "e.onnx", progress=False)
    assert not flag.exists(), "the pickle's code never ran"

    net = tiny_models.TinyNet()
    torch.save(net, tmp_path / "net.pth")
    torch.save(net.state_dict(), tmp_path / "weights.pt")
    with pytest.raises(onnx_nb.UnsafeCheckpointError, match=r"tiny_models\.TinyNet"):
        onnx_nb.export(tmp_path / "net.pth", torch.randn(1, 3), out=tmp_path / "n.onnx", progress=False)
    with pytest.raises(onnx_nb.ModelLoadError, match=r"holds only weights .*'fc.weight'.*load_state_dict"):
        onnx_nb.export(tmp_path / "weights.pt", torch.randn(1, 3), out=tmp_path / "w.onnx", progress=False)
    result = onnx_nb.export(tmp_path / "net.pth", torch.randn(2, 3), out=tmp_path / "n.onnx", allow_pickle=True,
                            progress=False)
    assert result and result.source.location == str(tmp_path / "net.pth")
    assert onnx_nb.check_parity(result, progress=False)


# -- isolation ----------------------------------------------------------------------------------------

def test_isolated_parity_and_benchmark_match_in_process(hostile: Path) -> None:
    inline = onnx_nb.check_parity(hostile, hostile, sample(), progress=False)
    apart = onnx_nb.check_parity(hostile, hostile, sample(), isolate=True, progress=False)
    assert inline and apart
    assert [r.max_abs for r in inline.rows] == [r.max_abs for r in apart.rows]
    table = onnx_nb.benchmark(hostile, sample=sample(), providers="cpu", runs=5, warmup=1, isolate=True,
                              progress=False)
    row = table.rows[0]
    assert row.status == "ok" and row.options.get("process") == "isolated worker" and row.p50_ms > 0
    from onnx_nb.runtime.sessions import session

    with onnx_nb.isolated():
        opened = session(hostile)
        assert isinstance(opened, onnx_nb.IsolatedSession), "every session in the block goes to a worker"
        opened.close()
        assert onnx_nb.check_parity(hostile, hostile, sample(), progress=False)
    assert not isinstance(session(hostile), onnx_nb.IsolatedSession), "and only in the block"


def test_a_runtime_crash_does_not_take_the_caller(hostile: Path) -> None:
    from onnx_nb.runtime.sessions import session

    sess = session(hostile, isolate=True)
    feed = sample()
    first = sess.run(None, feed)[0]
    os.kill(sess.pid, signal.SIGSEGV)  # what a hostile graph does to ONNX Runtime
    time.sleep(0.2)
    with pytest.raises(onnx_nb.RuntimeCrashError, match=r"SIGSEGV.*Your session is unaffected"):
        sess.run(None, feed)
    again = session(hostile, isolate=True)
    assert np.array_equal(again.run(None, feed)[0], first), "the next call works"
    again.close()
