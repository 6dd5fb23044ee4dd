"""A speech LLM (Voxtral, AudioFlamingo 3, Granite Speech, Qwen3-ASR, GLM-ASR, ...) as three files, the vision-language
shape with audio in place of pixels: ``audio`` (the processor's features of one clip -> one row per audio token: the
audio tower and its projector, as the family's ``get_audio_features`` gives them), ``embed`` (token ids and those rows
-> the embeddings the decoder reads, each audio token's row replaced by the next feature row, as the model's
``masked_scatter`` does) and ``decoder`` with its cache.

The samples come from the model: a second of noise through the family's feature extractor (the processor's own where
the model came with one) in the layout its ``get_audio_features`` takes, run once to count the rows, and a prompt with
that many audio tokens. Only imported by functions that already need torch."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import torch

from ...errors import InvalidArgumentError
from ..vlm.parts import MergedEmbedding
from ..vlm.prompts import VisionPart, feature_rows, prompt_sample
from .names import AUDIO_TOKENS, AUDIO_TOWERS
from .windows import WINDOW, audio_ends, window_of, windowed_features

MASKS = ("input_features_mask", "feature_attention_mask", "padding_mask")  # a clip's mask, by the family's name
SIGNALS = ("input_features", "input_values")  # a clip's features (a spectrogram) or its waveform
SECONDS = 1.0  # the sample's length
DYNAMIC_SECONDS = (4.6, 3.2)  # the export's sample for the file of every length: no derived size of 1
OTHER_SECONDS = (2.3, 1.6)  # the export's check: two clips of other lengths
RATE = 16000


def audio_token_of(config: Any) -> int | None:
    for key in AUDIO_TOKENS:
        value = getattr(config, key, None)
        if isinstance(value, int):
            return value
    return None


def audio_features(model: Any) -> Any:
    """The family's ``get_audio_features`` whose signature names its inputs: the model's, or its inner model's where
    the outer one only passes ``*args`` on (Voxtral, Granite Speech); where neither has one, the steps of a forward
    that computes them itself (Qwen2-Audio, :mod:`.inline`); else None."""
    windowed = windowed_features(model)  # MusicFlamingo's: each clip's window given, not read from the prompt
    if windowed is not None:
        return windowed
    found = [getattr(owner, "get_audio_features", None) for owner in (model, getattr(model, "model", None))]
    methods = [m for m in found if callable(m)]
    if not methods:  # computed inside forward (Qwen2-Audio): the same steps as a method
        from .inline import inline_features

        return inline_features(model)
    known = (*SIGNALS, *MASKS)
    # the one naming the most of a clip's inputs (Moss's outer method passes its padding_mask on unnamed)
    return max(methods, key=lambda m: sum(n in inspect.signature(m).parameters for n in known))


def audio_inputs(model: Any) -> tuple[str, ...]:
    """What one clip is given as, in the order the audio file takes it: its features or waveform, then its mask
    where the family reads one (in ``get_audio_features``, or in the forward that masks the rows after it: Granite
    Speech)."""
    method = audio_features(model)
    if method is None:
        raise InvalidArgumentError(
            f"{type(model).__name__} has no get_audio_features and no audio_tower with a multi_modal_projector: "
            "onnx-nb's speech LLM route writes the audio tower from that method. Not supported yet.")
    takes = inspect.signature(method).parameters
    forward = inspect.signature(model.forward).parameters
    signal = next((n for n in SIGNALS if n in takes), None)
    if signal is None:
        raise InvalidArgumentError(f"{type(model).__name__}.get_audio_features takes {', '.join(takes)}: not a "
                                   f"clip's features ({' or '.join(SIGNALS)}).")
    required = [n for n, p in takes.items() if p.default is p.empty and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
                and n not in (signal, *MASKS, WINDOW)]
    if required:  # features that read the prompt's ids for more than each clip's window
        raise InvalidArgumentError(
            f"{type(model).__name__}.get_audio_features needs {', '.join(required)} beside the audio: its features "
            "depend on the prompt, which the audio file of onnx-nb's speech LLM route does not take. Not supported "
            "yet.")
    masks = tuple(n for n in MASKS if n in takes or (n in forward and n == "input_features_mask"))
    return (signal, *masks)


def takes_windows(model: Any) -> bool:
    """Whether the audio file takes each clip's window within its audio (``window_index``) beside the processor's
    inputs (:mod:`.windows`)."""
    return WINDOW in inspect.signature(audio_features(model)).parameters


def masks_rows(model: Any) -> bool:
    """The mask selects the tower's output rows after ``get_audio_features`` (Granite Speech: one flag per audio
    token), not the frames it reads."""
    names = audio_inputs(model)
    return len(names) > 1 and names[1] not in inspect.signature(audio_features(model)).parameters


def tower_config(model: Any) -> Any:
    config = model.config
    for name in AUDIO_TOWERS:
        found = getattr(config, name, None)
        if found is not None:
            return found
    return config


def feature_extractor(model: Any, processor: Any = None) -> Any:
    """The processor's feature extractor; else the family's (transformers' mapping by model type) at the tower's
    number of mel bins; None where it cannot be built here (one needing torchaudio)."""
    found = getattr(processor, "feature_extractor", None)
    if found is not None:
        return found
    import transformers
    from transformers.models.auto.feature_extraction_auto import FEATURE_EXTRACTOR_MAPPING_NAMES

    name = FEATURE_EXTRACTOR_MAPPING_NAMES.get(getattr(model.config, "model_type", ""))
    tower = tower_config(model)
    bins = getattr(tower, "num_mel_bins", None)
    try:
        cls = getattr(transformers, str(name))
        return cls(**({"feature_size": int(bins)} if isinstance(bins, int) and
                      "feature_size" in inspect.signature(cls.__init__).parameters else {}))
    except Exception:  # noqa: BLE001 - not exported, or a library it needs is missing: the tower's own layout
        return None


def audio_sample(model: Any, clips: int = 1, seed: int = 0, processor: Any = None,
                 seconds: float | tuple[float, ...] = SECONDS) -> dict[str, torch.Tensor]:
    """Noise of ``seconds`` (one length, or one per clip) per clip as the family's feature extractor gives it, under
    the names and in the layout its ``get_audio_features`` takes (the extractor's ``attention_mask`` under the
    family's mask name; clips of different lengths padded as it pads them); without an extractor, a spectrogram of
    the tower's size (``[clips, mel bins, frames]``, Granite's ``[clips, frames, input size]``) or a waveform, as
    long as the longest clip."""
    names = audio_inputs(model)
    g = np.random.default_rng(seed)
    lengths = tuple(seconds) if isinstance(seconds, tuple) else (seconds,) * clips
    waves = [g.standard_normal(int(RATE * length)).astype(np.float32) * 0.1 for length in lengths]
    seconds = max(lengths)
    clips = len(lengths)
    extractor = feature_extractor(model, processor)
    sample: dict[str, torch.Tensor] = {}
    if extractor is not None:
        rate = int(getattr(extractor, "sampling_rate", RATE) or RATE)
        out = None
        for how in ({"return_attention_mask": True}, {"return_attention_mask": True, "padding": "longest"}, {}):
            try:  # its own padding (Whisper's: 30 s), else to the longest clip; without a mask where it gives none
                out = extractor(waves, sampling_rate=rate, return_tensors="pt", **how)
                break
            except (TypeError, ValueError):
                continue
        out = out if out is not None else {}
        given = dict(out)
        if "attention_mask" in given and len(names) > 1 and names[1] not in given:
            given[names[1]] = given.pop("attention_mask")
        sample = {n: torch.as_tensor(given[n]) for n in names if n in given}
    if names[0] not in sample:
        tower = tower_config(model)
        if names[0] == "input_values":
            longest = max(len(w) for w in waves)  # the shorter clips zero-padded to the longest
            sample = {"input_values": torch.from_numpy(np.stack([np.pad(w, (0, longest - len(w))) for w in waves]))[
                :, None]}
        elif isinstance(getattr(tower, "input_dim", None), int):  # a Conformer's frames of input_dim features
            frames = int(seconds * 100)
            sample = {"input_features": torch.from_numpy(g.standard_normal((clips, frames, tower.input_dim))
                                                         .astype(np.float32))}
        else:
            bins = int(getattr(tower, "num_mel_bins", 80) or 80)
            frames = 2 * int(getattr(tower, "max_source_positions", 1500) or 1500)
            sample = {"input_features": torch.from_numpy(g.standard_normal((clips, bins, frames))
                                                         .astype(np.float32))}
    after = masks_rows(model)
    for name in names[1:]:
        if name in sample:
            continue
        if after:  # a flag per row of the tower's output
            with torch.no_grad():
                rows = audio_features(model)(sample[names[0]], return_dict=True).pooler_output
            sample[name] = torch.ones(rows.shape[:2], dtype=torch.bool)
        else:
            signal = sample[names[0]]
            frames = signal.shape[1] if isinstance(getattr(tower_config(model), "input_dim", None), int) \
                else signal.shape[-1]
            sample[name] = torch.ones((signal.shape[0], frames), dtype=torch.long)
    return {n: sample[n] for n in names}


class AudioFeatures(VisionPart):
    """``forward(input_features | input_values, [mask]) -> audio_features``: the audio tower and projector, one row
    per audio token (the clips' rows one after another, only the valid ones where the family masks them)."""

    varies = "clip length"  # what a file for one sample's shapes is fixed at (vlm.adapter.vision_or_embed)

    def __init__(self, model: Any, processor: Any = None) -> None:
        super().__init__(model)
        self.names = audio_inputs(model)
        self.features = audio_features(model)
        self.after = masks_rows(model)
        self.processor = processor
        self.related_axes = True  # a mask of rows (Granite's) follows the frames: torch.export relates them
        self.windows = takes_windows(model)

    def other_sample(self) -> dict[str, torch.Tensor]:
        """Two clips of other lengths, padded together as the processor pads them: the export's check (the second
        its audio's second window, where the family counts windows)."""
        return windowed(self.model, audio_sample(self.model, seed=1, processor=self.processor,
                                                 seconds=OTHER_SECONDS), torch.arange(len(OTHER_SECONDS)))

    def forward(self, input_features: torch.Tensor | None = None, input_values: torch.Tensor | None = None,
                input_features_mask: torch.Tensor | None = None, feature_attention_mask: torch.Tensor | None = None,
                padding_mask: torch.Tensor | None = None,
                window_index: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Under the family's own names (the processor's), so that its output feeds the file as it is;
        ``window_index`` where the family reads each clip's window (a clip alone: its audio's first)."""
        named = {"input_features": input_features, "input_values": input_values,
                 "input_features_mask": input_features_mask, "feature_attention_mask": feature_attention_mask,
                 "padding_mask": padding_mask}
        given: dict[str, torch.Tensor] = {n: v for n in self.names if (v := named[n]) is not None}
        if self.windows:
            clips = int(next(iter(given.values())).shape[0])
            given[WINDOW] = window_index if window_index is not None else torch.zeros(clips, dtype=torch.long)
        mask = given.pop(self.names[1], None) if self.after else None
        out = self.features(**given, return_dict=True)
        rows = out.pooler_output if hasattr(out, "pooler_output") else out
        if mask is not None:
            rows = rows[mask.bool()]
        return {"audio_features": feature_rows(rows)}


def features_of(model: Any, sample: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        out: torch.Tensor = AudioFeatures(model)(**sample)["audio_features"]
        return out


class AudioEmbedding(MergedEmbedding):
    """``forward(input_ids, audio_features) -> inputs_embeds``: :class:`~..vlm.parts.MergedEmbedding` at the audio
    token."""

    def forward(self, input_ids: torch.Tensor, audio_features: torch.Tensor,
                text_position_ids: torch.Tensor | None = None,
                image_positions: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        return super().forward(input_ids, audio_features)


def parts(model: Any, processor: Any = None) -> dict[str, tuple[Any, dict[str, torch.Tensor], Any]]:
    """The audio and embedding parts: (module, sample, dynamic axes) each. The audio file takes any count of clips
    and any length where the tower allows (written from two clips, checked at two of other lengths; else traced
    at one clip of the sample's length)."""
    token = audio_token_of(model.config)
    assert token is not None
    sample = audio_sample(model, processor=processor)
    module = AudioFeatures(model, processor)
    features = features_of(model, sample)
    ids = prompt_sample(token, features.shape[0], 1, int(model.get_input_embeddings().num_embeddings))
    embed = {"input_ids": ids, "audio_features": features}
    axes = {"input_ids": {0: "batch", 1: "sequence"}, "audio_features": {0: "audio_tokens"}}
    # the file for the sample's shapes, where no other passes its check
    module.fallback = (module, windowed(model, sample, torch.zeros(1, dtype=torch.long)), False)
    # two clips over 4 s for the file of every clip count and length: torch.export takes a size that is 1 in the
    # sample (one clip; Granite Speech's blocks of 200 frames, 4 s) for a constant, and the file fails at others
    two = windowed(model, audio_sample(model, processor=processor, seconds=DYNAMIC_SECONDS),
                   torch.zeros(len(DYNAMIC_SECONDS), dtype=torch.long))
    audio = (module, two, audio_axes(two, module.other_sample()))
    return {"audio": audio, "embed": (AudioEmbedding(model, token), embed, axes)}


def windowed(model: Any, sample: dict[str, torch.Tensor], windows: torch.Tensor) -> dict[str, torch.Tensor]:
    """``sample`` with each clip's window within its audio, where the family's audio file takes it."""
    return {**sample, WINDOW: windows} if takes_windows(model) else sample


def audio_axes(sample: dict[str, torch.Tensor], other: dict[str, torch.Tensor]) -> dict[str, dict[int, str]]:
    """The audio file's dynamic axes: the clips, and every axis whose length differs between the sample's clips
    and two of other lengths (``frames`` or ``samples``; a mask's axis named as the axis of the clip's
    features it follows, else ``audio_tokens``, Granite's one flag per row)."""
    signal = next(iter(sample))
    time = "samples" if signal == "input_values" else "frames"
    lengths = {(int(sample[signal].shape[k]), int(other[signal].shape[k])) for k in range(1, sample[signal].dim())
               if sample[signal].shape[k] != other[signal].shape[k]}
    axes: dict[str, dict[int, str]] = {}
    for name, value in sample.items():
        axes[name] = {0: "clips"}
        for k in range(1, value.dim()):
            pair = (int(value.shape[k]), int(other[name].shape[k]))
            if pair[0] != pair[1]:
                axes[name][k] = time if name == signal or pair in lengths else "audio_tokens"
    return axes


def per_clip(audio: Any, given: dict[str, Any], ids: np.ndarray | None = None, token: int | None = None) -> np.ndarray:
    """Every clip's feature rows, the audio file run once per clip (the first axis of the processor's features),
    one after another; where the file takes each clip's window within its audio, counted from the prompt's audio
    tokens (``ids``, ``token``) as the model counts them."""
    from ...runtime.shapes import cast_feed

    inputs = [i for i in audio.get_inputs() if i.name != WINDOW]
    counts = WINDOW in {i.name for i in audio.get_inputs()}
    if counts and (ids is None or token is None):
        raise InvalidArgumentError("This model's audio file takes each clip's window within its audio, counted from "
                                   "the prompt's audio tokens: pass the prompt's input_ids with the audio.")
    missing = [i.name for i in inputs if i.name not in given]
    if missing:
        raise InvalidArgumentError(f"The audio comes without {', '.join(missing)}, which this model's audio file "
                                   f"takes ({', '.join(i.name for i in inputs)}): pass the processor's whole output.")
    signal = np.asarray(given[inputs[0].name])
    want = list(inputs[0].shape[1:])
    if signal.ndim != len(inputs[0].shape) or any(isinstance(w, int) and w != got
                                                  for w, got in zip(want, signal.shape[1:])):
        raise InvalidArgumentError(
            f"{inputs[0].name} has shape {list(signal.shape)}; this model's audio file takes [clips, "
            f"{', '.join(map(str, want))}] (one clip per row): give the processor's output for the audio.")
    rows: list[np.ndarray] = []
    ends = audio_ends(ids, token) if counts and ids is not None and token is not None else None
    starts: dict[int, int] = {}
    for k in range(signal.shape[0]):
        feed = {i.name: np.asarray(given[i.name])[k:k + 1] for i in inputs}
        if ends is not None:
            feed[WINDOW] = np.array([window_of(ends, sum(len(r) for r in rows), k, starts)], np.int64)
        rows.append(audio.run(None, cast_feed(audio, feed))[0])
    width = audio.get_outputs()[0].shape[-1]
    return np.concatenate(rows, 0) if rows else np.zeros((0, width if isinstance(width, int) else 0), np.float32)
