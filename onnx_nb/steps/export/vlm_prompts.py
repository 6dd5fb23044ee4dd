"""What a vision-language model's processor gives beside the pixels, as the family's forward reads it (token types,
image-token marks), and the shapes both export files share: a prompt with the family's count of image tokens, the
feature rows of a tower's output. Only imported by functions that already need torch."""

from __future__ import annotations

import inspect
from typing import Any

import torch


def takes_token_types(model: Any) -> bool:
    """The forward reads ``token_type_ids`` (Gemma 3, PaliGemma: an image's tokens see each other both ways)."""
    return "token_type_ids" in inspect.signature(model.forward).parameters


def types_rule(model: Any) -> str | None:
    """What the family's processor gives as ``token_type_ids`` for a prompt: ``"image"`` (Gemma 3: 1 at an image's
    tokens, which attend each other both ways), ``"prefix"`` (PaliGemma: 0 over the whole prompt, image and text,
    which attends both ways; 1 marks a suffix), None where the forward reads none. Read from the forward itself."""
    if not takes_token_types(model):
        return None
    for cls in (type(getattr(model, "model", model)), type(model)):
        try:
            if "token_type_ids == 0" in inspect.getsource(cls.forward):
                return "prefix"
        except (OSError, TypeError):
            continue
    return "image"


def prompt_extras(model: Any, ids: torch.Tensor, image_token: int) -> dict[str, torch.Tensor]:
    """What the family's processor gives beside a prompt's ids and mask: ``token_type_ids`` by the family's
    :func:`types_rule`, ``mm_token_type_ids`` (1 at an image token) where the forward reads them (Qwen-VL)."""
    rule = types_rule(model)
    out = {}
    if rule is not None:
        out["token_type_ids"] = torch.zeros_like(ids) if rule == "prefix" else (ids == image_token).long()
    if "mm_token_type_ids" in inspect.signature(model.forward).parameters:
        out["mm_token_type_ids"] = (ids == image_token).int()
    return out


def image_rows(out: Any) -> torch.Tensor:
    """A tower's output (``get_image_features``' or the tower's own) as the vision file's rows: the pooled features,
    Qwen3-VL's deepstack features after them in the same rows (``[rows, embeds * (1 + layers)]``)."""
    pooled = out.pooler_output if hasattr(out, "pooler_output") else out
    deep = getattr(out, "deepstack_features", None) or []
    return torch.cat([feature_rows(pooled)] + [feature_rows(d) for d in deep], -1)


def feature_rows(features: Any) -> torch.Tensor:
    """Per-image features (a tensor, or a list of one per image) as one ``[rows, width]`` tensor."""
    if isinstance(features, (list, tuple)):
        features = torch.cat([f.reshape(-1, f.shape[-1]) for f in features], 0)
    return features.reshape(-1, features.shape[-1])


def prompt_sample(image_token: int, features: int, images: int, vocab: int, seed: int = 0) -> torch.Tensor:
    """A batch of one prompt per image: two text tokens, the image's tokens, three text tokens."""
    g = torch.Generator().manual_seed(seed)
    each = features // images
    rows = []
    for _ in range(images):
        text = torch.randint(3, max(min(vocab, image_token), 4), (5,), generator=g).tolist()
        rows.append(text[:2] + [image_token] * each + text[2:])
    return torch.tensor(rows)
