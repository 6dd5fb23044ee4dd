"""ONNX Runtime Mobile: optimize(target="mobile") writes the ORT-format file (.ort) and the reduced-operator config of
a custom build beside the optimized .onnx it holds; the .ort is opened in an ORT-format session, timed, and its
outputs equal the .onnx file's (rows "cpu:ort-format" in the variant's parity report). A .ort file given where a .onnx
is needed, renamed or not, is refused with a message that says so; the mobile providers say what runs them."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

import onnx_nb
from onnx_nb.runtime.onnxfile import is_ort_format
from onnx_nb.steps.variants.mobile import ORT_FORMAT, companions, ort_session


class SmallCnn(torch.nn.Module):
    """Conv + BatchNorm + ReLU twice, pooled, a linear head: what a phone's image model is made of."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.norm = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8)
        self.conv2, self.head = torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv2(torch.relu(self.norm(self.conv1(x)))))
        return self.head(x.mean((2, 3)))


@pytest.fixture(scope="module")
def cnn(tmp_path_factory: pytest.TempPathFactory) -> onnx_nb.ExportResult:
    torch.manual_seed(0)
    return onnx_nb.export(SmallCnn().eval(), torch.randn(2, 3, 16, 16),
                          out=tmp_path_factory.mktemp("mobile") / "cnn.onnx", progress=False)


@pytest.fixture(scope="module")
def phone(cnn: onnx_nb.ExportResult) -> onnx_nb.Variant:
    return onnx_nb.optimize(cnn, target="mobile")


def test_ort_file_and_config_beside_the_onnx(cnn: onnx_nb.ExportResult, phone: onnx_nb.Variant) -> None:
    ort_file, config = companions(phone.path)
    assert phone.path.name == "cnn.mobile.onnx" and ort_file.name == "cnn.mobile.ort"
    assert config.name == "cnn.mobile.required_operators.config"
    assert ort_file.read_bytes()[4:8] == b"ORTM" and is_ort_format(ort_file) and not is_ort_format(phone.path)
    lines = [line for line in config.read_text().splitlines() if not line.startswith("#")]
    assert lines and all(re.fullmatch(r"(ai\.onnx|com\.microsoft);\d+;\w+(,\w+)*", line) for line in lines), lines
    ops = {op for line in lines for op in line.split(";")[2].split(",")}
    assert ops & {"Conv", "FusedConv"} and "Gemm" in ops, ops
    assert "# - cnn.mobile.ort" in config.read_text() and "/tmp" not in config.read_text()  # no scratch path
    left = sorted(p.name for p in cnn.path.parent.iterdir())
    assert left == ["cnn.mobile.onnx", "cnn.mobile.ort", "cnn.mobile.required_operators.config", "cnn.onnx"], left
    # the .onnx is the graph the .ort holds (ORT's level "all" for ARM: Conv + ReLU fused)
    assert phone.recipe["optimization_style"] == "Fixed" and phone.recipe["target_platform"] == "arm"
    assert phone.size_after == phone.path.stat().st_size


def test_ort_format_session_is_timed_and_its_rows_pass(phone: onnx_nb.Variant) -> None:
    mobile = phone.runtime["mobile"]
    assert mobile["load_ms"] > 0 and mobile["onnx_load_ms"] > 0
    assert mobile["ort_bytes"] == Path(mobile["ort_file"]).stat().st_size > 1000
    assert phone and phone.parity, phone.parity
    rows = [r for r in phone.parity.rows if r.provider == ORT_FORMAT]
    cpu = [r for r in phone.parity.rows if r.provider == "cpu"]
    assert rows and all(r.status == "pass" for r in rows) and {r.shape for r in rows} == {r.shape for r in cpu}
    assert mobile["max_abs_vs_onnx"] == 0.0 == max(r.max_abs for r in rows)  # the same graph, the same kernels
    assert any("session.load_model_format=ORT" in n for n in phone.parity.notes)
    text, html = repr(phone), phone._repr_html_()
    for shown in (text, html):
        assert "ONNX Runtime Mobile" in shown and "cnn.mobile.ort" in shown and "loads in" in shown
        assert "identical to the .onnx" in shown
    assert json.loads(json.dumps(phone.to_dict()))["runtime"]["mobile"]["ort_file"] == mobile["ort_file"]


def test_ort_outputs_equal_the_onnx_outputs(phone: onnx_nb.Variant) -> None:
    """On an input of its own: the .ort in an ORT-format session and the .onnx (as converted: no x86 NCHWc layout)
    give the same bits; the .onnx as a desktop session opens it stays within fp32 tolerance."""
    x = np.random.default_rng(7).standard_normal((3, 3, 24, 24)).astype(np.float32) * 4
    mobile = ort_session(companions(phone.path)[0]).run(None, {"x": x})[0]
    same = ort.InferenceSession(str(phone.path), providers=["CPUExecutionProvider"],
                                disabled_optimizers=["NchwcTransformer"]).run(None, {"x": x})[0]
    desktop = ort.InferenceSession(str(phone.path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.array_equal(mobile, same)
    assert np.abs(mobile - desktop).max() < 1e-5


def test_existing_files_need_overwrite(cnn: onnx_nb.ExportResult, phone: onnx_nb.Variant, tmp_path: Path) -> None:
    with pytest.raises(onnx_nb.OutputExistsError, match="overwrite=True"):
        onnx_nb.optimize(cnn, target="mobile")
    out = tmp_path / "a<b>.onnx"  # a name with markup: shown escaped
    (tmp_path / "a<b>.ort").write_bytes(b"an older phone file")
    with pytest.raises(onnx_nb.OutputExistsError, match=r"a<b>\.ort already exists"):
        onnx_nb.optimize(cnn, target="mobile", out=out)
    assert not out.exists() and (tmp_path / "a<b>.ort").read_bytes() == b"an older phone file"
    again = onnx_nb.optimize(cnn, target="mobile", out=out, overwrite=True, validate=False)
    assert is_ort_format(tmp_path / "a<b>.ort") and again.parity is None and again.runtime["mobile"]["load_ms"] > 0
    assert "a&lt;b&gt;.ort" in again._repr_html_() and "a<b>" not in again._repr_html_()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a<b>.onnx", "a<b>.ort", "a<b>.required_operators.config"]
    with pytest.raises(onnx_nb.InvalidArgumentError, match=r"name the variant's \.onnx file"):
        onnx_nb.optimize(cnn, target="mobile", out=tmp_path / "x.ort")
    with pytest.raises(onnx_nb.InvalidArgumentError, match="'mobile'"):
        onnx_nb.optimize(cnn, target="phone")


def test_an_ort_file_where_an_onnx_is_needed(cnn: onnx_nb.ExportResult, phone: onnx_nb.Variant,
                                             tmp_path: Path) -> None:
    ort_file = companions(phone.path)[0]
    renamed = tmp_path / "model.onnx"  # a .ort renamed: told apart by its flatbuffer head
    shutil.copyfile(ort_file, renamed)
    calls: list[Any] = [
        lambda p: onnx_nb.check_parity(cnn, p, progress=False),
        lambda p: onnx_nb.check_parity(p, progress=False),  # a file checked alone
        lambda p: onnx_nb.quantize(p, out=tmp_path / "q.onnx"),
        lambda p: onnx_nb.optimize(p, out=tmp_path / "o.onnx"),
        lambda p: onnx_nb.benchmark(p, providers="cpu", runs=2, progress=False),
        lambda p: onnx_nb.export(p, progress=False),  # adopting a downloaded .onnx
        onnx_nb.summary, onnx_nb.check_model,
    ]
    for path in (ort_file, renamed):
        for call in calls:
            with pytest.raises(onnx_nb.InvalidModelError,
                               match=r"an ORT-format file for ONNX Runtime Mobile; pass the \.onnx it was made from"):
                call(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]  # nothing written


def test_an_onnx_file_that_starts_like_one_is_still_onnx(cnn: onnx_nb.ExportResult, tmp_path: Path) -> None:
    """ir_version, then a producer name "ORTM...": bytes 4..8 read ORTM, but the file is ONNX (no flatbuffer
    root offset before them)."""
    model = onnx.load(str(cnn.path))
    model.producer_name = "ORTM tools"
    path = tmp_path / "ortm.onnx"
    onnx.save(model, str(path))
    assert path.read_bytes()[4:8] == b"ORTM" and not is_ort_format(path)
    onnx_nb.check_model(path)


def test_over_two_gigabytes_is_refused(tmp_path: Path) -> None:
    """A flatbuffer holds at most 2 GB: a model whose weights are larger is refused before any work (its data file
    sparse here: it takes no disk)."""
    from onnx import TensorProto, helper

    count = 2**29 + 16  # fp32: just over 2 GiB
    weight = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[count])
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "big.data"), ("offset", "0"), ("length", str(count * 4))):
        weight.external_data.add(key=key, value=value)
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "big",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [count])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [count])], [weight])
    path = tmp_path / "big.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    with open(tmp_path / "big.data", "wb") as f:
        f.truncate(count * 4)
    with pytest.raises(onnx_nb.OptimizationError, match="holds at most 2 GB"):
        onnx_nb.optimize(path, target="mobile")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.data", "big.onnx"]


def test_mobile_providers_say_what_runs_them() -> None:
    from onnx_nb.runtime.providers import providers_named

    nnapi, coreml, xnnpack = providers_named(["nnapi", "coreml", "xnnpack"])
    assert not nnapi.available and "onnxruntime-android" in nnapi.reason and "addNnapi()" in nnapi.reason
    assert "--minimal_build extended" in nnapi.reason and "Runtime" in nnapi.reason
    assert not coreml.available and "CocoaPods" in coreml.reason and "appendCoreMLExecutionProvider" in coreml.reason
    assert not xnnpack.available and "addXnnpack" in xnnpack.reason and "--use_xnnpack" in xnnpack.reason
    assert "--include_ops_by_config" in xnnpack.reason and "available: " in xnnpack.reason


def test_command_line_target(cnn: onnx_nb.ExportResult, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from onnx_nb.frontends import cli, specs

    ns = cli.parser().parse_args(["optimize", "m.onnx", "--target", "mobile"])
    assert specs.optimize_kwargs(ns)["target"] == "mobile"
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["optimize", "m.onnx", "--target", "phone"])
    assert cli.main(["optimize", str(cnn.path), "--target", "mobile", "--out", str(tmp_path / "c.onnx"),
                     "--json"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert made["recipe"]["target"] == "mobile" and made["runtime"]["mobile"]["ort_file"].endswith("c.ort")
    assert any(r["provider"] == ORT_FORMAT and r["status"] == "pass" for r in made["parity"]["rows"])


def test_magic_target(ip: Any, cnn: onnx_nb.ExportResult, tmp_path: Path) -> None:
    ip.user_ns["res"] = cnn
    made = ip.run_line_magic("onnx_optimize", f"res --target mobile --out {tmp_path / 'm.onnx'}")
    assert made.recipe["target"] == "mobile" and (tmp_path / "m.ort").exists() and made
