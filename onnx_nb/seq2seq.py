"""Encoder-decoder models (T5, BART, Marian, Whisper) exported for generation: an encoder file and a decoder file
with its self-attention cache.

The encoder file runs the encoder once and also computes every decoder layer's cross-attention keys and values
(``present.{i}.encoder.key/value``), so the decoder never recomputes them. The decoder file takes
``decoder_input_ids``, the encoder's states (and mask), its own cache ``past_key_values.{i}.decoder.key/value``
(empty at the first step) and the cross-attention cache ``past_key_values.{i}.encoder.key/value``, and returns
``logits`` and ``present.{i}.decoder.key/value``. Only imported by functions that already need torch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .errors import InvalidArgumentError

SUFFIX = ".encoder.onnx"


def is_seq2seq(model: Any) -> bool:
    config = getattr(model, "config", None)
    return bool(getattr(config, "is_encoder_decoder", False)) and hasattr(model, "get_encoder") and \
        type(model).__name__.endswith("ForConditionalGeneration")


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
    encoder_inputs: tuple[str, ...]  # input_ids + attention_mask, or input_features

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
    return ([(layer.keys, layer.values) for layer in cache.self_attention_cache.layers],
            [(layer.keys, layer.values) for layer in cache.cross_attention_cache.layers])


def _new_cache(model: Any, self_kv: list[Any], cross_kv: list[Any]) -> Any:
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


def _start(model: Any, batch: int) -> torch.Tensor:
    return torch.full((batch, 1), int(model.config.decoder_start_token_id or 0), dtype=torch.long)


def encoder_inputs(model: Any) -> tuple[str, ...]:
    return ("input_features",) if model.main_input_name == "input_features" else ("input_ids", "attention_mask")


def layout_of(model: Any, sample: dict[str, torch.Tensor]) -> Seq2SeqLayout:
    names = encoder_inputs(model)
    with torch.no_grad():
        out = EncoderWithCross(model, names)(*[sample[n] for n in names])
    key = out["present.0.encoder.key"]
    with torch.no_grad():
        step = model(encoder_outputs=(out["encoder_hidden_states"],), decoder_input_ids=_start(model, 1)[:1].expand(
            key.shape[0], 1), past_key_values=_new_cache(model, [], []), use_cache=True, return_dict=True,
            **({"attention_mask": sample["attention_mask"]} if "attention_mask" in names else {}))
    own = _caches(step.past_key_values)[0][0][0]
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
        states = self.model.get_encoder()(**feed, return_dict=True).last_hidden_state
        mask = {"attention_mask": feed["attention_mask"]} if "attention_mask" in feed else {}
        out = self.model(encoder_outputs=(states,), decoder_input_ids=_start(self.model, 1).expand(states.shape[0], 1),
                         past_key_values=_new_cache(self.model, [], []), use_cache=True, return_dict=True, **mask)
        result = {"encoder_hidden_states": states}
        for i, (k, v) in enumerate(_caches(out.past_key_values)[1]):
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
        out = self.model(encoder_outputs=(states,), decoder_input_ids=decoder_input_ids,
                         past_key_values=_new_cache(self.model, own, cross), use_cache=True, return_dict=True,
                         **({"attention_mask": mask} if mask is not None else {}))
        result = {"logits": out.logits}
        for i, (k, v) in enumerate(_caches(out.past_key_values)[0]):
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
    states = {0: "batch", **({1: "encoder_sequence"} if text else {})}
    enc: dict[str, dict[int, str]] = {"encoder_hidden_states": states}
    if text:
        enc |= {"input_ids": {0: "batch", 1: "encoder_sequence"}, "attention_mask": {0: "batch", 1: "encoder_sequence"}}
    else:
        enc["input_features"] = {0: "batch"}
    dec: dict[str, dict[int, str]] = {"decoder_input_ids": {0: "batch", 1: "decoder_sequence"},
                                      "encoder_hidden_states": enc["encoder_hidden_states"],
                                      "logits": {0: "batch", 1: "decoder_sequence"}}
    if text:
        dec["encoder_attention_mask"] = {0: "batch", 1: "encoder_sequence"}
    for i in range(layout.layers):
        for kv in ("key", "value"):
            cross = {0: "batch", **({2: "encoder_sequence"} if text else {})}
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
    vocab = int(getattr(model.config, "vocab_size", 100) or 100)
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


# -- running the two files --------------------------------------------------------------------------

class OnnxSeq2Seq:
    """The encoder file once, then decoder steps with the self-attention cache, in ONNX Runtime."""

    def __init__(self, decoder: Path, provider: str = "CPUExecutionProvider", encoder: Path | None = None) -> None:
        from .sessions import session

        encoder = encoder or encoder_path(decoder)
        if not encoder.exists():
            raise InvalidArgumentError(f"{decoder} has no encoder file beside it ({encoder.name}); export the model "
                                       "again with onnx_nb.export(model).")
        self.encoder = session(encoder, provider)
        self.decoder = session(decoder, provider)
        self.encoder_names = [i.name for i in self.encoder.get_inputs()]
        self.decoder_inputs = {i.name: i for i in self.decoder.get_inputs()}
        self.self_names = [n for n in self.decoder_inputs if ".decoder." in n]
        first = self.decoder_inputs[self.self_names[0]]
        self.heads, self.head_size = int(first.shape[1]), int(first.shape[3])
        self.decoder_outputs = [o.name for o in self.decoder.get_outputs()]

    def encode(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = self.encoder.run(None, {n: feed[n] for n in self.encoder_names})
        return dict(zip([o.name for o in self.encoder.get_outputs()], out))

    def start(self, encoded: dict[str, np.ndarray], mask: np.ndarray | None) -> dict[str, np.ndarray]:
        """The decoder's constant inputs and an empty self-attention cache."""
        batch = encoded["encoder_hidden_states"].shape[0]
        state: dict[str, np.ndarray] = {}
        if "encoder_hidden_states" in self.decoder_inputs:  # some decoders only read the cross-attention cache
            state["encoder_hidden_states"] = encoded["encoder_hidden_states"]
        if "encoder_attention_mask" in self.decoder_inputs and mask is not None:
            state["encoder_attention_mask"] = mask.astype(np.int64)
        for name in self.decoder_inputs:
            if ".encoder." in name:
                state[name] = encoded[name.replace("past_key_values.", "present.")]
        for name in self.self_names:
            state[name] = np.zeros((batch, self.heads, 0, self.head_size), np.float32)
        return state

    def step(self, ids: np.ndarray, state: dict[str, np.ndarray]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        out = dict(zip(self.decoder_outputs, self.decoder.run(None, {"decoder_input_ids": ids.astype(np.int64),
                                                                     **state})))
        grown = dict(state)
        for name in self.self_names:
            grown[name] = out[name.replace("past_key_values.", "present.")]
        return out["logits"], grown


def encoder_feed(inputs: Any, tokenizer: Any, names: tuple[str, ...], pad: int) -> dict[str, np.ndarray]:
    """Encoder inputs from text, token id lists (right-padded into a batch), a dict or audio features."""
    if names == ("input_features",):
        value = inputs["input_features"] if hasattr(inputs, "keys") else inputs
        array = np.asarray(value.numpy() if hasattr(value, "numpy") else value, np.float32)
        return {"input_features": array[None] if array.ndim == 2 else array}
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


def encoder_of(model: Any) -> Path | None:
    """The encoder file of a decoder file, an export or a variant of the decoder (which keeps using the export's
    encoder file)."""
    from .parity.check import export_of

    path = Path(getattr(model, "path", model))
    if isinstance(model, _Beside):
        return model.encoder
    if encoder_path(path).exists():
        return encoder_path(path)
    export = export_of(model)
    return encoder_path(export.path) if export is not None else None


def generate(model: Any, inputs: Any, *, max_new_tokens: int, pick: Any, eos: set[int], pad: int, start: int,
             provider: str, tokenizer: Any, stream: Any) -> tuple[list[list[int]], list[float]]:
    """The generation loop of an encoder-decoder (called by :func:`onnx_nb.generate`)."""
    from .generation import accept

    runner = OnnxSeq2Seq(Path(getattr(model, "path", model)), provider, encoder_of(model))
    names = tuple(runner.encoder_names)
    feed = encoder_feed(inputs, tokenizer, names, pad)
    times: list[float] = []
    t0 = time.perf_counter()
    encoded = runner.encode(feed)
    state = runner.start(encoded, feed.get("attention_mask"))
    batch = encoded["encoder_hidden_states"].shape[0]
    ids = np.full((batch, 1), start, np.int64)
    done = np.zeros(batch, bool)
    new: list[list[int]] = [[] for _ in range(batch)]
    for _ in range(max_new_tokens):
        logits, state = runner.step(ids, state)
        chosen = pick(logits[:, -1, :])
        times.append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        if accept(chosen, done, new, eos, stream):
            break
        ids = np.where(done, pad, chosen)[:, None].astype(np.int64)
    return new, times


# -- export -----------------------------------------------------------------------------------------

def export_parts(model: Any, sample: Any, target: Path, opset: int, staged_dir: Path, warnings: list[str],
                 branches: list[Any]) -> tuple[Seq2SeqLayout, dict[str, Any], dict[str, Any]]:
    """Export the encoder file and the decoder file into ``staged_dir`` (named after ``target``), and check
    both in ONNX Runtime at other shapes. Returns the layout, the checks and the decoder's sample."""
    from .exporting import _check, run_exporter
    from .inputs import Sample, grow
    from .wrap import FlatModule, signature_module

    names = encoder_inputs(model)
    given = dict(sample.as_dict())
    enc_sample = {n: given[n] for n in names}
    layout = layout_of(model, enc_sample)
    enc_axes, dec_axes = axes(layout)
    grown = grow(Sample(list(names), [enc_sample[n] for n in names], False, {n: dict(enc_axes[n]) for n in names}))
    grown_sample = dict(zip(grown.names, grown.tensors))
    parts = [(EncoderWithCross(model, names), list(names), enc_sample, grown_sample, enc_axes,
              target.stem + SUFFIX),
             (DecoderWithCaches(model, layout), decoder_names(layout), decoder_sample(model, layout, enc_sample),
              decoder_sample(model, layout, grown_sample, past=4, length=2, seed=1), dec_axes, target.name)]
    checks: dict[str, Any] = {}
    for module, in_names, feed, other, spec, filename in parts:
        flat = FlatModule(module, in_names, False, {})
        tensors = [feed[n] for n in in_names]
        flat.discover(tensors)
        smp = Sample(list(in_names), tensors, False, {n: spec[n] for n in in_names if n in spec})
        all_axes = {**smp.axes, **{o: spec[o] for o in flat.output_names if o in spec}}
        staged = staged_dir / filename
        run_exporter("torchscript", signature_module(flat), smp, flat, staged, all_axes, opset, False, warnings, [],
                     branches)
        probe = Sample(list(in_names), [other[n] for n in in_names], False, dict(smp.axes))
        with torch.no_grad():
            expected = flat.flat(*probe.tensors)
        checks["encoder" if filename.endswith(SUFFIX) else "decoder"] = _check(staged, probe, expected,
                                                                                flat.output_names)
    return layout, checks, parts[1][2]


# -- generation parity ------------------------------------------------------------------------------

class Seq2SeqParity:
    """Generation parity's inputs and runs for an encoder-decoder: three inputs of different lengths (token
    prompts right-padded for the encoder, or audio features), the decoder's steps under teacher forcing."""

    def __init__(self, model: Any, path: Path, max_new_tokens: int, count: int = 3,
                 encoder: Path | None = None) -> None:
        from .parity.generation import default_prompts

        self.model, self.path, self.new, self.encoder = model, path, max_new_tokens, encoder
        self.names = encoder_inputs(model)
        config = model.config
        self.pad = int(getattr(config, "pad_token_id", None) or 0)
        self.start = int(config.decoder_start_token_id if config.decoder_start_token_id is not None else self.pad)
        if self.names == ("input_features",):
            frames = 2 * int(getattr(config, "max_source_positions", 1500))
            rng = np.random.default_rng(0)
            self.items: list[dict[str, np.ndarray]] = [
                {"input_features": rng.standard_normal((1, config.num_mel_bins, frames)).astype(np.float32)}
                for _ in range(count)]
            self.batch = {"input_features": np.concatenate([i["input_features"] for i in self.items])}
            self.labels = [f"audio {i} (features of {frames} frames)" for i in range(count)]
            self.describe = f"{count} audio inputs ({frames} frames of random features) batched"
        else:
            prompts = default_prompts(model, count)
            self.items = [encoder_feed([p], None, self.names, self.pad) for p in prompts]
            self.batch = encoder_feed(prompts, None, self.names, self.pad)
            self.labels = [f"input {i} ({len(p)} tokens)" for i, p in enumerate(prompts)]
            self.describe = (f"{count} encoder inputs of {', '.join(str(len(p)) for p in prompts)} tokens, batched "
                             "with right padding for the teacher-forced logits")
        self.first_step = "first decoder step (batch)"

    def _torch(self, feed: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        return {k: torch.from_numpy(v) for k, v in feed.items()}

    def reference(self) -> list[list[int]]:
        out = []
        for item in self.items:
            feed = self._torch(item)
            with torch.no_grad():
                if self.names == ("input_features",):  # Whisper's generate() adds its own task tokens: plain greedy
                    out.append(self._greedy(feed))
                    continue
                ids = self.model.generate(**feed, max_new_tokens=self.new, min_new_tokens=self.new, do_sample=False,
                                          pad_token_id=self.pad, eos_token_id=None)
            out.append([int(t) for t in ids[0, 1:]])
        return out

    def _greedy(self, feed: dict[str, torch.Tensor]) -> list[int]:
        """PyTorch's own greedy loop with its cache (the encoder once, one decoder step per token)."""
        states = self.model.get_encoder()(**feed, return_dict=True).last_hidden_state
        cache = _new_cache(self.model, [], [])
        ids = torch.tensor([[self.start]])
        tokens: list[int] = []
        for _ in range(self.new):
            out = self.model(encoder_outputs=(states,), decoder_input_ids=ids, past_key_values=cache, use_cache=True,
                             return_dict=True)
            cache = out.past_key_values
            ids = out.logits[:, -1].argmax(-1, keepdim=True)
            tokens.append(int(ids[0, 0]))
        return tokens

    def forced(self, provider: str, reference: list[list[int]]) -> list[tuple[int, np.ndarray, np.ndarray]]:
        runner = OnnxSeq2Seq(self.path, provider, self.encoder)
        encoded = runner.encode(self.batch)
        state = runner.start(encoded, self.batch.get("attention_mask"))
        feed = self._torch(self.batch)
        mask = {"attention_mask": feed["attention_mask"]} if "attention_mask" in feed else {}
        with torch.no_grad():
            states = self.model.get_encoder()(**feed, return_dict=True).last_hidden_state
        cache = _new_cache(self.model, [], [])
        steps = min(len(r) for r in reference)
        ids = np.full((len(reference), 1), self.start, np.int64)
        out = []
        for step in range(steps + 1):
            logits, state = runner.step(ids, state)
            with torch.no_grad():
                ref = self.model(encoder_outputs=(states,), decoder_input_ids=torch.from_numpy(ids), use_cache=True,
                                 past_key_values=cache, return_dict=True, **mask)
            cache = ref.past_key_values
            out.append((step, logits[:, -1, :], ref.logits[:, -1, :].float().numpy()))
            if step < steps:
                ids = np.array([[r[step]] for r in reference], np.int64)
        return out

    def generated(self, provider: str) -> list[list[int]]:
        runner_tokens = []
        for item in self.items:  # one at a time, as the reference ran
            tokens, _ = generate(self.path if self.encoder is None else _Beside(self.path, self.encoder), item,
                                 max_new_tokens=self.new, pick=lambda logits: np.argmax(logits, -1),
                                 eos=set(), pad=self.pad, start=self.start, provider=_full(provider), tokenizer=None,
                                 stream=None)
            runner_tokens.append(tokens[0])
        return runner_tokens

    def logits_at(self, index: int, prefix: list[int]) -> torch.Tensor:
        feed = self._torch(self.items[index])
        with torch.no_grad():
            return self.model(**feed, decoder_input_ids=torch.tensor([[self.start, *prefix]])).logits[0, -1].float()


def _full(provider: str) -> str:
    from .sessions import providers_named

    return providers_named([provider])[0].name


@dataclass
class _Beside:
    """A decoder file (a variant) and the export's encoder file it runs with."""

    path: Path
    encoder: Path
