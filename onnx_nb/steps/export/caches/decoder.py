"""Decoders with a key/value cache, model side: the layout of the cache (layers, heads, head size, dtype), the wrapper
that exports prefill and decode as one graph, its input/output names, axes and samples.

One graph serves prefill and decode (as Optimum's merged decoder and onnxruntime-genai do): it takes
``input_ids``, ``attention_mask`` (over past + new tokens), ``position_ids`` and, per layer,
``past_key_values.{i}.key`` / ``.value`` of shape ``[batch, kv_heads, past_sequence, head_size]``
(``past_sequence`` is 0 at the first step), and returns ``logits`` and ``present.{i}.key`` / ``.value``.
Only imported by functions that already need torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ....render import human_bytes
from ....runtime.shapes import SAMPLE_SIZES
from .hf_names import cache_kwargs, cache_of
from .layers import first_step_cache, indexed_layer

PAST = "past_key_values.{}.{}"
PRESENT = "present.{}.{}"
LAYER_INPUTS, MM_TYPES = "per_layer_inputs", "mm_token_type_ids"
SAMPLE_BATCH, SAMPLE_SEQUENCE, SAMPLE_PAST = (SAMPLE_SIZES[k] for k in ("batch", "step_sequence", "past_sequence"))


@dataclass
class CacheLayout:
    """How the key/value cache of a decoder is laid out, and what it costs per token."""

    layers: int
    kv_heads: int
    head_size: int
    dtype: str = "float32"
    value_size: int | None = None  # when the value's last axis differs from the key's (DeepSeek's latent cache)
    # a vision-language model's decoder part takes the merged embeddings ([batch, sequence, embeds]) instead of
    # input_ids, and token_type_ids where its forward reads them (Gemma 3, PaliGemma: the image block bidirectional)
    embeds: int = 0
    token_types: bool = False
    mm_token_types: bool = False  # Gemma 4's two-way attention within an image (mm_token_type_ids, 1 at its tokens)
    # Qwen-VL's positions come in sections (temporal, height, width): position_ids [sections, batch, sequence]
    sections: int = 0
    # Qwen3-VL's "deepstack": the vision tower's early features added to the first decoder layers' image rows,
    # deepstack_embeds [layers, batch, sequence, embeds] (zeros at text tokens)
    deepstack: int = 0
    # (layers, width) of Gemma 4's per_layer_inputs [batch, sequence, layers, width] beside the embeddings
    layer_inputs: tuple[int, ...] = ()
    # a cache that keeps a state per layer (Mamba, linear attention; :mod:`.states`): every tensor it carries,
    # keys and values included; the file then takes one token per step
    states: tuple[Any, ...] = ()
    # (kv heads, key size, value size) of each layer, where layers differ (Gemma 4's full-attention layers have
    # wider heads than its sliding ones); empty when every layer is the first's
    per_layer: tuple[tuple[int, int, int], ...] = ()
    # (layer, size) of each layer that keeps an indexer's keys beside its keys and values (DeepSeek sparse
    # attention: DeepSeek-V3.2, GLM-MoE-DSA, HY-V4): past_key_values.{i}.indexer [batch, past_sequence, size]
    indexers: tuple[tuple[int, int], ...] = ()

    @property
    def value_head_size(self) -> int:
        return self.value_size if self.value_size is not None else self.head_size

    def dims(self, layer: int) -> tuple[int, int, int]:
        """Key/value heads, key size and value size of one layer's cache."""
        return self.per_layer[layer] if self.per_layer else (self.kv_heads, self.head_size, self.value_head_size)

    @property
    def bytes_per_token(self) -> int:
        if self.states:
            return sum(int(np.prod(shape)) for _, kind, _, shape in self.states if kind in ("key", "value")) * \
                int(np.dtype(self.dtype).itemsize)
        return (sum(h * (k + v) for h, k, v in map(self.dims, range(self.layers))) + sum(s for _, s in self.indexers)
                ) * int(np.dtype(self.dtype).itemsize)

    @property
    def state_bytes(self) -> int:
        """What the states take per sequence, whatever its length."""
        return sum(int(np.prod(shape)) for _, kind, _, shape in self.states if kind not in ("key", "value")) * \
            int(np.dtype(self.dtype).itemsize)

    def text(self) -> str:
        if self.states:
            attending = sum(e[1] == "key" for e in self.states)
            return (f"{self.layers} layers, {len(self.states) - 2 * attending} states of "
                    f"{human_bytes(self.state_bytes)} per sequence" +
                    (f" and keys and values in {attending}: {human_bytes(self.bytes_per_token)} per token"
                     if attending else "") + f", {self.dtype}; one token per step")
        size = (f"{self.head_size} head size" if self.value_size is None else
                f"{self.head_size} key and {self.value_size} value size")
        indexed = f", an indexer's keys in {len(self.indexers)} of them" if self.indexers else ""
        if self.per_layer:
            size = "heads and head sizes by layer (" + ", ".join(
                f"{h}x{k}" if k == v else f"{h}x{k}/{v}" for h, k, v in self.per_layer) + ")"
            return (f"{self.layers} layers x (key + value), {size}{indexed}, {self.dtype}: "
                    f"{human_bytes(self.bytes_per_token)} per token")
        return (f"{self.layers} layers x (key + value) x {self.kv_heads} kv heads x {size}{indexed}, "
                f"{self.dtype}: {human_bytes(self.bytes_per_token)} per token")

    def to_dict(self) -> dict[str, Any]:
        return {"layers": self.layers, "kv_heads": self.kv_heads, "head_size": self.head_size, "dtype": self.dtype,
                **({"value_size": self.value_size} if self.value_size is not None else {}),
                **({"per_layer": [list(d) for d in self.per_layer]} if self.per_layer else {}),
                **({"indexers": [list(d) for d in self.indexers]} if self.indexers else {}),
                **({"embeds": self.embeds, "token_types": self.token_types} if self.embeds else {}),
                **({"mm_token_types": True} if self.mm_token_types else {}),
                **({"sections": self.sections} if self.sections else {}),
                **({"deepstack": self.deepstack} if self.deepstack else {}),
                **({"layer_inputs": list(self.layer_inputs)} if self.layer_inputs else {}),
                **({"states": [[i, kind, j, list(shape)] for i, kind, j, shape in self.states]} if self.states else {}),
                "bytes_per_token": self.bytes_per_token}


def _layers_of(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return [(k, v) for k, v in cache]  # a legacy tuple of (key, value) pairs


class NoKeyValueCache(Exception):
    """A causal LM whose cache is not one key and one value per layer (none at all: GPT-1, an encoder used as a
    decoder; a state: Mamba, RWKV, linear attention): its file takes the whole sequence each step."""


def text_decoder(model: Any) -> Any:
    """The module a decoder step runs: the model itself, or, where its forward cannot run without an image (BLIP-2
    encodes its required ``pixel_values`` on every call), its language model (a causal LM of its own, fed
    embeddings where the image's rows are already placed)."""
    import inspect

    try:
        pixels = inspect.signature(model.forward).parameters.get("pixel_values")
    except (TypeError, ValueError):  # pragma: no cover - a forward without a signature
        return model
    text = getattr(model, "language_model", None)
    if pixels is None or pixels.default is not inspect.Parameter.empty or text is None:
        return model
    head = getattr(text, "get_output_embeddings", lambda: None)()
    return text if head is not None else model


def layout_of(model: Any) -> CacheLayout:
    """Run the model once on one token with its cache on, and read the cache it returns (NoKeyValueCache when it
    is not per-layer keys and values)."""
    from ..machinery.wrap import forward_parameters

    model = text_decoder(model)
    name = type(model).__name__
    # positions given as generate() gives them: without, some models count them from the cache, which a cache of
    # linear-attention layers only cannot say (LFM-3 of one layer)
    positions = {"position_ids": torch.zeros(1, 1, dtype=torch.long)} \
        if "position_ids" in forward_parameters(model) else {}
    with torch.no_grad():
        out = model(input_ids=torch.ones(1, 1, dtype=torch.long), use_cache=True, return_dict=True, **positions)
    try:
        cache = cache_of(out)
    except KeyError as exc:
        raise NoKeyValueCache(f"{name} returns no cache") from exc
    if cache is None:
        cache = _filled_when_given(model)
    if cache is None:
        raise NoKeyValueCache(f"{name} returns no cache" + (
            " (it is an encoder: is_decoder=False in its config)"
            if getattr(getattr(model, "config", None), "is_decoder", True) is False else ""))
    from .states import read_cache, state_entries, transformers_own

    states = state_entries(cache)
    if states:
        heads, size = next((shape for _, kind, _, shape in states if kind == "key"), (0, 0))
        dtype = str(read_cache(cache, states[:1])[0].dtype).replace("torch.", "")
        return CacheLayout(len(cache.layers), heads, size, dtype, states=states)
    # a layer with keys and values may keep a state beside them (linear attention's conv and recurrent states)
    kinds = {type(layer).__name__ for layer in getattr(cache, "layers", [])
             if not (hasattr(layer, "keys") and hasattr(layer, "values"))
             or hasattr(layer, "conv_states") or hasattr(layer, "recurrent_states")}
    if kinds or not (hasattr(cache, "layers") or isinstance(cache, (tuple, list))):
        raise NoKeyValueCache(f"{name} keeps a {', '.join(sorted(kinds)) or type(cache).__name__} cache, not one "
                              "key and one value per layer")
    if hasattr(cache, "layers") and not transformers_own(cache):
        # a cache class of the model's own (MiniMax's keeps linear attention's state beside its layers; DeepSeek-V4's
        # layers keep compressed entries): the file is fed transformers' DynamicCache, which such a model refuses
        home = "transformers.cache_utils"
        own = sorted({type(layer).__name__ for layer in cache.layers if type(layer).__module__ != home})
        raise NoKeyValueCache(f"{name} keeps a cache of its own ({', '.join(own) or type(cache).__name__})")
    layers = _layers_of(cache)
    if not layers or any(k is None or getattr(k, "dim", lambda: 0)() != 4 for k, _ in layers):
        raise NoKeyValueCache(f"{name} returned no key/value cache of [batch, heads, sequence, head size]")
    key, value = layers[0]
    dims = tuple((int(k.shape[1]), int(k.shape[3]), int(v.shape[3])) for k, v in layers)
    indexers = tuple((i, int(layer.indexer_keys.shape[-1])) for i, layer in enumerate(getattr(cache, "layers", []))
                     if getattr(layer, "indexer_keys", None) is not None)
    if any(getattr(layer, "indexer_position_ids", None) is not None for layer in getattr(cache, "layers", [])):
        raise NoKeyValueCache(f"{name} keeps its indexer's positions in its cache")
    return CacheLayout(len(layers), int(key.shape[1]), int(key.shape[3]), str(key.dtype).replace("torch.", ""),
                       int(value.shape[3]) if value.shape[3] != key.shape[3] else None,
                       per_layer=dims if len(set(dims)) > 1 else (), indexers=indexers)


def _filled_when_given(model: Any) -> Any:
    """The cache an encoder used as a decoder fills when handed an empty one, as ``generate()`` hands it
    (Megatron-BERT with is_decoder=False starts none of its own, yet ``generate()`` decodes it with a cache whose
    prompt keys stay as its bidirectional prefill left them); None when it fills none."""
    from transformers import DynamicCache

    given = DynamicCache()
    try:
        with torch.no_grad():
            out = model(input_ids=torch.ones(1, 1, dtype=torch.long), use_cache=True, return_dict=True,
                        **cache_kwargs(model, given))
        cache = cache_of(out)
    except Exception:  # noqa: BLE001 - a model that refuses the offer keeps the whole-sequence file
        return None
    if cache is None:  # filled in place and not returned (XLM-RoBERTa-XL)
        cache = given
    return cache if getattr(cache, "get_seq_length", lambda: 0)() else None


class DecoderWithCache(torch.nn.Module):
    """``forward(input_ids, attention_mask, position_ids, *past) -> {logits, present.{i}.key/value}`` around
    a Hugging Face causal LM: the flat cache tensors become the model's cache object and back."""

    def __init__(self, model: Any, layout: CacheLayout) -> None:
        super().__init__()
        self.model = text_decoder(model)
        self.layout = layout

    def forward(self, first: torch.Tensor, *rest: torch.Tensor) -> dict[str, torch.Tensor]:
        from transformers import DynamicCache

        layout = self.layout
        given = dict(zip(input_names(layout), (first, *rest)))
        extra = {k: given[k] for k in ("token_type_ids", MM_TYPES, LAYER_INPUTS) if k in given}
        attention_mask, position_ids = given["attention_mask"], given["position_ids"]
        if layout.states:
            return self._state_step(first, attention_mask, position_ids, given)
        past = [given[PAST.format(i, kv)] for i in range(layout.layers) for kv in ("key", "value")]
        tokens = {"inputs_embeds": first} if layout.embeds else {"input_ids": first}
        if MM_TYPES in extra:  # read by absolute position: the cached tokens' (in no block) before the new ones'
            extra[MM_TYPES] = torch.cat([extra[MM_TYPES].new_zeros(first.shape[0], past[0].shape[-2]),
                                         extra[MM_TYPES]], 1)

        # Every layer a plain DynamicLayer, whatever the config says (not DynamicCache(config=...)): a sliding-window
        # layer keeps its length as a Python int, which a trace bakes into the graph (right at the traced length,
        # out of bounds past the window); with full layers the window is the mask's (transformers' sliding window
        # overlay), the graph's cache grows with the tokens, and every length is right.
        cache = (first_step_cache() if layout.token_types else DynamicCache)(
            [(past[2 * i], past[2 * i + 1]) for i in range(self.layout.layers)])
        for i, _ in layout.indexers:  # an indexed layer (sparse attention) holding its indexer's keys too
            cache.layers[i] = indexed_layer(cache.layers[i], given[PAST.format(i, "indexer")])
        if layout.deepstack:  # the language model itself, told every row may take a deepstack addition
            deep = given["deepstack_embeds"]
            text = self.model.model.language_model
            out = text(**tokens, attention_mask=attention_mask, position_ids=position_ids,
                       visual_pos_masks=torch.ones(first.shape[:2], dtype=torch.bool),
                       deepstack_visual_embeds=[d.reshape(-1, d.shape[-1]) for d in deep.unbind(0)],
                       **cache_kwargs(text, cache), use_cache=True, return_dict=True)
            logits = self.model.lm_head(out.last_hidden_state)
        else:
            out = self.model(**tokens, **extra, attention_mask=attention_mask, position_ids=position_ids,
                             **cache_kwargs(self.model, cache), use_cache=True, return_dict=True)
            logits = out.logits
        done = cache_of(out)
        if done is None:  # filled in place and not returned (XLM-RoBERTa-XL)
            done = cache
        present = [t for k, v in _layers_of(done) for t in (k, v)] + [
            done.layers[i].indexer_keys for i, _ in layout.indexers]
        return dict(zip(output_names(self.layout), (logits, *present)))

    def _state_step(self, ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                    given: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One token (its id, or its embedding where the layout takes them) through a cache of states
        (:mod:`.states`)."""
        from .states import attends, build_cache, entry_name, read_cache, unless_padding

        states = self.layout.states
        before = [given[entry_name(e)] for e in states]
        cache = build_cache(self.model, states, before)
        real = attention_mask[:, -1]  # the new token is a prompt's (1) or its left padding (0)
        if not attends(states):  # no layer looks back through a mask: the new token's own (Mamba pads with it)
            attention_mask = attention_mask[:, -ids.shape[1]:]
        tokens = {"inputs_embeds": ids} if self.layout.embeds else {"input_ids": ids}
        out = self.model(**tokens, attention_mask=attention_mask, position_ids=position_ids,
                         **cache_kwargs(self.model, cache), use_cache=True, return_dict=True)
        after = unless_padding(states, read_cache(cache_of(out), states), before, real)
        return dict(zip(output_names(self.layout), (out.logits, *after)))


def input_names(layout: CacheLayout) -> list[str]:
    if layout.states:
        from .states import entry_name

        first = ["inputs_embeds"] if layout.embeds else ["input_ids"]  # embeddings: a vision-language decoder
        return [*first, "attention_mask", "position_ids"] + [entry_name(e) for e in layout.states]
    first = ["inputs_embeds"] if layout.embeds else ["input_ids"]
    first += ["token_type_ids"] if layout.token_types else []
    first += [MM_TYPES] if layout.mm_token_types else []
    first += [LAYER_INPUTS] if layout.layer_inputs else []
    first += ["deepstack_embeds"] if layout.deepstack else []
    return [*first, "attention_mask", "position_ids"] + [PAST.format(i, kind) for i, kind in _carried(layout)]


def output_names(layout: CacheLayout) -> list[str]:
    if layout.states:
        from .states import entry_name

        return ["logits"] + [entry_name(e, "present") for e in layout.states]
    return ["logits"] + [PRESENT.format(i, kind) for i, kind in _carried(layout)]


def _carried(layout: CacheLayout) -> list[tuple[int, str]]:
    """(layer, kind) of each tensor a key/value cache carries between steps, in the file's order: every layer's key
    and value, then the indexers' keys."""
    return [(i, kv) for i in range(layout.layers) for kv in ("key", "value")] + [
        (i, "indexer") for i, _ in layout.indexers]


def cache_axes(layout: CacheLayout) -> dict[str, dict[int, str]]:
    axes = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "total_sequence"},
            "position_ids": {1: "batch", 2: "sequence"} if layout.sections else {0: "batch", 1: "sequence"},
            "logits": {0: "batch", 1: "sequence"},
            "inputs_embeds": {0: "batch", 1: "sequence"}, "token_type_ids": {0: "batch", 1: "sequence"},
            "deepstack_embeds": {1: "batch", 2: "sequence"}, LAYER_INPUTS: {0: "batch", 1: "sequence"},
            MM_TYPES: {0: "batch", 1: "sequence"}}
    if layout.states:  # one token per step: only the batch and the keys' past vary
        from .states import entry_name

        axes.update(input_ids={0: "batch"}, inputs_embeds={0: "batch"}, logits={0: "batch"},
                    position_ids={1: "batch"} if layout.sections else {0: "batch"})
        for e in layout.states:
            along = {0: "batch", 2: "past_sequence"} if e[1] in ("key", "value") else {0: "batch"}
            axes[entry_name(e)] = along
            axes[entry_name(e, "present")] = {**along, 2: "total_sequence"} if 2 in along else along
        return axes
    for i in range(layout.layers):
        for kv in ("key", "value"):
            axes[PAST.format(i, kv)] = {0: "batch", 2: "past_sequence"}
            axes[PRESENT.format(i, kv)] = {0: "batch", 2: "total_sequence"}
    for i, _ in layout.indexers:
        axes[PAST.format(i, "indexer")] = {0: "batch", 1: "past_sequence"}
        axes[PRESENT.format(i, "indexer")] = {0: "batch", 1: "total_sequence"}
    return axes


def _token_types(batch: int, sequence: int) -> torch.Tensor:
    """An image block (type 1) inside the new tokens: what a prompt with an image gives."""
    types = torch.zeros(batch, sequence, dtype=torch.long)
    types[:, 1:max(sequence - 1, 1)] = 1
    return types


def cache_sample(model: Any, layout: CacheLayout, seed: int = 0, batch: int = SAMPLE_BATCH,
                 sequence: int = SAMPLE_SEQUENCE, past: int = SAMPLE_PAST) -> dict[str, torch.Tensor]:
    """A decode-step sample (by default 4 new tokens after 3 cached ones, batch 2), ids inside the vocabulary:
    never an empty sequence, whatever the config."""
    g = torch.Generator().manual_seed(seed)
    vocab = int(getattr(model.config, "vocab_size", 100) or 100)
    b, s, p = batch, 1 if layout.states else max(sequence, 1), past
    sample: dict[str, torch.Tensor] = {
        **({"inputs_embeds": torch.randn(b, s, layout.embeds, generator=g) * 0.5} if layout.embeds else
           {"input_ids": torch.randint(min(3, vocab - 1), vocab, (b, s), generator=g)}),
        **({"token_type_ids": _token_types(b, s)} if layout.token_types else {}),
        **({MM_TYPES: _token_types(b, s)} if layout.mm_token_types else {}),
        **({"deepstack_embeds": torch.randn(layout.deepstack, b, s, layout.embeds, generator=g) * 0.5}
           if layout.deepstack else {}),
        **({LAYER_INPUTS: torch.randn(b, s, *layout.layer_inputs, generator=g) * 0.5} if layout.layer_inputs else {}),
        "attention_mask": torch.ones(b, p + s, dtype=torch.long),
        "position_ids": torch.arange(p, p + s).expand(*((layout.sections,) if layout.sections else ()), b, s)
        .contiguous(),
    }
    if layout.states:
        from .states import entry_name, entry_shape

        for e in layout.states:
            sample[entry_name(e)] = torch.randn(*entry_shape(e, b, p), generator=g) * \
                (1.0 if e[1] in ("key", "value") else 0.5)
        return sample
    for i in range(layout.layers):
        heads, key, value = layout.dims(i)
        for kv, size in (("key", key), ("value", value)):
            sample[PAST.format(i, kv)] = torch.randn(b, heads, p, size, generator=g)
    for i, size in layout.indexers:
        sample[PAST.format(i, "indexer")] = torch.randn(b, p, size, generator=g)
    return sample
