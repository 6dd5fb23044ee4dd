"""Ultralytics YOLO models (v8, 11; detect, segment, pose, obb, classify) prepared for export as Ultralytics' own
exporter prepares them: a fused copy in eval mode whose head returns the decoded predictions (boxes in pixels,
class scores after the sigmoid) for any image size; input ``images`` (batch, 3, height, width), outputs
``output0`` (and ``output1``, the mask prototypes of a segmentation model), the file's metadata in Ultralytics'
keys so ``YOLO("model.onnx")`` loads it. ``nms=True`` adds the post-processing to the graph (ONNX's
NonMaxSuppression): one ``detections`` output, a row per kept box. Only imported by :func:`onnx_nb.export`
when ultralytics is loaded and the model is one of its."""

from __future__ import annotations

import copy
import sys
from collections.abc import Mapping
from typing import Any

import torch

from ...errors import InvalidArgumentError

NMS_DEFAULTS = {"conf": 0.25, "iou": 0.45, "max_det": 300}
# a detections row: the image's index in the batch, the box's corners in pixels, its score and class, then the
# model's extras for that box (mask coefficients, keypoints, the angle of an oriented box)
DETECTION_COLUMNS = ("batch", "x1", "y1", "x2", "y2", "score", "class")


def is_ultralytics(model: Any) -> bool:
    """A ``YOLO(...)`` wrapper or the ``DetectionModel``-like network inside one (ultralytics already loaded)."""
    engine, tasks = sys.modules.get("ultralytics.engine.model"), sys.modules.get("ultralytics.nn.tasks")
    return (engine is not None and isinstance(model, engine.Model)) or \
        (tasks is not None and isinstance(model, tasks.BaseModel))


def network_of(model: Any) -> Any:
    engine = sys.modules.get("ultralytics.engine.model")
    net = model.model if engine is not None and isinstance(model, engine.Model) else model
    if not isinstance(net, torch.nn.Module):
        raise InvalidArgumentError(f"This {type(model).__name__} holds no PyTorch network ({type(net).__name__}): "
                                   "load it from a .pt checkpoint or a .yaml, e.g. YOLO('yolov8n.pt').")
    return net


def name_of(model: Any) -> str:
    """``yolov8n`` for a network built from yolov8n.yaml or loaded from yolov8n.pt."""
    from pathlib import Path

    net = network_of(model)
    where = getattr(model, "ckpt_path", None) or getattr(net, "pt_path", None) or \
        (getattr(net, "yaml", None) or {}).get("yaml_file") or type(net).__name__
    return Path(str(where)).stem


def check_nms(nms: Any) -> dict[str, Any] | None:
    """``nms``: False, True (Ultralytics' defaults) or a dict of conf, iou, max_det, agnostic."""
    if nms is False or nms is None:
        return None
    given = {} if nms is True else nms
    if not isinstance(given, Mapping) or set(given) - {*NMS_DEFAULTS, "agnostic"}:
        raise InvalidArgumentError(f"nms={nms!r}: give True, or a dict with any of conf (score threshold, "
                                   f"default 0.25), iou (default 0.45), max_det (boxes per image, default 300), "
                                   "agnostic (one suppression across classes, default False).")
    out = {**NMS_DEFAULTS, "agnostic": False, **given}
    if not 0 <= out["conf"] < 1 or not 0 < out["iou"] <= 1 or int(out["max_det"]) < 1:
        raise InvalidArgumentError(f"nms={nms!r}: conf in [0, 1), iou in (0, 1], max_det at least 1.")
    return out


class YoloGraph(torch.nn.Module):
    """The prepared network as ``forward(images)``: a dict of named outputs; ``onnx_metadata`` goes into the file."""

    def __init__(self, model: Any, nms: dict[str, Any] | None = None) -> None:
        super().__init__()
        net = network_of(model)
        self.task = str(getattr(net, "task", "detect"))
        if nms is not None and self.task not in ("detect", "segment", "pose"):
            raise InvalidArgumentError(f"nms=True is for detect, segment and pose models; this one is {self.task!r}.")
        self.net = _prepared(net)
        self.names = dict(getattr(net, "names", {}) or {})
        self.nms = nms
        self.onnx_metadata = _metadata(net, self.task, self.names, nms)

    def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        y = self.net(images)
        preds, protos = (y[0], y[1]) if isinstance(y, (tuple, list)) else (y, None)
        out = {"output0": preds} if self.nms is None else {"detections": _suppress(preds, len(self.names), self.nms)}
        if protos is not None:
            out["output1"] = protos
        return out


def _prepared(net: Any) -> Any:
    """What Ultralytics' exporter does before its ONNX export, on a copy (the user's model is left as it was)."""
    from ultralytics.nn.modules import C2f, Detect

    net = copy.deepcopy(net).float().eval()
    for p in net.parameters():
        p.requires_grad_(False)
    net = net.fuse(verbose=False)
    for module in net.modules():
        m: Any = module  # Ultralytics' modules take export settings as plain attributes
        if isinstance(module, Detect):  # Segment, Pose, OBB too: decoded boxes, anchors for the image size at run time
            m.dynamic, m.export, m.format, m.shape = True, True, "onnx", None
            if hasattr(m, "xyxy"):
                m.xyxy = False
        elif type(m).__name__ == "DFL":
            m.forward = _dfl_last_axis(m)
        elif type(m).__name__ == "Classify":
            m.export = True
        elif isinstance(module, C2f):
            m.forward = m.forward_split  # Split instead of Chunk: the graph Ultralytics exports
    return net


def _dfl_last_axis(dfl: Any) -> Any:
    """The distribution focal loss decoding with its softmax over the last axis: the same numbers, but ONNX
    Runtime's float Softmax on an inner axis transposes around itself (6 ms of a 30 ms YOLOv8n INT8 run on 2 cores,
    where the head's decoding stays float; 0.5 ms on the last axis)."""
    bins = dfl.c1

    def forward(x: torch.Tensor) -> torch.Tensor:
        b, _, a = x.shape
        p = x.view(b, 4, bins, a).transpose(2, 3).softmax(-1)  # (batch, 4 sides, anchors, bins)
        out: torch.Tensor = (p @ dfl.conv.weight.view(bins, 1)).view(b, 4, a)
        return out

    return forward


def _metadata(net: Any, task: str, names: dict[int, str], nms: dict[str, Any] | None) -> dict[str, str]:
    """Ultralytics' metadata keys (its AutoBackend reads them back: ``YOLO("model.onnx")`` predicts with the file)."""
    meta: dict[str, Any] = {"description": f"Ultralytics {task} model exported by onnx-nb", "author": "onnx-nb",
                            "stride": int(max(net.stride)) if hasattr(net, "stride") else 32, "task": task,
                            "batch": 1, "imgsz": [640, 640], "names": names,
                            "channels": (getattr(net, "yaml", None) or {}).get("channels", 3),
                            "end2end": False, "dynamic": True}
    head = net.model[-1] if hasattr(net, "model") else None
    if task == "pose" and head is not None:
        meta["kpt_shape"] = list(head.kpt_shape)
    if nms is not None:
        meta["nms"] = {k: nms[k] for k in ("conf", "iou", "max_det", "agnostic")}
        meta["detections_columns"] = list(DETECTION_COLUMNS)
    return {k: str(v) for k, v in meta.items()}


def _suppress(preds: torch.Tensor, classes: int, nms: dict[str, Any]) -> torch.Tensor:
    """Non-maximum suppression over the whole batch at once (torchvision's nms: ONNX's NonMaxSuppression in the
    file), per class unless agnostic, at most ``max_det`` boxes per image. Rows sorted by score."""
    from torchvision.ops import nms as torch_nms

    pred = preds.transpose(1, 2)  # (batch, anchors, 4 + classes + extras)
    batch = pred.shape[0]
    xywh, scores, extra = pred.split([4, classes, pred.shape[2] - 4 - classes], dim=2)
    score, cls = scores.max(dim=2)
    xyxy = torch.cat([xywh[..., :2] - xywh[..., 2:] / 2, xywh[..., :2] + xywh[..., 2:] / 2], dim=2)
    image = torch.arange(batch, device=pred.device).view(batch, 1).expand_as(score)
    span = xyxy.max() - xyxy.min() + 1  # wider than any box (over all anchors: no branch on how many are kept)
    keep = score > nms["conf"]
    boxes, score, cls, extra, image = xyxy[keep], score[keep], cls[keep], extra[keep], image[keep]
    # one suppression for all images and classes: boxes of another image or class are moved apart by more than
    # any box spans (torchvision's batched_nms coordinate trick, without its size-dependent Python loop)
    group = image * (1 if nms["agnostic"] else classes) + (0 if nms["agnostic"] else cls)
    offset = group.to(boxes.dtype) * span
    kept = torch_nms(boxes + offset.unsqueeze(1), score, float(nms["iou"]))
    kept_image = image[kept]
    # at most max_det per image: the rank of each kept box among its image's (kept is sorted by score)
    same = kept_image.unsqueeze(1) == torch.arange(batch, device=pred.device).unsqueeze(0)
    rank = (same.to(torch.int64).cumsum(0) * same.to(torch.int64)).sum(1)
    kept = kept[rank <= int(nms["max_det"])]
    return torch.cat([image[kept].unsqueeze(1).to(boxes.dtype), boxes[kept], score[kept].unsqueeze(1),
                      cls[kept].unsqueeze(1).to(boxes.dtype), extra[kept]], dim=1)


def default_sample(graph: YoloGraph, size: int = 640) -> dict[str, torch.Tensor]:
    """A 640x640 image batch of one (Ultralytics' default export size); the export checks another size too."""
    channels = int(graph.onnx_metadata.get("channels", "3"))
    return {"images": torch.rand(1, channels, size, size, generator=torch.Generator().manual_seed(0))}


def as_module(model: Any, sample: Any, name: str | None, nms: Any) -> tuple[YoloGraph, Any, str]:
    """An Ultralytics model as the module export() traces, its default sample and its name."""
    graph = YoloGraph(model, check_nms(nms))
    return graph, sample if sample is not None else default_sample(graph), name or name_of(model)
