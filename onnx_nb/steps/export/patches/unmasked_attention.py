"""A model whose attention is causal or not depending on its padding (transformers' Gemma family with
``use_bidirectional_attention``: PaliGemma's text model, so ColPali's).

Under sdpa, transformers builds no mask for a batch without padding and no cache (``create_causal_mask`` returns
None) and the attention module then attends with its own ``is_causal``, False for these models: every token sees
every other. With padding it builds a causal mask with the padding in it. A trace always builds the mask (the
skip is off while tracing), so both exporters wrote the causal form, and the file answered an unpadded batch, the
processor's output for one query, otherwise than PyTorch (ColPali's embeddings 0.065 off). Within
:func:`as_eager_skips`, the mask the model's code asks for is, in the graph, the model's own choice: no mask
(every token attending) where the 2-d mask is all ones, the causal mask with the padding where it is not. A mask
built with a past, with extra mask functions or token blocks, on a caller's demand (``allow_is_causal_skip``), or
for another attention implementation, is transformers' own; a model with sliding-window layers (PaliGemma 2's Gemma
2, whose sliding masks are built by another function) is left to transformers' masks throughout.

Recognised by what the model holds: a module whose config sets ``use_bidirectional_attention`` and whose
``is_causal`` is False; the mask function is lent to every source module of the model that calls
transformers' ``create_causal_mask``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from .contract import Patch

NAME = "create_causal_mask"


def _unmasked_when_unpadded(original: Any) -> Any:
    def create_causal_mask(config: Any, inputs_embeds: Any, attention_mask: Any, cache: Any = None,
                           *args: Any, **kwargs: Any) -> Any:
        import torch

        built = original(config, inputs_embeds, attention_mask, cache, *args, **kwargs)
        shaped = (config, inputs_embeds, attention_mask, cache, built)
        # transformers' own mask wherever its eager code builds one too: extra mask functions or token blocks, a
        # caller asking for the causal mask (allow_is_causal_skip=False), a cache under its old name, a past
        if args or kwargs.get("or_mask_function") or kwargs.get("and_mask_function") \
                or kwargs.get("block_sequence_ids") is not None or kwargs.get("allow_is_causal_skip") is False \
                or kwargs.get("past_key_values") is not None or not _skips(*shaped):
            return built
        unpadded = attention_mask.bool().all()
        if built.dtype == torch.bool:  # True: attend (ONNX Runtime has no Where over booleans)
            return built | unpadded
        return torch.where(unpadded, torch.zeros_like(built), built)  # an additive mask

    return create_causal_mask


def _skips(config: Any, inputs_embeds: Any, attention_mask: Any, cache: Any, built: Any) -> bool:
    """Whether eager sdpa code would have built no mask for an unpadded batch here (so attended without one): no
    past (no cache, or an empty one that grows with the tokens), keys as long as the queries, no sliding window."""
    import torch

    if getattr(config, "use_bidirectional_attention", None) is not True:
        return False
    empty = cache is None or (not getattr(cache, "is_compileable", False) and cache.get_seq_length() == 0)
    return empty and getattr(config, "_attn_implementation", None) == "sdpa" and _unwindowed(config) \
        and isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 2 \
        and attention_mask.shape[-1] == inputs_embeds.shape[1] \
        and isinstance(built, torch.Tensor) and built.dim() == 4


def _unwindowed(config: Any) -> bool:
    """No sliding-window layers: those build their own mask (``create_sliding_window_causal_mask``), not lent here,
    so a model with them (PaliGemma 2's Gemma 2) keeps transformers' masks throughout rather than half of each."""
    return getattr(config, "sliding_window", None) is None and "sliding_attention" not in (
        getattr(config, "layer_types", None) or ())


def _bidirectional(model: Any) -> bool:
    return any(getattr(m, "is_causal", None) is False
               and getattr(getattr(m, "config", None), "use_bidirectional_attention", None) is True
               and _unwindowed(m.config)
               for m in model.modules())


@contextlib.contextmanager
def as_eager_skips(model: Any) -> Iterator[list[str]]:
    """Within: the model's source modules that call transformers' ``create_causal_mask`` get one that leaves an
    unpadded batch unmasked, as eager sdpa code does; yields their names. Their globals come back on leaving."""
    from .lending import lent_to_sources, source_modules

    if not hasattr(model, "modules") or not _bidirectional(model):
        yield []
        return
    from transformers import masking_utils

    original = masking_utils.create_causal_mask
    found = [s for s in source_modules(model) if vars(s).get(NAME) is original]
    with lent_to_sources(found, NAME, _unmasked_when_unpadded(original)) as names:
        yield names


PATCH = Patch(
    name="unmasked_attention",
    applies_to="models with a module whose config sets use_bidirectional_attention and whose is_causal is False "
               "(the Gemma family's flag: PaliGemma's text model, ColPali's)",
    replaces="transformers' create_causal_mask in the model's source modules, for masks built without a cache",
    why="eager sdpa code builds no mask for an unpadded batch (the module then attends every token) and a causal "
        "one with padding; a trace always builds it, so the file was causal where PyTorch was not",
    during=as_eager_skips)
