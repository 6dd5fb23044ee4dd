"""A vision-language model's three files (:mod:`.parts`) as one step runner: the images through
``vision.onnx`` once, each step's tokens through ``embed.onnx`` (the image features merged at the first step), the
embeddings through ``decoder.onnx`` with its cache. It imports torch (the feature handling lives beside the export's
modules), and for a grid family (Qwen-VL) or LLaVA-NeXT's tiles it needs the model, whose functions compute each
image's grid tensors and positions or its pack index (:mod:`.grid`,
:mod:`.tiled`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError
from ...runtime.facts import IMAGE_COUNTS, IMAGE_GRID, PACK_WEIGHT, fixed_inputs, grid_derived, sized_by, tiled
from ...steps.generate.runners import OnnxDecoder


class VlmDecoder(OnnxDecoder):
    """:class:`OnnxDecoder` over ``decoder.onnx``, its tokens embedded by ``embed.onnx`` with the features of the
    images given to :meth:`set_images` (used by the next step, the prompt's)."""

    # its rows, each with its images, run as one left-padded batch: the images' rows follow the prompts' order, and
    # a text-only probe (generate()'s batches.pads_safely) would run the chain without them
    left_padding_safe = True
    tower, token_key = "vision", "image_token"  # the step_files entries of its tower's file and its token
    media = "image"

    def __init__(self, files: dict[str, Any], provider: str = "CPUExecutionProvider", **options: Any) -> None:
        """``files``: the adapter's ``step_files`` (the ``vision``, ``embed`` and ``decoder`` paths, the
        ``image_token``)."""
        from ...runtime.sessions import session

        super().__init__(Path(files["decoder"]), provider, **options)
        options.pop("io_binding", None)
        self.vision = session(Path(files[self.tower]), provider, **options)
        self.embed = session(Path(files["embed"]), provider, **options)
        image_token = int(files[self.token_key])
        self.image_token = image_token
        derived = grid_derived(self.vision)  # computed from the images' grids here, which come with them
        packing, size = tiled(self.vision), sized_by(self.vision)  # the pack index: computed from the sizes here
        self.vision_inputs = [i.name for i in self.vision.get_inputs() if i.name not in [*derived, packing,
                                                                                          PACK_WEIGHT]]
        self.vision_inputs += [IMAGE_GRID] if derived and IMAGE_GRID not in self.vision_inputs else []
        self.vision_inputs += [size] if size else []  # each image's size: its crop or its tiles
        # LLaVA-OneVision's processor also counts each prompt's images (an image among others is not tiled)
        self.vision_inputs += [IMAGE_COUNTS] if packing else []
        self.model = files.get("model")
        width = self.embed.get_inputs()[1].shape[-1]
        self.features_width = int(width) if isinstance(width, int) else int(
            self.session.get_inputs()[0].shape[-1])
        self.pending: np.ndarray | None = None
        self.vision_ms = 0.0
        # the images' values the file was traced at come with them (Qwen-VL's grid, LLaVA-NeXT's size), checked
        self.vision_inputs += list(fixed_inputs(self.vision))
        # Qwen-VL: each row's positions after the prompt are its text positions shifted by what the prompt's
        # images added (set at the prompt's step)
        self.shift: np.ndarray | None = None
        self.thumbnails: list[str] = []  # the pictures of the prompt, for the result to show

    def set_images(self, pixels: dict[str, np.ndarray] | None) -> None:
        """The images of the next prompt (the vision file's inputs by name), encoded now; None: a prompt
        without images."""
        import time

        self.shift = None
        if not pixels:
            self.pending, self.vision_ms = None, 0.0
            return
        # (the image counts: only some processors give them)
        missing = [n for n in self.vision_inputs if n not in pixels and n != IMAGE_COUNTS]
        if missing:
            raise InvalidArgumentError(f"The {self.tower} inputs lack {', '.join(missing)}, which this model's "
                                       f"{self.tower} file takes ({', '.join(self.vision_inputs)}): pass the "
                                       "processor's whole output.")
        started = time.perf_counter()
        self.pending = self.encode(pixels)
        self.vision_ms = (time.perf_counter() - started) * 1e3

    def encode(self, pixels: dict[str, np.ndarray]) -> np.ndarray:
        """The feature rows of every image, one after another (with their position columns, Qwen-VL)."""
        from .chain import with_positions
        from .parts import per_image

        images = per_image(self.vision, pixels, self.model)
        out: np.ndarray = with_positions(self.embed, images, pixels, self.model, self.image_token)
        return out

    def token_feed(self, ids: np.ndarray, positions: np.ndarray) -> dict[str, np.ndarray]:
        from .chain import token_feed
        from .prompts import check_counts

        features = self.pending
        if features is None:  # a decode step, or a prompt without images: every token is text
            features = np.zeros((0, self.features_width), np.float32)
        else:
            check_counts(ids, self.image_token, int(features.shape[0]), self.media)
        self.pending = None
        feed = token_feed(self.embed, ids, features, positions)
        if "position_ids" in feed:  # sections: the prompt's numbered by its images, later steps shifted as much
            if self.shift is None:  # the next token goes on from the prompt's largest position (an image may end it)
                self.shift = feed["position_ids"].max(axis=(0, 2)) - positions[:, -1]
            else:
                feed["position_ids"] = feed["position_ids"] + self.shift[None, :, None]
        return feed


def step_runner(model: Any, inputs: Any, images: Any, provider: str, threads: int | None) -> tuple[Any, Any]:
    """The chain shape's runner for :func:`onnx_nb.generate`: the export's files as one :class:`VlmDecoder`, its
    images set, and the inputs it reads (text with pictures goes through the model's processor, which expands each
    image placeholder)."""
    from ...results.export import source_of
    from .adapter import chain_files

    files = chain_files(model)
    processor = getattr(source_of(model), "preprocessor", None)
    given = images
    inputs, images = with_processor(inputs, images, processor)
    runner = VlmDecoder(files, provider, threads=threads)
    pixels = pixels_of(inputs, images, processor, runner.vision_inputs)
    runner.set_images(pixels)
    runner.thumbnails = thumbnails(given, pixels)
    return runner, inputs


def pixels_of(inputs: Any, images: Any, processor: Any, names: list[str]) -> dict[str, Any] | None:
    """The vision file's inputs: ``images`` as a processor's output (a dict) or a pixel array, else the pixel
    entries of ``inputs`` (a processor's output with text and images); PIL images go through ``processor``."""
    if images is None:
        if hasattr(inputs, "keys") and names[0] in inputs:
            return {n: inputs[n] for n in names if n in inputs}
        return None
    if hasattr(images, "keys"):
        return {n: images[n] for n in names if n in images}
    if hasattr(images, "shape"):
        return {names[0]: images}
    out = _processor(processor, "images= given as pictures", "pixel_values").image_processor(images,
                                                                                            return_tensors="np")
    return {n: out[n] for n in names if n in out}


def with_processor(inputs: Any, images: Any, processor: Any) -> tuple[Any, Any]:
    """Text prompts and pictures through the model's processor together (it puts each image's tokens where the
    prompt has its placeholder): (its output as the inputs, None); anything else as it came."""
    texts = [inputs] if isinstance(inputs, str) else inputs
    pictures = images is not None and not hasattr(images, "keys") and not hasattr(images, "shape")
    if not (pictures and isinstance(texts, (list, tuple)) and texts and all(isinstance(t, str) for t in texts)):
        return inputs, images
    pictures_list = list(images) if isinstance(images, (list, tuple)) else [images]
    out = _processor(processor, "Text with pictures", "token ids and pixel_values")(
        text=list(texts), images=pictures_list, return_tensors="np", padding="longest")
    return dict(out), None


def _processor(processor: Any, given: str, instead: str) -> Any:
    """The model's processor, or the refusal of what was ``given`` without one, saying what to pass ``instead``."""
    if processor is None or not hasattr(processor, "image_processor"):
        raise InvalidArgumentError(
            f"{given} needs the model's processor (none was saved with the model): pass the processor's output "
            f"instead (processor(text=..., images=..., return_tensors='np')), or {instead}.")
    return processor


def thumbnails(pictures: Any, pixels: dict[str, Any] | None, size: int = 96) -> list[str]:
    """Small PNG data URIs of the images, for a notebook to show beside the answers: the pictures as given, else
    each image's pixels (its first tile) scaled to 0-255; none for flat patches (Qwen-VL) or without Pillow."""
    import base64
    import io

    try:
        from PIL import Image
    except ImportError:
        return []
    if pictures is not None and not hasattr(pictures, "keys") and not hasattr(pictures, "shape"):
        shown = [p.convert("RGB") for p in (pictures if isinstance(pictures, (list, tuple)) else [pictures])
                 if hasattr(p, "convert")]
    else:
        values = np.asarray((pixels or {}).get("pixel_values", np.zeros((0,))), np.float32)
        if values.ndim not in (4, 5) or values.shape[-3] not in (1, 3):
            return []
        shown = []
        for image in values if values.ndim == 4 else values[:, 0]:  # tiles: the first, the whole picture
            low, high = float(image.min()), float(image.max())
            scaled = ((image - low) / (high - low or 1.0) * 255).astype(np.uint8).transpose(1, 2, 0)
            shown.append(Image.fromarray(scaled[..., 0] if scaled.shape[-1] == 1 else scaled))
    out = []
    for picture in shown:
        picture.thumbnail((size, size))
        buffer = io.BytesIO()
        picture.save(buffer, format="PNG")
        out.append("data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode())
    return out
