"""Vision-language families whose images come as flat patches with a grid (Qwen2-VL, Qwen3-VL, GLM-OCR, ...): a vision
file that takes any grid, and the three position sections their text is numbered in.

The tower's work follows the grid's values (its attention spans, its patch positions, the interpolation of its
position table), which a trace cannot follow. transformers computes those tensors from the grid outside the tower
(``transformers.exporters.utils.precompute_export_inputs``, the functions of ``transformers.vision_utils``) and the
tower takes them precomputed; its attention's loop over spans is traced as one reshape (transformers' export
patches), or as one masked attention where the spans differ in length (Qwen2.5-VL's windows), both lent around the
tower by :mod:`.patches.vision_towers`. The vision file takes those tensors as inputs beside the patches, so one
file runs every grid; the runners compute them per image from the grid with the model's own functions
(:func:`grid_inputs`), and the file's metadata names them (``onnx_nb.grid_derived``); a tower that reads the grid's
values itself (GLM-4V interpolates its position table by them) takes the grid too, and a projection that
``get_image_features`` applies after the tower (HyperCLOVAX-Vision-2) is in the file too. Where the tower does not
go this way (none of :data:`TOWERS`, a tower whose inputs transformers cannot precompute, other features than the
model's), the vision file is traced at one grid instead (:mod:`.vlm`).

The embed file numbers the positions: beside each image row of ``image_features`` it takes four columns
(``image_positions``, int64), the row's offsets past its image's start in the three sections less its place in the
image and, at an image's last row, how much further the text after it goes on than it would as text
(:func:`position_columns`, read from the model's own ``get_rope_index`` per grid). Only imported by functions that
already need torch.
"""

from __future__ import annotations

import inspect
import itertools
import weakref
from collections.abc import Callable
from typing import Any

import torch

from ...runtime.facts import GRID_DERIVED
from ...runtime.facts import IMAGE_GRID as GRID
from .prompts import VisionPart, gives

POSITION_COLUMNS = 4  # three sections' offsets and the text's shift, after each image row's features
# model -> grid -> its position table (read once per grid; forgotten with the model)
_TABLES: weakref.WeakKeyDictionary[Any, dict[tuple[int, ...], tuple[torch.Tensor, int]]] = weakref.WeakKeyDictionary()
# tower -> grid -> the tensors it takes precomputed, as numpy (what the runners feed; images repeat their grids)
_FEEDS: weakref.WeakKeyDictionary[Any, dict[tuple[int, ...], dict[str, Any]]] = weakref.WeakKeyDictionary()


TOWERS = ("visual", "vision_model", "vision_tower")  # where get_image_features finds its tower, in this order


def merge_of(vision: Any) -> int:
    """How many patches a side a grid family's tower merges into one row: ``spatial_merge_size`` (Qwen-VL),
    ``merge_size`` (MUSE Glimmer), ``merge_kernel_size`` (Kimi-K2.5's, per axis)."""
    for name in ("spatial_merge_size", "merge_size", "merge_kernel_size"):
        found = getattr(vision, name, None)
        found = found[0] if isinstance(found, (list, tuple)) and found else found
        if isinstance(found, int):
            return found
    return 1


def tower_of(model: Any) -> Any:
    """The vision tower ``get_image_features`` runs (``model.model.visual``; HyperCLOVAX-Vision-2's
    ``vision_model``), or None."""
    inner = getattr(model, "model", model)
    return next((getattr(inner, n) for n in TOWERS if isinstance(getattr(inner, n, None), torch.nn.Module)), None)


def projector_of(model: Any) -> Any:
    """A projection ``get_image_features`` applies to the tower's output (HyperCLOVAX-Vision-2's ``projector``), or
    None; whether it does is the screen's to find (:func:`grid_free_part`)."""
    found = getattr(getattr(model, "model", model), "projector", None)
    return found if isinstance(found, torch.nn.Module) else None


def grid_inputs(tower: Any, grid: Any) -> dict[str, torch.Tensor]:
    """What the tower takes precomputed for one image of ``grid`` (``[t, h, w]``): its attention spans, its patches'
    positions, its position table's interpolation, as transformers computes them for an export."""
    from transformers.exporters.utils import precompute_export_inputs

    given: dict[str, Any] = {"grid_thw": torch.as_tensor(grid, dtype=torch.long).reshape(1, 3)}
    precompute_export_inputs(tower, given)
    return {k: v for k, v in given.items() if torch.is_tensor(v) and k != "grid_thw"}


def grid_feed(tower: Any, grid: Any, names: Any) -> dict[str, Any]:
    """:func:`grid_inputs` named ``names`` as numpy arrays, computed once per tower and grid."""
    known = _FEEDS.setdefault(tower, {})
    key = tuple(int(x) for x in grid)
    if key not in known:
        known[key] = {k: v.numpy() for k, v in grid_inputs(tower, key).items()}
    return {n: known[key][n] for n in names}


class GridFreeFeatures(VisionPart):
    """``forward(pixel_values, <the tower's precomputed inputs>) -> image_features``: one image's patches, of any
    grid, through the tower and projector (rows as :class:`.vlm.ImageFeatures` gives them, deepstack features after).
    ``other_sample()`` is the same image kind at another grid, the export's check (its tensors must agree with each
    other, which growing each axis alone would not give)."""

    def __init__(self, model: Any, names: list[str], grid: torch.Tensor, width: int, reads_grid: bool = False,
                 projector: Any = None) -> None:
        super().__init__(model)
        self.projector = projector  # applied to the tower's pooled rows, where get_image_features does
        self.reads_grid = reads_grid
        self.tower = tower_of(model)
        self.names = list(names)
        self.grid = grid
        self.width = width  # a patch row's values (channels x temporal x patch x patch)
        self.onnx_metadata = {GRID_DERIVED: ",".join(self.names)}
        self.related_axes = True  # patches four to a merged row, windows by the grid: torch.export relates them

    def forward(self, pixel_values: torch.Tensor, cu_seqlens: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, interp_indices: torch.Tensor | None = None,
                interp_weights: torch.Tensor | None = None, window_index: torch.Tensor | None = None,
                cu_window_seqlens: torch.Tensor | None = None,
                image_grid_thw: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        from .prompts import image_rows

        given = {"cu_seqlens": cu_seqlens, "position_ids": position_ids, "interp_indices": interp_indices,
                 "interp_weights": interp_weights, "window_index": window_index,
                 "cu_window_seqlens": cu_window_seqlens}
        from ...steps.export.patches.vision_towers import traceable_spans

        with traceable_spans(self.tower, windows=window_index is not None):
            out = self.tower(pixel_values, grid_thw=image_grid_thw,
                             **{k: v for k, v in given.items() if v is not None})
        if self.projector is not None:
            out.pooler_output = self.projector(out.pooler_output)
        return {"image_features": image_rows(out)}

    def other_grid(self) -> torch.Tensor:
        """The sample's grid a merge taller and a merge narrower (another count and another shape of patches)."""
        merge = max(merge_of(self.tower), merge_of(getattr(self.tower, "config", None)))
        t, h, w = (int(x) for x in self.grid.reshape(-1)[:3])
        return torch.tensor([t, h + merge, max(w - merge, merge)])

    def sample_at(self, grid: torch.Tensor, seed: int) -> dict[str, torch.Tensor]:
        """Random patches of one image of ``grid`` and the tensors it gives (the grid too, where the tower reads
        its values: GLM-4V interpolates its position table by the image's size)."""
        g = torch.Generator().manual_seed(seed)
        return {"pixel_values": torch.randn(int(grid.prod()), self.width, generator=g), **grid_inputs(self.tower, grid),
                **({GRID: grid.reshape(1, 3)} if self.reads_grid else {})}

    def other_sample(self) -> dict[str, torch.Tensor]:
        return self.sample_at(self.other_grid(), seed=1)

    def model_pixels(self, other: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"pixel_values": other["pixel_values"], GRID: self.other_grid()[None]}


SUPPORTED = tuple(p for p in inspect.signature(GridFreeFeatures.forward).parameters if p not in ("self",))


def grid_free_part(model: Any, pixels: dict[str, torch.Tensor], features: torch.Tensor,
                   reference: Callable[[Any, dict[str, torch.Tensor]], torch.Tensor]) -> tuple[Any, Any, Any] | None:
    """The vision part of a grid family as one file for every grid (module, sample, axes), or None where the tower
    does not take its grid's tensors precomputed, takes some this module does not pass, or gives other features with
    them than the model's own (``features`` at the sample's grid, ``reference(model, pixels)`` at another)."""
    tower = tower_of(model)
    grid = pixels.get(GRID)
    if tower is None or grid is None or grid.shape[0] != 1:
        return None
    try:
        pre = grid_inputs(tower, grid[0])
    except Exception:  # noqa: BLE001 - transformers cannot precompute this tower's inputs: traced at one grid
        return None
    if not pre or set(pre) - set(SUPPORTED):
        return None
    # the grid itself as an input only where the tower reads it; the projection only where the features need it
    projectors = [None] if projector_of(model) is None else [None, projector_of(model)]
    for projector, reads_grid in itertools.product(projectors, (False, True)):
        module = GridFreeFeatures(model, list(pre), grid[0], int(pixels["pixel_values"].shape[-1]), reads_grid,
                                  projector)
        sample = {"pixel_values": pixels["pixel_values"], **pre, **({GRID: grid[:1]} if reads_grid else {})}
        if gives(module, sample, features, reference):
            break
    else:
        return None
    rows = sample["pixel_values"].shape[0]  # one image's spans ([0, rows]) and grid are fixed; the rest grows
    axes = {n: {0: "patches" if v.shape[0] == rows else f"{n}_length"} for n, v in sample.items()
            if n not in ("cu_seqlens", GRID)}
    return module, sample, axes


def position_columns(model: Any, image_token: int, grids: Any, rows: list[int]) -> torch.Tensor:
    """The four columns each image row has beside it for the embed file (``[sum(rows), 4]``, int64): its three
    sections' offsets past its image's start less its place ``k`` in the image, and at an image's last row the
    text's extra advance (how much further than ``rows`` the text after it goes on);
    :class:`.vlm.MergedEmbedding` turns them into positions from the text positions."""
    out = []
    for grid, count in zip(grids, rows):
        known = _TABLES.setdefault(model, {})
        key = tuple(int(x) for x in grid)
        if key not in known:
            known[key] = position_table(model, image_token, torch.as_tensor(grid).reshape(1, 3), count)
        table, advance = known[key]
        k = torch.arange(count)
        extra = torch.zeros(count, dtype=torch.long)
        extra[-1] = advance - count
        out.append(torch.cat([(table - k).T, extra[:, None]], 1))
    return torch.cat(out, 0) if out else torch.zeros(0, POSITION_COLUMNS, dtype=torch.long)


def position_table(model: Any, image_token: int, grid: torch.Tensor, rows: int) -> tuple[torch.Tensor, int]:
    """How the family numbers one image's ``rows`` tokens in its three position sections: each token's offsets
    ``[3, rows]`` past the image's start, and how far the text after it goes on from there. Read from the model's
    own ``get_rope_index``, twice, the image one token later the second time (offsets that move are refused:
    HunYuan-VL's); where it cannot say, the tokens step over the merged grid (Qwen2-VL's rule)."""
    from ...errors import ExportError
    from .prompts import prompt_sample

    merge = merge_of(model.config.vision_config)
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
    from .prompts import prompt_extras

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
