"""Encoder-decoder models (T5, BART, Marian, Whisper), model side: the layout of their caches, the encoder wrapper
that also computes every decoder layer's cross-attention keys and values, the decoder wrapper with its
self-attention cache, and their names, axes and samples. Only imported by functions that already need torch.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ....errors import InvalidArgumentError
from ..machinery.wrap import forward_parameters
from .hf_names import cache_kwargs, cache_of

SUFFIX = ".encoder.onnx"


def encoder_path(decoder: Path) -> Path:
    """Where the encoder of a decoder file lives: ``model.onnx`` -> ``model.encoder.onnx``."""
    return decoder.with_name(decoder.stem + SUFFIX)


@dataclass
class Seq2SeqLayout:
    """Layers of the decoder and the shapes of its two caches."""

    layers: int
    heads: int
    head_size: int
    cross_heads: int
    encoder_inputs: tuple[str, ...]  # input_ids + attention_mask, or input_features, input_values or pixel_values

    @property
    def bytes_per_token(self) -> int:  # the self-attention cache grows by this per generated token
        return 2 * self.layers * self.heads * self.head_size * 4

    def text(self) -> str:
        return (f"decoder: {self.layers} layers x (key + value) x {self.heads} heads x {self.head_size} head size, "
                f"float32: {self.bytes_per_token} B per generated token; cross-attention cache computed once by "
                "the encoder file")

    def to_dict(self) -> dict[str, Any]:
        return {"layers": self.layers, "heads": self.heads, "head_size": self.head_size,
                "cross_heads": self.cross_heads, "encoder_inputs": list(self.encoder_inputs),
                "bytes_per_token": self.bytes_per_token}


def _caches(cache: Any) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], list[tuple[torch.Tensor, torch.Tensor]]]:
    """The self-attention and cross-attention keys and values of the layers the step filled: a cache made from a
    config whose ``num_hidden_layers`` is not the decoder's depth (ProphetNet's counts its encoder's layers apart from
    its decoder's) holds layers no decoder layer writes, left empty."""
    return ([(layer.keys, layer.values) for layer in cache.self_attention_cache.layers if layer.keys is not None],
            [(layer.keys, layer.values) for layer in cache.cross_attention_cache.layers if layer.keys is not None])


def encoder_decoder_cache(model: Any, self_kv: list[Any], cross_kv: list[Any]) -> Any:
    from transformers import DynamicCache, EncoderDecoderCache

    own, cross = DynamicCache(config=model.config), DynamicCache(config=model.config)
    for i, (k, v) in enumerate(self_kv):
        own.update(k, v, i)
    for i, (k, v) in enumerate(cross_kv):
        cross.update(k, v, i)
    cache = EncoderDecoderCache(own, cross)
    for i in range(len(cross_kv)):
        cache.is_updated[i] = True  # the cross-attention keys and values are given: never recomputed
    return cache


def start_token(model: Any) -> int:
    """The decoder's first token as transformers' ``generate()`` picks it: ``decoder_start_token_id`` (the config's,
    else the generation config's: PLBart's config has none), else ``bos_token_id`` (mBART's default config), else
    the padding id (T5's convention), else 0."""
    from ....runtime.facts import DECODER_START

    for name in (*DECODER_START, "pad_token_id"):
        for source in (model.config, getattr(model, "generation_config", None)):
            value = getattr(source, name, None)
            if value is not None:
                return int(value)
    return 0


def _start(model: Any, batch: int) -> torch.Tensor:
    return torch.full((batch, 1), start_token(model), dtype=torch.long)


@functools.cache
def _encoded_class() -> Any:
    """transformers' encoder output class, its missing fields read as None; made once (transformers registers each
    output class it meets as a pytree node)."""
    from transformers.modeling_outputs import BaseModelOutput

    class Encoded(BaseModelOutput):
        def __getattr__(self, name: str) -> Any:
            if name.startswith("_"):
                raise AttributeError(name)
            return None

    return Encoded


def as_encoder_output(states: torch.Tensor) -> Any:
    """``encoder_outputs=`` for a model call: transformers' own output class (Switch Transformers reads
    ``.last_hidden_state`` off it, where a plain tuple fails), whose other fields read as None (a mixture of experts'
    ``router_logits``, which only its training loss uses)."""
    return _encoded_class()(last_hidden_state=states)


def encoder_states(model: Any, feed: dict[str, torch.Tensor]) -> torch.Tensor:
    """The encoder's last hidden states (an encoder that answers with a tuple, as NLLB-MoE's and ProphetNet's do
    whatever ``return_dict`` says: its first item)."""
    out = model.get_encoder()(**feed, return_dict=True)
    return out[0] if isinstance(out, tuple) else out.last_hidden_state


# a spectrogram (Whisper, Speech2Text), a waveform (Moonshine) or an image (a vision encoder-decoder: TrOCR, Donut)
FEATURE_INPUTS = ("input_features", "input_values", "pixel_values")


def main_input(model: Any) -> str:
    """``model.main_input_name``; a composite's generic ``inputs`` (SpeechEncoderDecoderModel: whatever its
    encoder takes) is its encoder's own name (a wav2vec2 encoder's ``input_values``) when ``forward`` takes it."""
    main = model.main_input_name
    if main == "inputs" and hasattr(model, "get_encoder"):
        own = getattr(model.get_encoder(), "main_input_name", main)
        return own if own in forward_parameters(model) else main
    return main


def encoder_inputs(model: Any) -> tuple[str, ...]:
    main = main_input(model)
    return (main,) if main in FEATURE_INPUTS else ("input_ids", "attention_mask")


def layout_of(model: Any, sample: dict[str, torch.Tensor]) -> Seq2SeqLayout:
    names = encoder_inputs(model)
    with torch.no_grad():
        out = EncoderWithCross(model, names)(*[sample[n] for n in names])
    key = out["present.0.encoder.key"]
    with torch.no_grad():
        step = model(encoder_outputs=as_encoder_output(out["encoder_hidden_states"]),
                     decoder_input_ids=_start(model, 1)[:1].expand(key.shape[0], 1),
                     **cache_kwargs(model, encoder_decoder_cache(model, [], [])), use_cache=True, return_dict=True,
                     **({"attention_mask": sample["attention_mask"]} if "attention_mask" in names else {}))
    own = _caches(cache_of(step))[0][0][0]
    layers = sum(1 for k in out if k.startswith("present.") and k.endswith(".key"))
    return Seq2SeqLayout(layers, int(own.shape[1]), int(own.shape[3]), int(key.shape[1]), names)


class EncoderWithCross(torch.nn.Module):
    """The encoder, then every decoder layer's cross-attention keys and values (filled by one decoder step on
    the start token, which HF's cache records)."""

    def __init__(self, model: Any, names: tuple[str, ...]) -> None:
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        feed = dict(zip(self.names, inputs))
        states = encoder_states(self.model, feed)
        mask = {"attention_mask": feed["attention_mask"]} if "attention_mask" in feed else {}
        out = self.model(encoder_outputs=as_encoder_output(states),
                         decoder_input_ids=_start(self.model, 1).expand(states.shape[0], 1),
                         **cache_kwargs(self.model, encoder_decoder_cache(self.model, [], [])), use_cache=True,
                         return_dict=True, **mask)
        result = {"encoder_hidden_states": states}
        for i, (k, v) in enumerate(_caches(cache_of(out))[1]):
            result[f"present.{i}.encoder.key"], result[f"present.{i}.encoder.value"] = k, v
        return result


class DecoderWithCaches(torch.nn.Module):
    """``forward(decoder_input_ids, [encoder_attention_mask,] encoder_hidden_states, *self_past, *cross)``."""

    def __init__(self, model: Any, layout: Seq2SeqLayout) -> None:
        super().__init__()
        self.model, self.layout = model, layout
        self.masked = "attention_mask" in layout.encoder_inputs

    def forward(self, decoder_input_ids: torch.Tensor, *rest: torch.Tensor) -> dict[str, torch.Tensor]:
        mask, rest = (rest[0], rest[1:]) if self.masked else (None, rest)
        states, caches = rest[0], rest[1:]
        n = self.layout.layers
        own = [(caches[2 * i], caches[2 * i + 1]) for i in range(n)]
        cross = [(caches[2 * n + 2 * i], caches[2 * n + 2 * i + 1]) for i in range(n)]
        out = self.model(encoder_outputs=as_encoder_output(states), decoder_input_ids=decoder_input_ids,
                         **cache_kwargs(self.model, encoder_decoder_cache(self.model, own, cross)), use_cache=True,
                         return_dict=True, **({"attention_mask": mask} if mask is not None else {}))
        result = {"logits": out.logits}
        for i, (k, v) in enumerate(_caches(cache_of(out))[0]):
            result[f"present.{i}.decoder.key"], result[f"present.{i}.decoder.value"] = k, v
        return result


def decoder_names(layout: Seq2SeqLayout) -> list[str]:
    names = ["decoder_input_ids"] + (["encoder_attention_mask"] if "attention_mask" in layout.encoder_inputs else [])
    names.append("encoder_hidden_states")
    names += [f"past_key_values.{i}.decoder.{kv}" for i in range(layout.layers) for kv in ("key", "value")]
    names += [f"past_key_values.{i}.encoder.{kv}" for i in range(layout.layers) for kv in ("key", "value")]
    return names


def axes(layout: Seq2SeqLayout) -> tuple[dict[str, dict[int, str]], dict[str, dict[int, str]]]:
    """(encoder axes, decoder axes), inputs and outputs."""
    text = "attention_mask" in layout.encoder_inputs
    main = layout.encoder_inputs[0]
    # the encoder's length follows token ids and a waveform; a spectrogram's frames stay as the sample's (which
    # of its axes holds them is the family's layout: Whisper's bins first, Speech2Text's frames first), and an
    # image's size (its patches are the encoder's positions)
    grows = text or (main == "input_values")
    states = {0: "batch", **({1: "encoder_sequence"} if grows else {})}
    enc: dict[str, dict[int, str]] = {"encoder_hidden_states": states}
    if text:
        enc |= {"input_ids": {0: "batch", 1: "encoder_sequence"}, "attention_mask": {0: "batch", 1: "encoder_sequence"}}
    else:
        enc[main] = {0: "batch", 1: "audio_length"} if main == "input_values" else {0: "batch"}
    dec: dict[str, dict[int, str]] = {"decoder_input_ids": {0: "batch", 1: "decoder_sequence"},
                                      "encoder_hidden_states": enc["encoder_hidden_states"],
                                      "logits": {0: "batch", 1: "decoder_sequence"}}
    if text:
        dec["encoder_attention_mask"] = {0: "batch", 1: "encoder_sequence"}
    for i in range(layout.layers):
        for kv in ("key", "value"):
            cross = {0: "batch", **({2: "encoder_sequence"} if grows else {})}
            enc[f"present.{i}.encoder.{kv}"] = cross
            dec[f"past_key_values.{i}.encoder.{kv}"] = cross
            dec[f"past_key_values.{i}.decoder.{kv}"] = {0: "batch", 2: "past_decoder_sequence"}
            dec[f"present.{i}.decoder.{kv}"] = {0: "batch", 2: "total_decoder_sequence"}
    return enc, dec


def decoder_sample(model: Any, layout: Seq2SeqLayout, encoder_sample: dict[str, torch.Tensor], past: int = 2,
                   length: int = 3, seed: int = 0) -> dict[str, torch.Tensor]:
    """A decode-step sample: ``length`` new tokens after ``past`` cached ones, the encoder's real outputs."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        enc = EncoderWithCross(model, layout.encoder_inputs)(*[encoder_sample[n] for n in layout.encoder_inputs])
    batch = enc["encoder_hidden_states"].shape[0]
    vocab = decoder_vocab(model)
    sample = {"decoder_input_ids": torch.randint(min(3, vocab - 1), vocab, (batch, length), generator=g)}
    if "attention_mask" in layout.encoder_inputs:
        sample["encoder_attention_mask"] = encoder_sample["attention_mask"]
    sample["encoder_hidden_states"] = enc["encoder_hidden_states"]
    for i in range(layout.layers):
        for kv in ("key", "value"):
            sample[f"past_key_values.{i}.decoder.{kv}"] = torch.randn(batch, layout.heads, past, layout.head_size,
                                                                      generator=g)
    for i in range(layout.layers):
        for kv in ("key", "value"):
            sample[f"past_key_values.{i}.encoder.{kv}"] = enc[f"present.{i}.encoder.{kv}"]
    return sample


def decoder_vocab(model: Any) -> int:
    """How many tokens the decoder writes: its config's ``vocab_size`` (a vision encoder-decoder's decoder config's),
    else 100."""
    config = model.config
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    return int(getattr(text, "vocab_size", None) or getattr(config, "vocab_size", None) or 100)


def step_tokens(model: Any, layout: Seq2SeqLayout, encoder_sample: dict[str, torch.Tensor]) -> int:
    """How many new tokens the decoder's samples give a cached step: several (the file then takes any count), or 1
    where the model takes one at a time once it has a cache (ProphetNet asserts it; its generation feeds one)."""
    sample = decoder_sample(model, layout, encoder_sample, past=1, length=2)
    try:
        with torch.no_grad():
            DecoderWithCaches(model, layout)(*sample.values())
    except Exception:  # noqa: BLE001 - any refusal: one token, whose own run says what else is wrong
        return 1
    return 3


# -- running the two files --------------------------------------------------------------------------


def encoder_feed(inputs: Any, tokenizer: Any, names: tuple[str, ...], pad: int) -> dict[str, np.ndarray]:
    """Encoder inputs from text, token id lists (right-padded into a batch), a dict, audio features, or an image's
    pixel values (pictures made into them by the processor, ``tokenizer`` here)."""
    from ....runtime.pictures import Pictures, is_pictures, pixel_values_of

    if isinstance(inputs, Pictures) and names[0] != "pixel_values":
        raise InvalidArgumentError(f"images= is for an image-to-text model; this encoder takes {', '.join(names)}: "
                                   "pass those as the inputs.")
    if names[0] == "pixel_values" and is_pictures(inputs):
        inputs = pixel_values_of(inputs, tokenizer)
    if names[0] in FEATURE_INPUTS:  # one spectrogram [bins, frames], waveform [samples] or image [channels, height,
        value = inputs[names[0]] if hasattr(inputs, "keys") else inputs  # width] gets its batch axis
        array = np.asarray(value.numpy() if hasattr(value, "numpy") else value, np.float32)
        single = {"input_features": 2, "input_values": 1, "pixel_values": 3}[names[0]]
        return {names[0]: array[None] if array.ndim == single else array}
    if hasattr(inputs, "keys"):
        return {k: np.asarray(inputs[k].numpy() if hasattr(inputs[k], "numpy") else inputs[k], np.int64)
                for k in names}
    if isinstance(inputs, str) or (isinstance(inputs, (list, tuple)) and inputs and isinstance(inputs[0], str)):
        if tokenizer is None:
            raise InvalidArgumentError("Text prompts need a tokenizer: pass tokenizer=..., or token ids.")
        texts = [inputs] if isinstance(inputs, str) else list(inputs)
        rows = [list(tokenizer(t)["input_ids"]) for t in texts]
    else:
        rows = [[int(t) for t in r] for r in inputs]
    width = max(len(r) for r in rows)
    ids = np.full((len(rows), width), pad, np.int64)
    mask = np.zeros((len(rows), width), np.int64)
    for i, r in enumerate(rows):
        ids[i, :len(r)], mask[i, :len(r)] = r, 1
    return {"input_ids": ids, "attention_mask": mask}
