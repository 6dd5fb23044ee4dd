"""A speech LLM's rows in :func:`onnx_nb.benchmark`'s generation table (the audio chain's timing): a prefill is one
clip (a second of audio) through the audio file and the prompt through the embed file and the decoder, the time to
first token with audio; a decode step is the embed file and the decoder for one token; PyTorch's prefill is the
model's forward on the same clip and prompt. The vision-language rows' timing (:mod:`..vlm.timing`) with audio. Only
imported by functions that already need torch."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..vlm.timing import ChainStep, ChainTiming, TorchImagePrefill


class AudioStep(ChainStep):
    """:class:`ChainStep` over :class:`~.runner.SpeechDecoder`: a prefill's clip through the audio file."""

    @staticmethod
    def runner_class() -> Any:
        from .runner import SpeechDecoder

        return SpeechDecoder

    @staticmethod
    def media(files: dict[str, Any], runner: Any) -> dict[str, np.ndarray]:
        from .parts import audio_sample

        return {k: v.numpy() for k, v in audio_sample(files["model"]).items()}


class TorchAudioPrefill(TorchImagePrefill):
    """PyTorch eager: the model's forward on one clip and a prompt of its audio tokens and ``length`` text tokens."""

    @staticmethod
    def media(model: Any) -> tuple[int, dict[str, torch.Tensor], int]:
        from .parts import audio_sample, audio_token_of, features_of

        token = audio_token_of(model.config)
        assert token is not None
        audio = audio_sample(model)
        return token, audio, int(features_of(model, audio).shape[0])


class AudioChainTiming(ChainTiming):
    notes = ("A speech LLM runs as generate() runs it: a prefill row is one clip (a second of audio) through the "
             "audio file, the prompt (the clip's audio tokens and the text tokens) through the embed file and the "
             "decoder, so it is the time to first token with audio; a decode row is the embed file and the decoder "
             "for one token. PyTorch's prefill is the model's forward on the same clip and prompt.",)
    steps = (AudioStep, TorchAudioPrefill)

    @staticmethod
    def tag(length: int, past: int) -> str:
        return f"prefill: a clip + {length} text tokens" if not past else ChainTiming.tag(length, past)
