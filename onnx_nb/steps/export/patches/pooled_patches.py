"""A vision tower that pools its patches by their positions into ``k x k`` kernels (Gemma 4's: patches in a row with
their (x, y) positions, padding at (-1, -1), an image's count of soft tokens following its size), as a trace can
follow it for any count of patches.

The model's pooler reads ``k`` back from the lengths (``int(sqrt(patches // soft_tokens))``), branches on them and
builds a one-hot table as wide as the soft tokens; ``get_image_features`` reads ``k`` the same way and splits the
pooled rows per image with ``.tolist()``. torch.export turns each into a guard on the count of patches, which it
cannot prove for every count, and specializes the file to the sample's count: an image of another size is refused.
Within :func:`any_patch_count` the pooler sums each patch into its kernel with ``scatter_add`` (the same average:
every patch's states over ``k * k``, a kernel that no patch reaches dropped, as the model's mask drops it), ``k``
read from the tower's config, and ``get_image_features`` returns the tower's pooled rows as one group (the rows the
split made, in their order: the vision-language export joins them anyway).

Recognised by what the modules hold: a pooler with ``_avg_pool_by_positions`` inside a tower whose config has an
int ``pooling_kernel_size``; a model whose ``get_image_features`` calls that tower (``vision_tower``) and its
``embed_vision`` projection.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from .contract import Patch
from .lending import lent


def _pooled(kernel: int) -> Any:
    """The pooler's forward for kernels of ``kernel x kernel`` patches."""
    import torch

    def forward(self: Any, hidden_states: Any, pixel_position_ids: Any, padding_positions: Any,
                output_length: Any = None) -> Any:
        hidden_states = hidden_states.masked_fill(padding_positions.unsqueeze(-1), 0.0)
        places = torch.div(pixel_position_ids.clamp(min=0), kernel, rounding_mode="floor")
        width = pixel_position_ids[..., 0].clamp(min=0).max(dim=-1, keepdim=True)[0] + 1
        index = places[..., 0] + torch.div(width, kernel, rounding_mode="floor") * places[..., 1]
        batch, _, size = hidden_states.shape
        pooled = hidden_states.new_zeros(batch, output_length, size, dtype=torch.float32).scatter_add(
            1, index[..., None].expand(-1, -1, size), hidden_states.float() / (kernel * kernel))
        reached = index.new_zeros(batch, output_length).scatter_add(1, index, torch.ones_like(index)) > 0
        return pooled.to(hidden_states.dtype).float() * self.root_hidden_size, reached

    return forward


def _features(self: Any, pixel_values: Any, image_position_ids: Any = None, **kwargs: Any) -> Any:
    """``get_image_features`` without the per-image split: the tower's rows, projected, as one group."""
    out = self.vision_tower(pixel_values=pixel_values, pixel_position_ids=image_position_ids, **kwargs)
    out.pooler_output = (self.embed_vision(inputs_embeds=out.last_hidden_state),)
    return out


def _kernel(module: Any) -> int | None:
    size = getattr(getattr(module, "config", None), "pooling_kernel_size", None)
    pooler = getattr(module, "pooler", None)
    return size if isinstance(size, int) and callable(getattr(pooler, "_avg_pool_by_positions", None)) else None


@contextlib.contextmanager
def any_patch_count(model: Any) -> Iterator[list[str]]:
    """Within: every such tower's pooler pools by ``scatter_add`` and every model calling one returns its rows
    unsplit; yields their names."""
    modules = list(model.named_modules()) if hasattr(model, "named_modules") else []
    towers = [(name, m, k) for name, m in modules if (k := _kernel(m))]
    callers = [(name or type(m).__name__, m) for name, m in modules
               if callable(getattr(m, "get_image_features", None)) and _kernel(getattr(m, "vision_tower", None))
               and hasattr(m, "embed_vision")]
    loans = [(m.pooler, "forward", _pooled(k).__get__(m.pooler)) for _, m, k in towers]
    loans += [(m, "get_image_features", _features.__get__(m)) for _, m in callers]
    with lent(loans):
        yield [f"{name}.pooler" for name, _, _ in towers] + [name for name, _ in callers]


PATCH = Patch(
    name="pooled_patches",
    applies_to="vision towers pooling their patches by position (a pooler with _avg_pool_by_positions, the config's "
               "pooling_kernel_size) and the get_image_features calling them (vision_tower, embed_vision)",
    replaces="the pooler's one-hot table and its kernel size read back from the lengths, and the per-image split "
             "of the pooled rows by .tolist()",
    why="torch.export guards on the count of patches at each and specializes the file to the sample's count, so an "
        "image of another size is refused",
    during=any_patch_count)
