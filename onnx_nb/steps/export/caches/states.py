"""Caches that keep a state per layer (transformers 5's cache layers: Mamba's convolution and SSM states, linear
attention's convolution and recurrent states), instead of keys and values or beside them (Qwen3-Next's full-attention
layers): what each layer keeps, the cache object made from a file's tensors, and read back from it.

A state's shape does not grow with the tokens, and the model's own one-token path updates it (its prefill path runs a
chunked scan no trace can make dynamic), so such a file takes one token per step: ``input_ids`` ``[batch, 1]``
(a vision-language decoder part: ``inputs_embeds`` ``[batch, 1, width]``), and
per layer ``past_key_values.{i}.conv.{j}`` / ``.recurrent.{j}`` (``[batch, ...]``, zeros before the first token),
``past_key_values.{i}.key`` / ``.value`` where the layer also attends; the outputs are ``present.*`` of the same
shapes. A prompt goes through it token by token (:class:`onnx_nb.steps.generate.runners.OnnxDecoder`): a zero state
is what the model's prefill starts from, so the tokens are PyTorch's. Only imported by functions that need torch.
"""

from __future__ import annotations

from typing import Any

from ....runtime.facts import STATE_KINDS

# one entry of a layout: (layer, kind, index, shape without the batch axis); a key or value's shape is
# (heads, head size), its sequence axis left out
Entry = tuple[int, str, int, tuple[int, ...]]


def transformers_own(cache: Any) -> bool:
    """A cache of transformers' own classes, by layers (not a model's own class, as MiniMax's cache or
    DeepSeek-V4's compressed-attention layers)."""
    own = "transformers.cache_utils"
    return hasattr(cache, "layers") and type(cache).__module__ == own and \
        all(type(layer).__module__ == own for layer in cache.layers)


def state_entries(cache: Any) -> tuple[Entry, ...] | None:
    """What each layer of a transformers cache keeps, when at least one layer keeps a state; None otherwise (a
    plain key/value cache, or a cache class that is not transformers' own)."""
    if not transformers_own(cache):
        return None
    entries: list[Entry] = []
    for i, layer in enumerate(cache.layers):
        for kind in STATE_KINDS:
            for j, tensor in sorted((getattr(layer, f"{kind}_states", None) or {}).items()):
                if tensor is not None:
                    entries.append((i, kind, j, tuple(int(d) for d in tensor.shape[1:])))
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if keys is not None and values is not None and keys.numel():
            if keys.dim() != 4 or any(e[0] == i for e in entries):
                # one layer that keeps a state and attends too (Inkling 2): fed token by token, its left-padded
                # prompts drift from PyTorch's padded prefill; the whole-sequence file serves it exactly
                return None
            entries += [(i, "key", 0, (int(keys.shape[1]), int(keys.shape[3]))),
                        (i, "value", 0, (int(values.shape[1]), int(values.shape[3])))]
    return tuple(entries) if any(e[1] in STATE_KINDS for e in entries) else None


def entry_name(entry: Entry, prefix: str = "past_key_values") -> str:
    i, kind, j, _ = entry
    return f"{prefix}.{i}.{kind}" if kind in ("key", "value") else f"{prefix}.{i}.{kind}.{j}"


def entry_shape(entry: Entry, batch: int, past: int) -> tuple[int, ...]:
    """The tensor's shape for ``batch`` rows: a state's own, a key's or value's over ``past`` tokens."""
    shape = entry[3]
    return (batch, shape[0], past, shape[1]) if entry[1] in ("key", "value") else (batch, *shape)


def attends(entries: tuple[Entry, ...]) -> bool:
    """Whether any layer keeps keys and values (then the attention mask spans past + new tokens)."""
    return any(e[1] == "key" for e in entries)


def build_cache(model: Any, entries: tuple[Entry, ...], tensors: list[Any]) -> Any:
    """The model's own cache (``DynamicCache(config=...)``: its layer kinds) holding ``tensors``, every state marked
    as carried over from an earlier step, so the model takes its one-token path."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    cache = DynamicCache(config=getattr(model, "config", None))
    for (i, kind, j, _), given in zip(entries, tensors):
        # a copy: the layers update their states in place (copy_), which must not reach the file's inputs (a trace
        # turns that into a mutated input, and the reference run would change the sample it is compared on)
        tensor = given.clone()
        layer: Any = cache.layers[i]
        if kind in ("key", "value") and isinstance(layer, DynamicSlidingWindowLayer) and \
                not hasattr(layer, "conv_states"):
            # a sliding-window layer keeps its length as a Python int, which a trace bakes in: a full layer, the
            # window left to the mask (as the key/value route does)
            layer = cache.layers[i] = DynamicLayer()
        if getattr(layer, "device", None) is None:
            layer.dtype, layer.device = tensor.dtype, tensor.device
        if kind == "key":
            layer.keys, layer.is_initialized = tensor, True
        elif kind == "value":
            layer.values = tensor
        elif kind == "conv":
            layer.conv_states[j], layer.conv_kernel_size[j] = tensor, int(tensor.shape[-1])
            layer.is_conv_states_initialized[j] = layer.has_previous_state[j] = True
        else:
            layer.recurrent_states[j] = tensor
            layer.is_recurrent_states_initialized[j] = layer.has_previous_state[j] = True
    return cache


def read_cache(cache: Any, entries: tuple[Entry, ...]) -> list[Any]:
    """The tensors of ``entries`` in ``cache`` after a step."""
    found = []
    for i, kind, j, _ in entries:
        layer = cache.layers[i]
        found.append(layer.keys if kind == "key" else layer.values if kind == "value" else
                     getattr(layer, f"{kind}_states")[j])
    return found


def unless_padding(entries: tuple[Entry, ...], after: list[Any], before: list[Any], real: Any) -> list[Any]:
    """Each state as the step left it, or as it was where the step's token is left padding (``real`` 0): a
    model's one-token path takes every token for a real one (transformers skips the padding mask there), while its
    prefill zeroes padding rows, which leaves a zero state at zero; so a padded prompt fed token by token gives the
    states a padded prefill gives. Keys and values need no such care: the mask hides padding from later tokens."""
    import torch

    kept = []
    for (_, kind, _, _), new, old in zip(entries, after, before):
        if kind in STATE_KINDS:
            new = torch.where(real.reshape(-1, *[1] * (new.dim() - 1)) > 0, new, old)
        kept.append(new)
    return kept
