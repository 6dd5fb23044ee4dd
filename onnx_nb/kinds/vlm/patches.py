"""Families whose processor hands the tower its image as a row of flat patches with each patch's (x, y) position
(Gemma 4: ``pixel_values [images, patches, 3 * patch * patch]`` and ``image_position_ids [images, patches, 2]``,
padding patches at (-1, -1); an image's count of soft tokens follows its own size and aspect), and decoders that
read a second, per-layer embedding of each token beside its embedding (Gemma 4's per-layer inputs, looked up from
the token ids with an image's tokens read as padding). Only imported by functions that already need torch."""

from __future__ import annotations

from typing import Any

import torch

POSITION_IDS = "image_position_ids"


def patch_sample(vision: Any, images: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Random patches of a square image two kernels of the tower's pooling a side (one where that is over 12
    patches), in row-major positions, with a kernel's worth of padding patches after them at (-1, -1) (what a batch
    padded to its largest image gives)."""
    pool = int(getattr(vision, "pooling_kernel_size", 1) or 1)
    side = 2 * pool if 2 * pool <= 12 else pool
    # a patch of model_patch_size where the tower merges smaller ones itself (Gemma 4 Unified's 48 = 3 x 16)
    patch = int(getattr(vision, "model_patch_size", None) or vision.patch_size)
    channels = int(getattr(vision, "num_channels", 3) or 3)
    count = side * side
    x, y = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="xy")
    positions = torch.stack([x, y], -1).reshape(count, 2)
    padded = torch.cat([positions, torch.full((pool * pool, 2), -1)], 0)
    pixels = torch.rand(images, count + pool * pool, channels * patch * patch, generator=generator)
    pixels[:, count:] = 0
    return {"pixel_values": pixels, POSITION_IDS: padded.expand(images, -1, -1).contiguous()}


def patch_axes(pixels: dict[str, Any]) -> dict[str, dict[int, str]]:
    """The vision file's free axis for a patch family: the count of patches (an image's size, its padding)."""
    return {n: {1: "patches"} for n in ("pixel_values", POSITION_IDS)} if POSITION_IDS in pixels else {}


def layer_table(model: Any) -> Any:
    """The embedding that holds every token's per-layer inputs (Gemma 4's ``embed_tokens_per_layer``, looked up by
    its text model's ``get_per_layer_inputs``), or None where the decoder reads none."""
    text = model.config.get_text_config()
    if not getattr(text, "hidden_size_per_layer_input", None):
        return None
    owner = next((m for m in model.modules() if callable(getattr(m, "get_per_layer_inputs", None))), None)
    return getattr(owner, "embed_tokens_per_layer", None)


def layer_inputs_shape(model: Any) -> tuple[int, int] | tuple[()]:
    """(layers, width) of the per-layer inputs the decoder takes beside its embeddings; () where it takes none."""
    if layer_table(model) is None:
        return ()
    text = model.config.get_text_config()
    return int(text.num_hidden_layers), int(text.hidden_size_per_layer_input)


def media_tokens(model: Any) -> tuple[int, ...]:
    """The ids the model reads as padding in its per-layer inputs: its image, video and audio tokens."""
    found = (getattr(model.config, k, None) for k in ("image_token_id", "video_token_id", "audio_token_id"))
    return tuple(int(t) for t in found if isinstance(t, int))


def layer_inputs(table: Any, shape: tuple[int, ...], input_ids: torch.Tensor, media: tuple[int, ...],
                 pad: int) -> torch.Tensor:
    """Each token's per-layer inputs ``[batch, sequence, layers, width]`` from ``table`` (:func:`layer_table`), a
    media token's (:func:`media_tokens`) and one outside the table's those of ``pad``, as the model reads its
    prompt."""
    outside = (input_ids < 0) | (input_ids >= table.num_embeddings)
    for token in media:
        outside = outside | (input_ids == token)
    ids = torch.where(outside, torch.full_like(input_ids, pad), input_ids)
    out: torch.Tensor = table(ids).reshape(*ids.shape, *shape)
    return out


def two_way_images(model: Any) -> bool:
    """The decoder lets an image's tokens attend each other both ways, marked by ``mm_token_type_ids`` (Gemma 4's
    larger models and Gemma 4 Unified: ``use_bidirectional_attention == "vision"``)."""
    import inspect

    text = model.config.get_text_config()
    return getattr(text, "use_bidirectional_attention", None) == "vision" and \
        "mm_token_type_ids" in inspect.signature(model.forward).parameters
