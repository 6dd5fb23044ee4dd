"""Vision-language models (transformers' image-text-to-text: LLaVA, Gemma 3, SmolVLM, ...) as three files, the shape
onnxruntime-genai's builder gives them: ``vision`` (pixels and the family's extras -> one row of features per image
token), ``embed`` (token ids and those features -> the embeddings the decoder reads, each image token's row replaced
by the next feature row, as the model's own ``masked_scatter`` does) and ``decoder`` (embeddings -> logits, with its
key/value cache: the causal-LM route, :mod:`.decoder_cache`).

The samples come from the model itself: an image of the vision tower's size (in the layout the family's
``get_image_features`` takes: tiles, patch masks, sizes), run once to count the features, and a prompt with that
many image tokens. Only imported by functions that already need torch.
"""

from __future__ import annotations

import inspect
import math
import weakref
from typing import Any

import torch

from ...errors import InvalidArgumentError
from ...runtime.facts import FIXED_INPUT, fixed_inputs
from ...runtime.facts import IMAGE_GRID as GRID
from ...runtime.shapes import SAMPLE_SIZES
from ...steps.export.caches.decoder import LAYER_INPUTS, MM_TYPES
from . import patches
from .prompts import VisionPart, image_feature_inputs, image_features, image_rows, prompt_sample, types_rule

QFORMER_IDS, QFORMER_MASK = "qformer_input_ids", "qformer_attention_mask"  # InstructBLIP's, beside the image
MERGES = "image_merge_sizes"  # VideoLLaMA 3's, beside its grid
SHAPES = "spatial_shapes"  # a NaFlex tower's (SigLIP 2 in LFM2-VL): each image's patch rows and columns
POSITIONS = "image_positions"  # a grid family's embed input: each image row's position columns (grid.py)
COLUMNS = 4

PARTS = ("vision", "embed", "decoder")
IMAGE_TOKEN_KEYS = ("image_token_id", "image_token_index")


def image_token_of(config: Any) -> int | None:
    for key in IMAGE_TOKEN_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int):
            return value
    return None


def takes_grid(model: Any) -> bool:
    """The family's images come as flat patches with their grid (Qwen2-VL, Qwen2.5-VL), its positions in three
    sections (temporal, height, width: multimodal rotary positions)."""
    return GRID in image_feature_inputs(model) and callable(
        getattr(getattr(model, "model", model), "get_rope_index", None))


def deepstack_layers(model: Any) -> int:
    """How many decoder layers take the tower's early features at the image rows (Qwen3-VL's "deepstack"; 0 for
    other families): read from the language model's forward and the tower's config."""
    text = getattr(getattr(model, "model", None), "language_model", None)
    if text is None or "deepstack_visual_embeds" not in inspect.signature(text.forward).parameters:
        return 0
    vision = model.config.vision_config
    depth = getattr(vision, "depth", None)  # an index past the tower's last block gives no features, and a block
    # named twice gives one (the tower checks each block against the list)
    return len({i for i in getattr(vision, "deepstack_visual_indexes", None) or [] if depth is None or i < depth})


class ImageFeatures(VisionPart):
    """``forward(pixel_values, [pixel_attention_mask], [image_sizes]) -> image_features``: the vision tower and
    projector, one row per image token (every image's rows one after another, as the model concatenates them).
    Qwen3-VL's deepstack features ride in the same rows, after the features (``[rows, embeds * (1 + layers)]``),
    so every runner passes one array; the embed file splits them."""

    def __init__(self, model: Any, fixed: dict[str, torch.Tensor] | None = None) -> None:
        super().__init__(model)
        # inputs whose values shape the tower's work (Qwen-VL's grid, LLaVA-NeXT's image size): constants of the
        # trace, recorded in the file's metadata so that runners refuse other values
        self.fixed = dict(fixed or {})
        self.onnx_metadata = {FIXED_INPUT + k: ",".join(str(int(x)) for x in v[0].reshape(-1))
                              for k, v in self.fixed.items()}

    def forward(self, pixel_values: torch.Tensor, pixel_attention_mask: torch.Tensor | None = None,
                image_sizes: torch.Tensor | None = None, qformer_input_ids: torch.Tensor | None = None,
                qformer_attention_mask: torch.Tensor | None = None,
                image_position_ids: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        # a fixed image size as Python ints: LLaVA-NeXT computes its tiles and unpadding from them
        fixed = {k: v.tolist() if k == "image_sizes" else v for k, v in self.fixed.items()}
        given = {"pixel_attention_mask": pixel_attention_mask, "image_sizes": image_sizes,
                 QFORMER_IDS: qformer_input_ids, QFORMER_MASK: qformer_attention_mask,
                 patches.POSITION_IDS: image_position_ids, **fixed}
        out = image_features(self.model)(pixel_values=pixel_values,
                                          **{k: v for k, v in given.items() if v is not None}, return_dict=True)
        return {"image_features": image_rows(out)}

    def other_sample(self) -> dict[str, torch.Tensor]:
        """Another image, a longer instruction beside it (InstructBLIP's: the one axis left free), the check."""
        sample = {k: v for k, v in pixel_sample(self.model, 1, seed=1).items() if k not in self.fixed}
        return {k: torch.cat([v, v[:, :3]], 1) if k in (QFORMER_IDS, QFORMER_MASK) else v for k, v in sample.items()}


class MergedEmbedding(torch.nn.Module):
    """``forward(input_ids, image_features) -> inputs_embeds [, token_type_ids]``: the token embeddings with the
    k-th image token's row taken from the k-th feature row (row-major over the batch, as ``masked_scatter`` fills).
    A graph of gathers: with no features (a decode step, a prompt without images) every token is embedded as text,
    as the model does without pixels; an image token past the last feature reuses it, and callers check the counts
    first (:func:`check_counts`). Where the decoder reads token types, they come out too, by the family's
    :func:`types_rule`, so no runner needs to know it."""

    def __init__(self, model: Any, image_token: int, sections: bool = False) -> None:
        super().__init__()
        self.embed = model.get_input_embeddings()
        self.image_token = image_token
        self.types = types_rule(model)
        self.deepstack = deepstack_layers(model)
        self.sections = sections  # each image row's position columns come beside it (grid.position_columns)
        # Gemma 4's per-layer inputs, looked up from the ids with an image's tokens read as padding
        self.layers, self.layers_shape = patches.layer_table(model), patches.layer_inputs_shape(model)
        self.pad, self.media = int(getattr(model.config.get_text_config(), "pad_token_id", 0) or 0), \
            patches.media_tokens(model)
        self.two_way = patches.two_way_images(model)  # Gemma 4's image blocks: mm_token_type_ids, 1 at an image

    def forward(self, input_ids: torch.Tensor, image_features: torch.Tensor,
                text_position_ids: torch.Tensor | None = None,
                image_positions: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        any_features = image_features.new_ones(image_features.shape[0]).sum() > 0
        is_image = (input_ids == self.image_token) & any_features
        # an image token id may lie outside the text vocabulary (its row is replaced anyway)
        embeds = self.embed(torch.where(is_image, torch.zeros_like(input_ids), input_ids))
        flat = is_image.reshape(-1).long()
        index = torch.clamp(torch.cumsum(flat, 0) * flat, max=image_features.shape[0])
        table = torch.cat([image_features.new_zeros(1, image_features.shape[-1]), image_features], 0)
        picked = table.index_select(0, index).reshape(*embeds.shape[:2], -1)
        width = embeds.shape[-1]
        out = {"inputs_embeds": torch.where(is_image.unsqueeze(-1), picked[..., :width].to(embeds.dtype), embeds)}
        if self.deepstack:  # each layer's addition at the image tokens, zeros elsewhere
            deep = picked[..., width:].to(embeds.dtype)
            deep = torch.where(is_image.unsqueeze(-1), deep, torch.zeros_like(deep))
            out["deepstack_embeds"] = deep.reshape(*embeds.shape[:2], self.deepstack, width).permute(2, 0, 1, 3)
        if self.layers is not None:
            out[LAYER_INPUTS] = patches.layer_inputs(self.layers, self.layers_shape, input_ids, self.media, self.pad)
        if self.two_way:
            out[MM_TYPES] = is_image.long()
        if self.types is not None:
            out["token_type_ids"] = torch.zeros_like(input_ids) if self.types == "prefix" else is_image.long()
        if self.sections and text_position_ids is not None and image_positions is not None:
            rows = torch.cat([image_positions.new_zeros(1, image_positions.shape[-1]), image_positions], 0)
            columns = rows.index_select(0, torch.clamp(index, max=image_positions.shape[0]))
            out["position_ids"] = self.positions(is_image.long(), text_position_ids,
                                                 columns.reshape(*embeds.shape[:2], -1))
        return out

    @staticmethod
    def positions(is_image: torch.Tensor, text: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
        """Qwen-VL's three position sections ``[3, batch, sequence]`` from each token's text position (its count
        of tokens before it, as the runner counts them) and its image row's columns: an image token at its text
        position plus its offsets (less its place in the image: the image's start plus the offset, as the model's
        ``get_rope_index`` numbers it), every token shifted by the extra advance of the images before it."""
        columns = columns * is_image.unsqueeze(-1)  # zero at text tokens
        extra = columns[..., 3]
        base = text + torch.cumsum(extra, 1) - extra  # the images before each token, not its own
        return base.unsqueeze(0) + columns[..., :3].permute(2, 0, 1)


_SHAPES: weakref.WeakKeyDictionary[Any, tuple[int, ...]] = weakref.WeakKeyDictionary()  # model -> a patch's shape


def patch_shape(model: Any, sizes: tuple[int, int, int], grid: dict[str, torch.Tensor]) -> tuple[int, ...]:
    """How a grid family's tower takes each patch: a flat row of channels x temporal x patch x patch (Qwen-VL's,
    HY-V4-VL's: the tower reshapes it), or ``[channels, patch, patch]`` where its 2-D convolution reads the patches
    as given (Kimi-K2.5, PaddleOCR-VL). Tried once per model on one image of ``grid``, flat first."""
    if model in _SHAPES:
        return _SHAPES[model]
    channels, temporal, patch = sizes
    flat = (channels * temporal * patch * patch,)
    from .grid import tower_of

    first = next((m for m in (tower_of(model) or torch.nn.Module()).modules()
                  if isinstance(m, (torch.nn.Conv2d, torch.nn.Conv3d))), None)
    _SHAPES[model] = flat
    if temporal == 1 and isinstance(first, torch.nn.Conv2d):
        count = int(grid[GRID][0].prod())
        for shape in (flat, (channels, patch, patch)):
            try:
                with torch.no_grad():
                    image_features(model)(pixel_values=torch.zeros(count, *shape), **grid)
            except (RuntimeError, ValueError, TypeError, IndexError):  # the tower does not take this layout
                continue
            _SHAPES[model] = shape
            break
    return _SHAPES[model]


def pixel_sample(model: Any, images: int = 1, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random pixels of the vision tower's size in the layout the family's ``get_image_features`` takes: flat
    patches with their grid (Qwen-VL), flat patches with their rows and columns and a patch mask (a NaFlex tower:
    LFM2-VL's SigLIP 2), tiles and their sizes (LLaVA-NeXT's grid), an image per prompt with its patch mask
    (Idefics 3, SmolVLM), the image's size beside it (Pixtral's towers), else one ``[images, 3, size, size]``
    tensor."""
    config = model.config
    vision = config.vision_config
    size = getattr(vision, "image_size", SAMPLE_SIZES["image_side"])
    size = int(size[0] if isinstance(size, (list, tuple)) else size)
    channels = int(getattr(vision, "num_channels", 3) or 3)
    g = torch.Generator().manual_seed(seed)
    takes = image_feature_inputs(model)
    sample: dict[str, torch.Tensor] = {}
    if GRID in takes:  # flat patches, channels x temporal x patch x patch each, in rows of the merge
        from .grid import merge_of

        patch, merge = int(vision.patch_size), merge_of(vision)
        temporal = int(getattr(vision, "temporal_patch_size", None) or getattr(vision, "patch_temporal", 1) or 1)
        side = max(size // (patch * merge), 1) * merge
        grid = {GRID: torch.tensor([[1, side, side]] * images)}
        if MERGES in takes:  # VideoLLaMA 3's merge per image (its image processor's: 1)
            grid[MERGES] = torch.tensor([merge] * images)
        shape = patch_shape(model, (channels, temporal, patch), {k: v[:1] for k, v in grid.items()})
        sample = {"pixel_values": torch.randn(images * side * side, *shape, generator=g), **grid}
    elif SHAPES in takes:  # flat patches with each image's rows and columns and a patch mask (LFM2-VL's SigLIP 2)
        patch = vision.patch_size
        patch = int(patch[0] if isinstance(patch, (list, tuple)) else patch)
        factor = int(getattr(config, "downsample_factor", 1) or 1)  # its processor's grids: multiples of the merge
        count = int(getattr(vision, "num_patches", 0) or (size // patch) ** 2)  # the tower's patches per image
        side = max(math.isqrt(count) // factor * factor, factor)
        sample["pixel_values"] = torch.randn(images, side * side, channels * patch * patch, generator=g)
        sample["pixel_attention_mask"] = torch.ones(images, side * side, dtype=torch.long)
        sample[SHAPES] = torch.tensor([[side, side]] * images)
    elif patches.POSITION_IDS in takes:  # flat patches with their positions (Gemma 4)
        sample.update(patches.patch_sample(vision, images, g))
    elif "pixel_attention_mask" in takes:
        sample["pixel_values"] = torch.randn(images, 1, channels, size, size, generator=g)
        sample["pixel_attention_mask"] = torch.ones(images, 1, size, size, dtype=torch.bool)
    elif getattr(config, "image_grid_pinpoints", None):
        from transformers.models.llava_next.modeling_llava_next import image_size_to_num_patches

        tiles = image_size_to_num_patches((size, size), config.image_grid_pinpoints, size)
        sample["pixel_values"] = torch.randn(images, tiles, channels, size, size, generator=g)
        sample["image_sizes"] = torch.tensor([[size, size]] * images)
    else:
        sample["pixel_values"] = torch.randn(images, channels, size, size, generator=g)
        if getattr(vision, "model_type", "") == "pixtral":
            sample["image_sizes"] = torch.tensor([[size, size]] * images)
    if QFORMER_IDS in takes:  # InstructBLIP: the instruction, in the Q-Former's own vocabulary, beside each image
        vocab = int(getattr(getattr(config, "qformer_config", None), "vocab_size", 100) or 100)
        sample[QFORMER_IDS], sample[QFORMER_MASK] = torch.randint(1, vocab, (images, 6), generator=g), \
            torch.ones(images, 6, dtype=torch.long)
    return sample


def fixed_names(model: Any) -> tuple[str, ...]:
    """The image inputs whose values shape the tower's work, traced as constants: Qwen-VL's grid, the image size of
    LLaVA-NeXT's tiling (its tile count and unpadding follow the values), a NaFlex tower's rows and columns of
    patches per image."""
    takes = image_feature_inputs(model)
    return tuple(n for n in (GRID, "image_sizes", MERGES, SHAPES) if n in takes and (
        n != "image_sizes" or getattr(model.config, "image_grid_pinpoints", None)))


def features_of(model: Any, pixels: dict[str, torch.Tensor]) -> torch.Tensor:
    fixed = {k: v for k, v in pixels.items() if k in fixed_names(model)}
    with torch.no_grad():
        given = {k: v for k, v in pixels.items() if k not in fixed}
        out: torch.Tensor = ImageFeatures(model, fixed)(**given)["image_features"]
        return out


def parts(model: Any) -> dict[str, tuple[Any, dict[str, torch.Tensor], Any]]:
    """The vision and embedding parts: (module, sample, dynamic axes) each. A grid family's vision part takes any
    grid where its tower allows (:func:`.grid.grid_free_part`), a family whose images come with their sizes any
    size (:func:`.sized.sized_part`, :func:`.tiled.tiled_part`), with the one-size module as its
    ``fallback``."""
    from .grid import grid_free_part, position_columns

    token = image_token_of(model.config)
    assert token is not None
    pixels = pixel_sample(model)
    features = features_of(model, pixels)
    vocab = int(model.get_input_embeddings().num_embeddings)
    ids = prompt_sample(token, features.shape[0], 1, vocab)
    # three position sections only where the family counts them (EXAONE 4.5 and HyperCLOVAX-Vision-2 take flat
    # patches with a grid and number their text plainly)
    sections = takes_grid(model)
    embed = {"input_ids": ids, "image_features": features}
    axes = {"input_ids": {0: "batch", 1: "sequence"}, "image_features": {0: "image_tokens"}}
    if sections:  # the text positions the sections are counted from, and the image rows' position columns
        embed["text_position_ids"] = torch.arange(ids.shape[1]).expand(ids.shape).contiguous()
        embed[POSITIONS] = position_columns(model, token, pixels[GRID], [features.shape[0]])
        axes.update({"text_position_ids": {0: "batch", 1: "sequence"}, POSITIONS: {0: "image_tokens"}})
    from .sized import sized_part
    from .tiled import tiled_part

    free = grid_free_part(model, pixels, features, features_of) if GRID in pixels else \
        sized_part(model, pixels, features, features_of) or tiled_part(model, pixels, features, features_of)
    fixed = {k: pixels.pop(k) for k in fixed_names(model)}
    # one image per run (the families split and loop over images in Python: a trace fixes their count); the
    # runners run it per image and join the rows (InstructBLIP's instruction beside its image: any length)
    vision = (ImageFeatures(model, fixed), pixels, {**{n: {1: "qformer_sequence"} for n in (QFORMER_IDS, QFORMER_MASK)
                                                       if n in pixels}, **patches.patch_axes(pixels)} or False)
    if free is not None:
        free[0].fallback = vision
    return {"vision": free or vision, "embed": (MergedEmbedding(model, token, sections), embed, axes)}


def per_image(vision: Any, pixels: dict[str, Any], model: Any = None) -> list[Any]:
    """Each image's feature rows, the vision file run once per image (its inputs' first axis; a grid family's flat
    patches, each image's grid of them). A file taking its grid's tensors computes them with ``model``'s tower
    (:mod:`.grid`)."""
    import numpy as np

    from ...runtime.facts import grid_derived, sized_by, tiled
    from ...runtime.shapes import cast_feed

    inputs = vision.get_inputs()
    derived = grid_derived(vision)
    if derived:
        return _grid_features(vision, pixels, None, model, derived)
    if tiled(vision):  # one image's tiles at a time, packed by its size
        from .tiled import tiled_feeds

        return [vision.run(None, cast_feed(vision, feed))[0] for feed in tiled_feeds(vision, pixels, model)]
    if sized_by(vision):  # one image at a time, cropped to its size
        from .sized import cropped

        count, channels = np.shape(pixels["pixel_values"])[0], inputs[0].shape[1]
        if isinstance(channels, int) and np.shape(pixels["pixel_values"])[1:2] != (channels,):
            raise InvalidArgumentError(f"pixel_values has shape {list(np.shape(pixels['pixel_values']))}; this "
                                       f"model's vision encoder takes [images, {channels}, height, width]: give the "
                                       "processor's output.")
        return [vision.run(None, cast_feed(vision, {inputs[0].name: cropped(pixels, k)}))[0] for k in range(count)]
    fixed = fixed_inputs(vision)
    for name, want in fixed.items():
        if name not in pixels:
            raise InvalidArgumentError(f"The images come without {name}: pass the processor's whole output.")
        given = [list(map(int, row)) for row in np.asarray(pixels[name]).reshape(-1, len(want))]
        wrong = [row for row in given if row != want]
        if wrong:
            what = f"{want[1]}x{want[2]} patches" if name == GRID else f"a merge of {want[0]}" if name == MERGES \
                else f"{want[0]}x{want[1]} patches" if name == SHAPES else f"{want[0]}x{want[1]} pixels"
            raise InvalidArgumentError(
                f"{name} {wrong[0]}: this model's vision encoder was exported for images of {what} (the tower's "
                f"work follows {name}'s values): resize the pictures to that size before the processor (for Qwen-VL "
                "its size= or min_pixels=/max_pixels=; for LFM2-VL do_image_splitting=False and min_image_tokens= "
                "/max_image_tokens=), or export again from a sample at the size you use.")
    if GRID in fixed:
        return _grid_features(vision, pixels, fixed[GRID])
    from .tiled import images_as_rows

    pixels = images_as_rows(inputs, pixels)
    for i in inputs:
        shape = list(np.shape(pixels[i.name]))
        want = list(i.shape[1:])
        if len(shape) != len(want) + 1 or any(isinstance(w, int) and w != g for w, g in zip(want, shape[1:])):
            raise InvalidArgumentError(
                f"{i.name} has shape {shape}; this model's vision encoder takes [images, "
                f"{', '.join(map(str, want))}] (one image per row, {want[-1]}x{want[-2]} pixels for its tower, "
                f"{want[-3] if len(want) >= 3 else '-'} channels): give the processor's output, which resizes "
                "pictures to that.")
    count = int(np.asarray(pixels[inputs[0].name]).shape[0])
    return [vision.run(None, cast_feed(vision, {i.name: np.asarray(pixels[i.name])[k:k + 1] for i in inputs}))[0]
            for k in range(count)]


def _grid_features(vision: Any, pixels: dict[str, Any], grid: list[int] | None, model: Any = None,
                   derived: list[str] | tuple[str, ...] = ()) -> list[Any]:
    """A grid family's images, flat patches with their grids: each image's rows through the file, whose grid is
    fixed (``grid``) or whose ``derived`` inputs are computed from each image's grid by ``model``'s tower."""
    import numpy as np

    from ...runtime.shapes import cast_feed

    if GRID not in pixels:
        raise InvalidArgumentError(f"The images come without {GRID}: pass the processor's whole output.")
    if derived and model is None:
        raise InvalidArgumentError(
            f"This vision file takes {', '.join(derived)} computed from each image's grid by the model's own "
            "functions: run it through the export's result (onnx_nb.generate(result, ...)), which holds the model.")
    grids = np.asarray(pixels[GRID]).reshape(-1, 3).astype(np.int64)
    flat = np.asarray(pixels["pixel_values"])
    counts = [int(np.prod(g)) for g in grids] if grid is None else [int(np.prod(grid))] * len(grids)
    if sum(counts) != flat.shape[0]:
        raise InvalidArgumentError(
            f"pixel_values has {flat.shape[0]} rows of patches and {GRID} {grids.tolist()} counts {sum(counts)}: "
            "give the processor's output for these images (its pixel_values and its grid together).")
    name = vision.get_inputs()[0].name
    reads_grid = GRID in {i.name for i in vision.get_inputs()}  # the tower reads the image's grid too (GLM-4V)
    rows, start = [], 0
    for g, count in zip(grids, counts):
        feed = {name: flat[start:start + count], **({GRID: g[None]} if reads_grid else {})}
        if derived:  # computed once per grid
            from .grid import grid_feed, tower_of

            feed.update(grid_feed(tower_of(model), g, derived))
        rows.append(vision.run(None, cast_feed(vision, feed))[0])
        start += count
    return rows
