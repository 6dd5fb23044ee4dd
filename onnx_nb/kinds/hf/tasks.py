"""Which task a Hugging Face model serves, and which Auto class loads it for that task."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from ...errors import InvalidArgumentError

# Auto class (in ``transformers``) per task.
TASK_AUTO_CLASS: dict[str, str] = {
    "feature-extraction": "AutoModel",
    "fill-mask": "AutoModelForMaskedLM",
    "text-classification": "AutoModelForSequenceClassification",
    "token-classification": "AutoModelForTokenClassification",
    "question-answering": "AutoModelForQuestionAnswering",
    "multiple-choice": "AutoModelForMultipleChoice",
    "text-generation": "AutoModelForCausalLM",
    "text2text-generation": "AutoModelForSeq2SeqLM",
    "image-classification": "AutoModelForImageClassification",
    "object-detection": "AutoModelForObjectDetection",
    "image-segmentation": "AutoModelForImageSegmentation",
    "automatic-speech-recognition": "AutoModelForSpeechSeq2Seq",
    "audio-classification": "AutoModelForAudioClassification",
    "zero-shot-image-classification": "AutoModelForZeroShotImageClassification",
    "image-to-text": "AutoModelForVision2Seq",
    "image-text-to-text": "AutoModelForImageTextToText",  # vision-language models: exported as parts (kinds/vlm)
    "sentence-embedding": "AutoModel",  # loaded with sentence-transformers: its pooling and normalisation too
}

_AUDIO_TYPES = ("wav2vec2", "hubert", "wavlm", "whisper", "unispeech", "sew", "data2vec-audio",
                "speech_to_text", "audio-spectrogram-transformer", "seamless_m4t", "moonshine")

# Class-name suffix -> task, most specific first.
_SUFFIX_TASKS: tuple[tuple[str, str], ...] = (
    ("VisionEncoderDecoderModel", "image-to-text"),
    ("ForSequenceClassification", "text-classification"),
    ("ForAudioClassification", "audio-classification"),
    ("ForTokenClassification", "token-classification"),
    ("ForQuestionAnswering", "question-answering"),
    ("ForMultipleChoice", "multiple-choice"),
    ("ForMaskedLM", "fill-mask"),
    ("ForCausalLM", "text-generation"),
    ("LMHeadModel", "text-generation"),
    ("ForSpeechSeq2Seq", "automatic-speech-recognition"),
    ("ForCTC", "automatic-speech-recognition"),
    ("ForImageClassification", "image-classification"),
    ("ForObjectDetection", "object-detection"),
    ("ForSemanticSegmentation", "image-segmentation"),
    ("ForVision2Seq", "image-to-text"),
    ("ForImageTextToText", "image-to-text"),
    ("ForConditionalGeneration", "text2text-generation"),
    ("ForPreTraining", "feature-extraction"),
    ("Model", "feature-extraction"),
)

# Models whose bare ``*Model`` class already serves a more specific task.
_BARE_MODEL_TASKS = {"clip": "zero-shot-image-classification",
                     "siglip": "zero-shot-image-classification"}


# transformers' auto mappings of the generative classes -> task (read from transformers, so every class it
# lists is known: MarianMTModel, *ForConditionalGeneration, *ForCausalLM, *ForSpeechSeq2Seq, ...)
_GENERATIVE_MAPPINGS = (("MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES", "automatic-speech-recognition"),
                        ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "text2text-generation"),
                        ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "text-generation"),
                        ("MODEL_FOR_CTC_MAPPING_NAMES", "automatic-speech-recognition"))


@lru_cache(maxsize=1)
def generative_classes() -> dict[str, str]:
    """Class name -> task for every generative class in transformers' auto mappings (first mapping wins)."""
    from transformers.models.auto import modeling_auto

    found: dict[str, str] = {}
    for mapping, task in _GENERATIVE_MAPPINGS:
        for names in getattr(modeling_auto, mapping, {}).values():
            for name in (names,) if isinstance(names, str) else names:
                found.setdefault(name, task)
    return found


def generative_task(class_name: str) -> str | None:
    """``text-generation``, ``text2text-generation`` or ``automatic-speech-recognition`` for a class transformers'
    auto mappings list as generative; None for the others."""
    return generative_classes().get(class_name)


def task_from_class_name(class_name: str, model_type: str | None) -> str:
    """Infer the task from a model class name such as ``BertForSequenceClassification`` (generative classes from
    transformers' auto mappings, the rest by their suffix)."""
    generative = generative_task(class_name)
    if generative is not None:
        return generative
    for suffix, task in _SUFFIX_TASKS:
        if class_name.endswith(suffix):
            if task == "feature-extraction" and model_type in _BARE_MODEL_TASKS:
                return _BARE_MODEL_TASKS[model_type]
            if task == "text-classification" and model_type in _AUDIO_TYPES:
                return "audio-classification"
            if task == "text2text-generation" and model_type in _AUDIO_TYPES:
                return "automatic-speech-recognition"
            return task
    return "feature-extraction"


def infer_task(config: Any, model: Any = None) -> str:
    """The task of a model object, or of a config's first listed architecture."""
    model_type = getattr(config, "model_type", None)
    if model is not None:
        return task_from_class_name(type(model).__name__, model_type)
    architectures = getattr(config, "architectures", None) or []
    if architectures:
        return task_from_class_name(architectures[0], model_type)
    return task_from_class_name("Model", model_type)


def check_task(task: str) -> str:
    if task not in TASK_AUTO_CLASS:
        known = ", ".join(sorted(TASK_AUTO_CLASS))
        raise InvalidArgumentError(f"Unknown task {task!r}. Known tasks: {known}.")
    return task
