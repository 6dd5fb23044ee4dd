"""``export()``: any PyTorch or Hugging Face model to a checked ONNX file."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import ExportError, InvalidArgumentError, OnnxNbError, UnsupportedOperatorError
from .files import check_space, check_target, default_output, disk_error, publish, staging_dir, total_size
from .progress import Steps
from .results.export import ExportResult, ModelSource
from .sources import build_sample, hf_call_kwargs

EXPORTER_CHOICES = ("auto", "dynamo", "torchscript")
DEFAULT_OPSET = 18
EXTERNAL_DATA_BYTES = 2**31 - 2**27  # leave room for the graph itself under protobuf's 2 GB
CHECK_ATOL = 1e-3
CHECK_RTOL = 1e-3


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
) -> ExportResult:
    """Export ``model`` to ONNX and check the file in ONNX Runtime at a shape other than the sample's.

    ``model``: a ``torch.nn.Module`` (then ``sample`` is needed: a tensor, tuple or dict), a Hugging
    Face model object, a local Hugging Face folder, or a hub id. ``exporter="auto"`` tries the
    dynamo exporter, then TorchScript; the result says which was used and why the other was not.
    ``name`` names the model in results and in the default output folder. A PyTorch checkpoint file
    (``.pt``, ``.pth``, ``.ckpt``) is loaded with ``weights_only=True``; one that pickles a whole model
    needs ``allow_pickle=True``, for files you trust (unpickling can run arbitrary code).
    """
    _check_args(exporter, opset, dynamic)
    from .sources import source_name

    label = name or source_name(model)
    target = check_target(out if out is not None else default_output(label), overwrite)
    with Steps(5, "export", progress) as steps:
        steps.step("loading the model")
        from .sources import resolve

        source = resolve(model, task, allow_pickle)
        source.name = label
        steps.step("preparing sample inputs")
        return _export(source, sample, target, opset or DEFAULT_OPSET, dynamic, exporter, steps)


def _export(source: ModelSource, sample: Any, target: Path, opset: int, dynamic: Any,
            exporter: str, steps: Steps) -> ExportResult:
    import torch

    from . import inputs
    from .wrap import FlatModule, eval_mode, signature_module

    model = source.model
    s = build_sample(source, sample, dynamic)
    call_kwargs = hf_call_kwargs(source)
    warnings_seen: list[str] = []
    with eval_mode(model):
        flat = FlatModule(model, s.names, s.as_kwargs, call_kwargs)
        try:
            before = flat.discover(s.tensors)
        except OnnxNbError:
            raise
        except Exception as exc:
            raise _sample_failed(model, s, exc) from exc
        probe, after = s, before
        if s.axes:
            grown = inputs.grow(s)
            try:
                with torch.no_grad():
                    after = flat.flat(*grown.tensors)
                probe = grown
            except Exception as exc:  # noqa: BLE001 - reported, export goes on statically checked
                warnings_seen.append(
                    f"The PyTorch model itself fails at shapes {grown.shapes()} "
                    f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); checked at the sample's shape only."
                )
        out_axes = inputs.output_axes(s, probe, before, after, flat.output_names) if probe is not s else {}
        source.sample = s.as_dict()
        source.input_axes = dict(s.axes)
        source.as_kwargs = s.as_kwargs
        module = signature_module(flat)
        param_bytes = sum(p.numel() * p.element_size() for p in model.parameters()) + \
            sum(b.numel() * b.element_size() for b in model.buffers())
        check_space(target.parent, param_bytes)
        order = ["dynamo", "torchscript"] if exporter == "auto" else [exporter]
        attempts: dict[str, str] = {}
        errors: dict[str, BaseException] = {}
        logs: dict[str, str] = {}
        for name in order:
            steps.step(f"exporting with {name}")
            start = time.perf_counter()
            with staging_dir(target) as tmp:
                staged = tmp / target.name
                native: list[str] = []
                try:
                    run_exporter(name, module, s, flat, staged, {**s.axes, **out_axes}, opset,
                                  param_bytes > EXTERNAL_DATA_BYTES, warnings_seen, native)
                except (KeyboardInterrupt, MemoryError):
                    raise
                except Exception as exc:
                    from .exporters import first_line

                    full = disk_error(exc, target.parent)
                    if full is not None:  # no other exporter would fare better
                        raise full from exc
                    attempts[name] = first_line(exc)
                    errors[name] = exc
                    logs[name] = "".join(native)
                    continue
                seconds = time.perf_counter() - start
                steps.step("checking in ONNX Runtime")
                check = _check(staged, probe, after, flat.output_names)
                if not check["passed"] and exporter == "auto" and name != order[-1]:
                    attempts[name] = f"its graph did not match PyTorch: {check.get('error') or check['summary']}"
                    continue
                steps.step("saving")
                files = publish(staged, target)
                return _result(target, files, name, attempts, seconds, warnings_seen, source, check, s)
    raise _all_failed(model, flat, s, attempts, errors, logs)


def run_exporter(name: str, module: Any, s: Any, flat: Any, staged: Path,
                  axes: dict[str, dict[int, str]], opset: int, external: bool,
                  warnings_seen: list[str], native: list[str]) -> None:
    from . import onnxfile
    from .exporters import export_dynamo, export_torchscript, quiet

    args = tuple(s.tensors)
    with quiet(warnings_seen, native):
        if name == "dynamo":
            export_dynamo(module, args, staged, s.names, flat.output_names, s.axes, opset, external)
        else:
            export_torchscript(module, args, staged, s.names, flat.output_names, axes, opset)
    import onnx

    proto = onnxfile.load_proto(staged)
    onnxfile.strip_prefix(proto, "inner.model.")
    known = {n for spec in s.axes.values() for n in spec.values()}
    # dynamo names derived lengths itself ("((audio_length//10)) - 1"); keep those.
    onnxfile.name_dims(proto, axes if name == "torchscript" else
                       {k: {a: n for a, n in v.items() if n in known} for k, v in axes.items()})
    inputs_info, _ = onnxfile.signature(proto)
    for info in inputs_info:
        for axis, axis_name in axes.get(info.name, {}).items():
            if axis < len(info.shape) and isinstance(info.shape[axis], int):
                warnings_seen.append(
                    f"{name}: axis {axis} ({axis_name}) of input {info.name} was fixed to "
                    f"{info.shape[axis]}: the model only runs at that size."
                )
    onnx.save(proto, str(staged))


def _check(path: Path, probe: Any, expected: tuple[Any, ...], names: list[str]) -> dict[str, Any]:
    """Run the staged file in ONNX Runtime on ``probe`` and compare with PyTorch's outputs."""
    import numpy as np

    from .sessions import session as open_session

    shapes = probe.shapes()
    try:
        session = open_session(path)
        feed_names = [i.name for i in session.get_inputs()]
        feed = {n: t.numpy() for n, t in zip(probe.names, probe.tensors) if n in feed_names}
        got = session.run(None, feed)
    except Exception as exc:  # noqa: BLE001 - ORT's own error types vary by version
        return {"passed": False, "shapes": shapes,
                "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
    per_output: dict[str, float] = {}
    passed = True
    for name, ref, value in zip(names, expected, got):
        ref_np = ref.detach().float().numpy() if ref.is_floating_point() else ref.numpy()
        if ref_np.shape != value.shape:
            passed = False
            per_output[name] = float("inf")
            continue
        diff = np.abs(value.astype(np.float64) - ref_np.astype(np.float64))
        per_output[name] = float(diff.max()) if diff.size else 0.0
        if not np.allclose(value, ref_np, atol=CHECK_ATOL, rtol=CHECK_RTOL):
            passed = False
    worst = max(per_output.values(), default=0.0)
    return {"passed": passed, "shapes": shapes, "max_abs_diff": worst, "per_output": per_output,
            "summary": f"max abs diff {worst:.3g} at {shapes}"}


def _result(target: Path, files: list[Path], exporter: str, attempts: dict[str, str],
            seconds: float, warnings_seen: list[str], source: ModelSource,
            check: dict[str, Any], s: Any) -> ExportResult:
    from . import onnxfile

    proto = onnxfile.load_proto(target)
    ins, outs = onnxfile.signature(proto)
    if not check["passed"]:
        warnings_seen.append(f"ONNX Runtime does not match PyTorch: {check.get('error') or check['summary']}")
    return ExportResult(
        path=target, exporter=exporter, fallback_reason=attempts, opset=onnxfile.opset(proto),
        inputs=ins, outputs=outs, op_histogram=onnxfile.op_histogram(proto),
        parameters=onnxfile.parameter_count(proto), file_size=total_size(files), files=files,
        export_seconds=seconds, warnings=warnings_seen, source=source, check=check,
    )


def _sample_failed(model: Any, s: Any, exc: Exception) -> Exception:
    from .errors import SampleError

    return SampleError(
        f"{type(model).__name__} fails on the sample inputs {s.shapes()} "
        f"({type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}). "
        "Pass inputs the model accepts as sample=..."
    )


def _all_failed(model: Any, flat: Any, s: Any, attempts: dict[str, str],
                errors: dict[str, BaseException], logs: dict[str, str]) -> ExportError:
    from .exporters import locate_operator, scope_of, unsupported_operator

    listing = "; ".join(f"{k}: {v}" for k, v in attempts.items())
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
            "(torch.onnx.export(..., custom_translation_table=...)).",
            operator=op, module_path=where, attempts=attempts,
        )
    if not attempts:
        attempts = {"all": "no exporter produced a model"}
    return ExportError(f"Every exporter failed: {listing}. See the lines above for each exporter's "
                       "first error; try exporter='torchscript' or exporter='dynamo' to see one in full.",
                       attempts)
