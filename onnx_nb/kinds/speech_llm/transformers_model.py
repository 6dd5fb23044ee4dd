"""A speech LLM's three files as a transformers model (:func:`onnx_nb.to_transformers`): the vision-language chain's
model (:class:`~..vlm.transformers_model.OnnxForImageTextToText`) over :class:`~.runner.SpeechDecoder`, taking the
processor's audio inputs. Only imported by functions that already need torch and transformers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ...steps.generate.hf_model import OnnxCache, OnnxLMOutput
from ..vlm.transformers_model import OnnxForImageTextToText


class OnnxForSpeechLlm(OnnxForImageTextToText):
    """The first forward's audio (one clip per row) goes through the audio file, the later ones are text; beam
    search encodes the clips once and repeats each prompt's rows per beam."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,  # type: ignore[override]
                cache: OnnxCache | None = None, max_length: int | None = None,
                input_features: torch.Tensor | None = None, input_values: torch.Tensor | None = None,
                input_features_mask: torch.Tensor | None = None, feature_attention_mask: torch.Tensor | None = None,
                padding_mask: torch.Tensor | None = None, **kwargs: Any) -> OnnxLMOutput:
        given = {"input_features": input_features, "input_values": input_values,
                 "input_features_mask": input_features_mask, "feature_attention_mask": feature_attention_mask,
                 "padding_mask": padding_mask}
        return self.chain_forward(given, input_ids, attention_mask, cache, max_length, **kwargs)


def transformers_model(model: Any, config: Any, path: Path, provider: str, threads: int | None,
                       io_binding: bool | None) -> Any:
    """The export's audio, embed and decoder files as one transformers model: the audio chain's answer to
    :func:`onnx_nb.to_transformers`."""
    from ..vlm.transformers_model import chained_model
    from .runner import SpeechDecoder

    return chained_model(OnnxForSpeechLlm, SpeechDecoder, model, config, provider, threads)
