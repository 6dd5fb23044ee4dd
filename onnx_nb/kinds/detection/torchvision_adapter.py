"""A torchvision detector (Faster/Mask/Keypoint R-CNN, RetinaNet, FCOS, SSD): a list of images in, a list of dicts out
in PyTorch, one image tensor in and ``detections`` (``masks``, ``keypoints``) out in the file
(:mod:`onnx_nb.kinds.detection.torchvision_export`), then the PyTorch route; the batch stays fixed at one image."""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Any, ClassVar

from ...errors import SampleError
from ...steps.export.adapters.base import Adapter
from ...steps.export.args import ExportArgs


class TorchvisionAdapter(Adapter):
    key = "torchvision"
    what = "a torchvision detector"
    takes: ClassVar[frozenset[str]] = frozenset({"sample", "dynamic", "exporter", "opset"})

    @staticmethod
    def recognises(model: Any, args: ExportArgs) -> bool:
        if "torchvision.models.detection" not in sys.modules:
            return False
        from .torchvision_export import is_torchvision_detector

        return is_torchvision_detector(model)

    @classmethod
    def prepared(cls, model: Any, args: ExportArgs) -> tuple[Any, Any]:
        """(the record of the detector as one image tensor in, flat outputs out; the args with its sample and
        axes). The sample the detector is called with, a list of image tensors, is taken as the one image."""
        from ...results.export import ModelSource
        from .torchvision_export import as_module

        graph, sample, name, dynamic = as_module(model, _one_image(args.sample), args.name, args.dynamic)
        return (ModelSource(kind="module", name=name, model=graph, adapter=cls.key),
                replace(args, sample=sample, dynamic=dynamic))

    @classmethod
    def export(cls, model: Any, args: ExportArgs) -> Any:
        from ...steps.export.machinery.inputs import FixedAxis
        from .torchvision_export import BATCH_NOTE, TRACED_NOTE

        result = cls.export_prepared(model, args)
        result.fixed_axes.insert(0, FixedAxis("images", 0, 1, BATCH_NOTE))
        if result.exporter == "torchscript" and not result.unverified:  # exporter="torchscript" asked for
            result.unverified = [TRACED_NOTE]
        return result

    @classmethod
    def reference_of_model(cls, model: Any, candidate: Any, sample: Any, label: str | None = None,
                           exporter: str | None = None) -> Any:
        from ...runtime.feeds import export_sample
        from ...steps.export.machinery.references import torch_reference

        record, args = cls.prepared(model, ExportArgs(sample=sample if sample is not None else
                                                      export_sample(candidate)))
        return torch_reference(record, args.sample, label or f"PyTorch {record.name}", exporter, adapter=cls)


def _one_image(sample: Any) -> Any:
    """A detector's own call takes a list of image tensors; the file takes one image: a list of one is that image."""
    if isinstance(sample, (list, tuple)) and sample and all(getattr(t, "ndim", 0) == 3 for t in sample):
        if len(sample) > 1:
            raise SampleError(f"The sample is a list of {len(sample)} images; the file takes one image per call "
                              "(its batch is fixed at one): pass [image] or image[None].")
        return {"images": sample[0][None]}
    return sample
