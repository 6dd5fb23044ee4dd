"""A speech model's sample audio: a waveform, or a spectrogram in the width and layout the model takes."""

from __future__ import annotations

from typing import Any

import torch

from ...runtime.shapes import SAMPLE_SIZES

BATCH, AUDIO_SAMPLES, MEL_FRAMES = (SAMPLE_SIZES[k] for k in ("batch", "audio_samples", "mel_frames"))


def bins(config: Any) -> int | None:
    """A spectrogram's bins (or a feature frame's width) as the config names them, the encoder's or audio tower's
    config too (Nemotron 3's diarizer: its ``audio_config``)."""
    for c in filter(None, (config, getattr(config, "encoder_config", None), getattr(config, "audio_config", None))):
        for name in ("num_mel_bins", "feature_projection_input_dim"):
            if isinstance(getattr(c, name, None), int):
                return int(getattr(c, name))
        if isinstance(getattr(c, "input_feat_per_channel", None), int):
            return int(c.input_feat_per_channel) * int(getattr(c, "input_channels", 1) or 1)
    return None


def extractor_width(config: Any) -> int | None:
    """The frame width the model type's own feature extractor gives at its defaults, where transformers registers
    one that builds here: a width no config field names (Granite Speech 5's CTC model takes each mel frame with its
    delta, two frames stacked: 4 x its 80 bins)."""
    import transformers
    from transformers.models.auto.feature_extraction_auto import FEATURE_EXTRACTOR_MAPPING_NAMES

    name = FEATURE_EXTRACTOR_MAPPING_NAMES.get(getattr(config, "model_type", ""))
    try:
        width = getattr(getattr(transformers, name)(), "feature_size", None) if isinstance(name, str) else None
    except Exception:  # noqa: BLE001 - a placeholder for a library missing here, or arguments it needs: none
        return None
    return width if isinstance(width, int) else None


def _taken(target: Any, name: str, candidates: list[torch.Tensor]) -> torch.Tensor | None:
    """The first of ``candidates`` whose first row ``target`` runs on, else None."""
    for candidate in candidates:
        try:
            with torch.no_grad():
                target(**{name: candidate[:1]})
            return candidate
        except Exception:  # noqa: BLE001 - not this layout; the next
            continue
    return None


def audio(model: Any, name: str, length: int | None, gen: torch.Generator) -> torch.Tensor:
    """A waveform or a spectrogram for ``name``. The layout of a spectrogram is not in any config (Whisper takes
    [batch, bins, frames], Speech2Text, Wav2Vec2-BERT and LASR [batch, frames, bins], AST its ``input_values`` as
    [batch, max_length, bins]), so the candidates are tried on the model (its encoder, for an encoder-decoder)
    and the first it takes is the sample; where it takes none, the same at the width of the type's feature extractor
    (:func:`extractor_width`) where that differs from the config's, else (none builds here: Granite Speech 5's needs
    torchaudio) at two and four times the bins (frames stacked, with their deltas); ``length``, a quirk's
    spectrogram length (Whisper's), is taken as it is."""
    config = model.config
    named = bins(config)
    width = named or 80
    frames = length or MEL_FRAMES
    if name == "input_features" and length:
        return torch.randn(BATCH, width, frames, generator=gen)
    spectrogram_frames = getattr(config, "max_length", None) if name == "input_values" else None
    # a waveform of a quarter second, else one second (an x-vector head's dilated convolutions need more frames than
    # a quarter second leaves after the feature encoder)
    # (and a waveform with its channel axis, [batch, 1, samples]: OmniASR's)
    shapes: list[tuple[int, ...]] = [(BATCH, AUDIO_SAMPLES), (BATCH, 4 * AUDIO_SAMPLES), (BATCH, 1, AUDIO_SAMPLES)] \
        if name == "input_values" else [(BATCH, width, frames), (BATCH, frames, width)]
    if named and isinstance(spectrogram_frames, int):  # a spectrogram named input_values (AST)
        shapes.append((BATCH, spectrogram_frames, width))
    candidates = [torch.randn(*shape, generator=gen) for shape in shapes]
    if len(candidates) == 1:
        return candidates[0]
    target = model.get_encoder() if getattr(config, "is_encoder_decoder", False) and hasattr(
        model, "get_encoder") else model
    found = _taken(target, name, candidates)
    if found is None and name == "input_features":  # frames widened by the type's feature extractor
        known = extractor_width(config)
        for wide in [known] if known and known != width else [2 * width, 4 * width]:
            found = _taken(target, name, [torch.randn(BATCH, frames, wide, generator=gen),
                                          torch.randn(BATCH, wide, frames, generator=gen)])
            if found is not None:
                break
    return candidates[0] if found is None else found  # none taken: the export's own run says what the model wanted
