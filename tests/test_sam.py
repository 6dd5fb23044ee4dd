"""SAM in one call: a tiny transformers SamModel (random weights) exported as Optimum splits it, vision_encoder.onnx and
prompt_encoder_mask_decoder.onnx, each checked at other shapes; the two files chained in ONNX Runtime give SamModel's
masks (IoU of the binarized masks) and IoU scores at one point and at three (the number of points is dynamic); bad
input is a clear error."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch

import onnx_nb
from onnx_nb.errors import InvalidArgumentError, OnnxNbError, OutputExistsError
from onnx_nb.kinds.sam import export as sam
from onnx_nb.kinds.sam.adapter import is_sam
from onnx_nb.kinds.sam.result import SamExport

transformers = pytest.importorskip("transformers")


def tiny_sam() -> Any:
    """A SAM with a 128-pixel image (an 8x8 grid of 16-pixel patches), 32 channels everywhere and two layers per
    transformer; weights seeded at scales that give masks neither empty nor full (SamModel's own init leaves the
    vision encoder's norms and positions at zero)."""
    config = transformers.SamConfig(
        vision_config={"hidden_size": 32, "output_channels": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                       "image_size": 128, "patch_size": 16, "window_size": 4, "global_attn_indexes": [1],
                       "num_pos_feats": 16, "mlp_dim": 64},
        prompt_encoder_config={"hidden_size": 32, "image_size": 128, "patch_size": 16, "mask_input_channels": 4},
        mask_decoder_config={"hidden_size": 32, "mlp_dim": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                             "iou_head_hidden_dim": 32},
    )
    torch.manual_seed(0)
    model = transformers.SamModel(config).eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "positional_embedding" in name:  # random at its own scale already
                continue
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=gen) / p[0].numel() ** 0.5)
            else:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * torch.randn(p.shape, generator=gen))
    return model


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> SamExport:
    folder = tmp_path_factory.mktemp("sam")
    tiny_sam().save_pretrained(folder / "source")  # a folder, as a hub id's snapshot is
    return onnx_nb.export(folder / "source", out=folder / "onnx", progress=False)


def test_sam_exports_two_files_checked_at_other_shapes(exported: SamExport) -> None:
    assert exported.status == "verified" and bool(exported), repr(exported)
    assert list(exported.parts) == ["vision_encoder", "prompt_encoder_mask_decoder"]
    assert sorted(p.name for p in exported.folder.glob("*.onnx")) == ["prompt_encoder_mask_decoder.onnx",
                                                                      "vision_encoder.onnx"]
    assert not [p for p in exported.folder.iterdir() if p.name.startswith(".")]  # staged, then published
    encoder, decoder = exported.parts["vision_encoder"], exported.parts["prompt_encoder_mask_decoder"]
    assert [t.name for t in encoder.inputs] == ["pixel_values"]
    assert [t.name for t in encoder.outputs] == ["image_embeddings", "image_positional_embeddings"]
    assert [t.name for t in decoder.inputs] == ["image_embeddings", "image_positional_embeddings", "input_points",
                                                "input_labels"]
    assert [t.name for t in decoder.outputs] == ["iou_scores", "pred_masks"]
    points = next(t for t in decoder.inputs if t.name == "input_points")
    assert points.shape == ["batch", "point_batch", "points", 2]
    # exported at 2 images of 2 prompts of 2 points, checked in ONNX Runtime at 3 images of 4 prompts of 6 points
    assert encoder.check["passed"] and encoder.check["shapes"]["pixel_values"] == [3, 3, 128, 128]
    assert decoder.check["passed"] and decoder.check["shapes"]["input_points"] == [3, 4, 6, 2]
    assert next(t for t in decoder.outputs if t.name == "pred_masks").shape[2:] == [3, 32, 32]
    assert "prompt_encoder_mask_decoder.onnx" in repr(exported) and "SAM exported" in exported._repr_html_()
    assert type(exported.model).__name__ == "SamModel"  # loaded from the folder


@pytest.mark.parametrize("points", [1, 3])
def test_chained_onnx_masks_are_pytorchs(exported: SamExport, points: int) -> None:
    """Encoder then decoder in ONNX Runtime against SamModel(pixel_values, input_points, input_labels)."""
    report = onnx_nb.check_sam(exported, points)
    assert report.passed, report.summary
    assert report.points == [1, 1, points, 2] and report.masks == [1, 1, 3, 32, 32]
    assert report.mask_iou_min >= 0.9 and report.score_max_abs_diff <= 1e-3
    assert "mask IoU" in report._repr_html_() and report.to_dict()["passed"] is True


def test_batches_of_images_and_prompts(exported: SamExport) -> None:
    coords, labels = sam.sample_points(exported.model, 2, 4, point_batch=3, seed=5)
    labels[0, 1, -1] = -10  # a padding point, as SamProcessor pads prompts of fewer points
    report = onnx_nb.check_sam(exported, coords, labels)
    assert report.passed and report.masks == [2, 3, 3, 32, 32], report.summary
    two = torch.randn(2, 3, 128, 128, generator=torch.Generator().manual_seed(2))  # the batch follows the images
    assert onnx_nb.check_sam(exported, 2, pixel_values=two).masks == [2, 1, 3, 32, 32]


def test_the_mask_check_tells_another_model_apart(exported: SamExport) -> None:
    """The IoU measures something: a SamModel with other decoder weights is not matched by the files."""
    other = copy.deepcopy(exported.model)
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in other.mask_decoder.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=gen) * p.std().clamp_min(0.1))
    report = onnx_nb.check_sam(SamExport(exported.folder, exported.parts, other), 2)
    assert not report.passed and report.score_max_abs_diff > 1e-2


def test_bad_input_is_a_clear_error(exported: SamExport, tmp_path: Path) -> None:
    model = exported.model
    assert is_sam(model) and not is_sam(model.vision_encoder) and not is_sam(torch.nn.Linear(2, 2))
    with pytest.raises(OutputExistsError, match="overwrite=True"):
        onnx_nb.export(model, out=exported.folder, progress=False)
    with pytest.raises(OutputExistsError, match="overwrite=True"):  # a file's path names the folder: sam.onnx -> sam/
        onnx_nb.export(model, out=exported.folder.with_suffix(".onnx"), progress=False)
    with pytest.raises(InvalidArgumentError, match="sample: not for a SAM model"):
        onnx_nb.export(model, {"x": torch.zeros(1)}, out=tmp_path / "other", progress=False)
    half = copy.deepcopy(model).to(torch.float16)
    with pytest.raises(InvalidArgumentError, match="float32 on the CPU"):
        onnx_nb.export(half, out=tmp_path / "half", progress=False)
    assert not (tmp_path / "half").exists()

    class Sam(torch.nn.Module):  # facebookresearch/segment-anything's layout
        def __init__(self) -> None:
            super().__init__()
            self.image_encoder = self.prompt_encoder = self.mask_decoder = torch.nn.Identity()
            self.register_buffer("pixel_mean", torch.zeros(3))

    with pytest.raises(InvalidArgumentError, match="convert_sam_to_hf"):
        onnx_nb.export(Sam(), out=tmp_path / "meta", progress=False)
    with pytest.raises(InvalidArgumentError, match="points=0"):
        onnx_nb.check_sam(exported, 0)
    with pytest.raises(InvalidArgumentError, match=r"\[batch, point_batch, points, 2\]"):
        onnx_nb.check_sam(exported, [[10.0, 20.0]])
    with pytest.raises(InvalidArgumentError, match="128, 128"):
        onnx_nb.check_sam(exported, 1, pixel_values=torch.zeros(1, 3, 64, 64))
    with pytest.raises(OnnxNbError, match="check_sam takes"):
        onnx_nb.check_sam(exported.parts["vision_encoder"])  # type: ignore[arg-type]
