"""Models from beyond PyTorch, and ONNX files made elsewhere, into :func:`onnx_nb.export`.

- a Keras 3 model (:mod:`.keras_tf`): on the TensorFlow or JAX backend through tf2onnx (``exporter="tf2onnx"``) or
  Keras's own ``model.export(format="onnx")`` (``exporter="keras"``); on the torch backend the model *is* a
  ``torch.nn.Module`` and takes the PyTorch route (its sample made from ``model.inputs`` when none is given);
- a TensorFlow SavedModel folder or ``tf.Module`` (:mod:`.keras_tf`, tf2onnx on its serving signature);
- a scikit-learn estimator or pipeline (:mod:`.scikit`, skl2onnx: probabilities as a tensor, no ZipMap);
- a ``.onnx`` file made elsewhere (:mod:`.adopt`): adopted where it is, checked against an independent reference.

Each gives the same :class:`~onnx_nb.ExportResult` as a PyTorch export (the check in ONNX Runtime at another
batch size, and another image size or sequence length where the model allows one) and the rest of the pipeline
takes it as it is. Only ``sys.modules`` is looked at here: a framework that is not imported already cannot have
made the object passed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...errors import InvalidArgumentError
from ...results.export import ExportResult
from .converting import TF2ONNX_MAX_OPSET, WHAT

FOREIGN_EXPORTERS = {"keras": ("keras", "tf2onnx"), "tensorflow": ("tf2onnx",), "sklearn": ("skl2onnx",),
                     "onnx": ()}


def kind_of(model: Any) -> str | None:
    """``"keras"``, ``"tensorflow"``, ``"sklearn"`` or ``"onnx"`` for what comes in through this module; None for
    the PyTorch and Hugging Face routes."""
    if isinstance(model, (str, os.PathLike)):
        path = Path(str(model)).expanduser()
        if path.suffix.lower() in (".onnx", ".ort") and path.is_file():
            return "onnx"
        if path.suffix.lower() == ".keras" and path.is_file():
            return "keras"
        if path.is_dir() and (path / "saved_model.pb").is_file():
            return "tensorflow"
        return None
    keras = sys.modules.get("keras")
    if keras is not None and isinstance(model, getattr(keras, "Model", ())):
        return "keras"
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(model, getattr(tf, "Module", ())):
        return "tensorflow"
    base = sys.modules.get("sklearn.base")
    if base is not None and isinstance(model, getattr(base, "BaseEstimator", ())):
        return "sklearn"
    return None


def keras_on_torch(model: Any) -> bool:
    """A Keras 3 model on the torch backend: a ``torch.nn.Module``, exported by the PyTorch route."""
    if kind_of(model) != "keras" or isinstance(model, (str, os.PathLike)):
        return False
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(model, torch.nn.Module)


def foreign_export(model: Any, sample: Any, given: dict[str, bool], out: Any, overwrite: bool, progress: bool,
                   opset: int | None, name: str | None, exporter: str, dynamic: Any) -> ExportResult | None:
    """The export of a model from beyond PyTorch or of a file made elsewhere; None for anything else."""
    kind = kind_of(model)
    if kind is None or keras_on_torch(model):
        if exporter in ("keras", "tf2onnx", "skl2onnx"):
            which = "scikit-learn" if exporter == "skl2onnx" else "Keras and TensorFlow"
            raise InvalidArgumentError(f"exporter={exporter!r} is for {which} models; this is a "
                                       f"{type(model).__name__}: use 'auto', 'dynamo' or 'torchscript'.")
        return None
    refused = [k for k in ("task", "precision", "cache") if given.get(k)]
    if isinstance(dynamic, Mapping):
        refused.append("dynamic={...}")
    if refused:
        raise InvalidArgumentError(f"{', '.join(refused)}: not for {WHAT[kind]}; its dynamic axes are the ones its "
                                   "own input shapes leave open (dynamic=False fixes them at the sample's).")
    choices = ("auto", *FOREIGN_EXPORTERS[kind])
    if exporter not in choices:
        raise InvalidArgumentError(f"exporter={exporter!r} cannot export {WHAT[kind]}: use "
                                   f"{' or '.join(repr(c) for c in choices)}.")
    if kind in ("keras", "tensorflow") and opset is not None and opset > TF2ONNX_MAX_OPSET:
        raise InvalidArgumentError(f"opset={opset}: tf2onnx writes opsets up to {TF2ONNX_MAX_OPSET}; pass "
                                   f"opset={TF2ONNX_MAX_OPSET} or leave it out.")
    if kind == "onnx":
        from .adopt import adopt

        return adopt(Path(str(model)).expanduser(), sample, out, overwrite, name)
    if kind == "sklearn":
        from .scikit import export_sklearn

        return export_sklearn(model, sample, out, overwrite, progress, opset, name, dynamic is not False)
    from .keras_tf import export_tensorflow

    return export_tensorflow(model, kind, sample, out, overwrite, progress, opset, name, exporter,
                             dynamic is not False)
