"""A plain ``torch.nn.Module`` and its sample, or a PyTorch checkpoint file (``.pt``, ``.pth``, ``.ckpt``): the last
row of the registry, which takes what no other row recognised and refuses what it cannot export."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar

from ...errors import InvalidArgumentError
from ...steps.export.adapters.base import Adapter
from ...steps.export.args import ExportArgs
from ...steps.export.machinery.writing import source_name

NOT_A_MODEL = ("Pass a torch.nn.Module, a Hugging Face model object, the path of a local Hugging Face folder, a hub id "
               "such as 'bert-base-uncased', a Keras model, a TensorFlow SavedModel folder or tf.Module, a fitted "
               "scikit-learn estimator, or an .onnx file.")


class TorchAdapter(Adapter):
    key = "torch"
    what = "a plain torch.nn.Module"
    takes: ClassVar[frozenset[str]] = frozenset({"sample", "dynamic", "exporter", "opset", "allow_pickle"})

    @staticmethod
    def recognises(model: Any, args: ExportArgs) -> bool:
        return True

    @classmethod
    def refuse(cls, model: Any, args: ExportArgs) -> None:
        if "task" in args.given:
            raise InvalidArgumentError("task only applies to Hugging Face models; for a plain torch.nn.Module pass "
                                       "a sample.")
        if args.cache is True:
            raise InvalidArgumentError("cache=True is for generative models (a Hugging Face *ForCausalLM or "
                                       "*ForConditionalGeneration); a plain torch.nn.Module has no cache onnx-nb "
                                       "knows: export it with its sample, or pass its Hugging Face model.")
        super().refuse(model, _without(args, "cache"))

    @classmethod
    def open(cls, model: Any, args: ExportArgs) -> Any:
        """The record of a module, or of the model a checkpoint file holds (a Hugging Face model in one is the
        Hugging Face adapter's)."""
        from ...results.export import ModelSource

        if isinstance(model, (str, os.PathLike)):
            from ..hf.adapter import HfAdapter
            from . import checkpoints

            path = Path(str(model)).expanduser()
            loaded = checkpoints.load(path, args.allow_pickle)
            record = HfAdapter.open(loaded, args) if HfAdapter.is_object(loaded) else cls.open(loaded, args)
            record.location = str(path)
            return record
        import torch

        if not isinstance(model, torch.nn.Module):
            raise InvalidArgumentError(f"model is a {type(model).__name__}. {NOT_A_MODEL}")
        return ModelSource(kind="module", name=source_name(model), model=model, adapter=cls.key)

    @classmethod
    def export(cls, model: Any, args: ExportArgs) -> Any:
        from ...progress import Steps
        from ...steps.export.machinery.torch_route import export_module
        from ...steps.export.machinery.writing import target_for

        label, target = target_for(model, args)
        with Steps(5, "export", args.progress) as steps:
            steps.step("loading the model")
            record = cls.open(model, args)
            record.name = label
            if record.adapter != cls.key:  # a checkpoint file holding a Hugging Face model
                from ..hf.adapter import HfAdapter

                return HfAdapter.export_record(record, args, target, steps)
            steps.step("preparing sample inputs")
            return export_module(cls, record, args, target, steps)

    @classmethod
    def reference_of_model(cls, model: Any, candidate: Any, sample: Any, label: str | None = None,
                           exporter: str | None = None) -> Any:
        """The reference for ``candidate`` when the model itself is given (``check_parity(model, file)``): a plain
        module cannot describe its inputs, so the sample defaults to the one ``candidate``'s export was made with."""
        from ...runtime.feeds import export_sample
        from ...steps.export.machinery.references import torch_reference

        record = cls.open(model, ExportArgs())
        if sample is None and record.adapter == cls.key:
            sample = export_sample(candidate)
        from ..hf.adapter import HfAdapter

        adapter = HfAdapter if record.adapter == HfAdapter.key else cls  # a checkpoint holding a Hugging Face model
        return torch_reference(record, sample, label or f"PyTorch {record.name}", exporter, adapter=adapter)


def _without(args: ExportArgs, *names: str) -> ExportArgs:
    """``args`` as if ``names`` had been left at their defaults (for a refusal made by name already)."""
    from dataclasses import replace

    return replace(args, **{n: getattr(ExportArgs(), n) for n in names})


def export_part(module: Any, sample: Any, **settings: Any) -> Any:
    """One part of a model written as several files (a pipeline's UNet, SAM's vision encoder): a plain module and
    its sample through the PyTorch route, with ``export()``'s keyword arguments."""
    args = ExportArgs(sample=sample, **settings)
    TorchAdapter.refuse(module, args)
    return TorchAdapter.export(module, args)
