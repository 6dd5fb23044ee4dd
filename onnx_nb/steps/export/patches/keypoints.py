"""A keypoint detector that finds each image's keypoints in a Python loop over the batch (SuperPoint: per image, the
scores past a threshold away from the border, the strongest ``max_keypoints`` of them, their descriptors sampled
from the descriptor map, then padded to the batch's largest count with a mask).

The loop iterates over the batch, so torch.export unrolled it and fixed the batch and image size at the sample's
(ONNX Runtime: "Got invalid dimensions for input: pixel_values"), and TorchScript's file did not load (its non-maximum
suppression pools a 3-d tensor). Within :func:`batched_keypoints` the images go through together: every image's
kept positions are sorted to the front of its row (raster order, as ``torch.nonzero`` gives them; by score where
more than ``max_keypoints`` pass, as ``torch.topk`` gives them), the rows cut at the largest count, the rest masked
to zero: the model's own values, its padding and its mask. The encoder, the score head (softmax, pixel shuffle,
non-maximum suppression) and the descriptor convolutions are the model's own modules. Labels, or a detector whose
decoders lack these parts, go to the model's own forward.

Recognised by what the module holds, not by family: ``extract_one_channel_pixel_values``, an ``encoder``, a
``keypoint_decoder`` with ``_get_pixel_scores``, ``keypoint_threshold``, ``border_removal_distance`` and
``max_keypoints``, and a ``descriptor_decoder`` with ``conv_descriptor_a`` / ``conv_descriptor_b``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from .contract import Patch
from .series_rows import output_class

SCORES = ("_get_pixel_scores", "keypoint_threshold", "border_removal_distance", "max_keypoints")
DESCRIPTORS = ("conv_descriptor_a", "conv_descriptor_b")


def batched_forward(self: Any, pixel_values: Any, labels: Any = None, output_hidden_states: bool | None = None,
                    return_dict: bool | None = None, **kwargs: Any) -> Any:
    """The detector's forward with the batch's images together; labels by its own."""
    import torch

    if labels is not None:
        return type(self).forward(self, pixel_values, labels, output_hidden_states, return_dict, **kwargs)
    hidden = output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
    return_dict = return_dict if return_dict is not None else self.config.return_dict
    pixels = self.extract_one_channel_pixel_values(pixel_values)
    height, width = pixels.shape[-2:]
    encoded = self.encoder(pixels, output_hidden_states=hidden, return_dict=return_dict)
    last = encoded[0]
    positions, scores, mask = _kept(self.keypoint_decoder, self.keypoint_decoder._get_pixel_scores(last))
    descriptors = _described(self.descriptor_decoder, last, positions) * mask[..., None]
    # (y, x) -> (x, y), relative to the image (the padding stays at 0)
    keypoints = torch.stack([positions[..., 1] / width, positions[..., 0] / height], dim=-1) * mask[..., None]
    # float32 as the model's padded outputs are (it fills torch.zeros), whatever the weights' type
    keypoints, scores, descriptors = keypoints.float(), scores.float(), descriptors.float()
    mask = mask.to(torch.int32)
    states = encoded[1] if hidden else None
    if not return_dict:
        return tuple(v for v in (keypoints, scores, descriptors, mask, states) if v is not None)
    return output_class(self)(loss=None, keypoints=keypoints, scores=scores, descriptors=descriptors, mask=mask,
                              hidden_states=states)


def _kept(decoder: Any, scores: Any) -> tuple[Any, Any, Any]:
    """Each image's keypoints from its score map ``[batch, H, W]``: positions ``[batch, n, 2]`` (y, x, float), their
    scores and mask ``[batch, n]``, ``n`` the batch's largest count, the padding zero."""
    import torch

    batch, rows, columns = scores.shape
    border = decoder.border_removal_distance
    # the model removes keypoints by the map's size times 8 (its pixel-shuffled map is already at full size)
    ys, xs = torch.arange(rows, device=scores.device), torch.arange(columns, device=scores.device)
    inside = ((ys >= border) & (ys < rows * 8 - border))[:, None] & ((xs >= border) & (xs < columns * 8 - border))
    flat = scores.reshape(batch, -1)
    valid = ((scores > decoder.keypoint_threshold) & inside).reshape(batch, -1)
    counts = valid.sum(dim=1)
    cells = flat.shape[1]
    index = torch.arange(cells, device=scores.device)
    order = torch.argsort(torch.where(valid, index, index + cells), dim=1)  # kept first, in raster order
    limit = decoder.max_keypoints
    if limit >= 0:
        strongest = torch.argsort(torch.where(valid, flat, flat.new_tensor(float("-inf"))), dim=1, descending=True,
                                  stable=True)
        order = torch.where((counts > limit)[:, None], strongest, order)
        counts = counts.clamp(max=limit)
    largest = counts.max().item()
    torch._check(largest >= 0)
    torch._check(largest <= cells)
    order = order[:, :largest]
    mask = torch.arange(largest, device=scores.device)[None, :] < counts[:, None]
    kept = torch.gather(flat, 1, order) * mask
    row = torch.div(order, columns, rounding_mode="floor")
    positions = torch.stack([row, order - row * columns], dim=-1).to(scores.dtype) * mask[..., None]
    return positions, kept, mask


def _described(decoder: Any, encoded: Any, positions: Any, scale: int = 8) -> Any:
    """The descriptor map's vectors at each keypoint ``[batch, n, 2]`` (y, x, full-size pixels), bilinear with
    corners aligned, normalised, as the model's ``_sample_descriptors`` (one image at a time there)."""
    import torch

    maps = decoder.conv_descriptor_b(decoder.relu(decoder.conv_descriptor_a(encoded)))
    maps = torch.nn.functional.normalize(maps, p=2, dim=1)
    batch, channels, height, width = maps.shape
    points = positions - scale / 2 + 0.5
    points = torch.stack([points[..., 1] / (width * scale - scale / 2 - 0.5),
                          points[..., 0] / (height * scale - scale / 2 - 0.5)], dim=-1) * 2 - 1  # (x, y)
    sampled = torch.nn.functional.grid_sample(maps, points.reshape(batch, 1, -1, 2), mode="bilinear",
                                              align_corners=True)
    sampled = torch.nn.functional.normalize(sampled.reshape(batch, channels, -1), p=2, dim=1)
    return sampled.transpose(1, 2)


def _is_detector(module: Any) -> bool:
    keypoint, descriptor = getattr(module, "keypoint_decoder", None), getattr(module, "descriptor_decoder", None)
    return hasattr(module, "extract_one_channel_pixel_values") and hasattr(module, "encoder") \
        and all(hasattr(keypoint, name) for name in SCORES) and all(hasattr(descriptor, n) for n in DESCRIPTORS)


@contextlib.contextmanager
def batched_keypoints(model: Any) -> Iterator[list[str]]:
    """Within: every such detector of ``model`` takes its images together; yields their names. Their own forwards
    come back on leaving."""
    from .lending import lent_to_modules

    with lent_to_modules(model, _is_detector, batched_forward) as names:
        yield names


PATCH = Patch(
    name="keypoints",
    applies_to="keypoint detectors holding extract_one_channel_pixel_values, an encoder, a keypoint_decoder "
               "(_get_pixel_scores, keypoint_threshold, border_removal_distance, max_keypoints) and a "
               "descriptor_decoder (conv_descriptor_a, conv_descriptor_b)",
    replaces="the Python loop over the images (threshold, border, top-k, descriptors sampled one image at a time, "
             "then padded with a mask)",
    why="the loop iterates over the batch: torch.export unrolled it and fixed the batch and image size at the "
        "sample's, and TorchScript's file did not load",
    during=batched_keypoints)
