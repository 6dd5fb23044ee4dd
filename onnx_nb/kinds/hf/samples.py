"""Sample inputs for Hugging Face models, built from their tokenizer or from their config.

Per-architecture quirks live in :data:`QUIRKS`, keyed by ``model_type``; the rest is generic and
driven by the model's ``main_input_name`` and ``forward`` signature.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ...errors import SampleError
from ...runtime.shapes import SAMPLE_SIZES
from ...steps.export.caches.seq2seq import main_input
from ...steps.export.machinery.inputs import AxisSpec, Sample, to_tensor
from ...steps.export.machinery.wrap import forward_parameters
from . import audio_samples, noise, side_inputs
from .images import image_shape, processor_class, vision_config

BATCH, SEQUENCE, DECODER_SEQUENCE, IMAGE_SIDE = (SAMPLE_SIZES[k] for k in (
    "batch", "sequence", "decoder_sequence", "image_side"))
SENTENCES = ["onnx-nb exports models to ONNX.", "Hello world!"]


@dataclass(frozen=True)
class Quirk:
    """What an architecture needs beyond the generic rules."""

    features_length: Any = None  # callable(config) -> frames for ``input_features``
    static_axes: tuple[str, ...] = ()  # inputs whose non-batch axes must stay static
    static_reason: str = ""  # why, for the export result


QUIRKS: dict[str, Quirk] = {
    "whisper": Quirk(features_length=lambda c: 2 * c.max_source_positions,
                     static_axes=("input_features",),
                     static_reason="Whisper's encoder takes exactly 2 x max_source_positions frames (30 s of "
                                   "audio, padded); shorter audio is padded by the feature extractor"),
}

TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
CLIP_FRAMES = 4  # a video input's frames where the config names none (VideoMT's: any clip length)
AXES: AxisSpec = {
    "input_ids": {0: "batch", 1: "sequence"},
    "attention_mask": {0: "batch", 1: "sequence"},
    "token_type_ids": {0: "batch", 1: "sequence"},
    "position_ids": {0: "batch", 1: "sequence"},
    "decoder_input_ids": {0: "batch", 1: "decoder_sequence"},
    "decoder_attention_mask": {0: "batch", 1: "decoder_sequence"},
    "decoder_input_values": {0: "batch", 1: "decoder_sequence"},
    "pixel_values": {0: "batch"},
    "input_values": {0: "batch", 1: "audio_length"},
    "input_features": {0: "batch"},
    **side_inputs.AXES,
}


def _naflex(vision: Any, gen: Any) -> dict[str, Any]:
    """SigLIP 2's NaFlex input as its processor gives it: an image cut into patches, flattened
    ([batch, patches, channels * patch * patch]) and padded to the config's ``num_patches``, the mask of the real
    ones and each image's grid of patches (rows, columns): here a grid as square as fills the patches, no padding."""
    patches, side = int(vision.num_patches), int(vision.patch_size)
    rows = max(r for r in range(1, int(patches ** 0.5) + 1) if patches % r == 0)  # rows x columns = patches
    pixels = torch.randn(BATCH, patches, getattr(vision, "num_channels", 3) * side * side, generator=gen)
    return {"pixel_values": pixels, "pixel_attention_mask": torch.ones(BATCH, patches, dtype=torch.long),
            "spatial_shapes": torch.tensor([[rows, patches // rows]] * BATCH, dtype=torch.long)}


def _sub(config: Any, name: str) -> Any:
    return getattr(config, name, None) or config


def _frames(config: Any) -> int | None:
    """A video model's frames per clip (``num_frames``; V-JEPA 2's ``frames_per_clip``), else None."""
    vision = _sub(config, "vision_config")
    found = getattr(vision, "num_frames", None) or getattr(vision, "frames_per_clip", None)
    return found if isinstance(found, int) else None


def _vocab(config: Any) -> int:
    """The token vocabulary: the text config's, else the acoustic model's beside a vocoder (FastSpeech 2 with
    HiFi-GAN keeps it in ``model_config``), else 100."""
    text = _sub(config, "text_config")
    return int(getattr(text, "vocab_size", None) or getattr(getattr(config, "model_config", None), "vocab_size", None)
               or 100)


def _input_names(model: Any, preprocessor: Any) -> list[str]:
    params = forward_parameters(model)
    config = model.config
    main = main_input(model)
    if isinstance(main, (list, tuple)):  # several main inputs (OneFormer's image and its task's token ids)
        names, main = list(main), main[0]
    else:
        names = [main]
    text = main in ("input_ids", "inputs")  # Perceiver's ``inputs``: ids or an image (:func:`_generic_inputs`)
    ids = params.get("input_ids")
    if not text and ids is not None and ids.default is ids.empty:  # a video-text model's text (VideoPrism's CLIP)
        names.append("input_ids")
        text = True
    tokenizer = getattr(preprocessor, "tokenizer", preprocessor)
    tok_inputs = getattr(tokenizer, "model_input_names", None) or []
    if "pixel_values" in params and main != "pixel_values" and (
            hasattr(config, "vision_config") or processor_class(getattr(config, "model_type", "")) is not None):
        names.append("pixel_values")  # a vision tower, or a processor that gives an image (ViLT's, LayoutLMv3's)
        if "pixel_mask" in params:  # which pixels are the image's: ViLT's processor pads a batch's images to one size
            names.append("pixel_mask")
    names += side_inputs.names(params, config, text)
    if "pixel_values" in names and "spatial_shapes" in params:  # NaFlex patches (SigLIP 2): their mask and grid
        names += ["pixel_attention_mask", "spatial_shapes"]
    if text and "attention_mask" in params:
        names.append("attention_mask")
    if text and "token_type_ids" in params and (
            "token_type_ids" in tok_inputs
            or (not tok_inputs and (getattr(config, "type_vocab_size", 0) or 0) > 1)
            or isinstance(getattr(config, "type_vocab_sizes", None), list)):
        names.append("token_type_ids")
    if "decoder_input_ids" in params and not pools_at_eos(model) and (
            getattr(config, "is_encoder_decoder", False) or type(model).__name__ == "BlipForQuestionAnswering"):
        names.append("decoder_input_ids")  # BLIP's answers are decoded too: its forward is a decoder's step
    if "decoder_input_values" in params and text:  # a text-to-speech decoder's step: spectrogram frames so far,
        names.append("decoder_input_values")       # and the voice (SpeechT5's speaker embedding)
        if "speaker_embeddings" in params and isinstance(getattr(config, "speaker_embedding_dim", None), int):
            names.append("speaker_embeddings")
        if noise.PRENET_DRAWS in params:  # the draws of its prenet's dropout masks (noise.py)
            names.append(noise.PRENET_DRAWS)
    # a required input no rule above makes (JevForDecision's option marks): named, so build() says to pass it
    names += [n for n, p in params.items() if p.default is p.empty and n not in names and p.kind in (
        p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    return names


def pools_at_eos(model: Any) -> bool:
    """An encoder-decoder classifier (BART's, T5's): it reads its decoder's states at each row's last
    end-of-sequence token of ``input_ids`` and makes its own decoder inputs from them (the prompt shifted right), so
    its sample leaves those out and ends every row with one end-of-sequence token."""
    return bool(getattr(model.config, "is_encoder_decoder", False)) and hasattr(model, "classification_head")


def one_eos_each(ids: torch.Tensor, eos: Any, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``ids`` with each row's last attended token (``mask``'s last 1; the last column without one) the
    end-of-sequence token and no other (unchanged where each row already holds one: a tokenizer's)."""
    if not isinstance(eos, int) or bool((ids == eos).sum(1).eq(1).all()):
        return ids
    ids = torch.where(ids == eos, torch.full_like(ids, 4 if eos == 3 else 3), ids)
    columns = torch.arange(ids.shape[1])
    last = (columns * (mask != 0)).argmax(1) if mask is not None and mask.shape == ids.shape else \
        torch.full((ids.shape[0],), ids.shape[1] - 1)
    ids[torch.arange(ids.shape[0]), last] = eos
    return ids


def _text(tokenizer: Any, names: list[str]) -> dict[str, torch.Tensor]:
    if tokenizer is None or not callable(tokenizer):
        return {}
    try:
        enc = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    except Exception:  # noqa: BLE001 - a tokenizer that cannot pad: fall back to the config
        return {}
    ids = enc.get("input_ids")
    if ids is None or ids.ndim != 2 or ids.shape[1] < 2:  # a tokenizer without a vocabulary (a folder saved
        return {}  # without one gets transformers' empty default): the config's ids instead
    return {k: v for k, v in enc.items() if k in names}


def _frames_of(quirk: Quirk, config: Any) -> int | None:
    """A quirk's own spectrogram length for ``config`` (Whisper's), else None."""
    return quirk.features_length(config) if quirk.features_length else None


def feature_rows(model: Any, count: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """``count`` random inputs of one row each for a speech model's main input (``input_features`` or
    ``input_values``), in the layout and length its own sample has (:func:`.audio_samples.audio`: tried on the
    model), or for an image encoder's ``pixel_values`` at its image size."""
    name = main_input(model)
    quirk = QUIRKS.get(getattr(model.config, "model_type", ""), Quirk())
    gen = torch.Generator().manual_seed(seed)
    shape = (getattr(vision_config(model.config), "num_channels", 3), *image_shape(model)) \
        if name == "pixel_values" else audio_samples.audio(model, name, _frames_of(quirk, model.config), gen).shape[1:]
    return [{name: torch.randn(1, *shape, generator=gen)} for _ in range(count)]


def _with_image_tokens(config: Any, values: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
    """``values`` with each row's image tokens after its first two text tokens, as many as the config pools an image
    to (``mm_tokens_per_image``); None for a config that names no such count or no image token."""
    from ..vlm.parts import image_token_of

    token, count = image_token_of(config), getattr(config, "mm_tokens_per_image", None)
    if token is None or not isinstance(count, int) or "input_ids" not in values:
        return None
    ids = values["input_ids"]
    image = torch.full((ids.shape[0], count), token, dtype=ids.dtype)
    out = dict(values, input_ids=torch.cat([ids[:, :2], image, ids[:, 2:]], dim=1))
    for name in ("attention_mask", "token_type_ids"):
        if name in values:
            out[name] = torch.cat([values[name][:, :2], torch.ones_like(image), values[name][:, 2:]], dim=1)
    return out


def _takes(model: Any, values: dict[str, torch.Tensor]) -> bool:
    """Whether ``model`` runs on one row of ``values``."""
    try:
        with torch.no_grad():
            model(**{k: v[:1] for k, v in values.items()})
        return True
    except Exception:  # noqa: BLE001 - any refusal: the sample leaves that input out
        return False


def _generic_inputs(model: Any, tokenizer: Any, seq: int, gen: torch.Generator) -> torch.Tensor:
    """A model whose main input is named ``inputs`` (Perceiver's: its preprocessor, not its name, says whether it
    takes token ids or an image): the tokenizer's ids, else the config's, else an image of the config's size;
    the first the model takes."""
    config = model.config
    text = _text(tokenizer, ["input_ids"]).get("input_ids")
    candidates = [text] if text is not None else []
    candidates.append(torch.randint(3, _vocab(config), (BATCH, seq), generator=gen))
    size = getattr(config, "image_size", None)
    if isinstance(size, int):
        candidates.append(torch.randn(BATCH, getattr(config, "num_channels", 3), size, size, generator=gen))
    for candidate in candidates:
        if _takes(model, {"inputs": candidate}):
            return candidate
    return candidates[0]  # none taken: the export's own run of the sample says what the model wanted


def build(model: Any, preprocessor: Any = None) -> Sample:
    """Sample inputs for ``model`` with named dynamic axes."""
    config = model.config
    quirk = QUIRKS.get(getattr(config, "model_type", ""), Quirk())
    names = _input_names(model, preprocessor)
    tokenizer = getattr(preprocessor, "tokenizer", preprocessor)
    values = _text(tokenizer, names) if "input_ids" in names else {}
    positions = getattr(_sub(config, "text_config"), "max_position_embeddings", None)
    if "input_ids" in values and isinstance(positions, int) and 0 < positions < values["input_ids"].shape[1]:
        values = {k: v[:, :positions] for k, v in values.items()}  # a text tower of few positions (OWL-ViT's 16)
    gen = torch.Generator().manual_seed(0)
    seq = values["input_ids"].shape[1] if "input_ids" in values else SEQUENCE
    if names[0] == "inputs":
        values["inputs"] = _generic_inputs(model, tokenizer, seq, gen)
        if values["inputs"].is_floating_point():  # an image: no token mask
            names = [n for n in names if n != "attention_mask"]
        seq = values["inputs"].shape[1]
    for name in names:
        if name in values:
            continue
        if name == "input_ids":
            values[name] = torch.randint(3, _vocab(config), (BATCH, seq), generator=gen)
        elif name == "task_inputs":  # OneFormer's task as token ids ("the task is semantic"), of the config's length
            values[name] = torch.randint(3, getattr(config, "text_encoder_vocab_size", 100),
                                         (BATCH, getattr(config, "task_seq_len", SEQUENCE)), generator=gen)
        elif name == "attention_mask":
            values[name] = torch.ones(BATCH, seq, dtype=torch.long)
        elif name == "token_type_ids" and isinstance(getattr(config, "type_vocab_sizes", None), list):
            # TAPAS: each token's place in the table (segment, column, row, ranks: one id per kind)
            values[name] = torch.stack([torch.randint(0, n, (BATCH, seq), generator=gen)
                                        for n in config.type_vocab_sizes], dim=-1)
        elif name == "token_type_ids":
            values[name] = torch.zeros(BATCH, seq, dtype=torch.long)
        elif name in side_inputs.AXES:
            values[name] = side_inputs.value(name, config, values, seq, gen)
        elif name == "decoder_input_ids":
            start = getattr(config, "decoder_start_token_id", None) or 0
            ids = torch.randint(3, _vocab(config), (BATCH, DECODER_SEQUENCE), generator=gen)
            ids[:, 0] = start
            values[name] = ids
        elif name == "pixel_values_videos" or (name == "pixel_values" and _frames(config)):
            frames = _frames(config) or CLIP_FRAMES
            vision = _sub(config, "vision_config")  # a clip: [batch, frames, channels, height, width]
            side = getattr(vision, "image_size", None) or getattr(vision, "crop_size", None) or IMAGE_SIDE
            side = side if isinstance(side, int) else side[0]
            values[name] = torch.randn(BATCH, frames, getattr(vision, "num_channels", 3), side, side, generator=gen)
        elif name == "past_values" and isinstance(getattr(config, "context_length", None), int):
            # a time series: [batch, context length, channels] (TimesFM's, without channels: [batch, context length])
            series = getattr(config, "num_input_channels", None)
            shape = [BATCH, int(config.context_length), *([int(series)] if series else [])]
            values[name] = torch.randn(*shape, generator=gen)
        elif name == "pixel_values" and "spatial_shapes" in names:
            values.update(_naflex(_sub(config, "vision_config"), gen))
        elif name in ("pixel_attention_mask", "spatial_shapes"):
            continue  # made with the NaFlex patches
        elif name == "pixel_values":
            vision = vision_config(config)
            pair = (2,) if type(model).__name__.endswith("ForKeypointMatching") else ()  # two images to match
            values[name] = torch.randn(BATCH, *pair, getattr(vision, "num_channels", 3), *image_shape(model),
                                       generator=gen)
        elif name == "pixel_mask":  # every pixel real, as the processor gives it for one image
            values[name] = torch.ones(BATCH, *values["pixel_values"].shape[-2:], dtype=torch.long)
        elif name == "decoder_input_values":
            values[name] = torch.randn(BATCH, DECODER_SEQUENCE, config.num_mel_bins, generator=gen)
        elif name == "speaker_embeddings":
            values[name] = torch.nn.functional.normalize(
                torch.randn(BATCH, config.speaker_embedding_dim, generator=gen), dim=-1)
        elif name in ("input_values", "input_features"):
            values[name] = audio_samples.audio(model, name, _frames_of(quirk, config), gen)
        else:
            raise SampleError(
                f"onnx-nb does not know how to build the input {name!r} of "
                f"{type(model).__name__}; pass sample={{'{name}': ...}}."
            )
    if "input_ids" in values and pools_at_eos(model):
        values["input_ids"] = one_eos_each(values["input_ids"], getattr(config, "eos_token_id", None),
                                            values.get("attention_mask"))
    choices = type(model).__name__.endswith("ForMultipleChoice")
    if choices:  # a multiple-choice head scores each row's candidates: [batch, choices, sequence], two choices here
        for name in [n for n in TEXT_INPUTS if n in values]:
            values[name] = torch.stack([values[name], torch.roll(values[name], 1, dims=1)], dim=1) \
                if name == "input_ids" else torch.stack([values[name]] * 2, dim=1)
    if "pixel_values" in values and names[0] != "pixel_values" and not _takes(model, values):
        with_tokens = _with_image_tokens(config, values)  # a classifier of an image and a prompt (ShieldGemma 2)
        if with_tokens is not None and _takes(model, with_tokens):
            values = with_tokens
        else:
            del values["pixel_values"]  # an image the text model takes but only with its image tokens (ModernVBERT)
            values.pop("pixel_mask", None)
    ordered = [n for n in names if n in values]
    axes = {n: dict(AXES.get(n, {0: "batch"})) for n in ordered if n not in quirk.static_axes}
    if "input_values" in axes and values["input_values"].dim() == 3 and values["input_values"].shape[1] == 1:
        axes["input_values"] = {0: "batch", 2: "audio_length"}  # a waveform with its channel axis
    if "inputs" in axes and not values["inputs"].is_floating_point():
        axes["inputs"] = dict(AXES["input_ids"])
    if choices:
        axes.update({n: {0: "batch", 1: "choices", 2: "sequence"} for n in TEXT_INPUTS if n in axes})
    for n in quirk.static_axes:
        if n in ordered:
            axes[n] = {0: "batch"}
    return Sample(ordered, [values[n] for n in ordered], as_kwargs=True, axes=axes)


def from_user(model: Any, sample: Any) -> Sample:
    """A user's dict-like sample (e.g. a tokenizer's ``BatchEncoding``) for a Hugging Face model."""
    if not hasattr(sample, "keys"):
        raise SampleError(
            f"For a Hugging Face model, pass the sample as a dict of input name -> tensor "
            f"(for example a tokenizer's output), not a {type(sample).__name__}."
        )
    params = forward_parameters(model)
    names = [str(k) for k in sample.keys()]
    unknown = [n for n in names if n not in params]
    if unknown and not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        raise SampleError(
            f"{type(model).__name__}.forward has no input named {', '.join(map(repr, unknown))}; "
            f"it takes {', '.join(list(params)[:8])}."
        )
    tensors = [to_tensor(sample[n], f"sample[{n!r}]") for n in names]
    axes = {n: dict(AXES.get(n, {0: "batch"})) for n, t in zip(names, tensors) if t.dim() >= 1}
    return Sample(names, tensors, as_kwargs=True, axes=axes)
