"""Generation parity's inputs and runs for an encoder-decoder (the decoder-only family: :mod:`.generation`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...steps.export.caches.hf_names import cache_kwargs, cache_of
from ...steps.export.caches.seq2seq import (
    FEATURE_INPUTS,
    as_encoder_output,
    encoder_decoder_cache,
    encoder_feed,
    encoder_inputs,
    encoder_states,
    start_token,
)
from ...steps.parity.probes import plain
from ..hf.samples import feature_rows
from .runner import BesideEncoder, OnnxSeq2Seq, full_provider_name, generate


class Seq2SeqParity:
    """Generation parity's inputs and runs for an encoder-decoder: three inputs of different lengths (token
    prompts right-padded for the encoder, audio features or images), the decoder's steps under teacher forcing."""

    def files(self) -> Any:
        """What :func:`onnx_nb.to_transformers` takes for these runs' files: the decoder file, beside the export's
        encoder when it is a variant's."""
        return self.path if self.encoder is None else BesideEncoder(self.path, self.encoder)

    @classmethod
    def of_export(cls, export: Any, model: Any, path: Path, prompts: Any, max_new_tokens: int) -> Seq2SeqParity:
        """The runs of ``path`` (the export's decoder file or a variant's) against ``model``, its encoder a named part
        of the export: the shape's parity answer (``prompts`` are a decoder's; an encoder-decoder makes its own)."""
        from ...steps.export.caches.seq2seq import encoder_path

        return cls(model, path, max_new_tokens, encoder=export.parts.get("encoder") or encoder_path(Path(export.path)))

    def __init__(self, model: Any, path: Path, max_new_tokens: int, count: int = 3,
                 encoder: Path | None = None) -> None:
        from ...steps.parity.probes import default_prompts

        self.model, self.path, self.new, self.encoder = model, path, max_new_tokens, encoder
        self.names = encoder_inputs(model)
        config = model.config
        self.pad = int(getattr(config, "pad_token_id", None) or 0)
        self.start = start_token(model)
        self.features = self.names[0] in FEATURE_INPUTS
        if self.features:  # in the model's own layout and length (Whisper's 3000 frames, a waveform, an image)
            name = self.names[0]
            self.items: list[dict[str, np.ndarray]] = [
                {name: row[name].numpy()} for row in feature_rows(model, count)]
            self.batch = {name: np.concatenate([i[name] for i in self.items])}
            shape = "x".join(str(n) for n in self.items[0][name].shape[1:])
            what = "image" if name == "pixel_values" else "audio"
            self.labels = [f"{what} {i} ({name} {shape})" for i in range(count)]
            self.describe = f"{count} {what} inputs ({name} {shape} of random values) batched"
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

    def feeds(self) -> list[tuple[dict[str, Any], int]]:
        """Each input as ``generate()`` takes it, and the decoder tokens before the new ones (the start token)."""
        return [({**self._torch(item), "decoder_start_token_id": self.start}, 1) for item in self.items]

    def log_probs(self, index: int, tokens: list[int]) -> float:
        """PyTorch's log-probability of ``tokens`` for input ``index`` (teacher-forced after the start token)."""
        decoder = torch.tensor([[self.start, *tokens[:-1]]])
        with torch.no_grad():
            logits = self.model(**self._torch(self.items[index]), decoder_input_ids=decoder).logits[0].float()
        return float(torch.log_softmax(logits, -1).gather(1, torch.tensor(tokens)[:, None]).sum())

    def reference(self) -> list[list[int]]:
        out = []
        for item in self.items:
            feed = self._torch(item)
            with torch.no_grad():
                if self.features:  # Whisper's generate() adds its own task tokens: plain greedy (an image too)
                    out.append(self._greedy(feed))
                    continue
                ids = self.model.generate(**feed, **plain(1 + self.new, self.pad, decoder_start_token_id=self.start))
            out.append([int(t) for t in ids[0, 1:]])
        return out

    def _greedy(self, feed: dict[str, torch.Tensor]) -> list[int]:
        """PyTorch's own greedy loop with its cache (the encoder once, one decoder step per token)."""
        states = encoder_states(self.model, feed)
        cache = encoder_decoder_cache(self.model, [], [])
        ids = torch.tensor([[self.start]])
        tokens: list[int] = []
        for _ in range(self.new):
            out = self.model(encoder_outputs=as_encoder_output(states), decoder_input_ids=ids,
                             **cache_kwargs(self.model, cache), use_cache=True, return_dict=True)
            cache = cache_of(out)
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
            states = encoder_states(self.model, feed)
        cache = encoder_decoder_cache(self.model, [], [])
        steps = min(len(r) for r in reference)
        ids = np.full((len(reference), 1), self.start, np.int64)
        out = []
        for step in range(steps + 1):
            logits, state = runner.step(ids, state)
            with torch.no_grad():
                ref = self.model(encoder_outputs=as_encoder_output(states), decoder_input_ids=torch.from_numpy(ids),
                                 use_cache=True, **cache_kwargs(self.model, cache), return_dict=True, **mask)
            cache = cache_of(ref)
            out.append((step, logits[:, -1, :], ref.logits[:, -1, :].float().numpy()))
            if step < steps:
                ids = np.array([[r[step]] for r in reference], np.int64)
        return out

    def generated(self, provider: str) -> list[list[int]]:
        runner_tokens = []
        for item in self.items:  # one at a time, as the reference ran
            tokens, _ = generate(self.path if self.encoder is None else BesideEncoder(self.path, self.encoder), item,
                                 max_new_tokens=self.new, pick=lambda logits: np.argmax(logits, -1),
                                 eos=set(), pad=self.pad, start=self.start, provider=full_provider_name(provider),
                                 tokenizer=None, stream=None)
            runner_tokens.append(tokens[0])
        return runner_tokens

    def logits_at(self, index: int, prefix: list[int]) -> torch.Tensor:
        feed = self._torch(self.items[index])
        with torch.no_grad():
            out: torch.Tensor = self.model(**feed, decoder_input_ids=torch.tensor([[self.start, *prefix]])).logits
        return out[0, -1].float()
