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


def test_timm_attention_off_its_fused_kernel_lets_dynamo_write_beit(tmp_path: Path) -> None:
    """timm's BEiT reshapes the fused attention kernel's output in a layout its decomposition does not give ("Cannot
    view a tensor with shape ..."): dynamo is tried again with timm's attention modules off the fused kernel
    (``fused_attn``, timm's own switch), the file is dynamo's, and each module's switch comes back."""
    torch.manual_seed(0)
    model = timm.create_model("beit_base_patch16_224", pretrained=False, depth=2, embed_dim=64, num_heads=2,
                              num_classes=10).eval()
    kernels = [m for m in model.modules() if hasattr(m, "fused_attn")]
    assert kernels and all(m.fused_attn for m in kernels)
    r = onnx_nb.export(model, torch.rand(1, 3, 224, 224), out=tmp_path / "beit.onnx", progress=False)
    assert r.status == "verified" and r.exporter == "dynamo", r
    assert any(w.startswith("Traced with eager attention") and "Cannot view" in w for w in r.warnings), r.warnings
    assert not any("TorchScript" in w for w in r.warnings), r.warnings
    assert all(m.fused_attn for m in kernels), "timm's switch given back"
