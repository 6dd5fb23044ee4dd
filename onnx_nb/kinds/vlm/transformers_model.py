"""A vision-language model's three files as a transformers image-text-to-text model (:func:`onnx_nb.to_transformers`):
:class:`~onnx_nb.steps.generate.hf_model.OnnxForCausalLM` over :class:`~.runner.VlmDecoder`. Only imported by
functions that already need torch and transformers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...steps.generate.hf_model import OnnxCache, OnnxForCausalLM, OnnxLMOutput


class OnnxForImageTextToText(OnnxForCausalLM):
    """A vision-language model's three files (:class:`~.runner.VlmDecoder`) as a transformers image-text-to-text
    model: the first forward's pixels (and the family's extras) go through the vision file, the later ones are text;
    beam search encodes the images once and repeats each prompt's feature rows per beam as it repeats the prompt
    (Qwen-VL's pixels are rows of patches, which a per-row repeat would scramble)."""

    encoded = False  # the images of the coming prompt were encoded by _expand_inputs_for_generation

    def _expand_inputs_for_generation(self, expand_size: int = 1, is_encoder_decoder: bool = False,
                                      input_ids: torch.Tensor | None = None, **model_kwargs: Any) -> Any:
        decoder = self.steps.decoder
        given = {n: model_kwargs.pop(n) for n in decoder.vision_inputs if model_kwargs.get(n) is not None}
        if given and expand_size > 1 and input_ids is not None:
            decoder.set_images({n: v.cpu().numpy() for n, v in given.items()})
            counts = (input_ids == decoder.image_token).sum(1).tolist()
            pending = decoder.pending if decoder.pending is not None else np.zeros((0, 0))
            rows = np.split(pending, np.cumsum(counts)[:-1])
            if len(rows) == len(counts) and sum(counts) == len(pending) > 0:
                decoder.pending = np.concatenate([r for r in rows for _ in range(expand_size)], 0)
                self.encoded = True
                given = {}
        expand: Any = super()._expand_inputs_for_generation  # typed for its own models
        return expand(expand_size, is_encoder_decoder, input_ids, **model_kwargs, **given)

    def prepare_inputs_for_generation(self, input_ids: torch.Tensor, cache: OnnxCache | None = None,
                                      attention_mask: torch.Tensor | None = None, **kwargs: Any) -> dict[str, Any]:
        inputs = super().prepare_inputs_for_generation(input_ids, cache, attention_mask, **kwargs)
        if cache is not None:  # the images were the prompt's
            for name in (*self.steps.decoder.vision_inputs, "token_type_ids", "mm_token_type_ids"):
                inputs.pop(name, None)
        return inputs

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                cache: OnnxCache | None = None, max_length: int | None = None,
                pixel_values: torch.Tensor | None = None, pixel_attention_mask: torch.Tensor | None = None,
                image_sizes: torch.Tensor | None = None, token_type_ids: torch.Tensor | None = None,
                image_grid_thw: torch.Tensor | None = None, mm_token_type_ids: torch.Tensor | None = None,
                batch_num_images: torch.Tensor | None = None, qformer_input_ids: torch.Tensor | None = None,
                qformer_attention_mask: torch.Tensor | None = None, image_position_ids: torch.Tensor | None = None,
                **kwargs: Any) -> OnnxLMOutput:
        """``token_type_ids`` and ``mm_token_type_ids``: the embed file makes them from the image tokens;
        ``batch_num_images``: LLaVA-OneVision's count of each prompt's images (one among several is not tiled);
        ``qformer_input_ids`` and its mask: InstructBLIP's instruction, which its vision file takes beside the image;
        ``image_position_ids``: Gemma 4's patch positions beside its row of patches."""
        given = {"pixel_values": pixel_values, "pixel_attention_mask": pixel_attention_mask,
                 "image_sizes": image_sizes, "image_grid_thw": image_grid_thw, "batch_num_images": batch_num_images,
                 "qformer_input_ids": qformer_input_ids, "qformer_attention_mask": qformer_attention_mask,
                 "image_position_ids": image_position_ids}
        return self.chain_forward(given, input_ids, attention_mask, cache, max_length, **kwargs)

    def chain_forward(self, given: dict[str, torch.Tensor | None], input_ids: torch.Tensor,
                      attention_mask: torch.Tensor | None, cache: OnnxCache | None, max_length: int | None,
                      **kwargs: Any) -> OnnxLMOutput:
        """A step of the chain: the first one's tower inputs (``given``, by name) through the tower file."""
        decoder = self.steps.decoder
        media = {n: v.cpu().numpy() for n, v in given.items() if v is not None and n in decoder.vision_inputs}
        if cache is None and not self.encoded:
            decoder.set_images(media or None)
        self.encoded = False
        out = super().forward(input_ids, attention_mask, cache, max_length, **kwargs)
        if cache is None:
            self.step_ms[-1] += decoder.vision_ms  # time to first token: the image (audio) encoding too
        return out


def transformers_model(model: Any, config: Any, path: Path, provider: str, threads: int | None,
                       io_binding: bool | None) -> Any:
    """The export's vision, embed and decoder files as one transformers model: the chain shape's answer to
    :func:`onnx_nb.to_transformers`."""
    from .runner import VlmDecoder

    return chained_model(OnnxForImageTextToText, VlmDecoder, model, config, provider, threads)


def chained_model(wrapper: Any, runner: Any, model: Any, config: Any, provider: str, threads: int | None) -> Any:
    """``wrapper`` (a transformers model class over a chain) over ``runner`` (its step runner class) on the export's
    files."""
    from .adapter import chain_files

    files = chain_files(model)
    return wrapper(config, Path(files["decoder"]), provider, runner(files, provider, threads=threads))
