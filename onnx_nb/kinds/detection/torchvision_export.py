"""torchvision's detection models (Faster R-CNN, Mask R-CNN, Keypoint R-CNN, RetinaNet, FCOS, SSD, SSDlite) as one
image tensor in, flat tensors out: the model takes a list of images and returns a list of dicts, which an ONNX file
cannot; :class:`DetectorGraph` calls it on the batch's images and returns a ``detections`` output in the layout an
Ultralytics file with ``nms=True`` has (a row per kept box: image index, x1, y1, x2, y2, score, label), with
``masks`` (one per box, at the image's size) and ``keypoints`` (per box: x, y, visibility) where the model makes
them. The model's own transform (resize, normalize) and its suppression are in the graph; while it is traced, the
resize is :func:`_resize_as_eager`, which gives PyTorch's size and pixels where torchvision's traced branch and
ONNX's Resize do not, and the box decoding is :func:`_decode`, which runs on no boxes. Only imported by
:func:`onnx_nb.export` when torchvision's detection package is loaded and the model is one of its."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import torch

DETECTORS = {"generalized_rcnn": "GeneralizedRCNN", "retinanet": "RetinaNet", "fcos": "FCOS", "ssd": "SSD"}
# the model's postprocessing loops over the images of the batch: a traced file holds the loop for one image
BATCH_NOTE = ("one image per call: torchvision's detectors loop over a batch's images in Python (the transform's "
              "resize and the postprocessing), which the trace unrolls for the sample's one image")


TRACED_NOTE = ("the detector's postprocessing (score cut, suppression, the kept boxes' count) was traced with "
               "TorchScript along the path the sample took, as torch.export cannot take its data-dependent shapes; "
               "the check and check_parity at other image sizes and on probes are what vouch for it")


def is_torchvision_detector(model: Any) -> bool:
    modules = {k: sys.modules.get(f"torchvision.models.detection.{k}") for k in DETECTORS}
    classes = tuple(getattr(m, DETECTORS[k]) for k, m in modules.items() if m is not None)
    return bool(classes) and isinstance(model, classes)


def _taps(n_in: torch.Tensor, n_out: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """PyTorch's bilinear taps along one side of ``n_in`` pixels resized to ``n_out`` (1-d int64 tensors of one
    element; ``align_corners=False``, the scale ``n_in / n_out``): per output pixel the two source indices and
    their weights, computed as its CPU kernel computes them. The source position ``scale * (i + 0.5) - 0.5`` is
    rounded once to float32, as the kernel's fused multiply-add rounds it (float64 holds the product exactly)."""
    scale = (n_in.to(torch.float32) / n_out.to(torch.float32)).to(torch.float64)
    positions = torch.arange(n_out[0], dtype=torch.float64)  # traced: dynamic
    src = (scale * (positions + 0.5) - 0.5).to(torch.float32).clamp(min=0.0)
    last = n_in - 1
    i0 = torch.floor(src).to(torch.int64)
    i0 = torch.where(i0 < last, i0, last)
    w1 = (src - i0.to(torch.float32)).clamp(0.0, 1.0)
    i1 = torch.where(i0 < last, i0 + 1, i0)
    return i0, i1, 1.0 - w1, w1


def _bilinear_as_torch(image: torch.Tensor, size: torch.Tensor) -> torch.Tensor:
    """``interpolate(image[None], size, mode="bilinear", align_corners=False)[0]`` of a (C, H, W) image as
    gathers and weighted sums: ONNX's Resize computes its source positions with other roundings (a weight off by
    1e-4 at a 1300-pixel side), which a random-noise image and a random network turn into score differences
    near 1e-3; these taps give PyTorch's pixels to a float32 rounding. Width first, then height, as the kernel."""
    from torch.onnx import operators

    side = operators.shape_as_tensor(image)[-2:]
    c0, c1, a0, a1 = _taps(side[1:], size[1:])
    r0, r1, b0, b1 = _taps(side[:1], size[:1])
    rows = image.index_select(2, c0) * a0 + image.index_select(2, c1) * a1
    return rows.index_select(1, r0) * b0[:, None] + rows.index_select(1, r1) * b1[:, None]


def _resize_as_eager(image: torch.Tensor, min_size: int, max_size: int) -> torch.Tensor:
    """torchvision's resize (``_resize_image_and_masks``) of one image for the trace, as eager PyTorch resizes it:
    the size ``floor(side * min(min_size / short side, max_size / long side))`` in float64, then
    :func:`_bilinear_as_torch`. torchvision's own traced branch works the size out in float32, where
    ``992 * float32(800 / 992)`` is 799.99994: the file resized a 992-row image to 799 rows where PyTorch makes
    800, and every feature, proposal and box moved."""
    from torch.onnx import operators

    side = operators.shape_as_tensor(image)[-2:].to(torch.float64)  # (height, width)
    other = torch.cat([side[1:], side[:1]])  # (width, height)
    # where() for min and max of 1-d tensors: the exporter turns 0-d float64 tensors and the operands of Min, Max
    # and ReduceMin into float32; and a division of two tensors (a number over a tensor becomes a reciprocal and
    # a multiply: two roundings)
    by_short = torch.full((2,), float(min_size), dtype=torch.float64) / torch.where(side < other, side, other)
    by_long = torch.full((2,), float(max_size), dtype=torch.float64) / torch.where(side < other, other, side)
    scale = torch.where(by_short < by_long, by_short, by_long)
    return _bilinear_as_torch(image, torch.floor(side * scale).to(torch.int64))


def _decode(coder: Any, rel_codes: torch.Tensor, boxes: list[torch.Tensor]) -> torch.Tensor:
    """torchvision's ``BoxCoder.decode`` for the trace, its reshapes by explicit sizes: ``reshape(box_sum, -1)``
    cannot be inferred next to zero rows, which ONNX Runtime refuses (a Mask R-CNN whose proposals were all removed
    failed on ``/roi_heads/Reshape`` where PyTorch, which skips the reshape for no boxes, returns no detections)."""
    concat_boxes = torch.cat(boxes, dim=0)
    count = concat_boxes.shape[0]  # the callers give one row of codes per box (all four of torchvision's)
    pred_boxes = coder.decode_single(rel_codes.reshape(count, rel_codes.shape[-1]), concat_boxes)
    out: torch.Tensor = pred_boxes.reshape(count, pred_boxes.shape[-1] // 4, 4)
    return out


@contextlib.contextmanager
def _traced_fixes() -> Iterator[None]:
    """While the detector is traced: :func:`_resize_as_eager` in place of torchvision's resize, and
    :func:`_decode` in place of its box coder's decode (for 2-d codes)."""
    from torchvision.models.detection import _utils, transform

    original, decode = transform._resize_image_and_masks, _utils.BoxCoder.decode

    def resize(image: torch.Tensor, self_min_size: int, self_max_size: int, target: Any = None,
               fixed_size: Any = None) -> tuple[torch.Tensor, Any]:
        if target is not None:  # training's path, never traced here
            out: tuple[torch.Tensor, Any] = original(image, self_min_size, self_max_size, target, fixed_size)
            return out
        if fixed_size is not None:  # SSD's: the size is fixed, the pixels still PyTorch's
            size = torch.cat([torch.full((1,), fixed_size[1]), torch.full((1,), fixed_size[0])])
            return _bilinear_as_torch(image, size), target
        return _resize_as_eager(image, self_min_size, self_max_size), target

    def decode_rows(coder: Any, rel_codes: torch.Tensor, boxes: list[torch.Tensor]) -> torch.Tensor:
        return _decode(coder, rel_codes, boxes) if rel_codes.dim() == 2 else decode(coder, rel_codes, boxes)

    transform._resize_image_and_masks = resize
    _utils.BoxCoder.decode = decode_rows
    try:
        yield
    finally:
        transform._resize_image_and_masks = original
        _utils.BoxCoder.decode = decode


class DetectorGraph(torch.nn.Module):
    """``forward(images)`` for a torchvision detector: a dict of flat outputs (see the module's docstring)."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        with _traced_fixes() if torch.jit.is_tracing() else contextlib.nullcontext():
            outputs = self.model(list(images.unbind(0)))
        rows, masks, keypoints = [], [], []
        for i, out in enumerate(outputs):
            boxes = out["boxes"]
            rows.append(torch.cat([torch.full_like(boxes[:, :1], i), boxes, out["scores"].unsqueeze(1),
                                   out["labels"].unsqueeze(1).to(boxes.dtype)], dim=1))
            if "masks" in out:
                masks.append(out["masks"])
            if "keypoints" in out:
                keypoints.append(out["keypoints"])
        result = {"detections": torch.cat(rows)}
        if masks:
            result["masks"] = torch.cat(masks)
        if keypoints:
            result["keypoints"] = torch.cat(keypoints)
        return result


def as_module(model: Any, sample: Any, name: str | None,
              dynamic: Any) -> tuple[DetectorGraph, Any, str, Any]:
    """The detector as the module export() traces, a default sample (one 480x640 image), its name, and its axes:
    height and width dynamic, the batch fixed at one (:data:`BATCH_NOTE`)."""
    graph = DetectorGraph(model.eval())
    if sample is None:
        sample = {"images": torch.rand(1, 3, 480, 640, generator=torch.Generator().manual_seed(0))}
    if dynamic is True:
        dynamic = {"images": {2: "height", 3: "width"}}
    return graph, sample, name or type(model).__name__, dynamic
