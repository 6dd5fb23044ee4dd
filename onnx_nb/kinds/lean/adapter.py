"""``export(folder, precision=...)``: a decoder written layer by layer from its safetensors checkpoint, no PyTorch model
built (:mod:`onnx_nb.kinds.lean.graph`). Its record is a Hugging Face decoder's: later steps load the PyTorch model
from the same folder when they need a reference."""

from __future__ import annotations

import os
from typing import Any, ClassVar

from ...errors import InvalidArgumentError
from ...steps.export.adapters.base import is_torch_module
from ...steps.export.args import ExportArgs
from ..hf.adapter import HfAdapter


class LeanAdapter(HfAdapter):
    key = "lean"
    what = "the lean route (precision=)"
    takes: ClassVar[frozenset[str]] = frozenset({"precision", "algorithm", "lm_head_bits", "block_size"})

    @classmethod
    def offers(cls, model_type: str) -> str:
        from .families import FAMILIES

        return (f"This {model_type} decoder can take the lean route: export(its folder or hub id, precision='int4') "
                "(or 'int8', 'fp16', 'fp32') writes it straight from its checkpoint, layer by layer, without tracing "
                "and in a fraction of the weights' memory." if model_type in FAMILIES else "")

    @staticmethod
    def recognises(model: Any, args: ExportArgs) -> bool:
        if args.precision is None:
            return False
        return isinstance(model, (str, os.PathLike)) or is_torch_module(model)

    @classmethod
    def refuse(cls, model: Any, args: ExportArgs) -> None:
        if set(args.given) - cls.takes:
            raise InvalidArgumentError("precision= writes a decoder with its cache from the checkpoint alone: "
                                       "sample=, task=, opset=, exporter=, dynamic= and cache= do not apply to it.")

    @classmethod
    def export(cls, model: Any, args: ExportArgs) -> Any:
        from ...steps.export.machinery.writing import target_for
        from ...steps.export.precision import Blocks
        from .export import export_checkpoint

        if not isinstance(model, (str, os.PathLike)):
            raise InvalidArgumentError(
                "precision= builds a decoder straight from its checkpoint: give its folder or hub id. For a model "
                "object, model.save_pretrained(folder) then export(folder, precision=...), or export(model) then "
                "quantize(export, method=...).")
        label, target = target_for(model, args)
        assert args.precision is not None
        return export_checkpoint(model, args.precision, target, label, args.progress,
                                 Blocks.of(args.precision, args.algorithm, args.lm_head_bits,
                                           args.block_size))
