"""SAM (transformers' ``SamModel``, segment-anything's ``Sam``; an object, or a folder or hub id whose config says
sam): its vision encoder and its prompt encoder + mask decoder as two files in one folder
(:mod:`onnx_nb.kinds.sam.export`); the result is a :class:`~onnx_nb.SamExport`, checked whole by
:func:`onnx_nb.check_sam`."""

from __future__ import annotations

import os
from typing import Any, ClassVar

from ...errors import InvalidArgumentError
from ...steps.export.adapters.base import Adapter, is_torch_module, require_float32_cpu
from ...steps.export.args import ExportArgs


class SamAdapter(Adapter):
    key = "sam"
    several_files = True
    what = "a SAM model"
    instead = (", whose parts get their own samples and axes; export a part alone with "
               "onnx_nb.export(SamVisionEncoderPart(model), sample, ...) (onnx_nb.kinds.sam.export), or "
               "quantize(sam.parts['vision_encoder'], method='fp16') for another precision")
    takes: ClassVar[frozenset[str]] = frozenset({"opset"})

    @staticmethod
    def recognises(model: Any, args: ExportArgs) -> bool:
        if isinstance(model, (str, os.PathLike)):
            return _sam_location(model)
        if getattr(getattr(model, "config", None), "model_type", None) == "sam" or \
                (type(model).__name__ == "Sam" and hasattr(model, "image_encoder")):  # segment-anything's own
            return is_sam(model)
        return False

    @classmethod
    def export(cls, model: Any, args: ExportArgs) -> Any:
        from ..torch_module.adapter import export_part as export
        from .export import export_sam, load_sam

        loaded = load_sam(model)
        check_supported(loaded)
        return export_sam(loaded, args.out, args.overwrite, args.progress, args.opset, export, args.name)

    @classmethod
    def expect(cls, result: Any, what: str) -> Any:
        """``result`` when it is a transformers SAM's export with both parts (what ``check_sam`` takes)."""
        from .result import PARTS, SamExport

        if not isinstance(result, SamExport) or set(result.parts) != set(PARTS) or not is_hf_sam(result.model):
            raise InvalidArgumentError(f"{what} takes what onnx_nb.export(sam_model) returns, not "
                                       f"{type(result).__name__}.")
        return result


def _sam_location(model: Any) -> bool:
    """A folder or hub id whose config says SAM."""
    from ..hf.adapter import location_config

    return location_config(model).get("model_type") == "sam"


def is_sam(model: Any) -> bool:
    """A transformers ``SamModel`` (SAM, SlimSAM checkpoints), or facebookresearch/segment-anything's ``Sam``."""
    return is_hf_sam(model) or _is_meta_sam(model)


def is_hf_sam(model: Any) -> bool:
    return is_torch_module(model) and \
        getattr(getattr(model, "config", None), "model_type", None) == "sam" and \
        all(hasattr(model, n) for n in ("vision_encoder", "prompt_encoder", "mask_decoder",
                                         "get_image_wide_positional_embeddings"))


def _is_meta_sam(model: Any) -> bool:
    return is_torch_module(model) and not hasattr(model, "config") and \
        all(hasattr(model, n) for n in ("image_encoder", "prompt_encoder", "mask_decoder", "pixel_mean"))


def check_supported(model: Any) -> None:
    """Refuse what the converter cannot take: segment-anything's own Sam, a model off the CPU or not float32."""

    if _is_meta_sam(model):
        raise InvalidArgumentError(
            f"{type(model).__name__} (facebookresearch/segment-anything): onnx-nb exports transformers' SamModel. "
            "Convert the checkpoint with transformers' models/sam/convert_sam_to_hf.py and load it with "
            "SamModel.from_pretrained, or use segment-anything's own scripts/export_onnx_model.py for its decoder.")
    if not is_hf_sam(model):
        raise InvalidArgumentError(f"{type(model).__name__} is not a transformers SamModel.")
    first = next(model.parameters())
    require_float32_cpu(first.dtype, first.device, "The model", "model", "sam.parts['vision_encoder']")
