"""Longformer-style attention (Longformer, LED's encoder): each token attends to the tokens within
``one_sided_attn_window_size`` of it, and to the tokens marked global; a global token attends to every token through
projections of its own. The model pads the sequence to a multiple of the window and runs the band in overlapping
chunks (``as_strided`` views whose strides follow the length), and asks ``is_index_global_attn.any().item()``
before it computes the global part.

Neither exports: TorchScript bakes the padding and the chunk count (the file was wrong at another length, its check
failed), torch.export cannot guard the chunks' strides ("Could not guard on data-dependent expression"). Within
:func:`dense_bands` the attention computes the same thing over the whole sequence at once: the scores of every query
with every key, kept where the key is within the band and takes local attention (the model removes padding and
global keys from the band) or is global, one softmax over them (the model's one softmax over its global columns and
its band), padding queries zeroed as the model zeroes them; a global query's output is the model's global attention
(``query_global``, ``key_global``, ``value_global`` over every key but padding). The global part is always computed
and kept where a token is global, so there is no branch. The model's padding to the window becomes none (nothing
outside the band is read, so no padding is needed), which leaves its unpadding a no-op.

The cost: memory and work quadratic in the length (the model's are linear), fine at the lengths a notebook checks
and serves, not at Longformer's 4,096 or LED's 16,384 tokens with many heads.

Recognised by what the modules hold and take, not by family: attention holding ``query``, ``key``, ``value``,
``query_global``, ``key_global``, ``value_global`` and ``one_sided_attn_window_size`` whose forward takes
``(hidden_states, attention_mask, is_index_masked, is_index_global_attn, is_global_attn, output_attentions)``; the
padding, a model's ``_pad_to_window_size``.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import Any

from .contract import Patch

HOLDS = ("query", "key", "value", "query_global", "key_global", "value_global")
CALL = ("self", "hidden_states", "attention_mask", "is_index_masked", "is_index_global_attn", "is_global_attn",
        "output_attentions")


def dense_band_attention(self: Any, hidden_states: Any, attention_mask: Any = None, is_index_masked: Any = None,
                         is_index_global_attn: Any = None, is_global_attn: Any = None,
                         output_attentions: bool = False) -> Any:
    """The attention's forward over the whole sequence (``hidden_states``: batch, length, width). Its attention maps
    (``output_attentions``) are refused: the model's are banded, over a sequence padded to the window, which this
    form neither pads nor makes."""
    import math

    import torch

    from ....errors import ExportError

    if output_attentions:
        raise ExportError("A Longformer-style attention is exported without its attention maps: call the model with "
                          "output_attentions=False (its maps are banded over the window-padded sequence, which the "
                          "exported form computes densely).")
    batch, length, _ = hidden_states.shape
    heads, size = self.num_heads, self.head_dim

    def split(x: Any) -> Any:  # (batch, heads, length, head size)
        return x.view(batch, length, heads, size).transpose(1, 2)

    query = split(self.query(hidden_states) / math.sqrt(size))
    scores = torch.matmul(query, split(self.key(hidden_states)).transpose(-1, -2))
    lowest = torch.finfo(scores.dtype).min
    where = torch.arange(length, device=hidden_states.device)
    band = (where[:, None] - where[None, :]).abs() <= self.one_sided_attn_window_size
    keys = (band[None] & (attention_mask == 0)[:, None, :]) | is_index_global_attn[:, None, :]
    scores = scores.masked_fill(~keys[:, None], lowest)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).type_as(scores)
    probs = probs.masked_fill(is_index_masked[:, None, :, None], 0.0)
    local = torch.matmul(probs, split(self.value(hidden_states)))
    query = split(self.query_global(hidden_states) / math.sqrt(size))
    scores = torch.matmul(query, split(self.key_global(hidden_states)).transpose(-1, -2))
    scores = scores.masked_fill(is_index_masked[:, None, None, :], lowest)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).type_as(scores)
    spread = torch.matmul(probs, split(self.value_global(hidden_states)))
    out = torch.where(is_index_global_attn[:, None, :, None], spread, local)
    return (out.transpose(1, 2).reshape(batch, length, heads * size),)


def no_padding(original: Any) -> Any:
    """A model's ``_pad_to_window_size`` that pads nothing: ``(0, *what it was given but the padding id)``, in the
    order it returns them (LED's: ids, mask, embeddings; Longformer's: ids, mask, token types, positions,
    embeddings)."""
    names = [n for n in inspect.signature(original).parameters if n != "pad_token_id"]

    def unpadded(*args: Any, **kwargs: Any) -> tuple[Any, ...]:
        given = inspect.signature(original).bind(*args, **kwargs)
        return (0, *[given.arguments.get(n) for n in names])

    return unpadded


def _is_band(module: Any) -> bool:
    held = {*vars(module), *getattr(module, "_modules", {})}
    if not {*HOLDS, "one_sided_attn_window_size"} <= held:
        return False
    try:
        return tuple(inspect.signature(type(module).forward).parameters) == CALL
    except (TypeError, ValueError):  # pragma: no cover - a forward without a signature
        return False


@contextlib.contextmanager
def dense_bands(model: Any) -> Iterator[list[str]]:
    """Within: every such attention of ``model`` runs over the whole sequence, and every module padding to its window
    (where the model has such attention) pads nothing; yields their names. Their own forms come back on leaving."""
    from .lending import lent

    modules = list(model.named_modules()) if hasattr(model, "named_modules") else []
    bands = [(name, m) for name, m in modules if _is_band(m)]
    padding = [(name, m) for name, m in modules if bands and callable(getattr(m, "_pad_to_window_size", None))]
    with lent([(m, "forward", dense_band_attention.__get__(m)) for _, m in bands]
              + [(m, "_pad_to_window_size", no_padding(m._pad_to_window_size)) for _, m in padding]):
        yield [name for name, _ in bands] + [f"{name or type(m).__name__}._pad_to_window_size" for name, m in padding]


PATCH = Patch(
    name="sliding window",
    applies_to="attention within a window with global tokens (query, key, value, query_global, key_global, "
               "value_global, one_sided_attn_window_size) and the model's _pad_to_window_size",
    replaces="the overlapping chunks' strided views, the any().item() before the global part, and the padding to "
             "a multiple of the window",
    why="TorchScript bakes the padding and the chunks (its file is wrong at other lengths) and torch.export cannot "
        "guard the chunks' strides",
    during=dense_bands)
