"""A text-to-speech model that draws noise in eval mode at scales it holds as attributes (VITS, and so MMS-TTS: its
stochastic duration predictor's noise at ``noise_scale_duration``, its prior's at ``noise_scale``), as a model that
takes its scales, and its speaking rate, as inputs.

Exported as it is, such a model bakes each scale into the graph as a constant beside the draw, and no file can match
it run for run: PyTorch's second run of the same text gives other durations, so another length of speech (the
export's check said so, and failed). :class:`ScaledNoise` runs the same model with ``noise_scale``,
``noise_scale_duration`` and ``speaking_rate`` as scalar inputs of the file: the sample gives the noise at zero,
where PyTorch repeats itself and the file is checked against it as any model is, and an application gives the
config's scales (``noise_scales(config)``) for the speech the model was trained to make, drawn by ONNX Runtime's
``RandomNormal`` (Piper's VITS files likewise take theirs as an input, one vector of three).
"""

from __future__ import annotations

from typing import Any

import torch

SCALES = ("noise_scale", "noise_scale_duration")
RATE = "speaking_rate"


def draws_noise(model: Any) -> bool:
    """Whether ``model`` draws noise at scales held as float attributes, with a speaking rate its forward takes."""
    from ...steps.export.machinery.wrap import forward_parameters

    return isinstance(model, torch.nn.Module) and all(isinstance(getattr(model, n, None), float) for n in SCALES) \
        and RATE in forward_parameters(model)


def noise_scales(config: Any) -> dict[str, float]:
    """The scales and rate the model's config gives: what a file made from it takes for the model's own speech."""
    return {n: float(getattr(config, n)) for n in (*SCALES, RATE)}


class ScaledNoise(torch.nn.Module):
    """``forward(input_ids, attention_mask, noise_scale, noise_scale_duration, speaking_rate) -> {waveform,
    sequence_lengths, spectrogram}``: the model's own forward with its scales set from the inputs for the call."""

    main_input_name = "input_ids"

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model
        self.config = model.config

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                noise_scale: torch.Tensor | None = None, noise_scale_duration: torch.Tensor | None = None,
                speaking_rate: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """A scale not given is the model's own (a user's sample of token ids alone: the file then draws at it)."""
        model = self.model
        kept = [getattr(model, n) for n in SCALES]
        model.noise_scale = kept[0] if noise_scale is None else noise_scale
        model.noise_scale_duration = kept[1] if noise_scale_duration is None else noise_scale_duration
        try:
            out = model(input_ids=input_ids, attention_mask=attention_mask, speaking_rate=speaking_rate,
                        return_dict=True)
        finally:
            model.noise_scale, model.noise_scale_duration = kept
        return {"waveform": out.waveform, "sequence_lengths": out.sequence_lengths, "spectrogram": out.spectrogram}


def wrap(model: Any) -> Any:
    """``model`` as a :class:`ScaledNoise` where it draws noise at scales it holds (:func:`draws_noise`), else as
    it is; the user's model keeps its training flag (the export runs it in eval mode, and gives the flag back)."""
    if not draws_noise(model):
        return model
    wrapped = ScaledNoise(model)
    wrapped.training = model.training  # the wrapper's own flag only: never the user's modules
    return wrapped
