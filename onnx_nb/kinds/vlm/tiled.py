"""Vision-language families that tile each image by its size (LLaVA-NeXT, LLaVA-NeXT-Video: "anyres"): one vision
file for every image size; and the tiles Idefics3's and SmolVLM's processors give as ``[batch, images, ...]``, as the
vision file's rows of one image (:func:`images_as_rows`).

Their ``get_image_features`` counts an image's tiles from its ``image_sizes`` row, runs the tiles through the tower
and projector, then packs the tiles' rows by that size (the grid of tiles arranged, the padding cropped away, a
newline row after each row of patches): Python that a trace fixes. The packing only moves rows and adds the newline,
so the vision file takes the tiles (``[tiles, channels, side, side]``, any count) and the packing as an index
(``pack_index``: for each image token, which tile row it takes, or the newline row after the last one), and gathers.
The index comes from the model's own ``pack_image_features`` run on the row numbers (:func:`pack_index`), per image
size, in the runners; the file's metadata names it (``onnx_nb.tiled``) and the input that gives the size
(``onnx_nb.sized_by``). Where the module does not give the model's features, the vision file is traced at one image
size instead (:mod:`.vlm`). Only imported by functions that already need torch.
"""

from __future__ import annotations

import inspect
import sys
import weakref
from collections.abc import Callable
from typing import Any

import torch

from ...runtime.facts import IMAGE_COUNTS, SIZED_BY, TILED
from .prompts import VisionPart, gives, image_features

SIZES, INDEX, COUNTS = "image_sizes", "pack_index", IMAGE_COUNTS
# model -> (height, width) -> its tile count and pack index (images repeat their sizes; forgotten with the model)
_INDEXES: weakref.WeakKeyDictionary[Any, dict[tuple[int, int], tuple[int, Any]]] = weakref.WeakKeyDictionary()


def _inner(model: Any) -> Any:
    """The module holding ``pack_image_features`` (the model's ``.model``)."""
    return getattr(model, "model", model)


def tiles_of(model: Any, size: Any) -> int:
    """How many tiles the family makes of an image of ``size`` (``[height, width]``): its grid of tiles, plus one
    for the whole image resized."""
    namespace = sys.modules[type(_inner(model)).__module__]
    config = model.config
    return int(namespace.image_size_to_num_patches(image_size=[int(x) for x in size],
                                                   grid_pinpoints=config.image_grid_pinpoints,
                                                   patch_size=config.vision_config.image_size))


def pack_index(model: Any, size: Any) -> tuple[int, Any]:
    """The tile count of an image of ``size`` and its pack index (int64 numpy, one entry per image token): the
    model's ``pack_image_features`` run on each tile row's number, the newline rows numbered past the last."""
    key = (int(size[0]), int(size[1]))
    known = _INDEXES.setdefault(model, {})
    if len(known) > 512:  # pictures of many sizes: start again rather than grow without bound
        known.clear()
    if key not in known:
        tiles = tiles_of(model, key)
        per = rows_per_tile(model)
        numbers = torch.arange(tiles * per, dtype=torch.float64).reshape(tiles, per, 1)
        pack = _inner(model).pack_image_features
        asked = {"vision_feature_select_strategy": getattr(model.config, "vision_feature_select_strategy", "default"),
                 # LLaVA-OneVision's: an image of more tiles than its maximum has its rows resized (interpolated)
                 "vision_aspect_ratio": getattr(model.config, "vision_aspect_ratio", None)}
        takes = inspect.signature(pack).parameters
        with torch.no_grad():
            packed, _ = pack([numbers], torch.tensor([key]), image_newline=torch.tensor([-1.0], dtype=torch.float64),
                             **{k: v for k, v in asked.items() if k in takes and v is not None})
        rows = packed[0].reshape(-1)
        if not bool((rows == rows.round()).all()) or float(rows.max()) >= tiles * per:
            raise ValueError(f"an image of {key[0]}x{key[1]} makes {tiles} tiles, whose rows the model resizes "
                             f"(interpolates: vision_aspect_ratio {asked['vision_aspect_ratio']!r}) rather than "
                             "moving them, which this vision file does not do: give a smaller image")
        known[key] = tiles, torch.where(rows < 0, tiles * per, rows).long().numpy()
    return known[key]


def rows_per_tile(model: Any) -> int:
    """The rows one tile gives the packing: the tower's positions (a class row too where it has one: CLIP's, not
    SigLIP's), less the first where the family's strategy is "default" (it drops CLIP's class row)."""
    vision = model.config.vision_config
    tower = getattr(_inner(model), "vision_tower", None)
    embeddings = getattr(getattr(tower, "vision_model", tower), "embeddings", None)
    positions = getattr(embeddings, "num_positions", None)
    if not isinstance(positions, int):
        positions = (int(vision.image_size) // int(vision.patch_size)) ** 2 + 1
    strategy = getattr(model.config, "vision_feature_select_strategy", "default")
    return positions - (1 if strategy == "default" else 0)


class TiledImageFeatures(VisionPart):
    """``forward(pixel_values, pack_index) -> image_features``: one image's tiles (any count) through the tower and
    projector, their rows and the newline row gathered by ``pack_index``. ``other_sample()`` is an image of another
    size (another tile count), the export's check."""

    def __init__(self, model: Any, side: int) -> None:
        super().__init__(model)
        self.side = side
        self.onnx_metadata = {SIZED_BY: SIZES, TILED: INDEX}

    def forward(self, pixel_values: torch.Tensor, pack_index: torch.Tensor) -> dict[str, torch.Tensor]:
        from transformers.exporters.utils import patch_attribute

        from ...steps.export.patches.lending import lent
        from .prompts import feature_rows

        inner, tiles = _inner(self.model), pixel_values.shape[0]

        def flat(image_features: Any, image_sizes: Any, *_: Any, image_newline: Any = None,
                 **__: Any) -> Any:  # every tile's rows, the newline row last (whatever else the family passes)
            rows = feature_rows(list(image_features))
            return [torch.cat([rows, image_newline[None].to(rows)]) if image_newline is not None else rows], None

        namespace = sys.modules[type(inner).__module__]
        # on the instance, dropped after (the class's method is left as it is)
        with lent([(inner, "pack_image_features", flat)]), \
                patch_attribute(namespace, "image_size_to_num_patches", lambda _original: lambda **_: tiles):
            out = image_features(self.model)(pixel_values=pixel_values, image_sizes=[(self.side, self.side)],
                                                return_dict=True)
        return {"image_features": feature_rows(out.pooler_output)[pack_index]}

    def sample_at(self, size: tuple[int, int], seed: int) -> dict[str, torch.Tensor]:
        tiles, index = pack_index(self.model, size)
        g = torch.Generator().manual_seed(seed)
        channels = int(getattr(self.model.config.vision_config, "num_channels", 3) or 3)
        return {"pixel_values": torch.randn(tiles, channels, self.side, self.side, generator=g),
                INDEX: torch.from_numpy(index)}

    def other_size(self) -> tuple[int, int]:
        """A size of another tile count than the square sample's: the largest of the family's pinpoints (the
        resolutions it tiles to) that gives one and whose rows the model moves without resizing them, else an image
        twice as wide as tall (another unpadding)."""
        square = tiles_of(self.model, (self.side, self.side))
        pinpoints = [(int(h), int(w)) for h, w in self.model.config.image_grid_pinpoints]
        for size in sorted(pinpoints, key=lambda p: -p[0] * p[1]):
            if tiles_of(self.model, size) != square:
                try:
                    pack_index(self.model, size)  # (LLaVA-OneVision resizes the rows of its largest: not those)
                except ValueError:
                    continue
                return size
        return self.side, 2 * self.side

    def other_sample(self) -> dict[str, torch.Tensor]:
        return self.sample_at(self.other_size(), seed=1)

    def model_pixels(self, other: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"pixel_values": other["pixel_values"][None], SIZES: torch.tensor([list(self.other_size())])}


def tiled_part(model: Any, pixels: dict[str, torch.Tensor], features: torch.Tensor,
               reference: Callable[[Any, dict[str, torch.Tensor]], torch.Tensor]) -> tuple[Any, Any, Any] | None:
    """The vision part of a family that tiles its images by their sizes as one file for every size (module,
    sample, axes), or None where the family does not tile, or the module gives other features than the model's own
    (``features`` at the sample's size, ``reference(model, pixels)`` at another)."""
    values = pixels.get("pixel_values")
    if SIZES not in pixels or values is None or values.dim() != 5 or values.shape[0] != 1 or \
            not getattr(model.config, "image_grid_pinpoints", None) or \
            not hasattr(_inner(model), "pack_image_features"):
        return None
    side = int(values.shape[-1])
    module = TiledImageFeatures(model, side)
    try:
        sample = {"pixel_values": values[0],
                  INDEX: torch.from_numpy(pack_index(model, [int(x) for x in pixels[SIZES][0]])[1])}
    except Exception:  # noqa: BLE001 - another tiling than LLaVA-NeXT's: traced at one image size
        return None
    if not gives(module, sample, features, reference):
        return None
    return module, sample, {"pixel_values": {0: "tiles"}, INDEX: {0: "image_tokens"}}


def tiled_feeds(vision: Any, pixels: dict[str, Any], model: Any) -> list[dict[str, Any]]:
    """What the tiled vision file takes for each image of the processor's batch: its tiles (the batch pads every
    image to the most tiles) and its pack index, from its ``image_sizes`` row."""
    import numpy as np

    from ...errors import InvalidArgumentError

    if SIZES not in pixels:
        raise InvalidArgumentError(f"The images come without {SIZES}: pass the processor's whole output (each image's "
                                   "size says how it was tiled).")
    if model is None:
        raise InvalidArgumentError(
            "This vision file takes each image's pack index, computed from its size by the model's own "
            "pack_image_features: run it through the export's result (onnx_nb.generate(result, ...)), which holds "
            "the model.")
    values, sizes = np.asarray(pixels["pixel_values"]), np.asarray(pixels[SIZES]).reshape(-1, 2)
    if values.ndim == 4 and sizes.shape[0] > 1:
        raise InvalidArgumentError(f"pixel_values is {list(values.shape)}, every image's tiles in one run, with "
                                   f"{sizes.shape[0]} sizes: give the processor's 5-d output ([images, tiles, "
                                   "channels, height, width]).")
    if values.ndim == 4:  # one image's tiles without the images axis
        values = values[None]
    if sizes.shape[0] != values.shape[0]:
        raise InvalidArgumentError(f"pixel_values holds {values.shape[0]} images and {SIZES} {sizes.shape[0]} sizes: "
                                   "give the processor's output for these images (both together).")
    counts = pixels.get(COUNTS)  # LLaVA-OneVision's: an image beside others in its prompt is one tile, not tiled
    tiled = [True] * len(sizes) if counts is None else \
        [int(n) == 1 for n in np.asarray(counts).reshape(-1) for _ in range(int(n))]
    if len(tiled) != len(sizes):
        raise InvalidArgumentError(f"{COUNTS} counts {len(tiled)} images and {SIZES} {len(sizes)}: give the "
                                   "processor's output for these images (all together).")
    feeds = []
    for k, size in enumerate(sizes):
        try:  # one tile: its rows, then the newline row
            tiles, index = pack_index(model, size) if tiled[k] else (1, np.arange(rows_per_tile(model) + 1))
        except ValueError as exc:
            raise InvalidArgumentError(f"{SIZES} row {k}: {exc}.") from None
        if tiles > values.shape[1]:
            raise InvalidArgumentError(f"{SIZES} row {k} ({int(size[0])}x{int(size[1])}) makes {tiles} tiles and its "
                                       f"pixel_values holds {values.shape[1]}: give the processor's output for "
                                       "these images.")
        feeds.append({"pixel_values": values[k, :tiles], INDEX: index})
    return feeds


def images_as_rows(inputs: list[Any], pixels: dict[str, Any]) -> dict[str, Any]:
    """A processor's ``[batch, images, ...]`` (Idefics3 and SmolVLM split each picture into tiles, a row's images
    side by side) as the vision file's rows of one image, ``[images, 1, ...]``; the images that are all zeros (the
    processor's padding of a row with fewer) dropped as the model drops them. Other layouts as they are."""
    import numpy as np

    first = inputs[0]
    given: tuple[int, ...] = tuple(np.shape(pixels[first.name])) if first.name in pixels else ()
    if len(first.shape) != 5 or first.shape[1] != 1 or len(given) != 5 or given[1] == 1:
        return pixels
    flat = {i.name: np.asarray(pixels[i.name]).reshape(-1, 1, *np.shape(pixels[i.name])[2:])
            for i in inputs if i.name in pixels}
    values = flat[first.name]
    real: np.ndarray = np.not_equal(values, 0).reshape(len(values), -1).any(axis=1)
    real[0] = bool(real[0]) or not real.any()  # (every image padding: the model keeps the first)
    return {**pixels, **{name: array[real] for name, array in flat.items()}}
