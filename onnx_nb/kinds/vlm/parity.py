"""Generation parity of a vision-language model's decoder file (the export's own, or a variant of it), judged on the
whole chain: two prompts with an image each through the vision and embed files and this decoder, per-step logits
under teacher forcing and greedy tokens against PyTorch's ``generate()`` with the pixels: the runs
:func:`~onnx_nb.steps.parity.generation.generation_parity` makes for the chain shape (as ``DecoderOnly`` are a
decoder's). Only imported by functions that already need torch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...steps.parity.probes import plain


class VlmChain:
    """Two prompts of the model's own image-token count, each with its image, and the files that run them."""

    beams = False  # transformers' beam search over the chain is checked by tests, not in every variant's parity
    tower, token_key, media = "vision", "image_token", "an image"  # a speech LLM's chain: its audio file, a clip

    def __init__(self, model: Any, files: dict[str, Any], max_new_tokens: int) -> None:
        from .prompts import prompt_sample

        self.model, self.files, self.new = model, files, max_new_tokens
        self.token = int(files[self.token_key])
        self.pixels = [self.sample(model, seed) for seed in (1, 2)]  # each prompt's image (clip)
        rows = self.rows(model, self.pixels[0])
        vocab = int(model.get_input_embeddings().num_embeddings)
        self.prompts = [prompt_sample(self.token, rows, 1, vocab, seed=seed)[0].tolist() for seed in (1, 2)]
        self.pad = getattr(model.config.get_text_config(), "pad_token_id", None) or 0
        self.labels = [f"prompt {i} ({len(p)} tokens, {self.media})" for i, p in enumerate(self.prompts)]
        self.first_step = f"prefill (with {self.media})"
        others = " and ".join(f"the {p} file" for p in (self.tower, "embed", "decoder") if p != files["role"])
        self.describe = (f"{len(self.prompts)} prompts with {self.media} each ({rows} {self.tower} tokens), "
                         f"through {others} and this {files['role']} file")

    @staticmethod
    def sample(model: Any, seed: int) -> dict[str, torch.Tensor]:
        from .parts import pixel_sample

        return pixel_sample(model, 1, seed=seed)

    @staticmethod
    def rows(model: Any, sample: dict[str, torch.Tensor]) -> int:
        from .parts import features_of

        return int(features_of(model, sample).shape[0])

    @classmethod
    def of_export(cls, export: Any, model: Any, path: Path, prompts: Any, max_new_tokens: int) -> VlmChain:
        """The chain of the export's files (``path``: its decoder's or a variant's) judged against ``model``: the
        chain shape's parity answer (``prompts`` are a decoder's; the chain makes its own, with their images)."""
        from .adapter import chain_files

        files = chain_files(export, path)
        return cls(files["model"], files, max_new_tokens)

    def _torch(self, index: int, tokens: list[int]) -> dict[str, Any]:
        ids = torch.tensor([tokens])
        from .prompts import prompt_extras

        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), **self.pixels[index],
                **prompt_extras(self.model, ids, self.token)}

    def reference(self) -> list[list[int]]:
        out = []
        for i, p in enumerate(self.prompts):
            with torch.no_grad():
                full = self.model.generate(**self._torch(i, p), **plain(len(p) + self.new, self.pad))
            out.append([int(t) for t in full[0, len(p):]])
        return out

    def _runner(self, provider: str, index: int) -> Any:
        runner = self.runner_class()(self.files, provider)
        runner.set_images({k: v.numpy() for k, v in self.pixels[index].items()})
        return runner

    @staticmethod
    def runner_class() -> Any:
        from .runner import VlmDecoder

        return VlmDecoder

    def _steps(self, provider: str, index: int, tokens: list[int]) -> list[np.ndarray]:
        """The chain's last-position logits after the prompt, then after each of ``tokens``."""
        runner = self._runner(provider, index)
        prompt = self.prompts[index]
        cache = runner.empty_cache(1)
        ids = np.array([prompt], np.int64)
        out = []
        for step in range(len(tokens) + 1):
            mask = np.ones((1, len(prompt) + step), np.int64)
            logits, cache = runner.step(ids, mask, cache)
            out.append(np.asarray(logits[:, -1, :], np.float32))
            if step < len(tokens):
                ids = np.array([[tokens[step]]], np.int64)
        return out

    def forced(self, provider: str, reference: list[list[int]]) -> list[tuple[int, np.ndarray, np.ndarray]]:
        steps = min(len(c) for c in reference)
        got = [self._steps(provider, i, c[:steps]) for i, c in enumerate(reference)]
        want = []
        for i, (p, c) in enumerate(zip(self.prompts, reference)):
            with torch.no_grad():
                logits = self.model(**self._torch(i, p + c[:steps])).logits[0].float().numpy()
            want.append(logits[len(p) - 1:len(p) + steps])
        return [(k, np.concatenate([g[k] for g in got]), np.stack([w[k] for w in want])) for k in range(steps + 1)]

    def generated(self, provider: str) -> list[list[int]]:
        from ...runtime.providers import providers_named

        name = providers_named([provider])[0].name
        made = []
        for i, prompt in enumerate(self.prompts):
            runner = self._runner(name, i)
            cache = runner.empty_cache(1)
            ids, tokens = np.array([prompt], np.int64), []
            for step in range(self.new):
                logits, cache = runner.step(ids, np.ones((1, len(prompt) + step), np.int64), cache)
                tokens.append(int(logits[0, -1].argmax()))
                ids = np.array([[tokens[-1]]], np.int64)
            made.append(tokens)
        return made

    def logits_at(self, index: int, prefix: list[int]) -> torch.Tensor:
        with torch.no_grad():
            out: torch.Tensor = self.model(**self._torch(index, self.prompts[index] + prefix)).logits[0, -1].float()
            return out
