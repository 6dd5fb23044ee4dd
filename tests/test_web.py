"""The browser backend: ONNX Runtime Web (bundled) in a headless Chromium page, as providers "browser" (WASM) and
"browser-webgpu" (on SwiftShader's software adapter here, no GPU): parity of a tiny BERT and of MiniLM within fp32
tolerance, a latency row with p50/p90 labelled with the browser and the ORT Web version, the message for what ORT
Web cannot run, and optimize(target="web")."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

import onnx_nb
from onnx_nb.runtime import browser, browser_pages

pytestmark = pytest.mark.skipif(bool(browser.unavailable_reason()) and not os.environ.get("CI"),
                                reason=browser.unavailable_reason() or "browser backend available")


@pytest.fixture(scope="module", autouse=True)
def software_webgpu() -> Any:
    """This machine has no GPU: its headless Chromium offers WebGPU on SwiftShader, a software adapter, which the
    rows name (a fresh page for this module, started with that flag)."""
    saved = os.environ.get("ONNX_NB_CHROMIUM_ARGS")
    os.environ["ONNX_NB_CHROMIUM_ARGS"] = browser_pages.WEBGPU_FLAGS + " --use-webgpu-adapter=swiftshader"
    browser._PAGES.pop("headless", None)
    yield
    browser._PAGES.pop("headless", None)
    if saved is None:
        os.environ.pop("ONNX_NB_CHROMIUM_ARGS")
    else:
        os.environ["ONNX_NB_CHROMIUM_ARGS"] = saved


@pytest.fixture(scope="module")
def bert(bert_export: Any) -> Any:
    return bert_export  # read only (conftest's shared exports)


@pytest.fixture(scope="module")
def minilm(minilm_export: Any) -> Any:
    return minilm_export  # read only (conftest's shared exports)


def browser_rows(report: Any) -> list[Any]:
    return [r for r in report.rows if r.provider == "browser"]


def test_tiny_bert_in_the_browser_within_fp32_tolerance(bert: Any) -> None:
    report = onnx_nb.check_parity(bert, providers=["cpu", "browser", "browser-webgpu"], progress=False)
    rows = browser_rows(report)
    assert report and rows and all(r.status == "pass" for r in rows), report
    assert {r.shape for r in rows} == {r.shape for r in report.rows if r.provider == "cpu"}  # every shape, probes
    assert max(r.max_abs for r in rows) < 1e-4
    note = " ".join(report.notes)
    assert f"onnxruntime-web {browser.ORT_WEB_VERSION}" in note and "HeadlessChrome" in note, note
    webgpu = [r for r in report.rows if r.provider == "browser-webgpu"]  # ORT Web's WebGPU build, on SwiftShader
    assert webgpu and all(r.status == "pass" for r in webgpu) and {r.shape for r in webgpu} == {r.shape for r in rows}
    assert "WEBGPU, adapter google swiftshader" in note, note


def test_minilm_on_real_tokens_in_the_browser(minilm: Any) -> None:
    """all-MiniLM-L6-v2's plain export, on its tokenizer's tokens, in ORT Web: within fp32 tolerance of PyTorch."""
    report = onnx_nb.check_parity(minilm, providers=["browser"], progress=False)
    rows = browser_rows(report)
    assert report and rows and all(r.status == "pass" for r in rows), report
    assert max(r.max_abs for r in rows) < 1e-4 and min(r.cosine for r in rows) > 0.99999


def test_a_latency_row_from_the_browser_beside_ort_cpu(bert: Any) -> None:
    table = onnx_nb.benchmark(bert, reference=bert, providers=["cpu", "browser", "browser-webgpu"], runs=20,
                              progress=False)
    [gpu] = [r for r in table.rows if r.backend.startswith("ort-web:webgpu")]
    assert gpu.status == "ok" and gpu.p50_ms and "adapter google swiftshader" in gpu.backend, gpu
    web = [r for r in table.rows if r.backend.startswith("ort-web:wasm")]
    assert len(web) == 1 and web[0].status == "ok", table
    row = web[0]
    assert row.p50_ms and row.p90_ms and row.p90_ms >= row.p50_ms and row.runs == 20 and row.speedup
    assert f"onnxruntime-web {browser.ORT_WEB_VERSION}" in row.backend and "HeadlessChrome" in row.backend
    assert row.options["page"] == "headless Chromium" and row.options["isolated"] == "yes"
    assert row.remeasure_ms  # re-measured inside the page too, not through the round trip
    assert any(r.backend == "ort:cpu" and r.status == "ok" for r in table.rows)


def _save(model: Any, path: Path, ir_version: int | None = None) -> Path:
    if ir_version is not None:
        model.ir_version = ir_version
    onnx.save(model, str(path))
    return path


def test_an_operator_ort_web_lacks_is_named(tmp_path: Path) -> None:
    from onnx import TensorProto, helper

    # BiasAdd: a contrib operator with a CUDA kernel only (ORT's GPU fusions write it)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 8])
    bias = onnx.numpy_helper.from_array(np.ones(8, np.float32), "bias")
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 8])
    graph = helper.make_graph([helper.make_node("BiasAdd", ["x", "bias", "x"], ["y"], domain="com.microsoft")],
                              "gpu_fused", [x], [y], [bias])
    path = _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                          helper.make_opsetid("com.microsoft", 1)]),
                 tmp_path / "gpu_fused.onnx", ir_version=9)
    table = onnx_nb.benchmark(path, providers=["browser"], runs=5, progress=False)
    [row] = table.rows
    assert row.status == "error" and "ONNX Runtime Web has no kernel for BiasAdd" in row.note, row.note
    assert "target='web'" in row.note


def test_optimize_for_the_web(bert: Any, tmp_path: Path) -> None:
    """A transformer-fused variant (contrib operators) and an IR-14 file become files ORT Web reads, re-checked in
    the browser."""
    fused = onnx_nb.optimize(bert, level="transformer", unpad=False, out=tmp_path / "fused.onnx")
    assert any(op.startswith("com.microsoft.") for op in fused.op_diff)
    web = onnx_nb.optimize(fused, target="web", out=tmp_path / "web.onnx")
    proto = onnx.load(str(web.path))
    assert all(n.domain in ("", "ai.onnx") for n in proto.graph.node)
    assert proto.ir_version <= browser.WEB_MAX_IR and "started_from" in web.recipe
    assert web.parity and browser_rows(web.parity) and all(r.status == "pass" for r in browser_rows(web.parity))

    new_ir = _save(onnx.load(str(bert.path)), tmp_path / "ir14.onnx", ir_version=14)
    report = onnx_nb.check_parity(bert, new_ir, providers=["browser"], progress=False)
    assert [r.status for r in report.rows] == ["error"] and "IR version is 14" in report.rows[0].note
    fixed = onnx_nb.optimize(new_ir, target="web", out=tmp_path / "ir.web.onnx", reference=bert)
    assert onnx.load(str(fixed.path)).ir_version == browser.WEB_MAX_IR and fixed.parity, fixed.parity


def test_external_data_is_refused_and_inlined_for_the_web(bert: Any, tmp_path: Path) -> None:
    split = tmp_path / "split" / "model.onnx"
    split.parent.mkdir()
    onnx.save(onnx.load(str(bert.path)), str(split), save_as_external_data=True, size_threshold=1024,
              location="model.data")
    with pytest.raises(onnx_nb.InvalidModelError, match="external data"):
        browser.BrowserSession(split)
    web = onnx_nb.optimize(split, target="web", out=tmp_path / "one.onnx", reference=bert)
    assert not (tmp_path / "model.data").exists() and web.parity


def test_browser_provider_names() -> None:
    from onnx_nb.runtime.providers import providers_named

    [wasm, gpu] = providers_named(["browser", "browser-webgpu"])
    assert (wasm.name, wasm.short, wasm.available) == ("browser:wasm", "browser", True)
    assert (gpu.name, gpu.short, gpu.available) == ("browser:webgpu", "browser-webgpu", True)
    assert browser.bundle_bytes("wasm") > 10 * 2**20 and browser.bundle_bytes("webgpu") > 20 * 2**20  # shipped


def test_command_line_and_a_machine_without_a_browser(bert: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import json
    import subprocess
    import sys

    plain = {**os.environ, "ONNX_NB_CHROMIUM_ARGS": ""}  # a Chromium without WebGPU: no adapter
    out = subprocess.run([sys.executable, "-m", "onnx_nb", "bench", str(bert.path), "--providers",
                          "cpu,browser,browser-webgpu", "--runs", "5", "--json"], capture_output=True, text=True,
                         timeout=300, env=plain)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads(out.stdout)["rows"]
    assert [r["status"] for r in rows] == ["ok", "ok", "unavailable"] and "HeadlessChrome" in rows[1]["backend"]
    assert "no WebGPU adapter" in rows[2]["note"], rows[2]
    monkeypatch.setenv("ONNX_NB_CHROMIUM", "/nonexistent/chromium")  # no browser: a row that says why
    table = onnx_nb.benchmark(bert, providers=["cpu", "browser"], runs=5, progress=False)
    [web] = [r for r in table.rows if r.backend.startswith("ort-web")]
    assert web.status == "unavailable" and "no Chromium found" in web.note
