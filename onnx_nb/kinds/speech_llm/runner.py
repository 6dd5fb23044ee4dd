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
    (``input_features`` and its mask, or ``input_values``), one clip per row. Where the file takes each clip's
    window within its audio (MusicFlamingo: :mod:`.windows`), the clips are encoded at the prompt's step, whose audio
    tokens say which clips are windows of one audio."""

    tower, token_key = "audio", "audio_token"
    media = "audio"

    def __init__(self, files: dict[str, Any], provider: str = "CPUExecutionProvider", **options: Any) -> None:
        from .windows import WINDOW

        super().__init__(files, provider, **options)
        self.windows = WINDOW in self.vision_inputs  # counted here from the prompt, not given
        self.vision_inputs = [n for n in self.vision_inputs if n != WINDOW]
        self.deferred: dict[str, np.ndarray] | None = None

    def set_images(self, pixels: dict[str, np.ndarray] | None) -> None:
        self.deferred = None
        super().set_images(pixels)

    def encode(self, pixels: dict[str, np.ndarray]) -> np.ndarray | None:  # type: ignore[override]
        from .parts import per_clip

        if self.windows:  # at the prompt's step (token_feed), with its ids
            self.deferred = pixels
            return None
        return per_clip(self.vision, pixels)

    def token_feed(self, ids: np.ndarray, positions: np.ndarray) -> dict[str, np.ndarray]:
        if self.deferred is not None:
            import time

            from .parts import per_clip

            started = time.perf_counter()
            self.pending = per_clip(self.vision, self.deferred, ids, self.image_token)
            self.deferred = None
            self.vision_ms += (time.perf_counter() - started) * 1e3
        return super().token_feed(ids, positions)


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
