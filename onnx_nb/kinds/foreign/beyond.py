"""What the adapters of models from beyond PyTorch share (Keras, TensorFlow, scikit-learn, a file made elsewhere):
their refusals, their records (no PyTorch model behind them: no eager baseline row), and their reference, the model
run by its own framework or, for a file alone, an implementation that is not ONNX Runtime."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from ...errors import InvalidArgumentError, OnnxNbError
from ...steps.export.adapters.base import Adapter
from ...steps.export.args import ExportArgs

TF2ONNX_MAX_OPSET = 18  # tf2onnx 1.17 knows IR versions up to opset 18


class BeyondAdapter(Adapter):
    """A model with no PyTorch module behind it: its own converters, its own framework as the reference."""

    kind: ClassVar[str] = ""  # ModelSource.kind: "keras", "tensorflow", "sklearn", "onnx"
    takes: ClassVar[frozenset[str]] = frozenset({"sample", "opset", "dynamic", "exporter"})
    instead = ("; its dynamic axes are the ones its own input shapes leave open (dynamic=False fixes them at the "
               "sample's).")
    converters: ClassVar[tuple[str, ...]] = ()  # exporter= values besides "auto", in the order tried
    eager = False

    @classmethod
    def refuse(cls, model: Any, args: ExportArgs) -> None:
        refused = [n for n in args.given if n not in cls.takes] + \
            (["dynamic"] if isinstance(args.dynamic, Mapping) else [])
        if refused:
            raise InvalidArgumentError(f"{', '.join(ExportArgs.shown(n, args) for n in refused)}: not for "
                                       f"{cls.what}{cls.instead}")
        choices = ("auto", *cls.converters)
        if args.exporter not in choices:
            raise InvalidArgumentError(f"exporter={args.exporter!r} cannot export {cls.what}: use "
                                       f"{' or '.join(repr(c) for c in choices)}.")

    @classmethod
    def reload(cls, record: Any, step: str) -> Any:
        return record

    @classmethod
    def reference(cls, export: Any, candidate: Path, sample: Any, seed: int, exporter: str | None = None,
                  against: Any = None) -> Any:
        """The model itself, run by its own framework (:meth:`native`)."""
        return cls.native(export.source, candidate, sample)

    @classmethod
    def reference_of_model(cls, model: Any, candidate: Any, sample: Any, label: str | None = None,
                           exporter: str | None = None) -> Any:
        """``check_parity(model, file)`` with the model itself: its framework, on the file's own graph sample when
        no sample is given."""
        from ...results.export import ModelSource
        from ...steps.export.machinery.references import sample_from

        own = cls.loaded(model)
        location = str(model) if isinstance(model, (str, Path)) else None
        record = ModelSource(cls.kind, type(own).__name__, location=location, model=own, adapter=cls.key,
                             eager=False)
        path = Path(getattr(candidate, "path", candidate))
        return cls.native(record, path, sample if sample is not None else sample_from(path, 0))

    @classmethod
    def native(cls, record: Any, candidate: Path, sample: Any = None) -> Any:
        """The model behind ``record`` run by its own framework, as the reference for ``candidate``."""
        raise NotImplementedError  # pragma: no cover - each kind runs its own

    @classmethod
    def held(cls, record: Any) -> Any:
        """The model a reference runs: the record's own, else a clear error (a result from another session)."""
        if record.model is None:
            raise OnnxNbError(f"This export of {record.name} no longer holds its {record.kind} model (a result from "
                              "another session?): pass the model again, check_parity(model, file).")
        return record.model

    @classmethod
    def loaded(cls, model: Any) -> Any:
        """The model object a reference runs (a file loaded by its framework)."""
        return model
