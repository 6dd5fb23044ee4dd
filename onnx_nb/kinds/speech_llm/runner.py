"""A speech LLM's three files (:mod:`.parts`) as one step runner: each clip through ``audio.onnx`` once, each step's
tokens through ``embed.onnx`` (the audio rows merged at the prompt's step), the embeddings through ``decoder.onnx``
with its cache: the vision-language runner (:class:`~..vlm.runner.VlmDecoder`) with audio in place of images."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import InvalidArgumentError
from ..vlm.runner import VlmDecoder, pixels_of


class SpeechDecoder(VlmDecoder):
    """:class:`VlmDecoder` over the audio file: :meth:`set_images` takes the processor's audio inputs
    (``input_features`` and its mask, or ``input_values``), one clip per row."""

    tower, token_key = "audio", "audio_token"
    media = "audio"

    def encode(self, pixels: dict[str, np.ndarray]) -> np.ndarray:
        from .parts import per_clip

        return per_clip(self.vision, pixels)


def step_runner(model: Any, inputs: Any, images: Any, provider: str, threads: int | None) -> tuple[Any, Any]:
    """The audio chain's runner for :func:`onnx_nb.generate`: the export's files as one :class:`SpeechDecoder`, the
    audio of ``inputs`` (the processor's output: token ids with the audio tokens expanded, its features) set."""
    from ..vlm.adapter import chain_files

    if images is not None:
        raise InvalidArgumentError("A speech LLM takes no images=: pass the processor's output for the text and the "
                                   "audio (processor(text=..., audio=..., return_tensors='np')) as the inputs.")
    runner = SpeechDecoder(chain_files(model), provider, threads=threads)
    runner.set_images(pixels_of(inputs, None, None, runner.vision_inputs))  # the processor output's audio entries
    return runner, inputs
