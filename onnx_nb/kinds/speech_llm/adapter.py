"""A speech LLM (Voxtral, Granite Speech, Qwen2-Audio, Audio Flamingo 3, OmniASR, ...): an audio tower whose
features take the place of the audio tokens in a causal LM's prompt. Recognised from its config and class (an object,
a folder or a hub id) and refused in its own words: onnx-nb writes no file of this shape yet, and a file of the
model's forward on text alone would leave the audio tower out while reporting "ok"."""

from __future__ import annotations

import os
from typing import Any

from ...steps.export.adapters.base import is_torch_module
from ...steps.export.args import ExportArgs
from ..hf.adapter import HfAdapter, location_config

AUDIO_TOKENS = ("audio_token_id", "audio_token_index")
AUDIO_TOWERS = ("audio_config", "encoder_config", "audio_encoder_config")  # the audio tower's config


def is_speech_llm(config: dict[str, Any], class_name: str, main_input: str | None = None) -> bool:
    """Whether a model of ``class_name`` with ``config`` (a dict) takes token ids and fills audio tokens from an
    audio tower: its config names an audio token and has the tower (a text-only Gemma 4 names the token, with no
    tower), or it is a speech-recognition class whose first input is token ids (Voxtral names no token).
    ``main_input``: the model's own (an object's); else its transformers class's."""
    if not any(config.get(n) is not None for n in AUDIO_TOWERS):
        return False
    from ..hf.tasks import task_from_class_name

    if main_input is None:
        import transformers

        main_input = getattr(getattr(transformers, class_name, None), "main_input_name", None)
    if main_input != "input_ids":
        return False  # Whisper, CTC models and other encoders of audio take the audio itself
    token = any(isinstance(config.get(n), int) for n in AUDIO_TOKENS)
    return token or task_from_class_name(class_name, config.get("model_type")) == "automatic-speech-recognition"


class SpeechLlmAdapter(HfAdapter):
    key = "speech-llm"
    what = "a speech LLM"

    @staticmethod
    def recognises(model: Any, args: ExportArgs) -> bool:
        if isinstance(model, (str, os.PathLike)):
            config = location_config(model)
            return is_speech_llm(config, next(iter(config.get("architectures") or []), ""))
        own = getattr(model, "config", None)  # (a SentenceTransformer has none)
        if own is None or not (is_torch_module(model) and HfAdapter.is_object(model)) or not hasattr(own, "to_dict"):
            return False
        return is_speech_llm(own.to_dict(), type(model).__name__, getattr(model, "main_input_name", None))

    @classmethod
    def export(cls, model: Any, args: ExportArgs) -> Any:
        from ...errors import ExportError

        name = (next(iter(location_config(model).get("architectures") or []), str(model))
                if isinstance(model, (str, os.PathLike)) else type(model).__name__)
        raise ExportError(
            f"{name} is a speech LLM: an audio tower whose features take the place of the audio tokens in a causal "
            "LM's prompt. onnx-nb exports encoder-decoder speech models (Whisper, Moonshine, Speech2Text, "
            "SeamlessM4T) and CTC models; this shape is not supported yet, and a file of its forward on text alone "
            "would leave the audio tower out. For the text decoder alone, export its language model "
            "(model.language_model, or model.model.language_model) as a causal LM.")
