"""Generation parity of a speech LLM's decoder file (the export's own, or a variant of it), judged on the whole
chain: two prompts with a clip each through the audio and embed files and this decoder, against PyTorch's
``generate()`` with the audio: the vision-language chain's runs (:class:`~..vlm.parity.VlmChain`) with audio.
Only imported by functions that already need torch."""

from __future__ import annotations

from typing import Any

import torch

from ..vlm.parity import VlmChain


class AudioChain(VlmChain):
    """Two prompts of the model's own audio-token count for a second of audio, each with its clip."""

    tower, token_key, media = "audio", "audio_token", "a clip"

    @staticmethod
    def sample(model: Any, seed: int) -> dict[str, torch.Tensor]:
        from .parts import audio_sample

        return audio_sample(model, 1, seed=seed)

    @staticmethod
    def rows(model: Any, sample: dict[str, torch.Tensor]) -> int:
        from .parts import features_of

        return int(features_of(model, sample).shape[0])

    @staticmethod
    def runner_class() -> Any:
        from .runner import SpeechDecoder

        return SpeechDecoder
