"""What a vision-language model's processor gives beside the pixels, as the family's forward reads it (token types,
image-token marks), and the shapes both export files share: a prompt with the family's count of image tokens, the
feature rows of a tower's output; and what every vision module shares (:class:`VisionPart`, the screen
:func:`gives`). Only imported by functions that already need torch."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from ...errors import InvalidArgumentError


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
    out: torch.Tensor = features.reshape(-1, features.shape[-1])
    return out


def prompt_sample(image_token: int, features: int, images: int, vocab: int, seed: int = 0) -> torch.Tensor:
    """A batch of one prompt per image: two text tokens, the image's tokens, three text tokens."""
    g = torch.Generator().manual_seed(seed)
    each = features // images
    rows = []
    for _ in range(images):
        text = torch.randint(3, max(min(vocab, image_token), 4), (5,), generator=g).tolist()
        rows.append(text[:2] + [image_token] * each + text[2:])
    return torch.tensor(rows)


class VisionPart(torch.nn.Module):
    """A vision file's module: it holds the model (``.model``), which later steps find in it. A module for more
    than one image size also gives ``other_sample()`` (its inputs at another size, the export's check) and
    ``model_pixels(other)`` (the same image as the model's ``get_image_features`` takes it)."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def other_sample(self) -> dict[str, torch.Tensor]:
        raise NotImplementedError(type(self).__name__)

    def model_pixels(self, other: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        raise NotImplementedError(type(self).__name__)


def gives(module: VisionPart, sample: dict[str, torch.Tensor], features: torch.Tensor,
          reference: Callable[[Any, dict[str, torch.Tensor]], torch.Tensor]) -> bool:
    """``module`` gives ``features`` for ``sample``, and at its ``other_sample()`` the model's own features for that
    image (``reference(model, pixels)``): the screen before a vision file for more than one size is exported."""
    try:
        other = module.other_sample()
        with torch.no_grad():
            if not _close(module(**sample)["image_features"], features):
                return False
            want = reference(module.model, module.model_pixels(other))
            return _close(module(**other)["image_features"], want)
    except Exception:  # noqa: BLE001 - the tower wants its inputs otherwise: traced at one size
        return False


def _close(got: torch.Tensor, want: torch.Tensor) -> bool:
    """The same features up to the order of sums (the traced attention runs torch's math kernel, not its fused
    one): within a thousandth of their largest value. The files are judged by the export's checks."""
    return got.shape == want.shape and float((got - want).abs().max()) <= 1e-3 * float(want.abs().max()) + 1e-6


def image_features(model: Any) -> Any:
    """The model's ``get_image_features``, or its inner model's where the outer class does not pass it on
    (DeepSeek-VL, Janus, PerceptionLM); None when neither has one."""
    for owner in (model, getattr(model, "model", None)):
        found = getattr(owner, "get_image_features", None)
        if callable(found):
            return found
    return None


def image_feature_inputs(model: Any) -> set[str]:
    """The inputs ``get_image_features`` names: the outer class's, and its inner model's where the outer passes its
    keyword arguments on (VideoLLaMA 3's outer method names no ``image_merge_sizes``; its inner one needs them)."""
    names: set[str] = set()
    for owner in (model, getattr(model, "model", None)):
        found = getattr(owner, "get_image_features", None)
        if not callable(found):
            continue
        params = inspect.signature(found).parameters
        names |= {n for n, p in params.items() if p.kind is not p.VAR_KEYWORD}
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            break
    return names


def check_counts(input_ids: Any, image_token: int, features: int, media: str = "image") -> None:
    """A prompt's image (``media``) tokens against the images' feature rows: refused, saying both counts, when they
    differ."""
    import numpy as np

    tokens = int((np.asarray(input_ids) == image_token).sum())
    if tokens != features:
        given = "images" if media == "image" else media
        raise InvalidArgumentError(
            f"The prompts hold {tokens} {media} tokens (id {image_token}) and the {given} give {features} feature "
            f"rows: they must match. Make the prompts with the model's processor (processor(text=..., {given}=...) "
            f"expands each {media} placeholder to the family's count), or put that many {media} tokens in the token "
            "ids.")
