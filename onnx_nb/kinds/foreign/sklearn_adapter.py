"""A fitted scikit-learn estimator or pipeline, through skl2onnx (:mod:`.sklearn_export`: probabilities
as a tensor, no ZipMap), checked against ``predict`` / ``predict_proba`` / ``transform``. Its file holds trees and
linear models in ``ai.onnx.ml``: nothing INT8 applies to, so the pipeline quantizes nothing by default."""

from __future__ import annotations

import sys
from typing import Any, ClassVar

from ...steps.export.args import ExportArgs
from .beyond import BeyondAdapter


class SklearnAdapter(BeyondAdapter):
    key = kind = "sklearn"
    what = "a scikit-learn model"
    converters: ClassVar[tuple[str, ...]] = ("skl2onnx",)
    exporters: ClassVar[tuple[str, ...]] = ("auto", "skl2onnx")
    quantize_auto = None

    @staticmethod
    def recognises(model: Any, args: ExportArgs) -> bool:
        base = sys.modules.get("sklearn.base")  # an estimator means scikit-learn is loaded already
        return base is not None and isinstance(model, getattr(base, "BaseEstimator", ()))

    @classmethod
    def native(cls, record: Any, candidate: Any, sample: Any = None) -> Any:
        """predict / predict_proba / transform on the same rows (string labels compared as equal or not)."""
        from ...steps.export.machinery.references import Reference, output_names
        from .sklearn_export import features, native_outputs

        names = output_names(candidate)
        model = cls.held(record)
        feed = dict(record.sample) if sample is None else None
        given = sample["X"] if hasattr(sample, "keys") and "X" in sample else sample
        x = feed["X"] if feed is not None else features(model, given, [])
        return Reference("sklearn", f"scikit-learn {record.name}", {"X": x}, dict(record.input_axes) or
                         {"X": {0: "batch"}}, names, model=model, runner=lambda f: native_outputs(model, f["X"], names))

    @classmethod
    def export(cls, model: Any, args: ExportArgs) -> Any:
        from .sklearn_export import export_sklearn

        return export_sklearn(model, args.sample, args.out, args.overwrite, args.progress, args.opset, args.name,
                              args.dynamic is not False)
