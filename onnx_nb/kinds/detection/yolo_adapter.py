"""An Ultralytics YOLO model (``YOLO("yolov8n.pt")`` or the network inside it), prepared as Ultralytics' own exporter
prepares it (:mod:`.yolo_export`: images in, ``output0`` or, with ``nms=``, ``detections`` out, its
metadata in the file), then the PyTorch route. ``check_parity(network, file)`` builds the same graph as its
reference, the suppression settings read back from the file's metadata."""

from __future__ import annotations

import ast
import sys
from dataclasses import replace
from typing import Any, ClassVar

from ...steps.export.adapters.base import Adapter
from ...steps.export.args import ExportArgs


class YoloAdapter(Adapter):
    key = "yolo"
    what = "an Ultralytics YOLO model"
    takes: ClassVar[frozenset[str]] = frozenset({"sample", "nms", "dynamic", "exporter", "opset"})

    @staticmethod
    def recognises(model: Any, args: ExportArgs) -> bool:
        if "ultralytics" not in sys.modules:  # a YOLO object means ultralytics is loaded already
            return False
        from .yolo_export import is_ultralytics

        return is_ultralytics(model)

    @classmethod
    def prepared(cls, model: Any, args: ExportArgs) -> tuple[Any, Any]:
        """(the record of the prepared graph, the args with its default sample)."""
        from ...results.export import ModelSource
        from .yolo_export import as_module

        graph, sample, name = as_module(model, args.sample, args.name, args.nms)
        return ModelSource(kind="module", name=name, model=graph, adapter=cls.key), replace(args, sample=sample)

    @classmethod
    def export(cls, model: Any, args: ExportArgs) -> Any:
        return cls.export_prepared(model, args)

    @classmethod
    def reference_of_model(cls, model: Any, candidate: Any, sample: Any, label: str | None = None,
                           exporter: str | None = None) -> Any:
        from ...steps.export.machinery.references import torch_reference

        record, args = cls.prepared(model, ExportArgs(sample=sample, nms=_nms_of(candidate)))
        return torch_reference(record, args.sample, label or f"PyTorch {record.name}", exporter, adapter=cls)


def _nms_of(candidate: Any) -> Any:
    """The suppression settings a YOLO file was exported with (its metadata), False for a file without."""
    from pathlib import Path

    from ...runtime.onnxfile import load_proto

    path = getattr(candidate, "path", candidate)
    if path is None:
        return False
    meta = {p.key: p.value for p in load_proto(Path(path)).metadata_props}
    return ast.literal_eval(meta["nms"]) if "nms" in meta else False
