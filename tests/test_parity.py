"""check_parity on real exports, perturbed files, static shapes, variants and providers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch

import onnx_nb
import tiny_models
from helpers import perturb

VALUE = "bert.encoder.layer.1.attention.self.value"


@pytest.fixture(scope="module")
def bert_exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, onnx_nb.ExportResult]:
    folder = tmp_path_factory.mktemp("parity")
    model = tiny_models.build("bert")
    return {ex: onnx_nb.export(model, out=folder / f"{ex}.onnx", exporter=ex, progress=False)
            for ex in ("dynamo", "torchscript")}


@pytest.mark.lower_bounds
@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
def test_export_passes_on_three_shapes(bert_exports: dict[str, onnx_nb.ExportResult], exporter: str) -> None:
    report = onnx_nb.check_parity(bert_exports[exporter], progress=False)
    assert report, repr(report)
    sample = "sample batch=2, sequence=7"
    assert [r.shape for r in report.rows] == [sample, "batch=5, sequence=7", "batch=1, sequence=15",
                                              f"{sample} · ids", f"{sample} · right-padded"]
    assert any("Probe inputs" in n and "token ids drawn again" in n for n in report.notes)
    row = report.rows[0]
    assert row.output == "logits" and row.provider == "cpu" and row.max_abs is not None and row.max_abs < 1e-5
    assert row.cosine is not None and row.cosine > 0.99999 and row.tolerance is not None
    assert row.tolerance.atol == 1e-4 and row.needed_atol is not None and row.needed_atol <= row.max_abs
    data = json.loads(json.dumps(report.to_dict()))
    assert data["passed"] and data["precision"] == "fp32" and len(data["rows"]) == 5
    frame = report.to_pandas()
    assert list(frame["status"]) == ["pass"] * 5 and "needed_atol" in frame.columns
    fig = report.figure()
    assert len(fig.data) == 5 and "Parity errors" in fig.layout.title.text
    assert len({t.marker.color for t in fig.data}) == 5, "a colour per row (plotly's cycle repeats after ten)"
    # the legend sits in the bottom margin below the axis title, a line per row, the plot keeping its height
    legend, margin = fig.layout.legend, fig.layout.margin
    assert legend.yref == "container" and legend.yanchor == "bottom" and margin.b >= 60 + 20 * len(fig.data)
    assert fig.layout.height - margin.b - 100 >= 250
    report.raise_for_failure()


@pytest.mark.parametrize("name", ["t5", "vit", "wav2vec2", "whisper", "clip"])
def test_other_architectures_pass(name: str, tiny_dirs: dict[str, Path], tmp_path: Path) -> None:
    # whole-sequence exports (with their caches, T5 and Whisper are checked by generating: test_generation.py)
    result = onnx_nb.export(str(tiny_dirs[name]), out=tmp_path / "m.onnx", progress=False, cache=False)
    report = onnx_nb.check_parity(result, progress=False)
    assert report, repr(report)
    shapes = {r.shape for r in report.rows}
    assert len({s for s in shapes if " · " not in s}) == 3
    floats, ids = {"random", "negated", "scaled"}, {"ids"}
    want = {"t5": ids, "vit": floats, "wav2vec2": floats, "whisper": floats | ids, "clip": floats | ids}[name]
    assert {s.split(" · ")[1] for s in shapes if " · " in s} >= want


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
def test_perturbed_weight_names_its_consumer(bert_exports: dict[str, onnx_nb.ExportResult], exporter: str,
                                             tmp_path: Path) -> None:
    result = bert_exports[exporter]
    consumer = perturb(result.path, tmp_path / "bad.onnx", VALUE)
    report = onnx_nb.check_parity(result, tmp_path / "bad.onnx", progress=False)
    assert not report and all(r.status == "fail" for r in report.rows)
    assert report.divergence is not None
    assert report.divergence.node == consumer and report.divergence.module_path == VALUE
    assert report.divergence.op_type in ("MatMul", "Gemm")
    with pytest.raises(onnx_nb.ToleranceExceeded, match=consumer.replace(".", r"\.")):
        report.raise_for_failure()
    # the stored errors, judged looser, pass without re-running; atol alone does not (the scale rule)
    assert not report.rejudge(atol=1.0)
    assert report.rejudge(atol=1.0, max_scaled=10.0, min_cosine=0.0)
    assert not report.rejudge(atol=1e-9)
    assert "First diverging node" in report._repr_html_()
    assert "First diverging node" not in report.rejudge(atol=1.0, max_scaled=10.0, min_cosine=0.0)._repr_html_()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.onnx"], "no debug copies left behind"


def test_static_export_fails_at_other_shapes(tmp_path: Path) -> None:
    result = onnx_nb.export(tiny_models.build("bert"), out=tmp_path / "s.onnx", dynamic=False, progress=False)
    report = onnx_nb.check_parity(result, progress=False)
    assert not report
    statuses = [r.status for r in report.rows]
    assert statuses == ["pass", "shape-mismatch", "shape-mismatch", "pass", "pass"]  # probes at the sample's shape
    assert "axis 0 (batch) is fixed to 2" in report.rows[1].note
    assert "exported with dynamic=False: re-export with dynamic=True" in report.rows[1].note
    with pytest.raises(onnx_nb.ShapeMismatch, match="batch"):
        report.raise_for_failure()


class _Strided(torch.nn.Module):
    """Halves an image and joins it to itself again (as a UNet's levels do), scaled by a scalar input."""

    def __init__(self) -> None:
        super().__init__()
        self.down = torch.nn.Conv2d(2, 2, 3, stride=2, padding=1)
        self.up = torch.nn.Upsample(scale_factor=2)

    def forward(self, image: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return torch.cat([image, self.up(self.down(image))], 1) * scale


def test_scalar_inputs_and_halved_images_are_checked_at_shapes_they_allow(tmp_path: Path) -> None:
    """A 0-d input stays 0-d in every check and probe (numpy had made it 1-d: ONNX Runtime then broadcast it
    wrongly), and an image axis is checked at lengths the network can halve (16 -> 48, not 33)."""
    sample = {"image": torch.randn(1, 2, 16, 16), "scale": torch.tensor(3.0)}
    result = onnx_nb.export(_Strided(), sample, dynamic={"image": {0: "batch", 2: "height", 3: "width"}},
                            out=tmp_path / "s.onnx", progress=False)
    assert result.check["passed"] and result.check["shapes"]["image"][2:] == [32, 32]
    report = onnx_nb.check_parity(result, progress=False)
    assert report and [r.status for r in report.rows] == ["pass"] * 6
    assert "height=48, width=48" in report.rows[2].shape


@pytest.mark.lower_bounds
def test_variant_against_parent(bert_exports: dict[str, onnx_nb.ExportResult], tmp_path: Path) -> None:
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    parent = bert_exports["dynamo"].path
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    opts.optimized_model_filepath = str(tmp_path / "opt.onnx")
    ort.InferenceSession(str(parent), opts, providers=["CPUExecutionProvider"])
    optimized = onnx_nb.check_parity(parent, tmp_path / "opt.onnx", progress=False)
    assert optimized and optimized.reference == "ONNX dynamo.onnx" and optimized.precision == "fp32"

    plain = onnx.load(str(parent))
    del plain.graph.value_info[:]
    onnx.save(plain, str(tmp_path / "plain.onnx"))
    quantize_dynamic(str(tmp_path / "plain.onnx"), str(tmp_path / "int8.onnx"), weight_type=QuantType.QInt8,
                     per_channel=True)
    int8 = onnx_nb.check_parity(parent, tmp_path / "int8.onnx", progress=False)
    assert int8.precision == "int8" and int8.rows[0].tolerance is not None
    assert int8.rows[0].tolerance.mode == "task" and int8, repr(int8)

    consumer = perturb(parent, tmp_path / "bad.onnx", VALUE)
    bad = onnx_nb.check_parity(parent, tmp_path / "bad.onnx", progress=False)
    assert not bad and bad.divergence is not None and bad.divergence.node == consumer
    assert "reference ONNX" in bad.divergence.method

    # Damaged variants: the optimized graph (fused, renamed nodes) and the INT8 one.
    for name, ops in (("opt.onnx", ("MatMul", "FusedMatMul", "Gemm")), ("int8.onnx", ("MatMulInteger",))):
        consumer = damage_middle_weight(tmp_path / name, tmp_path / f"bad_{name}", ops)
        report = onnx_nb.check_parity(parent, tmp_path / f"bad_{name}", progress=False)
        assert not report and report.divergence is not None, (name, repr(report))
        assert report.divergence.node == consumer, (name, report.divergence)


def damage_middle_weight(path: Path, out: Path, ops: tuple[str, ...]) -> str:
    """Replace with noise the weight of the last node among ``ops`` that reads an initializer."""
    proto = onnx.load(str(path))
    inits = {i.name: i for i in proto.graph.initializer}
    nodes = [n for n in proto.graph.node if n.op_type in ops and any(i in inits and len(inits[i].dims) == 2
                                                                      for i in n.input)]
    node = nodes[-1]
    name = next(i for i in node.input if i in inits and len(inits[i].dims) == 2)
    weight = onnx.numpy_helper.to_array(inits[name])
    rng = np.random.default_rng(0)
    if np.issubdtype(weight.dtype, np.integer):
        noise = rng.integers(-127, 128, weight.shape)
    else:
        noise = rng.normal(0, 10 * float(weight.std()), weight.shape)
    inits[name].CopyFrom(onnx.numpy_helper.from_array(noise.astype(weight.dtype), name))
    onnx.save(proto, str(out))
    return node.name


def test_unavailable_and_unknown_providers(bert_exports: dict[str, onnx_nb.ExportResult]) -> None:
    report = onnx_nb.check_parity(bert_exports["dynamo"], providers=("cpu", "cuda"), progress=False)
    unavailable = report.unavailable
    assert len(unavailable) == 1 and unavailable[0].provider == "cuda"
    assert "available: " in unavailable[0].note and "cpu" in unavailable[0].note
    assert report, "CPU rows still pass; the missing provider is shown, not dropped"
    assert "unavailable" in repr(report)
    with pytest.raises(onnx_nb.InvalidArgumentError, match="Unknown execution provider 'tpu9'"):
        onnx_nb.check_parity(bert_exports["dynamo"], providers=("tpu9",), progress=False)
    with pytest.raises(onnx_nb.ProviderUnavailableError, match=r"None of the requested .*onnxruntime-gpu"):
        onnx_nb.check_parity(bert_exports["dynamo"], providers="CUDAExecutionProvider", progress=False)


def test_explicit_shapes_and_per_output_tolerance(bert_exports: dict[str, onnx_nb.ExportResult],
                                                   tmp_path: Path) -> None:
    result = bert_exports["dynamo"]
    report = onnx_nb.check_parity(result, shapes=[{"batch": 3, "sequence": 20}], probes=False, progress=False)
    assert [r.shape for r in report.rows] == ["batch=3, sequence=20"]
    probed = onnx_nb.check_parity(result, shapes=[{"batch": 3, "sequence": 20}], probes=["ids"], progress=False)
    assert [r.shape for r in probed.rows] == ["batch=3, sequence=20", "batch=3, sequence=20 · ids"]
    with pytest.raises(onnx_nb.InvalidArgumentError, match="Unknown probe 'sideways'"):
        onnx_nb.check_parity(result, probes=["sideways"], progress=False)
    perturb(result.path, tmp_path / "bad.onnx", VALUE)
    loose = onnx_nb.check_parity(result, tmp_path / "bad.onnx",
                                 tolerances={"logits": {"atol": 1.0, "max_scaled": 10.0, "min_cosine": 0.0}},
                                 localize=False, progress=False)
    assert loose and loose.divergence is None
    with pytest.raises(onnx_nb.InvalidArgumentError, match="neither dynamic axes"):
        onnx_nb.check_parity(result, shapes=[{"height": 3}], progress=False)


def test_html_escapes_markup_in_names(tmp_path: Path) -> None:
    class Evil(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"<img src=x onerror=alert(1)>": x * 2}

    result = onnx_nb.export(Evil(), torch.randn(2, 3), out=tmp_path / "e.onnx", progress=False)
    html = onnx_nb.check_parity(result, progress=False)._repr_html_()
    assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html


def test_interactive_view_rejudges(bert_exports: dict[str, onnx_nb.ExportResult], tmp_path: Path) -> None:
    from onnx_nb.results.parity_view import view

    perturb(bert_exports["dynamo"].path, tmp_path / "bad.onnx", VALUE)
    report = onnx_nb.check_parity(bert_exports["dynamo"], tmp_path / "bad.onnx", localize=False, progress=False)
    widget = view(report)
    table = widget.children[-1]
    assert "✗ fail" in table.value and "✓ pass" not in table.value
    atol, _rtol = widget.children[0].children
    scaled, cosine = widget.children[1].children
    atol.value = 1.0
    assert "✗ fail" in table.value, "atol alone does not pass errors this large against the output's scale"
    scaled.value, cosine.value = 10.0, 0.9
    assert "✓ pass" in table.value and "✗ fail" not in table.value
    assert widget.state["report"]


def test_magic_and_cli(ip: Any, bert_exports: dict[str, onnx_nb.ExportResult], tmp_path: Path) -> None:
    ip.user_ns["res"] = bert_exports["dynamo"]
    report = ip.run_line_magic("onnx_parity", "res --shapes 'batch=3,sequence=9;sample' --atol 1e-3")
    assert report and [r.shape for r in report.rows][:2] == ["batch=3, sequence=9", "sample batch=2, sequence=7"]
    assert report.rows[2].shape == "batch=3, sequence=9 · ids"
    unprobed = ip.run_line_magic("onnx_parity", "res --shapes sample --no-probes")
    assert [r.shape for r in unprobed.rows] == ["sample batch=2, sequence=7"]
    assert report.rows[0].tolerance.atol == 1e-3

    parent = str(bert_exports["dynamo"].path)
    perturb(bert_exports["dynamo"].path, tmp_path / "bad.onnx", VALUE)
    ok = subprocess.run([sys.executable, "-m", "onnx_nb", "check", parent, parent, "--json"],
                        capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["passed"] is True
    bad = subprocess.run([sys.executable, "-m", "onnx_nb", "check", parent, str(tmp_path / "bad.onnx")],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1 and "first diverging node" in bad.stdout


@pytest.mark.lower_bounds
def test_real_minilm_parity(minilm_export: onnx_nb.ExportResult) -> None:
    result = minilm_export  # read only (conftest's shared exports)
    report = onnx_nb.check_parity(result, progress=False)
    assert report, repr(report)
    assert max(r.max_abs or 0 for r in report.rows) < 1e-4
    assert any("Padded token positions" in n for n in report.notes)


def test_parity_reference_length_holds_against_the_configs_max_new_tokens() -> None:
    """SeamlessM4T's generation config sets max_new_tokens=256, which transformers lets override max_length: the
    parity reference generated 256 tokens for each probe where it asked for 9 (INT8's parity took minutes)."""
    import tiny_models
    from onnx_nb.steps.parity.probes import plain

    model = tiny_models.build_generative("bart")
    model.generation_config.max_new_tokens = 256
    with torch.no_grad():
        out = model.generate(torch.tensor([[5, 6, 7, 8]]), **plain(6, 1, decoder_start_token_id=2))
    assert out.shape == (1, 6), out.shape


def test_errors_near_zero_in_an_output_of_large_values_are_judged_at_its_fp32_rounding() -> None:
    """One matrix product of large values summed in another order (float64 then rounded, against numpy's float32
    BLAS): its elements near zero differ by far more than atol, as fp32 rounding at the products' scale makes
    them; the fp32 policy passes it, saying the ulp floor decided. An error of 1% of the output's scale at one
    element still fails."""
    from onnx_nb.results.tolerance import POLICY, measure

    rng = np.random.default_rng(0)
    a = rng.normal(0, 40, (64, 2048)).astype(np.float32)
    b = rng.normal(0, 40, (2048, 64)).astype(np.float32)
    reference = a @ b
    other_order = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    _, errors = measure(other_order, reference, "scores")
    assert (np.abs(other_order - reference) > 1e-4 + 1e-3 * np.abs(reference)).any()  # numpy's rule alone fails
    verdict = errors.judge(POLICY["fp32"])
    assert verdict["passed"] and "fp32 ulps of the output's largest value" in verdict["note"], verdict
    wrong = other_order.copy()
    wrong.flat[int(np.argmin(np.abs(reference)))] += 0.01 * float(np.sqrt(np.mean(reference.astype(np.float64) ** 2)))
    assert not measure(wrong, reference, "scores")[1].judge(POLICY["fp32"])["passed"]


def test_a_file_giving_nan_where_the_reference_has_numbers_is_far_off_not_an_underflow() -> None:
    """ONNX Runtime's NaN where PyTorch gives numbers of a usable size (a negated mask made every softmax row empty):
    the check read the reference as "~0e+00 everywhere" and the cosine as 1, scale and cosine taken over the
    elements both had finite. Now over the reference's finite elements: a failure with no underflow note, cosine 0;
    infinities both sides have (an attention mask) still count as equal."""
    from onnx_nb.results.tolerance import EXPORT_CHECK, measure

    reference = np.random.default_rng(0).normal(0, 3, (4, 26, 64)).astype(np.float32)
    stats, errors = measure(np.full_like(reference, np.nan), reference, "last_hidden_state")
    verdict = errors.judge(EXPORT_CHECK)
    assert not verdict["passed"] and verdict["status"] == "fail" and "everywhere" not in verdict["note"], verdict
    assert stats["cosine"] == 0.0 and stats["max_abs"] == float("inf"), stats
    masked = reference.copy()
    masked[:, :, -1] = -np.inf
    stats, errors = measure(masked.copy(), masked, "scores")
    assert errors.judge(EXPORT_CHECK)["passed"] and stats["cosine"] > 0.999999, stats
