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

from ...runtime.facts import IMAGE_COUNTS, PACK_WEIGHT, SIZED_BY, TILED
from .prompts import VisionPart, gives, image_features

SIZES, INDEX, WEIGHT, COUNTS = "image_sizes", "pack_index", PACK_WEIGHT, IMAGE_COUNTS
# model -> (height, width) -> its tile count and pack index (images repeat their sizes; forgotten with the model)
_INDEXES: weakref.WeakKeyDictionary[Any, dict[tuple[int, int], tuple[int, Any, Any]]] = weakref.WeakKeyDictionary()


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


def pack_index(model: Any, size: Any) -> tuple[int, Any, Any]:
    """The tile count of an image of ``size`` and its packing: for each image token, the tile rows it is made of
    (int64, ``[tokens, 4]``; the newline row numbered past the last tile row) and their weights (float32, ``[tokens,
    4]``). The model's ``pack_image_features`` runs on each tile row's number: a token that is one row moved takes
    it whole; where the family resizes the unpadded grid (LLaVA-OneVision, past its ``vision_aspect_ratio``), the
    resize is caught and each token takes the rows bilinear interpolation mixes, weighted as torch's own
    interpolation weighs a one-hot grid along each axis."""
    key = (int(size[0]), int(size[1]))
    known = _INDEXES.setdefault(model, {})
    if len(known) > 512:  # pictures of many sizes: start again rather than grow without bound
        known.clear()
    if key not in known:
        tiles, per = tiles_of(model, key), rows_per_tile(model)
        numbers = torch.arange(tiles * per, dtype=torch.float64).reshape(tiles, per, 1)
        pack = _inner(model).pack_image_features
        asked = {"vision_feature_select_strategy": getattr(model.config, "vision_feature_select_strategy", "default"),
                 "vision_aspect_ratio": getattr(model.config, "vision_aspect_ratio", None)}
        takes = inspect.signature(pack).parameters
        first = float(tiles * per + 1)  # the resized grid's positions, numbered from here
        catch = _CaughtResize(first)
        with torch.no_grad(), catch:  # (a torch function mode: this thread's calls only)
            packed, _ = pack([numbers], torch.tensor([key]), image_newline=torch.tensor([-1.0], dtype=torch.float64),
                             **{k: v for k, v in asked.items() if k in takes and v is not None})
        resized = catch.resized
        rows = packed[0].reshape(-1).numpy()
        if len(resized) > 1 or not bool((rows == rows.round()).all()):
            raise ValueError(f"an image of {key[0]}x{key[1]}: pack_image_features mixes its tile rows otherwise than "
                             "by one bilinear resize, which this vision file does not follow")
        known[key] = (tiles, *_weighted(rows, tiles * per, first, resized[0] if resized else None))
    return known[key]


class _CaughtResize(torch.overrides.TorchFunctionMode):
    """While active (in its own thread), ``torch.nn.functional.interpolate`` does not resize: it records the grid
    of row numbers it was given, the size asked and its options, and returns the new grid's positions numbered from
    ``first``; every other torch function runs as it is."""

    def __init__(self, first: float) -> None:
        super().__init__()
        self.first = first
        self.resized: list[tuple[Any, list[int], dict[str, Any]]] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        if func is not torch.nn.functional.interpolate:
            return func(*args, **kwargs)
        grid, *rest = args
        size = kwargs.pop("size", rest[0] if rest else None)
        if size is None:  # a resize by a scale factor: not a packing this file follows
            raise ValueError("pack_image_features resizes by a scale factor")
        height, width = (int(x) for x in size)
        self.resized.append((grid[0, 0].clone(), [height, width], kwargs))
        return self.first + torch.arange(height * width, dtype=grid.dtype).reshape(1, 1, height, width)


def _weighted(rows: Any, newline: int, first: float, resize: Any) -> tuple[Any, Any]:
    """The packing as ``[tokens, 4]`` row numbers and weights: a moved row whole, the newline row (``-1`` in
    ``rows``) as row ``newline``, a resized position (numbered from ``first``) as the up to four rows bilinear
    interpolation mixes into it."""
    import numpy as np

    index, weight = np.zeros((len(rows), 4), np.int64), np.zeros((len(rows), 4), np.float32)
    plain = rows < first
    index[plain, 0] = np.where(rows[plain] < 0, newline, rows[plain])
    weight[plain, 0] = 1.0
    if resize is None:
        return index, weight
    grid, (height, width), options = resize
    interpolate = torch.nn.functional.interpolate
    rows_in, cols_in = grid.shape
    with torch.no_grad():  # torch's weights along each axis: a one-hot grid per source row (column), resized
        down = interpolate(torch.eye(rows_in, dtype=torch.float64).reshape(1, rows_in, rows_in, 1),
                           [height, 1], **options)[0, :, :, 0].numpy()
        across = interpolate(torch.eye(cols_in, dtype=torch.float64).reshape(1, cols_in, 1, cols_in),
                             [1, width], **options)[0, :, 0, :].numpy()
    numbers = grid.long().numpy()
    for token in np.nonzero(~plain)[0]:
        i, j = divmod(int(rows[token] - first), width)
        pairs = [(numbers[y, x], down[y, i] * across[x, j]) for y in np.nonzero(down[:, i])[0]
                 for x in np.nonzero(across[:, j])[0]]
        if len(pairs) > 4:
            raise ValueError("a resized position mixes more than four rows")
        for k, (row, w) in enumerate(pairs):
            index[token, k], weight[token, k] = row, w
    return index, weight


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
    """``forward(pixel_values, pack_index, pack_weight) -> image_features``: one image's tiles (any count) through
    the tower and projector, each image token the sum of the rows (and the newline row) ``pack_index`` names, weighted
    by ``pack_weight`` (:func:`pack_index`). ``other_sample()`` is an image of another size (another tile count), the
    export's check."""

    def __init__(self, model: Any, side: int) -> None:
        super().__init__(model)
        self.side = side
        self.onnx_metadata = {SIZED_BY: SIZES, TILED: INDEX}

    def forward(self, pixel_values: torch.Tensor, pack_index: torch.Tensor,
                pack_weight: torch.Tensor) -> dict[str, torch.Tensor]:
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
        rows = feature_rows(out.pooler_output)
        return {"image_features": (rows[pack_index] * pack_weight[..., None].to(rows)).sum(1)}

    def sample_at(self, size: tuple[int, int], seed: int) -> dict[str, torch.Tensor]:
        tiles, index, weight = pack_index(self.model, size)
        g = torch.Generator().manual_seed(seed)
        channels = int(getattr(self.model.config.vision_config, "num_channels", 3) or 3)
        return {"pixel_values": torch.randn(tiles, channels, self.side, self.side, generator=g),
                INDEX: torch.from_numpy(index), WEIGHT: torch.from_numpy(weight)}

    def other_size(self) -> tuple[int, int]:
        """A size of another tile count than the square sample's: the largest of the family's pinpoints (the
        resolutions it tiles to) that gives one (LLaVA-OneVision resizes its rows: that too is checked) and whose
        packing is followed, else an image twice as wide as tall (another unpadding)."""
        square = tiles_of(self.model, (self.side, self.side))
        pinpoints = [(int(h), int(w)) for h, w in self.model.config.image_grid_pinpoints]
        for size in sorted(pinpoints, key=lambda p: -p[0] * p[1]):
            if tiles_of(self.model, size) != square:
                try:
                    pack_index(self.model, size)
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
        _, index, weight = pack_index(model, [int(x) for x in pixels[SIZES][0]])
    except Exception:  # noqa: BLE001 - another tiling than LLaVA-NeXT's: traced at one image size
        return None
    sample = {"pixel_values": values[0], INDEX: torch.from_numpy(index), WEIGHT: torch.from_numpy(weight)}
    if not gives(module, sample, features, reference):
        return None
    return module, sample, {"pixel_values": {0: "tiles"}, INDEX: {0: "image_tokens"}, WEIGHT: {0: "image_tokens"}}


def tiled_feeds(vision: Any, pixels: dict[str, Any], model: Any) -> list[dict[str, Any]]:
    """What the tiled vision file takes for each image of the processor's batch: its tiles (the batch pads every
    image to the most tiles) and its packing, from its ``image_sizes`` row. A file written before the packing had
    weights (``pack_index`` of one row per token) takes the sizes whose packing only moves rows."""
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
    weighted = WEIGHT in {i.name for i in vision.get_inputs()}
    feeds = []
    for k, size in enumerate(sizes):
        try:
            tiles, index, weight = pack_index(model, size) if tiled[k] else _one_tile(model)
        except ValueError as exc:
            raise InvalidArgumentError(f"{SIZES} row {k}: {exc}.") from None
        if not weighted and bool((weight[:, 1:] != 0).any()):
            raise InvalidArgumentError(f"{SIZES} row {k} ({int(size[0])}x{int(size[1])}): the model resizes this "
                                       "image's rows, which this vision file (written by an earlier onnx-nb) does "
                                       "not do: export the model again.")
        if tiles > values.shape[1]:
            raise InvalidArgumentError(f"{SIZES} row {k} ({int(size[0])}x{int(size[1])}) makes {tiles} tiles and its "
                                       f"pixel_values holds {values.shape[1]}: give the processor's output for "
                                       "these images.")
        feeds.append({"pixel_values": values[k, :tiles], **({INDEX: index, WEIGHT: weight} if weighted
                                                              else {INDEX: index[:, 0]})})
    return feeds


def _one_tile(model: Any) -> tuple[int, Any, Any]:
    """The packing of an image that is one tile (one of several in a prompt: LLaVA-OneVision): its rows, then the
    newline row."""
    import numpy as np

    per = rows_per_tile(model)
    return (1, *_weighted(np.append(np.arange(per, dtype=np.float64), -1.0), per, float(per + 1), None))


def images_as_rows(inputs: list[Any], pixels: dict[str, Any]) -> dict[str, Any]:
    """A processor's ``[batch, images, ...]`` (Idefics3 and SmolVLM split each picture into tiles, a row's images
    side by side) as the vision file's rows of one image, ``[images, 1, ...]``; the images that are all zeros (the
    processor's padding of a row with fewer) dropped as the model drops them. A NaFlex tower's patches
    (``[images, patches, values]``, LFM2-VL's SigLIP 2), which its processor pads to the most any image may have, cut
    to the file's count where the patches past it are padding (their mask 0). Other layouts as they are."""
    import numpy as np

    first = inputs[0]
    given: tuple[int, ...] = tuple(np.shape(pixels[first.name])) if first.name in pixels else ()
    mask = np.asarray(pixels.get("pixel_attention_mask", np.zeros(())))  # (none: no patch known to be padding)
    count = first.shape[1] if len(first.shape) == 3 and len(given) == 3 and mask.shape == given[:2] else None
    if isinstance(count, int) and given[1] > count and not mask[:, count:].any():
        cut = np.asarray(pixels[first.name])[:, :count]
        return {**pixels, first.name: cut, "pixel_attention_mask": mask[:, :count]}
    if len(first.shape) != 5 or first.shape[1] != 1 or len(given) != 5 or given[1] == 1:
        return pixels
    flat = {i.name: np.asarray(pixels[i.name]).reshape(-1, 1, *np.shape(pixels[i.name])[2:])
            for i in inputs if i.name in pixels}
    values = flat[first.name]
    real: np.ndarray = np.not_equal(values, 0).reshape(len(values), -1).any(axis=1)
    real[0] = bool(real[0]) or not real.any()  # (every image padding: the model keeps the first)
    return {**pixels, **{name: array[real] for name, array in flat.items()}}
