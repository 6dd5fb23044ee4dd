"""torchvision's detection models (Faster R-CNN, Mask R-CNN, Keypoint R-CNN, RetinaNet, FCOS, SSD, SSDlite) as one
image tensor in, flat tensors out: the model takes a list of images and returns a list of dicts, which an ONNX file
cannot; :class:`DetectorGraph` calls it on the batch's images and returns a ``detections`` output in the layout an
Ultralytics file with ``nms=True`` has (a row per kept box: image index, x1, y1, x2, y2, score, label), with
``masks`` (one per box, at the image's size) and ``keypoints`` (per box: x, y, visibility) where the model makes
them. The model's own transform (resize, normalize) and its suppression are in the graph. Only imported by
:func:`onnx_nb.export` when torchvision's detection package is loaded and the model is one of its."""

from __future__ import annotations

import sys
from typing import Any

import torch

DETECTORS = {"generalized_rcnn": "GeneralizedRCNN", "retinanet": "RetinaNet", "fcos": "FCOS", "ssd": "SSD"}
# the model's postprocessing loops over the images of the batch: a traced file holds the loop for one image
BATCH_NOTE = ("one image per call: torchvision's detectors loop over a batch's images in Python (the transform's "
              "resize and the postprocessing), which the trace unrolls for the sample's one image")


def is_torchvision_detector(model: Any) -> bool:
    modules = {k: sys.modules.get(f"torchvision.models.detection.{k}") for k in DETECTORS}
    classes = tuple(getattr(m, DETECTORS[k]) for k, m in modules.items() if m is not None)
    return bool(classes) and isinstance(model, classes)


class DetectorGraph(torch.nn.Module):
    """``forward(images)`` for a torchvision detector: a dict of flat outputs (see the module's docstring)."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
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
