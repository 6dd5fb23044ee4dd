"""SAM's two files chained in ONNX Runtime (the vision encoder, then the prompt encoder and mask decoder on its
outputs) against ``SamModel``'s own forward with the same image and points: masks compared by the IoU of their
pixels (binarized at logit 0), as segmentation benchmarks judge masks, and the predicted IoU scores by a
tolerance."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError
from ...results.detections import pixel_iou
from ...results.tolerance import SAM_MIN_MASK_IOU, SAM_SCORE_ATOL
from .adapter import SamAdapter
from .result import SamExport, SamParity


def check_sam(result: SamExport, points: int | Any = 1, labels: Any = None, *, pixel_values: Any = None,
              batch: int = 1, seed: int = 0, min_iou: float = SAM_MIN_MASK_IOU,
              score_atol: float = SAM_SCORE_ATOL, provider: str = "cpu") -> SamParity:
    """The two files chained in ONNX Runtime (encoder, then decoder on its outputs) against ``SamModel``'s forward
    with the same image and points. ``points``: how many per prompt (random ones inside the image, see
    :func:`sample_points`) or the coordinates themselves ([batch, point_batch, points, 2], image pixels) with
    ``labels``; ``pixel_values``: the image (default: seeded noise, ``batch`` images). Passed when every mask's
    IoU (binarized at logit 0) is at least ``min_iou`` and the IoU scores are within ``score_atol``.

    Example::

        sam = onnx_nb.export(transformers.SamModel.from_pretrained(folder), out="sam-onnx")
        parity = onnx_nb.check_sam(sam, points=3)
        assert parity, (parity.mask_iou_min, parity.score_max_abs_diff)
    """
    import torch

    from ...runtime.providers import providers_named
    from ...runtime.sessions import session
    from ...steps.export.machinery.wrap import eval_mode
    from .export import sample_points, side_of

    SamAdapter.expect(result, "check_sam")
    model = result.model
    if pixel_values is not None and np.ndim(pixel_values) == 4:
        batch = int(np.shape(pixel_values)[0])  # one prompt batch per image given
    if isinstance(points, numbers.Integral):
        if isinstance(points, bool) or points < 1:
            raise InvalidArgumentError(f"points={points!r}: at least 1 point per prompt.")
        coords, default_labels = sample_points(model, batch, int(points), seed=seed)
    else:
        coords = torch.as_tensor(np.asarray(points, np.float32))
        default_labels = torch.ones(coords.shape[:-1], dtype=torch.long)
    labels = default_labels if labels is None else torch.as_tensor(np.asarray(labels, np.int64))
    if coords.dim() != 4 or coords.shape[-1] != 2 or tuple(labels.shape) != tuple(coords.shape[:-1]):
        raise InvalidArgumentError(f"points {list(coords.shape)}, labels {list(labels.shape)}: give points as "
                                   "[batch, point_batch, points, 2] and labels as [batch, point_batch, points].")
    vision = model.config.vision_config
    side = side_of(vision.image_size)
    if pixel_values is None:
        gen = torch.Generator().manual_seed(seed)
        pixels = torch.randn(coords.shape[0], int(vision.num_channels), side, side, generator=gen)
    else:
        pixels = torch.as_tensor(np.asarray(pixel_values, np.float32))
    if pixels.dim() != 4 or pixels.shape[0] != coords.shape[0] or tuple(pixels.shape[2:]) != (side, side):
        raise InvalidArgumentError(f"pixel_values {list(pixels.shape)}: give [{coords.shape[0]}, "
                                   f"{vision.num_channels}, {side}, {side}] (one image per prompt batch, at the "
                                   "model's size as SamProcessor pads it).")
    named = providers_named([provider])[0].name
    encoder = session(result.parts["vision_encoder"].path, named)
    decoder = session(result.parts["prompt_encoder_mask_decoder"].path, named)
    embeddings, positional = encoder.run(["image_embeddings", "image_positional_embeddings"],
                                         {"pixel_values": pixels.numpy()})
    scores, masks = decoder.run(["iou_scores", "pred_masks"], {
        "image_embeddings": embeddings, "image_positional_embeddings": positional,
        "input_points": coords.numpy(), "input_labels": labels.numpy()})
    with torch.no_grad(), eval_mode(model):
        want = model(pixel_values=pixels, input_points=coords, input_labels=labels, multimask_output=True)
    want_masks, want_scores = want.pred_masks.numpy(), want.iou_scores.numpy()
    if masks.shape != want_masks.shape or scores.shape != want_scores.shape:
        error = (f"shapes differ: ONNX masks {list(masks.shape)} and scores {list(scores.shape)}, PyTorch's "
                 f"{list(want_masks.shape)} and {list(want_scores.shape)}")
        return SamParity(0.0, 0.0, min_iou, float("inf"), score_atol, float("inf"), list(masks.shape),
                         list(coords.shape), error)
    flat = (*masks.shape[:-2], -1)  # each mask's pixels, binarized at logit 0
    ious = pixel_iou(masks.reshape(flat) > 0, want_masks.reshape(flat) > 0)
    return SamParity(float(ious.min()), float(ious.mean()), min_iou, float(np.abs(scores - want_scores).max()),
                     score_atol, float(np.abs(masks - want_masks).max()), list(masks.shape), list(coords.shape))
