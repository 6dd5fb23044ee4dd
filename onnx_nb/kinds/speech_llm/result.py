"""A speech LLM as three ONNX files (:class:`SpeechLlmExport`): its audio tower, its text embedding with the audio
rows merged in, and its decoder with a key/value cache."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..vlm.result import ChainedExport


@dataclass(repr=False)
class SpeechLlmExport(ChainedExport):
    """A speech LLM as the vision-language shape with audio: ``audio.onnx`` (one clip's features -> one row per audio
    token), ``embed.onnx`` (token ids + rows -> the decoder's embeddings) and ``decoder.onnx`` (embeddings -> logits,
    with its cache). ``onnx_nb.generate(result, processor_output)`` runs the three in ONNX Runtime; the chain was
    checked against the model's own forward at export (``chain``).

    Example::

        speech = onnx_nb.export("nvidia/audio-flamingo-3-hf")
        inputs = processor(text=prompt, audio=clip, return_tensors="np")
        onnx_nb.generate(speech, inputs, max_new_tokens=40).text
    """

    TITLE = "Speech LLM exported"
    audio_token: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "audio_token": self.audio_token}
