"""Which reference a check uses (:func:`reference_and_model`); the references themselves are built by the adapter of
the model's kind (:mod:`onnx_nb.steps.export.machinery.references`, :mod:`onnx_nb.steps.export.adapters`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ...errors import InvalidArgumentError
from ...runtime.feeds import feed_for
from ..export.machinery.references import Reference, onnx_reference


def reference_and_model(reference: Any, onnx_model: Any, sample: Any, seed: int,
                        against: Any = None) -> tuple[Reference, Path]:
    """The reference to compare against and the path of the ONNX model under test: a file alone against an
    independent implementation; an export (or a model object, folder or hub id) by its adapter; another ONNX file as
    it is."""
    from ...results.export import ExportResult
    from ..export.adapters.registry import adapter_of, resolve
    from ..export.machinery.references import independent_reference

    if onnx_model is None and isinstance(reference, (str, os.PathLike)) and str(reference).endswith((".onnx", ".ort")):
        path = Path(reference)  # a file alone: ONNX Runtime against an implementation that is not ONNX Runtime
        return independent_reference(path, against, sample, seed), path
    own = isinstance(reference, ExportResult)
    if against is not None and not (own and onnx_model is None and adapter_of(reference).takes_against):
        raise InvalidArgumentError("against= chooses the reference of a file checked alone (check_parity('model.onnx', "
                                   "against=...), or an adopted file's ExportResult); here the reference is given.")
    if onnx_model is None and not hasattr(reference, "path"):
        raise InvalidArgumentError(
            "Which ONNX model should be checked? Pass it as onnx_model (a .onnx path or an ExportResult); "
            "it can only be left out when the reference is an ExportResult or a variant."
        )
    candidate = _path_of(onnx_model if onnx_model is not None else reference, "onnx_model")
    exporter = None
    if isinstance(onnx_model, ExportResult):  # the attempt that wrote it, for a fresh export of the same patch set
        from ..export.machinery.torch_route import attempt_of

        exporter = attempt_of(onnx_model)
    if own:  # an export: its adapter builds the reference (the framework it came from, fed as the export was)
        return adapter_of(reference).reference(reference, candidate, sample, seed, exporter, against), candidate
    parent = getattr(reference, "path", None) if not isinstance(reference, (str, os.PathLike)) else None
    if parent is not None or (isinstance(reference, (str, os.PathLike)) and str(reference).endswith(".onnx")):
        path = _path_of(reference, "reference")
        feed, axes = feed_for(path, onnx_model, sample, seed)
        if sample is not None:
            from ...runtime.shapes import check_sample

            check_sample(feed, path)
        return onnx_reference(path, feed, axes), candidate
    # a model object, folder or hub id: its adapter builds it as its export would
    return resolve(reference).reference_of_model(reference, onnx_model if onnx_model is not None else candidate,
                                                 sample, exporter=exporter), candidate


def _path_of(model: Any, what: str) -> Path:
    path = getattr(model, "path", model)
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgumentError(
            f"{what} is a {type(model).__name__}; pass the path of an .onnx file, an ExportResult "
            "or a variant."
        )
    return Path(path)
