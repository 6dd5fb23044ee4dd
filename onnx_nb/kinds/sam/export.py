"""SAM (segment-anything) to ONNX in one call, as Optimum splits it: ``vision_encoder.onnx`` (``pixel_values``
to ``image_embeddings`` and ``image_positional_embeddings``), run once per image, and
``prompt_encoder_mask_decoder.onnx`` (those two, ``input_points`` [batch, point_batch, points, 2] and
``input_labels`` [batch, point_batch, points] to ``iou_scores`` and ``pred_masks``, three masks per prompt), run per
prompt; batch, point batch and the number of points are dynamic. Each part goes through :func:`onnx_nb.export`
and its check at other shapes; :func:`onnx_nb.check_sam` runs the two files chained in ONNX Runtime against
``SamModel``'s own forward and compares the masks by IoU. Only imported by :func:`onnx_nb.export` when it is
given a transformers ``SamModel``, its folder or hub id (torch and transformers are loaded then)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from .result import PARTS, SamExport


class SamVisionEncoderPart(torch.nn.Module):
    """The image's embeddings, and the image-wide positional embeddings the decoder adds to them (a constant of
    the weights, repeated per image, as Optimum's file gives them)."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> dict[str, torch.Tensor]:
        embeddings = self.model.vision_encoder(pixel_values).last_hidden_state
        positional = self.model.get_image_wide_positional_embeddings().repeat(pixel_values.shape[0], 1, 1, 1)
        return {"image_embeddings": embeddings, "image_positional_embeddings": positional}


class SamPromptDecoderPart(torch.nn.Module):
    """Points and their labels (1 object, 0 background, -1 not a point, -10 padding) embedded by the prompt
    encoder, then the mask decoder: three masks per prompt (``multimask_output=True``) at a quarter of the
    image's side, and their predicted IoU."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, image_embeddings: torch.Tensor, image_positional_embeddings: torch.Tensor,
                input_points: torch.Tensor, input_labels: torch.Tensor) -> dict[str, torch.Tensor]:
        # Every (image, prompt) pair is decoded alone, so the prompts are folded into the batch: the decoder's own
        # repeat_interleave over a dynamic point batch becomes an Expand that torch.export's ONNX translation
        # shapes wrongly (right only when batch == point_batch), and SamModel computes the same masks either way.
        batch, prompts = input_points.shape[0], input_points.shape[1]
        channels, height, width = image_embeddings.shape[1:]
        points = input_points.reshape(batch * prompts, 1, input_points.shape[2], 2)
        labels = input_labels.reshape(batch * prompts, 1, input_labels.shape[2])
        sparse, dense = self.model.prompt_encoder(input_points=points, input_labels=labels,
                                                  input_boxes=None, input_masks=None)

        def per_prompt(images: torch.Tensor) -> torch.Tensor:
            return images[:, None].expand(batch, prompts, channels, height, width).reshape(
                batch * prompts, channels, height, width)

        masks, scores = self.model.mask_decoder(
            image_embeddings=per_prompt(image_embeddings),
            image_positional_embeddings=per_prompt(image_positional_embeddings),
            sparse_prompt_embeddings=sparse, dense_prompt_embeddings=dense, multimask_output=True)[:2]
        return {"iou_scores": scores.reshape(batch, prompts, scores.shape[-1]),
                "pred_masks": masks.reshape(batch, prompts, *masks.shape[2:])}


def load_sam(model: Any) -> Any:
    """The model itself, or the ``SamModel`` in a folder or behind a hub id (loaded as any export loads one)."""
    if not isinstance(model, (str, Path)):
        return model
    from ...steps.export.machinery.logs import quiet_loading
    from ..hf.loading import load_model

    with quiet_loading([], local=Path(str(model)).expanduser().exists()):
        return load_model(str(model)).model


def side_of(value: Any) -> int:
    return int(value if isinstance(value, int) else value[0])


def sample_points(model: Any, batch: int, points: int, point_batch: int = 1,
                  seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Points inside the image (in its pixels, as SamProcessor gives them) and labels: 1 for the first point of
    each prompt, then alternately 0 and 1."""
    side = side_of(model.config.prompt_encoder_config.image_size)
    gen = torch.Generator().manual_seed(seed)
    coords = torch.rand(batch, point_batch, points, 2, generator=gen) * (side - 1)
    labels = torch.ones(batch, point_batch, points, dtype=torch.long)
    labels[..., 1::2] = 0
    return coords, labels


def samples(model: Any) -> dict[str, tuple[torch.nn.Module, dict[str, torch.Tensor],
                                            dict[str, dict[int, str]]]]:
    """Each part's module, sample inputs (one image at the model's size; one prompt of two points) and dynamic
    axes (Optimum's, the number of points included)."""
    vision = model.config.vision_config
    side = side_of(vision.image_size)
    grid = side // side_of(vision.patch_size)
    gen = torch.Generator().manual_seed(0)
    channels = int(vision.output_channels)
    points, labels = sample_points(model, 2, 2, point_batch=2)
    prompt = {0: "batch", 1: "point_batch", 2: "points"}
    return {
        "vision_encoder": (SamVisionEncoderPart(model),
                           {"pixel_values": torch.randn(2, int(vision.num_channels), side, side, generator=gen)},
                           {"pixel_values": {0: "batch"}}),
        "prompt_encoder_mask_decoder": (
            SamPromptDecoderPart(model),
            {"image_embeddings": torch.randn(2, channels, grid, grid, generator=gen),
             "image_positional_embeddings": model.get_image_wide_positional_embeddings().detach().repeat(2, 1, 1, 1),
             "input_points": points, "input_labels": labels},
            {"image_embeddings": {0: "batch"}, "image_positional_embeddings": {0: "batch"},
             "input_points": prompt, "input_labels": prompt}),
    }


def export_sam(model: Any, out: Any, overwrite: bool, progress: bool, opset: int | None, export: Any,
               name: str | None = None) -> SamExport:
    """Both parts into ``out`` (a folder; default: one named after ``name`` or the model's class) with ``export``
    (:func:`onnx_nb.export`), each checked at other shapes (two images; two images of three prompts of five
    points), all or nothing (:func:`~onnx_nb.steps.export.machinery.staged.write_parts`)."""
    from ...steps.export.machinery.staged import write_parts
    from ...steps.export.machinery.wrap import eval_mode

    with eval_mode(model):
        folder, parts, seconds = write_parts(PARTS, lambda: samples(model), name or type(model).__name__,
                                             out, overwrite, progress, opset, export)
    return SamExport(folder, parts, model, seconds)
