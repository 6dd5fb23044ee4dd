"""What every kind of model answers: :class:`Adapter`, the adapter's protocol and its defaults.

An adapter is recognised once (:mod:`.registry`), opens the model once into a :class:`~onnx_nb.ModelSource` record
(``adapter``, ``generation``, ``eager`` and what the export learnt: sample, axes, cache layout), exports it, and is
asked by every later step instead of the step recognising the model again: its reference for parity, whether a
PyTorch eager baseline exists, what ``quantize="auto"`` means for it in the pipeline, how its PyTorch model comes
back when a result no longer holds it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeAlias

from ....errors import InvalidArgumentError
from ..args import ExportArgs

if TYPE_CHECKING:
    from ....results.export import ExportResult, ModelSource
    from ....results.parts import PartsExport
    from ....results.variant import Variant
    from ..machinery.inputs import Sample
    from ..machinery.references import Reference

    # what an export returns: one file's result, or a model written as several files
    Exported: TypeAlias = ExportResult | PartsExport
    # a file's result: an export of one file, or a variant of one
    Result: TypeAlias = ExportResult | Variant


def is_torch_module(model: Any) -> bool:
    """A ``torch.nn.Module``, asked without importing torch (a model of another framework never loads it)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(model, torch.nn.Module)


def require_float32_cpu(dtype: Any, device: Any, who: str, call: str, part: str) -> None:
    """Multi-part exports run and check in float32 on the CPU: anything else is refused, saying how to get there
    and how to make fp16 files afterwards (``who``: "The pipeline"; ``call``: the user's variable; ``part``: an
    example part)."""
    import torch

    if device.type != "cpu" or dtype != torch.float32:
        raise InvalidArgumentError(
            f"{who} runs in {dtype} on {device}; onnx-nb exports from float32 on the CPU (its parity reference too): "
            f"{call}.to('cpu', torch.float32) first; quantize({part}, method='fp16') then makes an fp16 file.")


class Adapter:
    """One kind of model. Subclasses set the class attributes and implement :meth:`export`; the policies below have
    the defaults of a model with a PyTorch module behind it."""

    key: ClassVar[str] = ""  # the registry row, and ModelSource.adapter
    what: ClassVar[str] = ""  # "a Hugging Face model", for messages
    # export() arguments this kind takes beyond model, out, overwrite, progress and name (ExportArgs.given)
    takes: ClassVar[frozenset[str]] = frozenset()
    instead: ClassVar[str] = ""  # the rest of a refusal's sentence, from its punctuation: what to do instead
    exporters: ClassVar[tuple[str, ...]] = ("auto", "dynamo", "torchscript")  # the exporter= values it takes
    quantize_auto: ClassVar[str | None] = "auto"  # what the pipeline's quantize="auto" means for this kind
    takes_against: ClassVar[bool] = False  # check_parity(export, against=...) chooses its reference
    eager: ClassVar[bool] = True  # a PyTorch model exists to time as the eager baseline
    several_files: ClassVar[bool] = False  # written as several files into a folder (out= names the folder)
    primary_part: ClassVar[str | None] = None  # of several files, the one the pipeline checks and makes variants of

    # --- recognising and exporting ---------------------------------------------------------------------------
    @staticmethod
    def recognises(model: Any, args: ExportArgs) -> bool:  # pragma: no cover - every row defines its own
        raise NotImplementedError

    @classmethod
    def refuse(cls, model: Any, args: ExportArgs) -> None:
        """The given arguments this kind does not take, refused in one format before anything is loaded."""
        extra = [name for name in args.given if name not in cls.takes]
        if "nms" in extra:
            raise InvalidArgumentError("nms is for Ultralytics YOLO models (detect, segment, pose); a torchvision "
                                       "detector has its suppression in the model already.")
        if extra:
            raise InvalidArgumentError(f"{', '.join(ExportArgs.shown(n, args) for n in extra)}: not for "
                                       f"{cls.what}{cls.instead or '.'}")
        if args.exporter not in cls.exporters:
            which = "scikit-learn" if args.exporter == "skl2onnx" else "Keras and TensorFlow"
            raise InvalidArgumentError(f"exporter={args.exporter!r} is for {which} models; this is a "
                                       f"{type(model).__name__}: use {_either(cls.exporters)}.")

    @classmethod
    def export(cls, model: Any, args: ExportArgs) -> Exported:  # pragma: no cover - every row defines its own
        raise NotImplementedError

    @classmethod
    def prepared(cls, model: Any, args: ExportArgs) -> tuple[ModelSource, ExportArgs]:  # pragma: no cover
        """(the record of the model as one flat graph, the args with its sample): for the rows that export through
        :meth:`export_prepared`."""
        raise NotImplementedError

    @classmethod
    def export_prepared(cls, model: Any, args: ExportArgs) -> ExportResult:
        """The PyTorch route on what :meth:`prepared` made of ``model`` (a detector as one flat graph)."""
        from ....progress import Steps
        from ..machinery.torch_route import export_module
        from ..machinery.writing import target_for

        record, args = cls.prepared(model, args)
        label, target = target_for(model, args, record.name)
        record.name = label
        with Steps(5, "export", args.progress) as steps:
            steps.step("loading the model")
            steps.step("preparing sample inputs")
            return export_module(cls, record, args, target, steps)

    # --- what later steps ask -----------------------------------------------------------------------------------
    @classmethod
    def reference(cls, export: ExportResult, candidate: Path, sample: Any, seed: int, exporter: str | None = None,
                  against: Any = None) -> Reference:
        """The reference ``candidate`` (a file of this export, or a variant of it) is checked against: the model
        run by its own framework, made flat and fed the way the export did."""
        from ..machinery.references import torch_reference
        from ..machinery.torch_route import attempt_of

        record = cls.reload(export.source, "check_parity")
        return torch_reference(record, sample, f"PyTorch {export.source.name}", exporter or attempt_of(export),
                               adapter=cls)

    @classmethod
    def reference_of_model(cls, model: Any, candidate: Any, sample: Any, label: str | None = None,
                           exporter: str | None = None) -> Reference:
        """The reference when the model itself is given (``check_parity(model, file)``)."""
        raise InvalidArgumentError(f"check_parity(model, file) cannot run {cls.what} as one reference: check each "
                                   "part's file against its own export (check_parity(result.parts[name])), or the "
                                   "whole with check_diffusion / check_sam.")

    @classmethod
    def reloadable(cls, record: ModelSource) -> bool:
        """Whether :meth:`reload` can load the model again from where it came from (a folder, a hub id)."""
        return False

    @classmethod
    def reload(cls, record: ModelSource, step: str) -> ModelSource:
        """``record`` with its model, loaded again from where it came from when the result no longer holds it."""
        if record.model is None:
            raise InvalidArgumentError(f"This export of {record.name} no longer holds its model (a result from "
                                       f"another session?): pass the model itself to {step}.")
        return record

    @classmethod
    def sample(cls, record: ModelSource, sample: Any, dynamic: Any = True) -> Sample:
        """Named sample tensors with their dynamic axes (an ``inputs.Sample``), the caller's or made for the model."""
        from ..machinery import inputs

        s = inputs.normalise(record.model, sample)
        s.axes = inputs.default_axes(s)
        return inputs.restrict_axes(s, dynamic)

    @classmethod
    def flat(cls, record: ModelSource, names: list[str], as_kwargs: bool) -> Any:
        """The model as one flat ``forward(*tensors)`` (a :class:`~onnx_nb.steps.export.machinery.wrap.FlatModule`)."""
        from ..machinery.wrap import FlatModule

        return FlatModule(record.model, names, as_kwargs, {})

    @classmethod
    def natural_axes(cls, record: ModelSource, sample: Any) -> dict[str, dict[int, str]]:
        """The axes the model's inputs naturally vary along, even when an export fixed them (parity shows that a
        static export fails at other shapes)."""
        from ..machinery import inputs

        return inputs.default_axes(sample)

    @classmethod
    def offers(cls, model_type: str) -> str:
        """What this kind's route offers a model of ``model_type`` that another route cannot export (too big to
        load, or failing to trace): one sentence the other routes' refusals add, empty when nothing."""
        return ""

    @classmethod
    def pads_left(cls, model: Any) -> bool:
        """Whether ``model`` batches inputs of different lengths with left padding (a decoder-only LM does, so its
        parity probes include left-padded inputs; encoders pad right)."""
        return False

    @classmethod
    def checked_by_generating(cls, export: Result) -> bool:
        """The export's files are judged by generating against its PyTorch model (a decoder with its cache, an
        encoder-decoder, a chain of files): what the adapter recorded when it opened the model, not the file's
        inputs (a decoder file adopted from elsewhere has no PyTorch model to generate with)."""
        return export.source.generation is not None or cls.step_files(export) is not None

    @classmethod
    def with_cache(cls, record: ModelSource) -> bool:
        """The record is of a decoder that goes with its cache (its export checked by the cache check)."""
        return bool(record.generation == "decoder")

    @classmethod
    def decoder_reexport(cls, result: Any) -> bool:
        """``optimize()`` may export this result's model again as a decoder with ONNX's standard attention ops
        (:mod:`onnx_nb.steps.variants.decoders`): a decoder-only file with its cache whose steps run alone (a
        vision-language model's decoder part takes embeddings from its embed file: the route would export the whole
        model as a text decoder)."""
        from ....runtime.facts import file_facts

        return result.source.model is not None and cls.step_files(result) is None and \
            file_facts(result.path).generation == "decoder"

    @classmethod
    def step_files(cls, result: Any, path: Path | None = None) -> dict[str, Any] | None:
        """The files :func:`onnx_nb.generate` and generation parity chain for a result of this kind (a
        vision-language model's three; ``path``: another file in the result's place, a variant's), or None: the
        result's one file is the decoder."""
        return None

    @classmethod
    def static_axes(cls, record: ModelSource) -> dict[str, str]:
        """Input axes that stay fixed for this model, with the reason (its architecture's quirk)."""
        return {}


def _either(choices: tuple[str, ...]) -> str:
    quoted = [repr(c) for c in choices]
    return ", ".join(quoted[:-1]) + f" or {quoted[-1]}" if len(quoted) > 1 else quoted[0]
