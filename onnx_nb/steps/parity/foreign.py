"""References for models from beyond PyTorch and for ONNX files made elsewhere (:mod:`onnx_nb.steps.export.foreign`).

- an export of a Keras, TensorFlow or scikit-learn model: the model itself, run by its own framework;
- an adopted ``.onnx`` file (``export("model.onnx")``), or ``check_parity("model.onnx")`` alone: an independent
  reference (:mod:`onnx_nb.runtime.independent`: ONNX's reference evaluator, OpenVINO, or the outputs saved beside
  the sample); every variant of an adopted file is checked against the file as it came.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError, OnnxNbError
from ...results.export import FOREIGN_KINDS
from .reference import Reference, onnx_reference

NATIVE = tuple(k for k in FOREIGN_KINDS if k != "onnx")  # run by their own framework
SAVED_NOTE = ("The reference is the outputs saved beside the sample: they hold for the saved inputs only, so only "
              "the sample's shape is checked and no probe runs.")


def _names(path: Path) -> list[str]:
    from ...runtime.onnxfile import load_proto

    return [o.name for o in load_proto(path).graph.output]


def native_reference(source: Any, candidate: Path, sample: Any = None) -> Reference:
    """The Keras, TensorFlow or scikit-learn model behind an export, as the reference for ``candidate``."""
    from ..export.keras_tf import KerasRoute, SignatureRoute, import_tensorflow, keras_sample

    names = _names(candidate)
    model = source.model
    if model is None and source.kind == "tensorflow" and source.location:
        model = source.location
    if model is None:
        raise OnnxNbError(f"This export of {source.name} no longer holds its {source.kind} model (a result from "
                          "another session?): pass the model again, check_parity(model, file).")
    feed = dict(source.sample) if sample is None else None
    if source.kind == "sklearn":
        from ..export.scikit import features, native_outputs

        given = sample["X"] if hasattr(sample, "keys") and "X" in sample else sample
        x = feed["X"] if feed is not None else features(model, given, [])
        return Reference(source.kind, f"scikit-learn {source.name}", {"X": x}, dict(source.input_axes) or
                         {"X": {0: "batch"}}, names, model=model,
                         runner=lambda f: native_outputs(model, f["X"], names))
    tf = import_tensorflow()
    route: Any
    if source.kind == "keras":
        route = KerasRoute(model, feed if feed is not None else keras_sample(model, sample), True, tf)
        label = f"Keras {source.name}"
    else:
        route = SignatureRoute(model, feed if feed is not None else sample, True, tf)
        label = f"TensorFlow {source.name}"
    axes = dict(source.input_axes) if feed is not None else route.axes
    return Reference(source.kind, label, dict(route.feed), axes, names, model=route.model,
                     runner=lambda f: route.expected(f, names))


def independent_reference(path: Path, against: Any, sample: Any, seed: int,
                          recorded: dict[str, np.ndarray] | None = None) -> Reference:
    """A reference for ``path`` that does not use ONNX Runtime: saved outputs (``against`` a ``.npz`` path, or
    ``recorded``), else :func:`~onnx_nb.runtime.independent.independent_runner`'s."""
    from ...runtime.feeds import feed_for
    from ...runtime.independent import independent_runner, read_saved
    from ...runtime.onnxfile import load_proto, signature

    ins, outs = signature(load_proto(path))
    if isinstance(against, (str, os.PathLike)) and str(against).endswith(".npz"):
        feed, recorded = read_saved(against, [i.name for i in ins], [o.name for o in outs])
        if not recorded:
            raise InvalidArgumentError(f"{against} holds inputs only; save the outputs beside them "
                                       "(numpy.savez(path, **inputs, **outputs)) to check against them.")
    elif recorded:
        feed = dict(sample)
    else:
        feed = None
    if recorded and feed is not None:
        saved = dict(recorded)
        return Reference("saved", "the outputs saved beside the sample", feed, {}, list(saved), path=path,
                         runner=lambda f: saved, fixed_feed=True)
    label, runner, why = independent_runner(path, "auto" if against is None else str(against))
    if runner is None:
        raise InvalidArgumentError(f"No reference for {path.name} without its source model: {why}. Pass "
                                   "against='x.npz' (inputs and the outputs you trust), or the model it came from: "
                                   "check_parity(model, file).")
    feed, axes = feed_for(path, None, sample, seed)
    return Reference("independent", f"{label} on {path.name}", feed, axes, [o.name for o in outs], path=path,
                     runner=runner)


def object_kind(reference: Any) -> str | None:
    """``keras``, ``tensorflow`` or ``sklearn`` for a model object (or SavedModel folder / .keras file) passed as the
    reference; None otherwise."""
    if not any(m in sys.modules for m in NATIVE) and not isinstance(
            reference, (str, os.PathLike)):
        return None
    from ..export.foreign import keras_on_torch, kind_of

    kind = kind_of(reference)
    return kind if kind in NATIVE and not keras_on_torch(reference) else None


def foreign_reference(reference: Any, candidate: Path, sample: Any, seed: int, against: Any) -> Reference | None:
    """The reference when ``reference`` (what check_parity was given first) is from beyond PyTorch or an adopted
    file; None for the PyTorch and Hugging Face routes."""
    from ...results.export import ExportResult

    source = getattr(reference, "source", None) if isinstance(reference, ExportResult) else None
    if source is not None and source.kind in NATIVE:
        return native_reference(source, candidate, sample)
    if source is not None and source.kind == "onnx":
        original = Path(reference.path)
        if original.resolve() != candidate.resolve():  # a variant of the adopted file: against the file as it came
            from ...runtime.feeds import feed_for

            feed, axes = feed_for(original, reference, sample, seed)
            return onnx_reference(original, feed, axes)
        return independent_reference(original, against, sample if sample is not None else source.sample, seed,
                                     source.recorded if sample is None else None)
    kind = object_kind(reference)
    if kind is not None:
        from ...results.export import ModelSource
        from ..export.keras_tf import load_keras

        model = load_keras(reference) if kind == "keras" else reference
        location = str(reference) if isinstance(reference, (str, os.PathLike)) else None
        return native_reference(ModelSource(kind, type(model).__name__, location=location, model=model), candidate,
                                sample if sample is not None else _sample_from(candidate, seed))
    return None


def _sample_from(candidate: Path, seed: int) -> dict[str, np.ndarray]:
    from ...runtime.feeds import graph_sample

    return graph_sample(candidate, seed)[0]
