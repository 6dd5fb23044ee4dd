"""An image embedding that picks its patches in Python (ViLT's ``visual_embed``): each image's position table
interpolated to its own valid size in a loop over the batch, the valid patches found with ``nonzero`` and drawn in a
random order (``torch.multinomial``), the shorter rows padded with masked patches drawn at random.

torch.export stopped at the draw ("Could not guard on data-dependent expression"), and TorchScript's file did not
build. Where the model keeps every valid patch (``max_image_length`` below 0, its config's default), the draw only
orders them: the patches carry their positions in their embeddings, and the masked ones weigh nothing in attention,
so the pooled output and the text tokens do not depend on that order. Within :func:`every_patch` each image's
position table is sampled at its own size by ``grid_sample`` (bilinear with aligned corners, the model's
interpolation), its valid patches come first in raster order and its masked ones after, and every patch of the grid
is kept: the image tokens' count is the grid's (the model's own where no image is padded, which is the processor's
output for one image or images of one size). The image tokens' own states come in that order, not in the model's
random one. A model that samples a subset (``max_image_length`` of 0 or more) keeps its own ``visual_embed``: no
file can give its random answer.

Recognised by what the module holds: ``visual_embed``, ``patch_embeddings.projection``, ``position_embeddings``,
``cls_token`` and a config with ``image_size``, ``patch_size`` and ``max_image_length``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from .contract import Patch


def every_patch(self: Any, pixel_values: Any, pixel_mask: Any, max_image_length: Any = 200) -> Any:
    """``visual_embed`` keeping every patch: valid ones first in raster order, masked ones after. The model's own
    return: embeddings with the class token first, their mask, and each patch's (row, column) with the grid's size.
    A call that asks for a subset (``max_image_length`` of 0 or more, the method's own default) gets the model's
    own draw."""
    import torch
    from torch import nn

    if isinstance(max_image_length, int) and max_image_length >= 0:
        return type(self).visual_embed(self, pixel_values, pixel_mask, max_image_length)

    x = self.patch_embeddings(pixel_values)
    batch, channels, height, width = x.shape
    mask = nn.functional.interpolate(pixel_mask[:, None, :, :].float(), size=(height, width)).long()[:, 0]
    valid_h, valid_w = mask.sum(dim=1)[:, 0], mask.sum(dim=2)[:, 0]  # the model's: the first column's, first row's
    side = self.config.image_size // self.config.patch_size
    table = self.position_embeddings[:, 1:, :].transpose(1, 2).reshape(1, channels, side, side)
    rows = torch.arange(height, device=x.device, dtype=table.dtype)
    cols = torch.arange(width, device=x.device, dtype=table.dtype)
    # bilinear with aligned corners to each image's (h, w): row i of h reads the table at i * (side - 1) / (h - 1)
    ys = rows[None, :] * 2 / (valid_h[:, None] - 1).clamp(min=1).to(table.dtype) - 1
    xs = cols[None, :] * 2 / (valid_w[:, None] - 1).clamp(min=1).to(table.dtype) - 1
    grid = torch.stack([xs[:, None, :].expand(batch, height, width), ys[:, :, None].expand(batch, height, width)], -1)
    positions = nn.functional.grid_sample(table.expand(batch, -1, -1, -1), grid, mode="bilinear",
                                          padding_mode="zeros", align_corners=True)
    inside = (rows[None, :, None] < valid_h[:, None, None]) & (cols[None, None, :] < valid_w[:, None, None])
    positions = positions * inside[:, None].to(positions.dtype)  # the model pads each image's table with zeros
    flat_mask = mask.flatten(1)
    # valid patches first, each kind in raster order: distinct keys, so any sort gives this order
    index = torch.arange(height * width, device=x.device)
    order = torch.argsort((1 - flat_mask) * (height * width) + index[None, :], dim=1)
    picked = order[..., None].expand(-1, -1, channels)
    x = torch.gather(x.flatten(2).transpose(1, 2), 1, picked)
    positions = torch.gather(positions.flatten(2).transpose(1, 2), 1, picked)
    flat_mask = torch.gather(flat_mask, 1, order)
    grid_index = torch.stack(torch.meshgrid(torch.arange(height, device=x.device), torch.arange(width, device=x.device),
                                            indexing="ij"), dim=-1).flatten(0, 1)
    patch_index = grid_index[order]
    cls_tokens = self.cls_token.expand(batch, -1, -1)
    x = torch.cat((cls_tokens, x), dim=1)
    positions = torch.cat((self.position_embeddings[:, 0, :][:, None, :].expand(batch, -1, -1), positions), dim=1)
    x = self.dropout(x + positions)
    flat_mask = torch.cat([torch.ones(batch, 1, dtype=flat_mask.dtype, device=x.device), flat_mask], dim=1)
    return x, flat_mask, (patch_index, (height, width))


def _keeps_every_patch(module: Any) -> bool:
    config = getattr(module, "config", None)
    limit = getattr(config, "max_image_length", None)
    sizes = (getattr(config, "image_size", None), getattr(config, "patch_size", None))
    return callable(getattr(module, "visual_embed", None)) \
        and hasattr(getattr(module, "patch_embeddings", None), "projection") \
        and hasattr(module, "position_embeddings") and hasattr(module, "cls_token") \
        and all(isinstance(size, int) for size in sizes) and (not isinstance(limit, int) or limit < 0)


@contextlib.contextmanager
def ordered_patches(model: Any) -> Iterator[list[str]]:
    """Within: every such image embedding of ``model`` keeps all its patches in order; yields their names. Their own
    ``visual_embed`` comes back on leaving."""
    from .lending import lent_to_modules

    with lent_to_modules(model, _keeps_every_patch, every_patch, "visual_embed") as names:
        yield names


PATCH = Patch(
    name="image_patches",
    applies_to="image embeddings holding visual_embed, patch_embeddings.projection, position_embeddings and "
               "cls_token, whose config keeps every valid patch (max_image_length below 0)",
    replaces="the loop over the images (each one's position table interpolated to its size, its valid patches "
             "found with nonzero and drawn in a random order, masked ones drawn to pad it)",
    why="torch.export cannot guard on the draw's data-dependent counts, and TorchScript's file did not build; "
        "the order is the only thing drawn, and the outputs the task reads do not depend on it",
    during=ordered_patches)
