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

from ...errors import InvalidArgumentError
from ...runtime.facts import is_cross_cache, present_of
from ...steps.export.caches.seq2seq import encoder_feed, encoder_path
from ...steps.generate.runners import binding_device, on_device, run_bound


class OnnxSeq2Seq:
    """The encoder file once, then decoder steps with the self-attention cache, in ONNX Runtime."""

    def __init__(self, decoder: Path, provider: str = "CPUExecutionProvider", encoder: Path | None = None,
                 threads: int | None = None, io_binding: bool | None = None) -> None:
        from ...runtime.sessions import session

        encoder = encoder or encoder_path(decoder)
        if not encoder.exists():
            raise InvalidArgumentError(f"{decoder} has no encoder file beside it ({encoder.name}); export the model "
                                       "again with onnx_nb.export(model).")
        # between two steps the logits are processed outside ONNX Runtime: its threads stop spinning after each run
        self.encoder = session(encoder, provider, threads=threads, stop_spinning=True)
        self.decoder = session(decoder, provider, threads=threads, stop_spinning=True)
        self.encoder_names = [i.name for i in self.encoder.get_inputs()]
        self.decoder_inputs = {i.name: i for i in self.decoder.get_inputs()}
        self.self_names = [n for n in self.decoder_inputs if ".decoder." in n]
        first = self.decoder_inputs[self.self_names[0]]
        self.heads, self.head_size = int(first.shape[1]), int(first.shape[3])
        self.decoder_outputs = [o.name for o in self.decoder.get_outputs()]
        # I/O binding (default: providers other than the CPU's): the encoder's states, the cross-attention cache
        # and the decoder's own cache stay on the provider's device between steps; only ids and logits move
        self.device = binding_device(self.decoder, provider, io_binding)

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
            if is_cross_cache(name):
                state[name] = encoded[present_of(name)]
        for name in self.self_names:
            state[name] = np.zeros((batch, self.heads, 0, self.head_size), np.float32)
        if self.device is not None:
            state = {name: on_device(value, self.device) for name, value in state.items()}
        return state

    def step(self, ids: np.ndarray, state: dict[str, Any]) -> tuple[np.ndarray, dict[str, Any]]:
        feed = {"decoder_input_ids": ids.astype(np.int64), **state}
        if self.device is not None:
            out = run_bound(self.decoder, feed, self.decoder_outputs, self.device)
            logits = out["logits"].numpy()
        else:
            out = dict(zip(self.decoder_outputs, self.decoder.run(None, feed)))
            logits = out["logits"]
        grown = dict(state)
        for name in self.self_names:
            grown[name] = out[present_of(name)]
        return logits, grown


def encoder_of(model: Any) -> Path | None:
    """The encoder file of a decoder file, an export or a variant of the decoder (which keeps using the export's
    encoder file)."""
    from ...results.export import export_of

    path = Path(getattr(model, "path", model))
    if isinstance(model, BesideEncoder):
        return model.encoder
    if encoder_path(path).exists():
        return encoder_path(path)
    export = export_of(model)
    if export is None:
        return None
    return export.parts.get("encoder") or encoder_path(export.path)  # a result from before parts were named


def generate(model: Any, inputs: Any, *, max_new_tokens: int, pick: Any, eos: set[int], pad: int, start: int,
             provider: str, tokenizer: Any, stream: Any, threads: int | None = None, rules: Any = None
             ) -> tuple[list[list[int]], list[float]]:
    """The generation loop of an encoder-decoder (called by :func:`onnx_nb.generate`)."""
    from ...steps.generate.sampling import accept, next_ids

    runner = OnnxSeq2Seq(Path(getattr(model, "path", model)), provider, encoder_of(model), threads)
    names = tuple(runner.encoder_names)
    feed = encoder_feed(inputs, tokenizer, names, pad)
    times: list[float] = []
    t0 = time.perf_counter()
    encoded = runner.encode(feed)
    state = runner.start(encoded, feed.get("attention_mask"))
    batch = encoded["encoder_hidden_states"].shape[0]
    prompt = [start, *(rules.prefix if rules is not None else [])]  # Whisper: language and task tokens after start
    ids = np.tile(np.asarray(prompt, np.int64), (batch, 1))
    done = [False] * batch
    new: list[list[int]] = [[] for _ in range(batch)]
    seqs = [list(prompt) for _ in range(batch)]  # the decoder's tokens as transformers counts them (rules' lengths)
    for _ in range(max_new_tokens):
        logits, state = runner.step(ids, state)
        last = logits[:, -1, :]
        if rules is not None and rules.active:
            last = rules.apply(last, seqs, len(prompt), len(prompt) + max_new_tokens)
        chosen = pick(last)
        times.append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        if accept(chosen, done, new, eos, stream):
            break
        ids = next_ids(chosen, done, pad)
        for row, token in zip(seqs, ids[:, 0].tolist()):
            row.append(token)
    return new, times



def loop(model: Any, inputs: Any, *, start: int | None, tokenizer: Any, pad: int, **rest: Any) -> Any:
    """``generate()``'s loop for an encoder-decoder's files (the shape's loop answer): the encoder once, then its
    decoder's steps, as :func:`onnx_nb.generate` returns them. An image-to-text model's pictures become pixel values
    through the export's processor (``tokenizer`` here: a processor, an image processor and a tokenizer)."""
    from ...results.generation import GenerationResult

    tokens, steps = generate(model, inputs, start=int(start if start is not None else pad), pad=pad,
                             tokenizer=tokenizer, **rest)
    words = getattr(tokenizer, "tokenizer", tokenizer)  # a processor's tokenizer (an image processor has none)
    text = [words.decode(t, skip_special_tokens=True) for t in tokens] if hasattr(words, "decode") else None
    return GenerationResult([], tokens, text, steps[0], steps[1:])


# -- export -----------------------------------------------------------------------------------------

def full_provider_name(provider: str) -> str:
    from ...runtime.providers import providers_named

    return providers_named([provider])[0].name


@dataclass
class BesideEncoder:
    """A decoder file (a variant) and the export's encoder file it runs with."""

    path: Path
    encoder: Path
