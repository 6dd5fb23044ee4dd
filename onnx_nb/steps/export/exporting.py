"""``export()``: any PyTorch or Hugging Face model to a checked ONNX file."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...errors import ExportError, InvalidArgumentError, OnnxNbError, UnsupportedOperatorError, first_line
from ...progress import Steps
from ...results.export import ExportResult, ModelSource
from ...runtime.files import (
    check_space,
    check_target,
    cleans_up_folders,
    default_output,
    disk_error,
    publish,
    staging_dir,
    total_size,
)
from .sources import build_sample

EXPORTER_CHOICES = ("auto", "dynamo", "torchscript", "keras", "tf2onnx", "skl2onnx")
DEFAULT_OPSET = 18
EXTERNAL_DATA_BYTES = 2**31 - 2**27  # leave room for the graph itself under protobuf's 2 GB


def _check_args(exporter: str, opset: int | None, dynamic: Any) -> None:
    if exporter not in EXPORTER_CHOICES:
        raise InvalidArgumentError(
            f"exporter={exporter!r} is not one of {', '.join(EXPORTER_CHOICES)}."
        )
    if opset is not None and (isinstance(opset, bool) or not isinstance(opset, int)
                              or not 9 <= opset <= 23):
        raise InvalidArgumentError(f"opset={opset!r}: give an integer from 9 to 23 (default {DEFAULT_OPSET}).")
    if not isinstance(dynamic, (bool, Mapping)):
        raise InvalidArgumentError(
            "dynamic must be True, False, or a dict like {'x': {0: 'batch', 1: 'sequence'}}."
        )


@cleans_up_folders
def export(
    model: Any,
    sample: Any = None,
    *,
    task: str | None = None,
    out: str | os.PathLike[str] | None = None,
    opset: int | None = None,
    dynamic: bool | Mapping[str, Mapping[int, str]] = True,
    exporter: str = "auto",
    overwrite: bool = False,
    progress: bool = True,
    name: str | None = None,
    allow_pickle: bool = False,
    cache: bool | str = "auto",
    precision: str | None = None,
    nms: bool | Mapping[str, Any] = False,
) -> ExportResult:
    """Export ``model`` to ONNX and check the file in ONNX Runtime at a shape other than the sample's.

    ``model``: a ``torch.nn.Module`` (then ``sample`` is needed: a tensor, tuple or dict), a Hugging
    Face model object, a local Hugging Face folder, or a hub id. ``exporter="auto"`` tries the
    dynamo exporter, then TorchScript; the result says which was used and why the other was not.
    ``name`` names the model in results and in the default output folder. ``cache`` (``"auto"``: for causal
    LMs) exports a decoder with its key/value cache, one graph for prefill and decode (see
    :mod:`onnx_nb.steps.export.decoder_cache`); ``cache=False`` exports logits for a whole sequence. A PyTorch
    checkpoint file (``.pt``, ``.pth``, ``.ckpt``) is loaded with ``weights_only=True``; one that pickles a whole model
    needs ``allow_pickle=True``, for files you trust (unpickling can run arbitrary code).

    ``precision`` (``"int4"``, ``"int8"``, ``"fp16"``, ``"fp32"``) takes the lean route for decoders (Llama, Mistral,
    Qwen2/3, Phi-3, Gemma, Granite) given as a folder or hub id: ONNX Runtime's fused decoder graph written layer
    by layer from the safetensors checkpoint, each weight converted as it is read, so memory stays near one layer
    (:mod:`onnx_nb.steps.export.lean`); checked against PyTorch on a prefill and decode steps.

    An Ultralytics YOLO model (``YOLO("yolov8n.pt")`` or its network) needs no sample: ``images`` at 640x640, any
    batch and image size in the file, outputs as Ultralytics' own export names them, its metadata so
    ``YOLO("model.onnx")`` predicts with it. ``nms=True`` (or a dict of ``conf``, ``iou``, ``max_det``,
    ``agnostic``) puts the non-maximum suppression in the graph: one ``detections`` output, a row per kept box
    (batch index, x1, y1, x2, y2, score, class, then mask coefficients or keypoints). A torchvision detector
    (Faster R-CNN, RetinaNet, ...) needs no sample either: one image ``images`` in, ``detections`` in that layout
    out (``masks``, ``keypoints`` beside it), height and width dynamic, the batch fixed at one.

    Example::

        result = onnx_nb.export("path/to/bert-folder")      # a Hugging Face folder (or hub id, or model object)
        result = onnx_nb.export(net, torch.randn(1, 3, 224, 224), out="net.onnx")   # a plain module and its sample
        assert result, result.check                        # falsy when the file disagrees with PyTorch
    """
    batch_note = None
    if nms is not False or _is_yolo(model):
        if not _is_yolo(model):
            raise InvalidArgumentError("nms is for Ultralytics YOLO models (detect, segment, pose); a torchvision "
                                       "detector has its suppression in the model already.")
        from .yolo import as_module

        model, sample, name = as_module(model, sample, name, nms)
    elif "torchvision.models.detection" in sys.modules:
        from .detection import is_torchvision_detector

        if is_torchvision_detector(model):  # a list of images in, a list of dicts out: flat tensors in the file
            from .detection import BATCH_NOTE
            from .detection import as_module as detector_module
            from .inputs import FixedAxis

            model, sample, name, dynamic = detector_module(model, sample, name, dynamic)
            batch_note = FixedAxis("images", 0, 1, BATCH_NOTE)
    from .parts import parts_export

    given = {"sample": sample is not None, "task": task is not None, "precision": precision is not None,
             "dynamic": dynamic is not True, "exporter": exporter != "auto", "cache": cache != "auto"}
    _check_args(exporter, opset, dynamic)
    from .foreign import foreign_export, keras_on_torch

    beyond = foreign_export(model, sample, given, out, overwrite, progress, opset, name, exporter, dynamic)
    if beyond is not None:  # Keras / TensorFlow, scikit-learn, an .onnx file made elsewhere
        return beyond
    if keras_on_torch(model):  # a torch.nn.Module: the PyTorch route, with a sample from its declared inputs
        from .keras_tf import keras_sample

        sample = keras_sample(model, sample, tensors=True)
    several = parts_export(model, given, out, overwrite, progress, opset, name, export)
    if several is not None:  # a diffusion pipeline, SAM: a file per part
        return several
    if precision is not None:
        from .lean_export import export_lean

        return export_lean(model, precision, out, overwrite, progress, name, (sample, task, opset, exporter,
                                                                               dynamic, cache))
    if cache not in ("auto", True, False):  # before the model is loaded
        raise InvalidArgumentError(f"cache={cache!r}: use True, False or 'auto' (for generative models).")
    from .sources import source_name

    label = name or source_name(model)
    target = check_target(out if out is not None else default_output(label), overwrite)
    from .lean_export import check_memory

    check_memory(model)
    with Steps(5, "export", progress) as steps:
        steps.step("loading the model")
        from .sources import load_source

        source = load_source(model, task, allow_pickle)
        source.name = label
        if cache is not False and source.kind != "module":
            from .decoder_cache import is_causal_lm, layout_of
            from .seq2seq_cache import is_seq2seq

            if is_seq2seq(source.model):
                steps.step("preparing sample inputs")
                return _export_seq2seq(source, sample, target, opset or DEFAULT_OPSET, steps)
            if is_causal_lm(source.model):
                source.cache_layout = layout_of(source.model)
            elif cache is True:
                raise InvalidArgumentError(f"cache=True is for generative models (*ForCausalLM, "
                                           f"*ForConditionalGeneration); {type(source.model).__name__} is not one.")
        steps.step("preparing sample inputs")
        result = _export(source, sample, target, opset or DEFAULT_OPSET, dynamic, exporter, steps)
        if batch_note is not None:
            result.fixed_axes.insert(0, batch_note)
            if result.exporter == "torchscript" and not result.unverified:  # exporter="torchscript" asked for
                from .detection import TRACED_NOTE

                result.unverified = [TRACED_NOTE]
        return result


def _is_yolo(model: Any) -> bool:
    if "ultralytics" not in sys.modules:  # a YOLO object means ultralytics is loaded already
        return False
    from .yolo import is_ultralytics

    return is_ultralytics(model)


def _export(source: ModelSource, sample: Any, target: Path, opset: int, dynamic: Any,
            exporter: str, steps: Steps) -> ExportResult:
    from .sources import flat_module
    from .wrap import eval_mode, signature_module

    model = source.model
    s = build_sample(source, sample, dynamic)
    warnings_seen: list[str] = list(source.load_warnings)
    with eval_mode(model):
        flat = flat_module(source, s.names, s.as_kwargs)
        try:
            before = flat.discover(s.tensors)
        except OnnxNbError:
            raise
        except Exception as exc:
            raise _sample_failed(model, s, exc) from exc
        if source.cache_layout is not None:
            probe, after, out_axes = _cache_check(source, flat, s)
            fixed: list[Any] = []
            if exporter == "auto":
                exporter = "torchscript"
        else:
            fixed = _probe_axes(source, flat, s) if dynamic is True else []
            probe, after, out_axes = _grown_check(s, flat, before, warnings_seen)
        source.sample = s.as_dict()
        source.input_axes = dict(s.axes)
        source.as_kwargs = s.as_kwargs
        module = signature_module(flat)
        param_bytes = sum(p.numel() * p.element_size() for p in model.parameters()) + \
            sum(b.numel() * b.element_size() for b in model.buffers())
        check_space(target.parent, param_bytes)
        order = ["dynamo", "torchscript"] if exporter == "auto" else [exporter]
        attempts: dict[str, str] = {} if source.cache_layout is None else {"dynamo": CACHE_NOT_DYNAMO}
        errors: dict[str, BaseException] = {}
        logs: dict[str, str] = {}
        started = time.perf_counter()  # export time counts every attempt, failed ones included
        for i, name in enumerate(order):
            if i:
                steps.add(2)  # another exporter: its export and its check
            steps.step(f"exporting with {name}")
            branches: list[Any] = []
            with staging_dir(target) as tmp:
                staged = tmp / target.name
                native: list[str] = []
                try:
                    run_exporter(name, module, s, flat, staged, {**s.axes, **out_axes}, opset,
                                 param_bytes > EXTERNAL_DATA_BYTES, warnings_seen, native, branches)
                except (KeyboardInterrupt, MemoryError):
                    raise
                except Exception as exc:
                    from .exporters import first_line as exporter_error

                    full = disk_error(exc, target.parent)
                    if full is not None:  # no other exporter would fare better
                        raise full from exc
                    attempts[name] = exporter_error(exc)
                    errors[name] = exc
                    logs[name] = "".join(native)
                    steps.step(f"{name} failed")
                    continue
                steps.step("checking in ONNX Runtime")
                from .exporters import check_file

                check = check_file(staged, probe, after, flat.output_names)
                if not check["passed"] and exporter == "auto" and name != order[-1]:
                    attempts[name] = f"its graph did not match PyTorch: {check.get('error') or check['summary']}"
                    continue
                steps.step("saving")
                files = publish(staged, target)
                seconds = time.perf_counter() - started
                unverified = _unverified(branches, attempts)
                return _result(target, files, name, attempts, seconds, warnings_seen, source, check, s,
                               fixed, dynamic, unverified)
    raise _all_failed(model, flat, s, attempts, errors, logs)


CACHE_NOT_DYNAMO = ("not tried for a decoder with its cache: the mask spans past_sequence + sequence, a sum of two "
                    "dynamic axes that torch.export cannot declare; TorchScript traces it")


def _cache_check(source: ModelSource, flat: Any, s: Any) -> tuple[Any, Any, Any]:
    """A second decode-step sample (other batch, new and cached lengths) and PyTorch's outputs there, for the
    export's check; the output axes of a cache graph are known."""
    import torch

    from . import decoder_cache
    from .inputs import Sample

    layout = source.cache_layout
    other = decoder_cache.cache_sample(source.model, layout, seed=1, batch=3, sequence=2, past=6)
    probe = Sample(list(s.names), [other[n] for n in s.names], False, dict(s.axes))
    with torch.no_grad():
        after = flat.flat(*probe.tensors)
    axes = decoder_cache.cache_axes(layout)
    return probe, after, {n: axes[n] for n in flat.output_names} if s.axes else {}


def _export_seq2seq(source: ModelSource, sample: Any, target: Path, opset: int, steps: Steps) -> ExportResult:
    """An encoder-decoder for generation: ``<name>.encoder.onnx`` (encoder states and the cross-attention
    cache, computed once) beside the decoder file at ``target`` (self-attention cache in and out)."""
    from . import seq2seq_cache
    from .wrap import eager_attention, eval_mode

    s = build_sample(source, sample, True)
    warnings_seen: list[str] = list(source.load_warnings)
    branches: list[Any] = []
    steps.add(1)
    # eager attention: SDPA's trace adds NaN guards and shape arithmetic per layer (a Marian-base decoder step:
    # 1230 nodes, 14.0 ms; eager: 924 nodes, 13.1 ms on 2 cores)
    with eval_mode(source.model), eager_attention(source.model):
        check_space(target.parent, sum(p.numel() * p.element_size() for p in source.model.parameters()) * 2)
        started = time.perf_counter()
        steps.step("exporting the encoder and the decoder with torchscript")
        with staging_dir(target) as tmp:
            layout, checks, dec_sample = export_seq2seq_parts(source.model, s, target, opset, tmp, warnings_seen,
                                                              branches)
            steps.step("checking both in ONNX Runtime")
            steps.step("saving")
            files = publish(tmp / target.name, target)
    source.cache_layout = layout
    source.sample = dec_sample
    source.input_axes = {n: a for n, a in seq2seq_cache.axes(layout)[1].items() if n in dec_sample}
    source.as_kwargs = False
    passed = all(c["passed"] for c in checks.values())
    check = {"passed": passed, "shapes": checks["decoder"].get("shapes", {}),
             "max_abs_diff": max(c.get("max_abs_diff", float("inf")) for c in checks.values()),
             "summary": "; ".join(f"{k}: {c.get('error') or c['summary']}" for k, c in checks.items()),
             "parts": {k: dict(c) for k, c in checks.items()}}
    attempts = {"dynamo": "not tried for an encoder-decoder with its caches: the decoder's cache grows by a sum of "
                          "dynamic axes that torch.export cannot declare; TorchScript traces both files"}
    return _result(target, files, "torchscript", attempts, time.perf_counter() - started, warnings_seen, source,
                   check, s, [], True, _unverified(branches, {}))


def _probe_axes(source: ModelSource, flat: Any, s: Any) -> list[Any]:
    """Make every input axis that can vary dynamic (by running the model at a second size along it);
    the ones that stay fixed come back with the reason."""
    from .inputs import probe_axes

    static: dict[str, str] = {}
    if source.kind != "module":
        from .hf.samples import QUIRKS, Quirk

        quirk = QUIRKS.get(source.model_type or "", Quirk())
        static = {n: quirk.static_reason or "fixed for this architecture" for n in quirk.static_axes}
    return probe_axes(lambda tensors: flat.flat(*tensors), s, static)


def _grown_check(s: Any, flat: Any, before: tuple[Any, ...], warnings_seen: list[str]) -> tuple[Any, Any, Any]:
    """The sample with every dynamic axis longer, PyTorch's outputs there, and the output axes that follow
    the input axes (found by comparing the two runs)."""
    import torch

    from . import inputs

    if not s.axes:
        return s, before, {}
    grown = inputs.grow(s)
    try:
        with torch.no_grad():
            after = flat.flat(*grown.tensors)
    except Exception as exc:  # noqa: BLE001 - reported, export goes on statically checked
        warnings_seen.append(f"The PyTorch model itself fails at shapes {grown.shapes()} "
                             f"({type(exc).__name__}: {first_line(exc, 200)}); checked at the sample's shape only.")
        return s, before, {}
    return grown, after, inputs.output_axes(s, grown, before, after, flat.output_names)


def _unverified(branches: list[Any], attempts: dict[str, str]) -> list[str]:
    """Why the file is not verified: the trace recorded one branch of data-dependent control flow."""
    from .exporters import FIX_HINT, data_dependent_failure

    found = [b.text() for b in branches]
    if branches or not data_dependent_failure(attempts.get("dynamo", "")):
        return found
    return [f"dynamo failed on a branch that depends on the inputs' values ({attempts['dynamo'][:200]}) and the "
            f"TorchScript fallback traced only the path this sample took. {FIX_HINT}"]


def run_exporter(name: str, module: Any, s: Any, flat: Any, staged: Path,
                  axes: dict[str, dict[int, str]], opset: int, external: bool,
                  warnings_seen: list[str], native: list[str], branches: list[Any] | None = None) -> None:
    """Run one exporter into ``staged``. TorchScript traces are watched for data-dependent branches
    (appended to ``branches``): such a file only computes the path the sample took."""
    from ...runtime import onnxfile
    from .exporters import BranchWatch, export_dynamo, export_torchscript, quiet

    args = tuple(s.tensors)
    existing = set(staged.parent.iterdir())
    with quiet(warnings_seen, native):
        if name == "dynamo":
            export_dynamo(module, args, staged, s.names, flat.output_names, s.axes, opset, external)
        else:
            with BranchWatch(args, flat.model) as watch:
                export_torchscript(module, args, staged, s.names, flat.output_names, axes, opset)
            if branches is not None:
                branches.extend(watch.found)
    import onnx

    proto = onnxfile.load_proto(staged)
    own = getattr(flat.model, "onnx_metadata", None)  # a model's own metadata (YOLO's, in Ultralytics' keys)
    if own:
        onnx.helper.set_model_props(proto, {**{p.key: p.value for p in proto.metadata_props}, **own})
    onnxfile.strip_prefix(proto, "inner.model.")
    onnxfile.tie_transposed(proto)  # a tied embedding and LM head: stored once
    known = {n for spec in s.axes.values() for n in spec.values()}
    # dynamo names derived lengths itself ("((audio_length//10)) - 1"); keep those.
    onnxfile.name_dims(proto, axes if name == "torchscript" else
                       {k: {a: n for a, n in v.items() if n in known} for k, v in axes.items()})
    data = staged.with_name(staged.name + ".data")
    onnxfile.consolidate_external(proto, staged.parent, data.name)  # one data file, not one loose file per weight
    for stray in set(staged.parent.iterdir()) - existing - {staged, data}:  # weights dropped since (tied ones)
        if stray.is_file():
            stray.unlink()
    onnx.save(proto, str(staged))


def _result(target: Path, files: list[Path], exporter: str, attempts: dict[str, str],
            seconds: float, warnings_seen: list[str], source: ModelSource,
            check: dict[str, Any], s: Any, fixed: list[Any], dynamic: Any, unverified: list[str]) -> ExportResult:
    from ...runtime import onnxfile
    from .inputs import FixedAxis

    proto = onnxfile.load_proto(target)
    ins, outs = onnxfile.signature(proto)
    if not check["passed"]:
        warnings_seen.append(f"ONNX Runtime does not match PyTorch: {check.get('error') or check['summary']}")
    fixed = list(fixed)
    for info in ins:  # axes asked to be dynamic that the exporter fixed in the graph anyway
        for axis, axis_name in s.axes.get(info.name, {}).items():
            if axis < len(info.shape) and isinstance(info.shape[axis], int):
                fixed.append(FixedAxis(info.name, axis, info.shape[axis],
                                       f"the {exporter} exporter fixed it ({axis_name}) in the graph"))
    return ExportResult(
        path=target, exporter=exporter, fallback_reason=attempts, opset=onnxfile.opset(proto),
        inputs=ins, outputs=outs, op_histogram=onnxfile.op_histogram(proto),
        parameters=onnxfile.parameter_count(proto), file_size=total_size(files), files=files,
        export_seconds=seconds, warnings=warnings_seen, source=source, check=check,
        fixed_axes=fixed, dynamic=dynamic if isinstance(dynamic, bool) else "custom", unverified=unverified,
    )


def _sample_failed(model: Any, s: Any, exc: Exception) -> Exception:
    from ...errors import SampleError

    return SampleError(
        f"{type(model).__name__} fails on the sample inputs {s.shapes()} "
        f"({type(exc).__name__}: {first_line(exc)}). "
        "Pass inputs the model accepts as sample=..."
    )


def _all_failed(model: Any, flat: Any, s: Any, attempts: dict[str, str],
                errors: dict[str, BaseException], logs: dict[str, str]) -> ExportError:
    from .exporters import locate_operator, scope_of, unsupported_operator
    from .lean import FAMILIES

    listing = "; ".join(f"{k}: {v}" for k, v in attempts.items())
    kind = str(getattr(getattr(model, "config", None), "model_type", ""))
    lean = (f" This is a {kind} decoder: export(its folder or hub id, precision='fp32') (or 'int4', 'int8', 'fp16') "
            "writes it straight from its checkpoint, without tracing (the lean route)." if kind in FAMILIES else "")
    op = next((o for o in (unsupported_operator(str(e)) for e in errors.values()) if o), None)
    if op:
        where = next((w for w in (scope_of(f"{errors[k]}\n{logs.get(k, '')}", op) for k in errors) if w is not None),
                     None)
        if where is None:
            where = locate_operator(model, lambda: flat.flat(*s.tensors), op)
        place = (f" in module '{where}'" if where else
                 f" in {type(model).__name__}.forward itself" if where == "" else "")
        return UnsupportedOperatorError(
            f"The operator {op}{place} has no ONNX translation in any exporter ({listing}). "
            "Replace it with supported operations, or register a custom ONNX translation "
            "(torch.onnx.export(..., custom_translation_table=...))." + lean,
            operator=op, module_path=where, attempts=attempts,
        )
    if not attempts:
        attempts = {"all": "no exporter produced a model"}
    return ExportError(f"Every exporter failed: {listing}. See the lines above for each exporter's "
                       "first error; try exporter='torchscript' or exporter='dynamo' to see one in full." + lean,
                       attempts)


def export_seq2seq_parts(model: Any, sample: Any, target: Path, opset: int, staged_dir: Path,
                         warnings: list[str], branches: list[Any]) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """Export the encoder file and the decoder file into ``staged_dir`` (named after ``target``), and check
    both in ONNX Runtime at other shapes. Returns the layout, the checks and the decoder's sample."""
    import torch

    from .exporters import check_file
    from .inputs import Sample, grow
    from .seq2seq_cache import (
        SUFFIX,
        DecoderWithCaches,
        EncoderWithCross,
        axes,
        decoder_names,
        decoder_sample,
        encoder_inputs,
        layout_of,
    )
    from .wrap import FlatModule, signature_module

    names = encoder_inputs(model)
    given = dict(sample.as_dict())
    enc_sample = {n: given[n] for n in names}
    layout = layout_of(model, enc_sample)
    enc_axes, dec_axes = axes(layout)
    grown = grow(Sample(list(names), [enc_sample[n] for n in names], False, {n: dict(enc_axes[n]) for n in names}))
    grown_sample = dict(zip(grown.names, grown.tensors))
    parts = [(EncoderWithCross(model, names), list(names), enc_sample, grown_sample, enc_axes,
              target.stem + SUFFIX),
             (DecoderWithCaches(model, layout), decoder_names(layout), decoder_sample(model, layout, enc_sample),
              decoder_sample(model, layout, grown_sample, past=4, length=2, seed=1), dec_axes, target.name)]
    checks: dict[str, Any] = {}
    for module, in_names, feed, other, spec, filename in parts:
        flat = FlatModule(module, in_names, False, {})
        tensors = [feed[n] for n in in_names]
        flat.discover(tensors)
        smp = Sample(list(in_names), tensors, False, {n: spec[n] for n in in_names if n in spec})
        all_axes = {**smp.axes, **{o: spec[o] for o in flat.output_names if o in spec}}
        staged = staged_dir / filename
        run_exporter("torchscript", signature_module(flat), smp, flat, staged, all_axes, opset, False, warnings, [],
                     branches)
        probe = Sample(list(in_names), [other[n] for n in in_names], False, dict(smp.axes))
        with torch.no_grad():
            expected = flat.flat(*probe.tensors)
        checks["encoder" if filename.endswith(SUFFIX) else "decoder"] = check_file(staged, probe, expected,
                                                                                    flat.output_names)
    return layout, checks, parts[1][2]
