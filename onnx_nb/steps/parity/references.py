"""What an ONNX model is compared against: a PyTorch model or another ONNX model."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ...errors import InvalidArgumentError, SampleError, first_line
from ...runtime.feeds import export_sample, feed_for, to_numpy
from .reference import Reference, onnx_reference


def torch_reference(source: Any, sample: Any, label: str, exporter: str | None = None) -> Reference:
    """From a resolved :class:`ModelSource` (model loaded) and an optional user sample."""
    from ..export.sources import build_sample, flat_module
    from ..export.wrap import eval_mode

    if sample is None and source.sample:
        tensors = dict(source.sample)
        from ..export.inputs import Sample

        s = Sample(list(tensors), list(tensors.values()), source.as_kwargs, dict(source.input_axes))
    else:
        s = build_sample(source, sample)
    if not s.axes:
        from ..export.sources import natural_axes

        s.axes = natural_axes(source, s)
    flat = flat_module(source, s.names, s.as_kwargs)
    with eval_mode(source.model):
        try:
            flat.discover(s.tensors)
        except Exception as exc:
            raise SampleError(
                f"The reference model fails on the sample {s.shapes()}: {type(exc).__name__}: "
                f"{first_line(exc, 200)}"
            ) from exc
    return Reference("torch", label, to_numpy(s.as_dict()), dict(s.axes), list(flat.output_names),
                     model=source.model, flat=flat, exporter=exporter)


def reference_and_model(reference: Any, onnx_model: Any, sample: Any, seed: int,
                        against: Any = None) -> tuple[Reference, Path]:
    """The reference to compare against and the path of the ONNX model under test."""
    from ...results.export import ExportResult
    from .foreign import foreign_reference, independent_reference

    if onnx_model is None and isinstance(reference, (str, os.PathLike)) and str(reference).endswith((".onnx", ".ort")):
        path = Path(reference)  # a file alone: ONNX Runtime against an implementation that is not ONNX Runtime
        return independent_reference(path, against, sample, seed), path
    if against is not None and not (isinstance(reference, ExportResult) and reference.source.kind == "onnx"
                                    and onnx_model is None):
        raise InvalidArgumentError("against= chooses the reference of a file checked alone (check_parity('model.onnx', "
                                   "against=...), or an adopted file's ExportResult); here the reference is given.")
    if onnx_model is None and not hasattr(reference, "path"):
        raise InvalidArgumentError(
            "Which ONNX model should be checked? Pass it as onnx_model (a .onnx path or an ExportResult); "
            "it can only be left out when the reference is an ExportResult or a variant."
        )
    candidate = _path_of(onnx_model if onnx_model is not None else reference, "onnx_model")
    exporter = onnx_model.exporter if isinstance(onnx_model, ExportResult) else None
    beyond = foreign_reference(reference, candidate, sample, seed, against)
    if beyond is not None:  # Keras, TensorFlow, scikit-learn; an adopted file
        return beyond, candidate
    if isinstance(reference, ExportResult):
        from ..export.sources import reload_source

        source = reload_source(reference.source, "check_parity")
        return torch_reference(source, sample, f"PyTorch {reference.source.name}",
                               exporter or reference.exporter), candidate
    parent = getattr(reference, "path", None) if not isinstance(reference, (str, os.PathLike)) else None
    if parent is not None or (isinstance(reference, (str, os.PathLike)) and str(reference).endswith(".onnx")):
        path = _path_of(reference, "reference")
        feed, axes = feed_for(path, onnx_model, sample, seed)
        if sample is not None:
            from ...runtime.shapes import check_sample

            check_sample(feed, path)
        return onnx_reference(path, feed, axes), candidate
    from ..export.sources import load_source

    source = load_source(reference, None)
    if sample is None and source.kind == "module":
        sample = export_sample(onnx_model)
    return torch_reference(source, sample, f"PyTorch {source.name}", exporter), candidate


def _path_of(model: Any, what: str) -> Path:
    path = getattr(model, "path", model)
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgumentError(
            f"{what} is a {type(model).__name__}; pass the path of an .onnx file, an ExportResult "
            "or a variant."
        )
    return Path(path)
