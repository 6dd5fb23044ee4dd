"""A trace-friendly form of attention that compresses windows of tokens (DeepSeek-V4's compressed attention), for a
file that takes the whole sequence.

Each window of ``compress_rate`` tokens is pooled into one extra key/value entry (a softmax over the window's gates;
in the overlapping form, the previous window's first half of the channels beside this window's second half), and a
lightning indexer picks the top ``index_topk`` entries each query may see. The model's own stateless path (no cache)
decides in Python from the length: whether any window closed (``if chunk.shape[1] > 0``), whether there is more than
one (``if n_windows > 1``), ``min(index_topk, entries)``, and the attention appends the entries only when there are
some. A trace keeps the sample's answers, so the file matched PyTorch at the sample's length only.

Within :func:`traceable_windows` each such module computes the same thing without a branch: the windows by
reshaping ``length // rate`` of them plus two spares over the zero-padded rest (so the entries' axis is never empty
or 1), the previous window's half by shifting along the window axis, and ``top_k`` as a symbolic minimum; the spares
(and every entry a query may not see yet) get ``-inf`` in the bias, so the attention always has entries to append
and a weight of ``exp(-inf) = 0`` leaves its output as the model's. With a cache the model's own forward runs: the
cache keeps Python state a trace cannot carry.

Recognised by what the modules hold, not by family: ``compress_rate``, ``kv_proj``, ``gate_proj``,
``position_bias``, ``kv_norm``, ``rotary_emb`` and ``rope_layer_type``; with an ``indexer`` it is the compressor of
sparse attention (overlapping windows), with a ``scorer`` the indexer itself, with neither the heavy compressor
(windows side by side, every earlier entry seen).
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator
from typing import Any

from .contract import Patch

HOLDS = ("compress_rate", "kv_proj", "gate_proj", "position_bias", "kv_norm", "rotary_emb", "rope_layer_type")


def _kind(module: Any) -> str | None:
    if not all(hasattr(module, a) for a in HOLDS):
        return None
    return "indexer" if hasattr(module, "scorer") else "sparse" if hasattr(module, "indexer") else "heavy"


def _rotary(module: Any) -> Any:
    """The family's ``apply_rotary_pos_emb``, from the module's own source file."""
    return sys.modules[type(module).__module__].apply_rotary_pos_emb


SPARE = 2  # windows past the last closed one, always computed and never seen


def pooled(module: Any, hidden_states: Any, overlap: bool) -> tuple[Any, Any]:
    """Every closed window of ``hidden_states`` pooled into one entry and rotated at its first token's position,
    then :data:`SPARE` more over the zero-padded rest: ``[batch, closed + SPARE, size]``, and the count of closed
    windows. The spares keep the entries' axis at 2 or more whatever the length (an empty axis breaks ONNX
    Runtime's Reshape; an axis of 1 at the sample is taken for a broadcast by the trace), and no query sees them."""
    import torch

    batch, length = hidden_states.shape[:2]
    rate = module.compress_rate
    closed = length // rate
    windows = closed + SPARE
    kv, gate = module.kv_proj(hidden_states), module.gate_proj(hidden_states)
    width = kv.shape[-1]
    rest = kv.new_zeros(batch, windows * rate - length, width)
    kv = torch.cat([kv, rest], dim=1).reshape(batch, windows, rate, width)
    gate = torch.cat([gate, rest.to(gate.dtype)], dim=1).reshape(batch, windows, rate, width) + module.position_bias
    if overlap:  # the previous window's first half beside this one's second half; none before the first
        half = width // 2
        kv = torch.cat([torch.cat([kv.new_zeros(batch, 1, rate, half), kv[..., :half]], dim=1)[:, :windows],
                        kv[..., half:]], dim=2)
        gate = torch.cat([torch.cat([gate.new_full((batch, 1, rate, half), float("-inf")), gate[..., :half]],
                                    dim=1)[:, :windows], gate[..., half:]], dim=2)
    entries = module.kv_norm((kv * gate.softmax(dim=2, dtype=torch.float32).to(kv.dtype)).sum(dim=2))
    positions = (torch.arange(windows, device=entries.device) * rate).unsqueeze(0).expand(batch, -1)
    cos, sin = module.rotary_emb(entries, position_ids=positions, layer_type=module.rope_layer_type)
    return _rotary(module)(entries.unsqueeze(1), cos, sin).squeeze(1), closed


def _seen(module: Any, position_ids: Any, entries: int, closed: Any) -> Any:
    """``[batch, sequence, entries]``: whether each query may see each entry (a closed window, closed at or before
    the query)."""
    import torch

    threshold = (position_ids + 1) // module.compress_rate
    index = torch.arange(entries, device=position_ids.device).view(1, 1, -1)
    return (index < threshold.unsqueeze(-1)) & (index < closed)


def _stateless(forward: Callable[..., Any]) -> Callable[..., Any]:
    """``forward`` for the path without a cache; with one, the module's own forward."""
    @functools.wraps(forward)
    def either(module: Any, hidden_states: Any, q_residual: Any, position_ids: Any, cache: Any = None,
               layer_idx: int = 0) -> Any:
        if cache is not None:
            return type(module).forward(module, hidden_states, q_residual, position_ids, cache, layer_idx)
        return forward(module, hidden_states, q_residual, position_ids, layer_idx)

    return either


@_stateless
def heavy_forward(module: Any, hidden_states: Any, q_residual: Any, position_ids: Any,
                  layer_idx: int) -> tuple[Any, Any]:
    import torch

    entries, closed = pooled(module, hidden_states, overlap=False)
    seen = _seen(module, position_ids, entries.shape[1], closed).unsqueeze(1)
    return entries.unsqueeze(1), torch.where(seen, entries.new_zeros(()), entries.new_full((), float("-inf")))


@_stateless
def indexer_forward(module: Any, hidden_states: Any, q_residual: Any, position_ids: Any, layer_idx: int) -> Any:
    import torch

    batch, sequence = hidden_states.shape[:2]
    entries, closed = pooled(module, hidden_states, overlap=True)
    count = entries.shape[1]
    cos, sin = module.rotary_emb(hidden_states, position_ids=position_ids, layer_type=module.rope_layer_type)
    q = module.q_b_proj(q_residual).view(batch, sequence, -1, module.head_dim).transpose(1, 2)
    q = _rotary(module)(q, cos, sin).transpose(1, 2)
    seen = _seen(module, position_ids, count, closed)
    scores = module.scorer(q, entries, hidden_states).masked_fill(~seen, float("-inf"))
    # the model takes min(index_topk, closed) of the closed windows; here of all, the spares too: what a spare or
    # an unseen entry wins is refused, so the same entries are seen
    picked = scores.topk(torch.sym_min(module.index_topk, count), dim=-1).indices
    return torch.where(seen.gather(-1, picked), picked, torch.full_like(picked, -1))


@_stateless
def sparse_forward(module: Any, hidden_states: Any, q_residual: Any, position_ids: Any,
                   layer_idx: int) -> tuple[Any, Any]:
    batch, sequence = hidden_states.shape[:2]
    entries, _ = pooled(module, hidden_states, overlap=True)
    count = entries.shape[1]
    picked = module.indexer(hidden_states, q_residual, position_ids, None, layer_idx)
    # the picked entries get 0, the rest -inf; a refused pick (-1) lands in a column dropped after
    spill = picked.where(picked >= 0, count)
    bias = entries.new_full((batch, 1, sequence, count + 1), float("-inf"))
    return entries.unsqueeze(1), bias.scatter(-1, spill.unsqueeze(1), 0.0)[..., :count]


FORWARDS = {"heavy": heavy_forward, "indexer": indexer_forward, "sparse": sparse_forward}


@contextlib.contextmanager
def traceable_windows(model: Any) -> Iterator[list[str]]:
    """Within: every window compressor of ``model`` runs its stateless path without a branch on the length (above);
    yields their names. The modules' ``forward`` is restored on leaving."""
    from .lending import lent

    found = [(name, m, kind) for name, m in model.named_modules() if (kind := _kind(m))] \
        if hasattr(model, "named_modules") else []
    with lent([(m, "forward", FORWARDS[kind].__get__(m)) for _, m, kind in found]):
        yield [name for name, _, _ in found]


PATCH = Patch(
    name="window compressors",
    applies_to="modules holding compress_rate, kv_proj, gate_proj, position_bias, kv_norm, rotary_emb and "
               "rope_layer_type (an indexer or a scorer tells the kind), on their stateless path",
    replaces="the forward that decides in Python from the length (windows closed, more than one, top-k size)",
    why="a trace keeps the sample's answers, so the file took the sample's length only",
    during=traceable_windows)
