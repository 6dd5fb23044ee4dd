"""A timm image model (random weights, from its constructor) exports in one call with its image size dynamic and
passes parity; timm is in the vision extra, installed with the suite."""

from __future__ import annotations

from pathlib import Path

import pytest

import onnx_nb

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")


def test_timm_resnet_exports_with_dynamic_image_size(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = timm.create_model("resnet10t", pretrained=False, num_classes=10).eval()
    r = onnx_nb.export(model, torch.rand(1, 3, 160, 160), out=tmp_path / "resnet10t.onnx", progress=False)
    assert r.status == "verified" and r.inputs[0].shape == ["batch", 3, "height", "width"]
    assert r.check["shapes"]["x"][2] > 160
    assert onnx_nb.check_parity(r, progress=False).passed
