"""What a model type's image processor gives: its class, and the image size a sample of the model takes."""

from __future__ import annotations

from typing import Any

from ...runtime.shapes import SAMPLE_SIZES

IMAGE_SIDE = SAMPLE_SIZES["image_side"]  # where neither the config nor the processor names a size


def vision_config(config: Any) -> Any:
    """The config that describes a model's images: its ``vision_config``, a vision encoder-decoder's ``encoder``
    (ViT under TrOCR or Donut), else the config itself."""
    return getattr(config, "vision_config", None) or (
        config.encoder if getattr(config, "model_type", "") == "vision-encoder-decoder" else config)


def image_shape(model: Any) -> tuple[int, int]:
    """An image's height and width: the config's image size, else the size its model type's image processor
    resizes to (a text-line recognizer's 48 x 320, a pose model's 256 x 192; the vision config's type, else the
    model's), else 224 x 224."""
    vision = vision_config(model.config)
    size = getattr(vision, "image_size", None)
    if size is None:
        size = getattr(processor_class(getattr(vision, "model_type", "")) or processor_class(
            getattr(model.config, "model_type", "")), "size", None)
        if not (isinstance(size, dict) and isinstance(size.get("height"), int) and isinstance(size.get("width"), int)):
            size = IMAGE_SIDE
    if isinstance(size, int):
        return size, size
    return (size["height"], size["width"]) if isinstance(size, dict) else (size[0], size[-1])


def processor_class(model_type: str) -> Any:
    """The image processor class transformers registers for ``model_type`` and can use here (None where there is
    none, or where each needs a library this environment lacks: transformers then gives a placeholder whose
    attributes raise ImportError)."""
    import transformers
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES

    found = IMAGE_PROCESSOR_MAPPING_NAMES.get(model_type) or {}
    names = list(found.values()) if isinstance(found, dict) else [found] if isinstance(found, str) else list(found)
    for name in names:
        try:
            cls = getattr(transformers, name) if isinstance(name, str) else None
            if cls is not None and not getattr(cls, "is_dummy", False):
                return cls
        except Exception:  # noqa: BLE001 - a backend missing here: the next, else none
            continue
    return None
