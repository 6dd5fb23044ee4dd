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
from typing import Any

import torch

from ...errors import InvalidArgumentError
from ...runtime.facts import FIXED_INPUT, fixed_inputs
from ...runtime.facts import IMAGE_GRID as GRID
from ...runtime.shapes import SAMPLE_SIZES

PARTS = ("vision", "embed", "decoder")
IMAGE_TOKEN_KEYS = ("image_token_id", "image_token_index")


def image_token_of(config: Any) -> int | None:
    for key in IMAGE_TOKEN_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int):
            return value
    return None


def takes_token_types(model: Any) -> bool:
    """The forward reads ``token_type_ids`` (Gemma 3, PaliGemma: an image's tokens see each other both ways)."""
    return "token_type_ids" in inspect.signature(model.forward).parameters


def takes_grid(model: Any) -> bool:
    """The family's images come as flat patches with their grid (Qwen2-VL, Qwen2.5-VL), its positions in three
    sections (temporal, height, width: multimodal rotary positions)."""
    return GRID in inspect.signature(model.get_image_features).parameters and callable(
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


def types_rule(model: Any) -> str | None:
    """What the family's processor gives as ``token_type_ids`` for a prompt: ``"image"`` (Gemma 3: 1 at an image's
    tokens, which attend each other both ways), ``"prefix"`` (PaliGemma: 0 over the whole prompt, image and text,
    which attends both ways; 1 marks a suffix), None where the forward reads none. Read from the forward itself."""
    if not takes_token_types(model):
        return None
    for cls in (type(getattr(model, "model", model)), type(model)):
        try:
            if "token_type_ids == 0" in inspect.getsource(cls.forward):
                return "prefix"
        except (OSError, TypeError):
            continue
    return "image"


def prompt_extras(model: Any, ids: torch.Tensor, image_token: int) -> dict[str, torch.Tensor]:
    """What the family's processor gives beside a prompt's ids and mask: ``token_type_ids`` by the family's
    :func:`types_rule`, ``mm_token_type_ids`` (1 at an image token) where the forward reads them (Qwen-VL)."""
    rule = types_rule(model)
    out = {}
    if rule is not None:
        out["token_type_ids"] = torch.zeros_like(ids) if rule == "prefix" else (ids == image_token).long()
    if "mm_token_type_ids" in inspect.signature(model.forward).parameters:
        out["mm_token_type_ids"] = (ids == image_token).int()
    return out


class ImageFeatures(torch.nn.Module):
    """``forward(pixel_values, [pixel_attention_mask], [image_sizes]) -> image_features``: the vision tower and
    projector, one row per image token (every image's rows one after another, as the model concatenates them).
    Qwen3-VL's deepstack features ride in the same rows, after the features (``[rows, embeds * (1 + layers)]``),
    so every runner passes one array; the embed file splits them."""

    def __init__(self, model: Any, fixed: dict[str, torch.Tensor] | None = None) -> None:
        super().__init__()
        self.model = model
        # inputs whose values shape the tower's work (Qwen-VL's grid, LLaVA-NeXT's image size): constants of the
        # trace, recorded in the file's metadata so that runners refuse other values
        self.fixed = dict(fixed or {})
        self.onnx_metadata = {FIXED_INPUT + k: ",".join(str(int(x)) for x in v[0].reshape(-1))
                              for k, v in self.fixed.items()}

    def forward(self, pixel_values: torch.Tensor, pixel_attention_mask: torch.Tensor | None = None,
                image_sizes: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        # a fixed image size as Python ints: LLaVA-NeXT computes its tiles and unpadding from them
        fixed = {k: v.tolist() if k == "image_sizes" else v for k, v in self.fixed.items()}
        given = {"pixel_attention_mask": pixel_attention_mask, "image_sizes": image_sizes, **fixed}
        out = self.model.get_image_features(pixel_values=pixel_values,
                                            **{k: v for k, v in given.items() if v is not None}, return_dict=True)
        pooled = out.pooler_output if hasattr(out, "pooler_output") else out
        rows = [_rows(pooled)] + [_rows(d) for d in (getattr(out, "deepstack_features", None) or [])]
        return {"image_features": torch.cat(rows, -1)}


def _rows(features: Any) -> torch.Tensor:
    """Per-image features (a tensor, or a list of one per image) as one ``[rows, width]`` tensor."""
    if isinstance(features, (list, tuple)):
        features = torch.cat([f.reshape(-1, f.shape[-1]) for f in features], 0)
    return features.reshape(-1, features.shape[-1])


class MergedEmbedding(torch.nn.Module):
    """``forward(input_ids, image_features) -> inputs_embeds [, token_type_ids]``: the token embeddings with the
    k-th image token's row taken from the k-th feature row (row-major over the batch, as ``masked_scatter`` fills).
    A graph of gathers: with no features (a decode step, a prompt without images) every token is embedded as text,
    as the model does without pixels; an image token past the last feature reuses it, and callers check the counts
    first (:func:`check_counts`). Where the decoder reads token types, they come out too, by the family's
    :func:`types_rule`, so no runner needs to know it."""

    def __init__(self, model: Any, image_token: int, grid: torch.Tensor | None = None, rows: int = 0) -> None:
        super().__init__()
        self.embed = model.get_input_embeddings()
        self.image_token = image_token
        self.types = types_rule(model)
        self.deepstack = deepstack_layers(model)
        self.table: torch.Tensor | None = None  # none: the family numbers its positions as text
        self.advance = 0
        if grid is not None:  # an image's positions past its start, and how far the text after it goes on
            self.table, self.advance = position_table(model, image_token, grid, rows)

    def forward(self, input_ids: torch.Tensor, image_features: torch.Tensor,
                text_position_ids: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        any_features = image_features.new_ones(image_features.shape[0]).sum() > 0
        is_image = (input_ids == self.image_token) & any_features
        # an image token id may lie outside the text vocabulary (its row is replaced anyway)
        embeds = self.embed(torch.where(is_image, torch.zeros_like(input_ids), input_ids))
        flat = is_image.reshape(-1).long()
        index = torch.clamp(torch.cumsum(flat, 0) * flat, max=image_features.shape[0])
        table = torch.cat([image_features.new_zeros(1, image_features.shape[-1]), image_features], 0)
        picked = table.index_select(0, index).reshape(*embeds.shape[:2], -1).to(embeds.dtype)
        width = embeds.shape[-1]
        out = {"inputs_embeds": torch.where(is_image.unsqueeze(-1), picked[..., :width], embeds)}
        if self.deepstack:  # each layer's addition at the image tokens, zeros elsewhere
            deep = torch.where(is_image.unsqueeze(-1), picked[..., width:], torch.zeros_like(picked[..., width:]))
            out["deepstack_embeds"] = deep.reshape(*embeds.shape[:2], self.deepstack, width).permute(2, 0, 1, 3)
        if self.types is not None:
            out["token_type_ids"] = torch.zeros_like(input_ids) if self.types == "prefix" else is_image.long()
        if self.table is not None and text_position_ids is not None:
            out["position_ids"] = self.positions(is_image.long(), text_position_ids)
        return out

    def positions(self, is_image: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        """Qwen-VL's three position sections ``[3, batch, sequence]`` from each token's text position (its count
        of tokens before it, as the runner counts them): an image's tokens start where its first would be, the
        k-th at that start plus the table's k-th offsets (temporal, height, width); after an image the text goes on
        from that start plus the advance, as the model's ``get_rope_index`` numbered them (:func:`position_table`)."""
        assert self.table is not None
        per_image = self.table.shape[1]
        before = torch.cumsum(is_image, 1) - is_image  # image tokens before each token in its row
        images = torch.div(before, per_image, rounding_mode="floor")
        k = (before - images * per_image) * is_image  # an image token's place in its image
        start = text - before + images * self.advance
        return start.unsqueeze(0) + self.table[:, k] * is_image.unsqueeze(0)


def position_table(model: Any, image_token: int, grid: torch.Tensor, rows: int) -> tuple[torch.Tensor, int]:
    """How the family numbers one image's ``rows`` tokens in its three position sections: each token's offsets
    ``[3, rows]`` past the image's start, and how far the text after it goes on from there. Read from the model's
    own ``get_rope_index``, twice, the image one token later the second time (offsets that move are refused:
    HunYuan-VL's); where it cannot say, the tokens step over the merged grid (Qwen2-VL's rule)."""
    from ...errors import ExportError

    merge = int(getattr(model.config.vision_config, "spatial_merge_size", 1) or 1)
    height, width = int(grid[0, 1]) // merge, int(grid[0, 2]) // merge
    k = torch.arange(rows)
    rule = (torch.stack([torch.zeros_like(k), torch.div(k, max(width, 1), rounding_mode="floor"),
                         k % max(width, 1)], 0), max(height, width))
    ids = prompt_sample(image_token, rows, 1, int(model.get_input_embeddings().num_embeddings))
    found = [_numbered(model, prompt, grid, image_token, rows) for prompt in (ids, torch.cat([ids[:, :1], ids], 1))]
    if found[0] is None or found[1] is None:
        return rule
    if not torch.equal(found[0][0], found[1][0]) or found[0][1] != found[1][1]:
        raise ExportError(
            f"{type(model).__name__} numbers an image's tokens in its position sections from a fixed origin (its "
            "get_rope_index gives other offsets when the image starts one token later), which onnx-nb's embed file "
            "cannot follow: not supported for now; the families the vision-language route serves are listed in "
            "docs/supported-architectures.md.")
    return found[0]


def _numbered(model: Any, ids: torch.Tensor, grid: torch.Tensor, image_token: int,
              rows: int) -> tuple[torch.Tensor, int] | None:
    """The image's offsets past its start and the text's advance in ``ids`` (one prompt holding one image), by the
    model's own ``get_rope_index``; None where it wants more than a prompt or gives other than three sections."""
    owner = getattr(model, "model", model)
    given = {"input_ids": ids, "attention_mask": torch.ones_like(ids), GRID: grid[:1],
             "mm_token_type_ids": (ids == image_token).int(), **prompt_extras(model, ids, image_token)}
    try:
        takes = inspect.signature(owner.get_rope_index).parameters
        with torch.no_grad():
            found = owner.get_rope_index(**{k: v for k, v in given.items() if k in takes})
    except Exception:  # noqa: BLE001 - a get_rope_index that wants more than a prompt: the grid's rule instead
        return None
    found = found[0] if isinstance(found, (tuple, list)) else found
    if not isinstance(found, torch.Tensor) or found.ndim != 3 or found.shape[0] != 3:
        return None  # before any indexing: other sections fall back to the grid's rule
    first = int((ids[0] == image_token).nonzero()[0, 0])
    start = int(found[0, 0, first - 1]) + 1
    advance = int(found[0, 0, first + rows]) - start
    return ((found[:, 0, first:first + rows] - start).long(), advance) if advance > 0 else None


def pixel_sample(model: Any, images: int = 1, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random pixels of the vision tower's size in the layout the family's ``get_image_features`` takes: flat
    patches with their grid (Qwen-VL), tiles and their sizes (LLaVA-NeXT's grid), an image per prompt with its patch
    mask (Idefics 3, SmolVLM), the image's size beside it (Pixtral's towers), else one ``[images, 3, size, size]``
    tensor."""
    config = model.config
    vision = config.vision_config
    size = getattr(vision, "image_size", SAMPLE_SIZES["image_side"])
    size = int(size[0] if isinstance(size, (list, tuple)) else size)
    channels = int(getattr(vision, "num_channels", 3) or 3)
    g = torch.Generator().manual_seed(seed)
    takes = inspect.signature(model.get_image_features).parameters
    sample: dict[str, torch.Tensor] = {}
    if GRID in takes:  # flat patches, channels x temporal x patch x patch each, in rows of the merge
        patch, merge = int(vision.patch_size), int(vision.spatial_merge_size)
        temporal = int(getattr(vision, "temporal_patch_size", 1) or 1)
        side = max(size // (patch * merge), 1) * merge
        sample["pixel_values"] = torch.randn(images * side * side, channels * temporal * patch * patch, generator=g)
        sample[GRID] = torch.tensor([[1, side, side]] * images)
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
    return sample


def fixed_names(model: Any) -> tuple[str, ...]:
    """The image inputs whose values shape the tower's work, traced as constants: Qwen-VL's grid, the image size of
    LLaVA-NeXT's tiling (its tile count and unpadding follow the values)."""
    takes = inspect.signature(model.get_image_features).parameters
    return tuple(n for n in (GRID, "image_sizes") if n in takes and (
        n == GRID or getattr(model.config, "image_grid_pinpoints", None)))


def features_of(model: Any, pixels: dict[str, torch.Tensor]) -> torch.Tensor:
    fixed = {k: v for k, v in pixels.items() if k in fixed_names(model)}
    with torch.no_grad():
        return ImageFeatures(model, fixed)(**{k: v for k, v in pixels.items() if k not in fixed})["image_features"]


def prompt_sample(image_token: int, features: int, images: int, vocab: int, seed: int = 0) -> torch.Tensor:
    """A batch of one prompt per image: two text tokens, the image's tokens, three text tokens."""
    g = torch.Generator().manual_seed(seed)
    each = features // images
    rows = []
    for _ in range(images):
        text = torch.randint(3, max(min(vocab, image_token), 4), (5,), generator=g).tolist()
        rows.append(text[:2] + [image_token] * each + text[2:])
    return torch.tensor(rows)


def check_counts(input_ids: Any, image_token: int, features: int) -> None:
    """A prompt's image tokens against the images' feature rows: refused, saying both counts, when they differ."""
    import numpy as np

    tokens = int((np.asarray(input_ids) == image_token).sum())
    if tokens != features:
        raise InvalidArgumentError(
            f"The prompts hold {tokens} image tokens (id {image_token}) and the images give {features} feature rows: "
            "they must match. Make the prompts with the model's processor (processor(text=..., images=...) expands "
            "each image placeholder to the family's count), or put that many image tokens in the token ids.")


def parts(model: Any) -> dict[str, tuple[Any, dict[str, torch.Tensor], Any]]:
    """The vision and embedding parts: (module, sample, dynamic axes) each."""
    token = image_token_of(model.config)
    assert token is not None
    pixels = pixel_sample(model)
    features = features_of(model, pixels)
    vocab = int(model.get_input_embeddings().num_embeddings)
    ids = prompt_sample(token, features.shape[0], 1, vocab)
    fixed = {k: pixels.pop(k) for k in fixed_names(model)}
    # the grid numbers the prompt's positions only where the family counts them in three sections (EXAONE 4.5 and
    # HyperCLOVAX-Vision-2 take flat patches with a grid and number their text plainly)
    grid = fixed.get(GRID) if takes_grid(model) else None
    embed = {"input_ids": ids, "image_features": features}
    axes = {"input_ids": {0: "batch", 1: "sequence"}, "image_features": {0: "image_tokens"}}
    if grid is not None:  # the text positions the three sections are counted from
        embed["text_position_ids"] = torch.arange(ids.shape[1]).expand(ids.shape).contiguous()
        axes["text_position_ids"] = {0: "batch", 1: "sequence"}
    return {
        # one image per run (the families split and loop over images in Python: a trace fixes their count); the
        # runners run it per image and join the rows
        "vision": (ImageFeatures(model, fixed), pixels, False),
        "embed": (MergedEmbedding(model, token, grid, features.shape[0]), embed, axes),
    }


def image_features(vision: Any, pixels: dict[str, Any]) -> Any:
    """The feature rows of every image, the vision file run once per image (its inputs' first axis)."""
    import numpy as np

    from ...runtime.shapes import cast_feed

    inputs = vision.get_inputs()
    fixed = fixed_inputs(vision)
    for name, want in fixed.items():
        if name not in pixels:
            raise InvalidArgumentError(f"The images come without {name}: pass the processor's whole output.")
        given = [list(map(int, row)) for row in np.asarray(pixels[name]).reshape(-1, len(want))]
        wrong = [row for row in given if row != want]
        if wrong:
            what = f"{want[1]}x{want[2]} patches" if name == GRID else f"{want[0]}x{want[1]} pixels"
            raise InvalidArgumentError(
                f"{name} {wrong[0]}: this model's vision encoder was exported for images of {what} (the tower's "
                f"work follows {name}'s values): resize the pictures to that size before the processor (for Qwen-VL "
                "its size= or min_pixels=/max_pixels=), or export again from a sample at the size you use.")
    if GRID in fixed:
        return _grid_features(vision, pixels, fixed[GRID])
    for i in inputs:
        shape = list(np.shape(pixels[i.name]))
        want = list(i.shape[1:])
        if shape[1:] != want:
            raise InvalidArgumentError(
                f"{i.name} has shape {shape}; this model's vision encoder takes [images, "
                f"{', '.join(map(str, want))}] (one image per row, {want[-1]}x{want[-2]} pixels for its tower, "
                f"{want[-3] if len(want) >= 3 else '-'} channels): give the processor's output, which resizes "
                "pictures to that.")
    count = int(np.asarray(pixels[inputs[0].name]).shape[0])
    rows = [vision.run(None, cast_feed(vision, {i.name: np.asarray(pixels[i.name])[k:k + 1] for i in inputs}))[0]
            for k in range(count)]
    return np.concatenate(rows, 0)


def _grid_features(vision: Any, pixels: dict[str, Any], grid: list[int]) -> Any:
    """Qwen-VL's images, flat patches with their grids: each image's rows through the file, whose grid is fixed."""
    import numpy as np

    from ...runtime.shapes import cast_feed

    grids = np.asarray(pixels[GRID]).reshape(-1, 3)
    flat = np.asarray(pixels["pixel_values"])
    each = int(np.prod(grid))
    name = vision.get_inputs()[0].name
    return np.concatenate([vision.run(None, cast_feed(vision, {name: flat[k * each:(k + 1) * each]}))[0]
                           for k in range(len(grids))], 0)


def chain_logits(folder: Any, pixels: dict[str, Any], ids: Any, image_token: int) -> Any:
    """The prompt's logits through the three files in ONNX Runtime (vision, embed, the decoder's prefill with an
    empty cache): what the export's check compares with the model's own forward."""
    import numpy as np

    from ...runtime.facts import is_cache
    from ...runtime.sessions import session
    from ..generate.genai import empty_shape

    vision, embed, decoder = (session(folder / f"{part}.onnx") for part in PARTS)
    features = image_features(vision, pixels)
    check_counts(ids, image_token, int(features.shape[0]))
    wanted = {i.name for i in decoder.get_inputs()}
    batch, width = ids.shape
    positions = np.tile(np.arange(width, dtype=np.int64), (batch, 1))
    feed = {"position_ids": positions, **token_feed(embed, ids, features, positions),
            "attention_mask": np.ones((batch, width), np.int64)}
    for i in decoder.get_inputs():
        if is_cache(i.name):  # empty: key/value [batch, heads, 0, size], a sparse layer's indexer [batch, 0, size]
            feed[i.name] = np.zeros((batch, *empty_shape(folder / "decoder.onnx", i.shape)), np.float32)
    return decoder.run(["logits"], {k: v for k, v in feed.items() if k in wanted})[0]


def token_feed(embed: Any, ids: Any, features: Any, positions: Any) -> dict[str, Any]:
    """What the decoder file takes for ``ids``: their embeddings from the embed file (``features`` merged at the
    image tokens; none: every token is text), their ``token_type_ids`` where the decoder reads them, and their
    three position sections from their text ``positions`` (Qwen-VL)."""
    import numpy as np

    given = {"input_ids": ids.astype(np.int64), "image_features": features, "text_position_ids": positions}
    out = embed.run(None, {i.name: given[i.name] for i in embed.get_inputs()})
    return {o.name: value for o, value in zip(embed.get_outputs(), out)}
