"""Text-to-speech models that draw random numbers in eval mode, as models that take what they draw from as inputs.

VITS (and so MMS-TTS) draws noise at scales it holds as attributes: its stochastic duration predictor's noise at
``noise_scale_duration``, its prior's at ``noise_scale``.

Exported as it is, such a model bakes each scale into the graph as a constant beside the draw, and no file can match
it run for run: PyTorch's second run of the same text gives other durations, so another length of speech (the
export's check said so, and failed). :class:`ScaledNoise` runs the same model with ``noise_scale``,
``noise_scale_duration`` and ``speaking_rate`` as scalar inputs of the file: the sample gives the noise at zero,
where PyTorch repeats itself and the file is checked against it as any model is, and an application gives the
config's scales (``noise_scales(config)``) for the speech the model was trained to make, drawn by ONNX Runtime's
``RandomNormal`` (Piper's VITS files likewise take theirs as an input, one vector of three).

SpeechT5's decoder prenet keeps its dropout on at inference ("consistent dropout", after Tacotron 2: one mask per
layer, the same for every row of the batch), so its text-to-speech forward gives another spectrogram on each run.
:class:`DrawnDropout` takes the uniform draws its masks come from as the input ``prenet_draws``
(``[prenet layers, decoder frames, prenet units]``, as a masked autoencoder takes its ``noise``): a unit is kept
where its draw is below the config's ``speech_decoder_prenet_dropout``, as ``torch.bernoulli`` keeps it, and scaled
by the model's own factor, so the file is checked against PyTorch at the sample's draws, run for run, and an
application draws fresh ones (``numpy.random.rand(...).astype(numpy.float32)``) for each call, as the model does.
Recognised by what the model holds (a text-to-speech head on ``speecht5`` whose prenet defines
``_consistent_dropout``); SpeechT5's speech-to-speech model has the same prenet and is left as it is.
"""

from __future__ import annotations

from typing import Any

import torch

from ...steps.export.patches.lending import lent

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


class OnTokens(torch.nn.Module):
    """A text-to-speech model wrapped for its export: it runs on token ids, its config the model's."""

    main_input_name = "input_ids"

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model
        self.config = model.config


class ScaledNoise(OnTokens):
    """``forward(input_ids, attention_mask, noise_scale, noise_scale_duration, speaking_rate) -> {waveform,
    sequence_lengths, spectrogram}``: the model's own forward with its scales set from the inputs for the call."""

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


PRENET_DRAWS = "prenet_draws"


def drops_out(model: Any) -> bool:
    """Whether ``model`` is a text-to-speech model whose decoder prenet drops out in eval mode (SpeechT5's: its
    text encoder and speech decoder under ``speecht5``, a spectrogram postnet, a prenet with
    ``_consistent_dropout``)."""
    config = getattr(model, "config", None)
    return isinstance(model, torch.nn.Module) and getattr(model, "main_input_name", None) == "input_ids" and all(
        hasattr(model, n) for n in ("speecht5", "speech_decoder_postnet")) and isinstance(
        getattr(config, "speech_decoder_prenet_dropout", None), float) and bool(_prenets(model))


def _prenets(model: Any) -> list[Any]:
    """The modules of ``model`` that drop out in eval mode (SpeechT5's speech decoder prenet)."""
    return [m for m in model.modules() if hasattr(m, "_consistent_dropout")]


def draws_for(config: Any, frames: int, gen: torch.Generator | None = None) -> torch.Tensor:
    """Uniform draws for ``frames`` decoder frames: ``[prenet layers, frames, prenet units]``."""
    shape = (int(config.speech_decoder_prenet_layers), frames, int(config.speech_decoder_prenet_units))
    return torch.rand(*shape, generator=gen)


class DrawnDropout(OnTokens):
    """``forward(input_ids, attention_mask, decoder_input_values, speaker_embeddings, prenet_draws,
    decoder_attention_mask) -> {spectrogram, stop_scores}``: SpeechT5's text-to-speech step with each prenet layer's
    mask from its draws; ``stop_scores`` are the postnet's end-of-speech scores per frame, before the sigmoid (its
    ``generate`` stops where their sigmoid passes its threshold)."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                decoder_input_values: torch.Tensor | None = None, speaker_embeddings: torch.Tensor | None = None,
                prenet_draws: torch.Tensor | None = None,
                decoder_attention_mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Draws not given are made here, as the model would draw them (a user's sample without them)."""
        model, p = self.model, float(self.config.speech_decoder_prenet_dropout)
        if prenet_draws is None and decoder_input_values is not None:
            prenet_draws = draws_for(self.config, int(decoder_input_values.shape[1])).to(decoder_input_values.device)
        draws = prenet_draws  # bound once for the closure below (mypy keeps no narrowing into it)
        layer = iter(range(int(self.config.speech_decoder_prenet_layers)))

        def drawn(inputs_embeds: torch.Tensor, _p: float) -> torch.Tensor:
            assert draws is not None, "SpeechT5's decoder runs on decoder_input_values"
            keep = draws[next(layer)] < p  # torch.bernoulli(x, p) gives 1 with probability p: kept
            return torch.where(keep.unsqueeze(0), inputs_embeds, 0) * (1 / (1 - p))

        with lent([(prenet, "_consistent_dropout", drawn) for prenet in _prenets(model)]):
            out = model.speecht5(input_values=input_ids, attention_mask=attention_mask,
                                 decoder_input_values=decoder_input_values,
                                 decoder_attention_mask=decoder_attention_mask, speaker_embeddings=speaker_embeddings,
                                 use_cache=False, return_dict=True)
        _, spectrogram, stop_scores = model.speech_decoder_postnet(out[0])
        # not "logits": the parity's rank rule reads an output so named as classes over its last axis (frames here)
        return {"spectrogram": spectrogram, "stop_scores": stop_scores}


def wrap(model: Any) -> Any:
    """``model`` as a :class:`ScaledNoise` where it draws noise at scales it holds (:func:`draws_noise`), as a
    :class:`DrawnDropout` where its prenet drops out in eval mode (:func:`drops_out`), else as it is; the user's
    model keeps its training flag (the export runs it in eval mode, and gives the flag back)."""
    if draws_noise(model):
        wrapped: torch.nn.Module = ScaledNoise(model)
    elif drops_out(model):
        wrapped = DrawnDropout(model)
    else:
        return model
    wrapped.training = model.training  # the wrapper's own flag only: never the user's modules
    return wrapped
