"""What a transformers.js folder's check runs on: texts (question answering's [question, context] pairs), images
at the processor's size, audio clips at the feature extractor's rate; what a task does not run on is refused before
anything is written."""

from __future__ import annotations

from typing import Any

from ...errors import InvalidArgumentError
from ...runtime.pictures import listed

# run on images (its processor's preprocessor_config.json), not text
IMAGE_TASKS = ("image-classification", "image-to-text")
CAPTIONS = "image-to-text"  # an encoder-decoder that writes an image's text (TrOCR, Donut, ViT-GPT2)
SPEECH = "automatic-speech-recognition"  # an encoder-decoder run on audio clips (Whisper)
TEXTS = ["Hello world", "ONNX models run in the browser, checked against PyTorch."]
QUESTIONS = [["Where do ONNX models run?", TEXTS[1]], ["What are they checked against?", TEXTS[1]]]


def default_texts(source: Any, task: str) -> list[Any]:
    """Two sentences (with the tokenizer's mask token in each for fill-mask; two [question, context] pairs for
    question answering)."""
    if task == "question-answering":
        return [list(q) for q in QUESTIONS]
    mask = getattr(source.preprocessor, "mask_token", None)
    if task == "fill-mask" and mask:
        return [f"Hello {mask} world", f"ONNX models run in the {mask}, checked against PyTorch."]
    return list(TEXTS)


def inputs_fit(task: str, texts: Any, images: Any, audio: Any) -> None:
    """Refuse, before anything is written, inputs the task does not run on, and question answering's texts that are
    not [question, context] pairs."""
    given = {"texts": texts is not None, "images": images is not None, "audio": audio is not None}
    takes = "images" if task in IMAGE_TASKS else "audio" if task == SPEECH else "texts"
    stray = [k for k, v in given.items() if v and k != takes]
    if stray:
        raise InvalidArgumentError(f"A {task} folder is checked on {takes}, not {' or '.join(stray)}.")
    if task == "question-answering" and texts is not None and not (texts and all(
            isinstance(t, (list, tuple)) and len(t) == 2 and all(isinstance(x, str) for x in t) for t in texts)):
        raise InvalidArgumentError("question-answering's texts are [question, context] pairs of strings.")


def clips_of(audio: list[Any] | None, processor: Any) -> list[tuple[Any, int]]:
    """``audio`` as float32 clips, each with the feature extractor's sampling rate; by default a one-second chirp
    and half a second of noise."""
    import numpy as np

    rate = int(getattr(getattr(processor, "feature_extractor", processor), "sampling_rate", 16000) or 16000)
    if audio is not None:
        clips = [np.asarray(a, dtype=np.float32) for a in listed(audio)]
        if any(c.ndim != 1 or not c.size or not np.isfinite(c).all() for c in clips):
            raise InvalidArgumentError(f"Audio of shapes {[c.shape for c in clips]}: give 1-D clips of finite mono "
                                       f"samples at {rate} Hz.")
        return [(c, rate) for c in clips]
    t = np.arange(rate, dtype=np.float64) / rate
    chirp = 0.5 * np.sin(2 * np.pi * (200 + 600 * t) * t)
    noise = np.random.default_rng(0).normal(0, 0.1, rate // 2)
    return [(chirp.astype(np.float32), rate), (noise.astype(np.float32), rate)]


def images_of(images: list[Any] | None, processor: Any) -> list[Any]:
    """``images`` as ``[height, width, 3]`` uint8 arrays (from PIL images, arrays or files); by default two made-up
    images (a colour gradient, and noise) at the processor's own size, so no resize stands between the two
    processors."""
    import numpy as np

    from ...runtime.pictures import image_processor_of, pictures_of

    if images is not None:
        return pictures_of(images)
    processor = image_processor_of(processor) or processor  # a processor's (TrOCR's: with its tokenizer)
    cropped = getattr(processor, "do_center_crop", False) and getattr(processor, "crop_size", None)
    size = cropped or getattr(processor, "size", None) or {}
    if isinstance(size, int):
        size = {"height": size, "width": size}

    def edge(name: str) -> Any:  # a dict, or transformers' SizeDict (attributes)
        return size.get(name) if isinstance(size, dict) else getattr(size, name, None)

    height = int(edge("height") or edge("shortest_edge") or 224)
    width = int(edge("width") or edge("shortest_edge") or height)
    y, x = np.mgrid[0:height, 0:width]
    gradient = np.stack([x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1), (x + y) * 127 // max(
        width + height - 2, 1)], axis=-1).astype(np.uint8)
    noise = np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return [gradient, noise]
