"""Vision-language families whose tower takes an image of any size, told by ``image_sizes`` (Pixtral's towers:
Mistral 3, LightOn-OCR): one vision file for every image size.

Their ``get_image_features`` crops each image of a padded batch to its ``image_sizes`` row and numbers its patches
from it, and a trace of a tensor ``image_sizes`` fixes those values. The vision file instead takes one image, already
cropped to its size (``[1, channels, height, width]``, height and width dynamic), and hands the tower its size read
from the tensor's shape, so the crop, the patch positions and the projector's merge follow the shape symbolically.
The runners crop each image of the processor's batch to its ``image_sizes`` row before the file
(:func:`.vlm.per_image`); the file's metadata says so (``onnx_nb.sized_by``). Where the tower does not give the
model's features this way, the vision file is traced at the tower's size instead (:mod:`.vlm`). Only imported by
functions that already need torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ...runtime.facts import SIZED_BY
from .prompts import VisionPart, gives, image_features

SIZES = "image_sizes"


class SizedImageFeatures(VisionPart):
    """``forward(pixel_values) -> image_features``: one image of any size (a multiple of ``step`` a side, as the
    family's processor makes them) through the tower and projector, its ``image_sizes`` its own shape.
    ``other_sample()`` is an image a step taller and a step narrower, the export's check."""

    def __init__(self, model: Any, sample: torch.Tensor, step: int) -> None:
        super().__init__(model)
        self.sample = sample
        self.step = step
        self.onnx_metadata = {SIZED_BY: SIZES}
        self.related_axes = True  # patches, merged rows and positions all follow height and width

    def forward(self, pixel_values: torch.Tensor) -> dict[str, torch.Tensor]:
        from .prompts import image_rows

        sizes = [(pixel_values.shape[-2], pixel_values.shape[-1])]
        out = image_features(self.model)(pixel_values=pixel_values, image_sizes=sizes, return_dict=True)
        return {"image_features": image_rows(out)}

    def other_sample(self) -> dict[str, torch.Tensor]:
        height, width = (int(x) for x in self.sample.shape[-2:])
        g = torch.Generator().manual_seed(1)
        other = (height + self.step, max(width - self.step, self.step))
        return {"pixel_values": torch.randn(*self.sample.shape[:-2], *other, generator=g)}

    def model_pixels(self, other: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"pixel_values": other["pixel_values"], SIZES: torch.tensor([list(other["pixel_values"].shape[-2:])])}


def sized_part(model: Any, pixels: dict[str, torch.Tensor], features: torch.Tensor,
               reference: Callable[[Any, dict[str, torch.Tensor]], torch.Tensor]) -> tuple[Any, Any, Any] | None:
    """The vision part of a family whose images come with their ``image_sizes`` as one file for every size
    (module, sample, axes), or None where the family tiles its images instead (LLaVA-NeXT) or the module gives other
    features than the model's own (``features`` at the sample's size, ``reference(model, pixels)`` at another)."""
    values = pixels.get("pixel_values")
    if SIZES not in pixels or values is None or values.dim() != 4 or values.shape[0] != 1 or \
            getattr(model.config, "image_grid_pinpoints", None):
        return None
    vision = model.config.vision_config
    merge = int(getattr(model.config, "spatial_merge_size", 1) or 1)
    module = SizedImageFeatures(model, values, int(vision.patch_size) * merge)
    if not gives(module, {"pixel_values": values}, features, reference):  # else traced at the tower's size
        return None
    return module, {"pixel_values": values}, {"pixel_values": {2: "height", 3: "width"}}


def cropped(pixels: dict[str, Any], k: int) -> Any:
    """Image ``k`` of the processor's padded batch, cropped to its ``image_sizes`` row (``[1, channels, h, w]``)."""
    import numpy as np

    from ...errors import InvalidArgumentError

    if SIZES not in pixels:
        raise InvalidArgumentError(f"The images come without {SIZES}: pass the processor's whole output (each image's "
                                   "size says where its padding starts).")
    values, sizes = np.asarray(pixels["pixel_values"]), np.asarray(pixels[SIZES]).reshape(-1, 2)
    if sizes.shape[0] != values.shape[0]:
        raise InvalidArgumentError(f"pixel_values holds {values.shape[0]} images and {SIZES} {sizes.shape[0]} sizes: "
                                   "give the processor's output for these images (both together).")
    height, width = (int(x) for x in sizes[k])
    if height > values.shape[-2] or width > values.shape[-1] or min(height, width) < 1:
        raise InvalidArgumentError(f"{SIZES} row {k} is {height}x{width}, and its image is {values.shape[-2]}x"
                                   f"{values.shape[-1]} pixels: each size must fit inside its padded image.")
    return values[k:k + 1, :, :height, :width]
