"""An ``.onnx`` file made elsewhere (a model zoo, a vendor, another team), adopted where it is
(:mod:`.onnx_adopt`) and checked against an implementation that is not ONNX Runtime; a variant of it
is checked against the file as it came. A ``.ort`` file is ONNX Runtime Mobile's format, refused where a ``.onnx`` is
needed (:func:`onnx_nb.runtime.onnxfile.check_model`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar

from ...steps.export.args import ExportArgs
from .beyond import BeyondAdapter


class OnnxFileAdapter(BeyondAdapter):
    key = kind = "onnx"
    what = "an ONNX file made elsewhere"
    exporters: ClassVar[tuple[str, ...]] = ("auto",)
    takes_against = True

    @staticmethod
    def recognises(model: Any, args: ExportArgs) -> bool:
        if not isinstance(model, (str, os.PathLike)):
            return False
        path = Path(str(model)).expanduser()
        return path.suffix.lower() in (".onnx", ".ort") and path.is_file()

    @classmethod
    def export(cls, model: Any, args: ExportArgs) -> Any:
        from .onnx_adopt import adopt

        return adopt(Path(str(model)).expanduser(), args.sample, args.out, args.overwrite, args.name)

    @classmethod
    def reference(cls, export: Any, candidate: Path, sample: Any, seed: int, exporter: str | None = None,
                  against: Any = None) -> Any:
        """A variant against the file as it came; the file itself against an independent implementation."""
        from ...runtime.feeds import feed_for
        from ...steps.export.machinery.references import independent_reference, onnx_reference

        record = export.source
        original = Path(export.path)
        if original.resolve() != Path(candidate).resolve():
            feed, axes = feed_for(original, export, sample, seed)
            return onnx_reference(original, feed, axes)
        return independent_reference(original, against, sample if sample is not None else record.sample, seed,
                                     record.recorded if sample is None else None)
