"""A vision-language model's rows in :func:`onnx_nb.benchmark`'s generation table (the chain shape's timing): a
prefill is one image through the vision file and the prompt through the embed file and the decoder, the time to
first token with an image; a decode step is the embed file and the decoder for one token; PyTorch's prefill is the
model's forward on the same image and prompt. Only imported by functions that already need torch."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...runtime.onnxfile import file_bytes
from ...runtime.providers import threads_for, threads_shown
from ...steps.benchmark.generation_latency import DecoderTiming


class ChainStep:
    """A vision-language model's files run as :func:`onnx_nb.generate` runs them (:class:`VlmDecoder`): a prefill is
    one image through the vision file, the prompt (its image tokens and ``length`` text tokens) through the embed
    file and the decoder's prefill, which is the time to first token; a decode step is one token through the embed
    file and the decoder after ``past`` cached ones."""

    def __init__(self, files: dict[str, Any], provider: str, length: int, past: int, threads: int | None) -> None:
        runner = self.runner_class()(files, provider, threads=threads, level="all", map_weights=False)
        # the weights of the three files
        self.floor_bytes = sum(file_bytes(files[part]) for part in (runner.tower, "embed", "decoder"))
        rng = np.random.default_rng(0)
        self.pixels = self.media(files, runner)
        runner.set_images(self.pixels)
        self.image_tokens = int(runner.pending.shape[0]) if runner.pending is not None else 0
        if past:
            runner.set_images(None)  # a decode step's token is text
        vocab = int(files["model"].get_input_embeddings().num_embeddings) if files.get("model") is not None else 100
        text = rng.integers(3, max(min(vocab, runner.image_token), 4), (1, length if not past else 1))
        self.ids = np.concatenate([text[:, :1], np.full((1, self.image_tokens), runner.image_token), text[:, 1:]], 1) \
            if not past else text
        self.mask = np.ones((1, past + self.ids.shape[1]), np.int64)
        self.cache = runner.empty_cache(1)
        if past:
            self.cache = {n: rng.standard_normal((1, v.shape[1], past, v.shape[3])).astype(runner.float_type)
                          for n, v in self.cache.items()}
        self.runner, self.past = runner, past
        self.options = {"graph_level": "all", "intra_op_threads": threads_shown(threads),
                        "step": "vision + embed + decoder prefill" if not past else "embed + decoder, cache kept"}

    @staticmethod
    def runner_class() -> Any:
        from .runner import VlmDecoder

        return VlmDecoder

    @staticmethod
    def media(files: dict[str, Any], runner: Any) -> dict[str, np.ndarray]:
        """One image in the shapes the vision file fixes (patches and their grid, an image and its size, from the
        model where the file takes those)."""
        from ...runtime.facts import IMAGE_GRID, fixed_inputs
        from ...runtime.feeds import graph_sample
        from .parts import pixel_sample

        pixels, _ = graph_sample(Path(files["vision"]), 0)
        takes_model = IMAGE_GRID in runner.vision_inputs or "image_sizes" in runner.vision_inputs
        if takes_model and files.get("model") is not None:
            pixels = {k: v.numpy() for k, v in pixel_sample(files["model"]).items()}
        if "image_sizes" in pixels:  # the image's size beside its pixels (Pixtral's towers)
            pixels["image_sizes"] = np.array([pixels["pixel_values"].shape[-2:]], np.int64)
        for name, values in fixed_inputs(runner.vision).items():  # the values it was traced at
            pixels[name] = np.array([values], np.int64)
        return pixels

    def __call__(self) -> None:
        if not self.past:
            self.runner.set_images(self.pixels)  # the image's encoding is part of the time to first token
        self.runner.step(self.ids, self.mask, self.cache)


class TorchImagePrefill:
    """PyTorch eager: the model's forward on one image and a prompt of its image tokens and ``length`` text tokens
    (what its first token costs)."""

    def __init__(self, model: Any, length: int, threads: int | None) -> None:
        from ...runtime.memory import weight_bytes
        from .prompts import prompt_extras

        token, self.pixels, rows = self.media(model)
        vocab = int(model.get_input_embeddings().num_embeddings)
        g = torch.Generator().manual_seed(0)
        text = torch.randint(3, max(min(vocab, token), 4), (1, length), generator=g)
        self.ids = torch.cat([text[:, :1], torch.full((1, rows), token), text[:, 1:]], 1)
        self.extra = prompt_extras(model, self.ids, token)
        self.model = model
        self.options = {"mode": "eager, inference_mode", "threads": threads_for(threads) or torch.get_num_threads(),
                        "cache": "on"}
        self.held_bytes = weight_bytes(model)

    @staticmethod
    def media(model: Any) -> tuple[int, dict[str, torch.Tensor], int]:
        """The image token, one image's pixels and its count of feature rows."""
        from .parts import features_of, image_token_of, pixel_sample

        token = image_token_of(model.config)
        assert token is not None
        pixels = pixel_sample(model)
        return token, pixels, int(features_of(model, pixels).shape[0])

    def __call__(self) -> None:
        with torch.inference_mode():
            self.model(input_ids=self.ids, attention_mask=torch.ones_like(self.ids), **self.pixels, **self.extra,
                       use_cache=True, return_dict=True)




class ChainTiming(DecoderTiming):
    notes = ("A vision-language model runs as generate() runs it: a prefill row is one image through the vision "
             "file, the prompt (the image's tokens and the text tokens) through the embed file and the decoder, so "
             "it is the time to first token with an image; a decode row is the embed file and the decoder for one "
             "token. PyTorch's prefill is the model's forward on the same image and prompt.",)

    @staticmethod
    def tag(length: int, past: int) -> str:
        return f"prefill: an image + {length} text tokens" if not past else DecoderTiming.tag(length, past)

    steps: tuple[Any, Any] = (ChainStep, TorchImagePrefill)  # the chain's step and PyTorch's prefill

    @classmethod
    def torch(cls, model: Any, length: int, past: int, cache: bool, threads: int | None, layout: Any) -> Any:
        if past:
            return DecoderTiming.torch(model, length, past, cache, threads, layout)
        return partial(cls.steps[1], model, length, threads)

    @classmethod
    def onnx(cls, obj: Any, path: Any, provider: str, length: int, past: int, threads: int | None,
             vocab: int) -> Any:
        from ...steps.export.adapters.registry import adapter_of

        files = adapter_of(obj).step_files(obj) if not isinstance(obj, (str, Path)) else None
        if not files:  # a file alone beside the chain: timed as a decoder's
            return DecoderTiming.onnx(obj, path, provider, length, past, threads, vocab)
        return partial(cls.steps[0], files, provider, length, past, threads)
