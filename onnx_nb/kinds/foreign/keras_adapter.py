"""Keras 3 and TensorFlow (:mod:`onnx_nb.kinds.foreign.keras_export`): a Keras model on the TensorFlow or JAX backend
through tf2onnx, then Keras's own ``model.export(format="onnx")``; a ``.keras`` file; a SavedModel folder or a
``tf.Module`` through tf2onnx on its serving signature. A Keras model on the torch backend is a ``torch.nn.Module``:
it takes the PyTorch route, its sample made from ``model.inputs`` when none is given."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from ...errors import InvalidArgumentError
from ...steps.export.adapters.base import is_torch_module
from ...steps.export.args import ExportArgs
from ..torch_module.adapter import TorchAdapter
from .beyond import TF2ONNX_MAX_OPSET, BeyondAdapter


def _is_keras(model: Any) -> bool:
    if isinstance(model, (str, os.PathLike)):
        path = Path(str(model)).expanduser()
        return path.suffix.lower() == ".keras" and path.is_file()
    keras = sys.modules.get("keras")
    return keras is not None and isinstance(model, getattr(keras, "Model", ()))


class KerasOnTorchAdapter(TorchAdapter):
    key = "keras-torch"
    what = "a Keras model on the torch backend"

    @staticmethod
    def recognises(model: Any, args: ExportArgs) -> bool:
        return not isinstance(model, (str, os.PathLike)) and _is_keras(model) and is_torch_module(model)

    @classmethod
    def export(cls, model: Any, args: ExportArgs) -> Any:
        from .keras_export import keras_sample

        return super().export(model, replace(args, sample=keras_sample(model, args.sample, tensors=True)))


class _TensorflowFamily(BeyondAdapter):
    converters: ClassVar[tuple[str, ...]] = ("tf2onnx",)
    framework: ClassVar[str] = "TensorFlow"

    @classmethod
    def route(cls, model: Any, sample: Any, tf: Any) -> Any:
        from .keras_export import SignatureRoute

        return SignatureRoute(model, sample, True, tf)

    @classmethod
    def native(cls, record: Any, candidate: Any, sample: Any = None) -> Any:
        """The model run by TensorFlow (Keras's own call, or the SavedModel's serving signature)."""
        from ...steps.export.machinery.references import Reference, output_names
        from .keras_export import import_tensorflow

        names = output_names(candidate)
        model = record.model if record.model is not None or not record.location else record.location
        model = cls.held(record) if model is None else model
        feed = dict(record.sample) if sample is None else None
        route = cls.route(model, feed if feed is not None else sample, import_tensorflow())
        axes = dict(record.input_axes) if feed is not None else route.axes
        return Reference(record.kind, f"{cls.framework} {record.name}", dict(route.feed), axes, names,
                         model=route.model, runner=lambda f: route.expected(f, names))

    @classmethod
    def refuse(cls, model: Any, args: ExportArgs) -> None:
        super().refuse(model, args)
        if args.opset is not None and args.opset > TF2ONNX_MAX_OPSET:
            raise InvalidArgumentError(f"opset={args.opset}: tf2onnx writes opsets up to {TF2ONNX_MAX_OPSET}; pass "
                                       f"opset={TF2ONNX_MAX_OPSET} or leave it out.")

    @classmethod
    def export(cls, model: Any, args: ExportArgs) -> Any:
        from .keras_export import export_tensorflow

        return export_tensorflow(model, cls.kind, args.sample, args.out, args.overwrite, args.progress, args.opset,
                                 args.name, args.exporter, args.dynamic is not False)


class KerasAdapter(_TensorflowFamily):
    key = kind = "keras"
    what = "a Keras model"
    framework = "Keras"
    converters: ClassVar[tuple[str, ...]] = ("keras", "tf2onnx")

    @classmethod
    def route(cls, model: Any, sample: Any, tf: Any) -> Any:
        from .keras_export import KerasRoute, keras_sample

        return KerasRoute(model, sample if hasattr(sample, "keys") else keras_sample(model, sample), True, tf)

    @staticmethod
    def recognises(model: Any, args: ExportArgs) -> bool:
        return _is_keras(model)

    @classmethod
    def loaded(cls, model: Any) -> Any:
        from .keras_export import load_keras

        return load_keras(model)


class TensorflowAdapter(_TensorflowFamily):
    key = kind = "tensorflow"
    what = "a TensorFlow model"

    @staticmethod
    def recognises(model: Any, args: ExportArgs) -> bool:
        if isinstance(model, (str, os.PathLike)):
            path = Path(str(model)).expanduser()
            return path.is_dir() and (path / "saved_model.pb").is_file()
        tf = sys.modules.get("tensorflow")
        return tf is not None and isinstance(model, getattr(tf, "Module", ()))
