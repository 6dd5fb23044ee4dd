"""Attention within windows of a packed audio sequence (Qwen3-ASR's audio encoder: every clip's frames packed into
one sequence, each frame attending to the frames of its own window of its own clip).

The model computes the windows' bounds in Python (``get_audio_cu_seqlens``: ``.item()`` of the longest chunk, a
loop over the clips, ``torch.tensor`` of the list) and splits the sequence at them (``torch.split(...,
lengths.tolist())``): the trace keeps the sample's bounds, and its file failed at any other clip length ("Cannot
split using values in 'split' attribute"). Within :func:`traceable_windows` the source module's
``get_audio_cu_seqlens`` answers with the same bounds as tensors (:class:`Windows`: the window's width in frames and
where each clip ends in the packed sequence, computed as the model computes them), and each such attention runs
once over the whole sequence, masked so a frame sees the frames of its own clip and window only (the model's split
and its attention per window: the same sums). Bounds the caller computed itself (``cu_seqlens=`` given) go through
the model's own code.

Recognised by what the code holds, not by family: an attention holding ``q_proj``, ``k_proj``, ``v_proj``,
``out_proj``, ``num_heads`` and ``scaling`` whose forward takes ``(hidden_states, cu_seqlens, max_seqlen,
**kwargs)``, in a source module that defines ``get_audio_cu_seqlens``.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .contract import Patch

HOLDS = ("q_proj", "k_proj", "v_proj", "out_proj", "num_heads", "scaling")
CALL = ("self", "hidden_states", "cu_seqlens", "max_seqlen", "kwargs")
BOUNDS = "get_audio_cu_seqlens"


@dataclass
class Windows:
    """The windows of a packed audio sequence as tensors: ``width`` (frames per window, a 0-d tensor) and ``ends``
    (where each clip ends in the packed sequence, cumulative)."""

    width: Any
    ends: Any


def window_bounds(original: Any) -> Any:
    """The module's ``get_audio_cu_seqlens`` answering with :class:`Windows` (the model's arithmetic: each clip's
    length after the convolutions, the window as the longest chunk's length times the inference window's ratio)."""
    lengths = original.__globals__["_get_feat_extract_output_lengths"]

    def bounds(chunk_lengths: Any, feature_lens: Any, n_window_infer: int, n_window: int,
               kwargs: dict[str, Any] | None = None) -> Any:
        if kwargs is not None and kwargs.get("cu_seqlens") is not None:  # the caller's own bounds: the model's code
            return original(chunk_lengths, feature_lens, n_window_infer, n_window, kwargs)
        width = lengths(chunk_lengths, n_window).max() * (n_window_infer // (n_window * 2))
        return Windows(width, lengths(feature_lens, n_window).cumsum(0))

    return bounds


def windowed_attention(self: Any, hidden_states: Any, cu_seqlens: Any, max_seqlen: Any = None, **kwargs: Any) -> Any:
    """The attention's forward over the whole packed sequence, masked to each frame's clip and window; the model's
    own for bounds given as ``cu_seqlens``."""
    import torch

    if not isinstance(cu_seqlens, Windows):
        return type(self).forward(self, hidden_states, cu_seqlens, max_seqlen, **kwargs)
    length = hidden_states.shape[0]

    def heads(x: Any) -> Any:  # (heads, length, head size)
        return x.reshape(length, self.num_heads, -1).transpose(0, 1)

    place = torch.arange(length, device=hidden_states.device)
    ends = cu_seqlens.ends.to(place.dtype)
    clip = (place[:, None] >= ends[None, :]).sum(-1)  # each frame's clip
    starts = torch.cat([ends.new_zeros(1), ends])[clip]
    window = torch.div(place - starts, cu_seqlens.width, rounding_mode="floor")
    same = (clip[:, None] == clip[None, :]) & (window[:, None] == window[None, :])
    query, key, value = heads(self.q_proj(hidden_states)), heads(self.k_proj(hidden_states)), \
        heads(self.v_proj(hidden_states))
    scores = torch.matmul(query, key.transpose(-1, -2)) * self.scaling
    scores = scores.masked_fill(~same[None], torch.finfo(scores.dtype).min)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    out = torch.matmul(probs, value).transpose(0, 1).reshape(length, -1)
    return self.out_proj(out)


def _is_windowed(module: Any) -> bool:
    held = {*vars(module), *getattr(module, "_modules", {})}
    if not set(HOLDS) <= held:
        return False
    source = sys.modules.get(type(module).__module__)
    if not callable(getattr(source, BOUNDS, None)):
        return False
    try:
        return tuple(inspect.signature(type(module).forward).parameters) == CALL
    except (TypeError, ValueError):  # pragma: no cover - a forward without a signature
        return False


@contextlib.contextmanager
def traceable_windows(model: Any) -> Iterator[list[str]]:
    """Within: every such attention of ``model`` runs masked over the packed sequence, and its source module's
    bounds are tensors; yields the attentions' names. Everything comes back on leaving."""
    from .lending import lent

    found = [(name, m) for name, m in (model.named_modules() if hasattr(model, "named_modules") else [])
             if _is_windowed(m)]
    sources = {type(m).__module__: sys.modules[type(m).__module__] for _, m in found}
    with lent([(m, "forward", windowed_attention.__get__(m)) for _, m in found]
              + [(s, BOUNDS, window_bounds(getattr(s, BOUNDS))) for s in sources.values()]):
        yield [name for name, _ in found]


PATCH = Patch(
    name="audio windows",
    applies_to="attention over a packed audio sequence split at cu_seqlens (q_proj, k_proj, v_proj, out_proj, "
               "num_heads, scaling; forward(hidden_states, cu_seqlens, max_seqlen)) in a module defining "
               "get_audio_cu_seqlens",
    replaces="the windows' bounds computed in Python (.item(), a loop over the clips) and the split at them",
    why="the trace keeps the sample's bounds: the file fails at any other clip length",
    during=traceable_windows)
