"""The PyTorch route every torch adapter shares (plain modules, Hugging Face models, YOLO, torchvision detectors,
Keras on torch): trace with each exporter into a staging folder, check the file in ONNX Runtime at a shape the sample
did not have, publish the first that matches, build the :class:`~onnx_nb.ExportResult`. The adapter supplies the
flat module and the sample (:class:`~onnx_nb.steps.export.adapters.base.Adapter`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ....errors import ExportError, OnnxNbError, UnsupportedOperatorError, first_line
from ....progress import Steps
from ....results.export import ExportCheck, ExportResult, ModelSource
from ....runtime import onnxedit, onnxfile
from ....runtime.files import check_space, total_size
from ..args import ExportArgs


def export_module(adapter: Any, source: ModelSource, args: ExportArgs, target: Path, steps: Steps) -> ExportResult:
    """The PyTorch route every torch adapter shares: the model made flat by ``adapter``, its sample, its axes
    probed, each exporter tried into a staging folder and checked in ONNX Runtime at another shape, the first that
    matches published. ``source`` is the adapter's record (the model loaded, a decoder's cache layout set)."""
    from .wrap import eval_mode, signature_module

    model = source.model
    dynamic, exporter, opset = args.dynamic, args.exporter, args.opset_or_default
    s = adapter.sample(source, args.sample, dynamic)
    warnings_seen: list[str] = list(source.load_warnings)
    with eval_mode(model):
        flat = adapter.flat(source, s.names, s.as_kwargs)
        from ..patches import upstream

        try:
            with upstream.watching() as ran:  # the classes whose forward runs: the code transformers may patch
                before = flat.discover(s.tensors)
        except OnnxNbError:
            raise
        except Exception as exc:
            raise _sample_failed(model, s, exc) from exc
        decoder = adapter.with_cache(source)
        if decoder:  # dynamo first, as for every model: the mask's length is an axis of its own (total_sequence)
            probe, after, out_axes = _cache_check(source, flat, s)
            fixed: list[Any] = []
        else:
            fixed = probe_axes(adapter.static_axes(source), flat, s) if dynamic is True else []
            probe, after, out_axes = _grown_check(s, flat, before, warnings_seen)
        source.sample = s.as_dict()
        source.input_axes = dict(s.axes)
        source.as_kwargs = s.as_kwargs
        module = signature_module(flat)
        param_bytes = sum(p.numel() * p.element_size() for p in model.parameters()) + \
            sum(b.numel() * b.element_size() for b in model.buffers())
        check_space(target.parent, param_bytes)
        order = ["dynamo", "torchscript"] if exporter == "auto" else [exporter]
        theirs = upstream.registered_for(model, ran)
        if order[0] == "dynamo" and theirs:  # transformers' patches for the code this model runs, then onnx-nb's
            order.insert(0, UPSTREAM)
        logs: dict[str, str] = {}  # each exporter's own log, for the refusal when every one failed
        big = param_bytes > onnxfile.EXTERNAL_DATA_BYTES

        from .attempts import first_that_passes
        from .second_look import second_look
        from .torch_exporters import check_file
        from .torch_exporters import first_line as exporter_error

        def attempt(s: Any, out_axes: Any, probe: Any, after: Any, given: Any = None) -> Any:
            def write(name: str, staged: Path) -> tuple[list[Any], list[str], dict[str, list[str]]]:
                native: list[str] = []
                branches: list[Any] = []
                said: list[str] = []  # this exporter's warnings: only the published file's are the result's
                try:
                    patched = run_exporter(name, module, s, flat, staged, {**s.axes, **out_axes}, opset, big, said,
                                           native, branches, theirs)
                finally:
                    logs[name] = "".join(native)
                return branches, said, patched

            def judged(staged: Path, at: Any, want: Any) -> Any:  # a numbers failure looked at again
                verdict = check_file(staged, at, want, flat.output_names)
                failed = not verdict.get("passed") and not verdict.get("error")
                return second_look(verdict, staged, flat, at, want, looked) if failed else verdict

            def check(_name: str, staged: Path, _written: Any) -> Any:
                verdict = judged(staged, probe, after)
                if given is None or not verdict.get("passed"):
                    return verdict
                at_given = judged(staged, *given)  # and at the row given
                return verdict if at_given.get("passed") else at_given

            return first_that_passes(order, target, write, check, steps, verb="exporting with", against="PyTorch",
                                     describe=exporter_error)

        looked: dict[int, Any] = {}  # per probe: PyTorch's second run, and its run in float64
        done = attempt(s, out_axes, probe, after)
        narrowed = None if decoder or dynamic is not True or (done.name and done.check.get("passed")) or \
            _no_translation(done) else batch_only(s, done.attempts)
        if narrowed is not None:  # Swin's windows: dynamo cannot view them at a symbolic size, TorchScript's trace
            steps.add(4)  # fixed their count; with the image size fixed, dynamo's file matches
            narrow, also, how = narrowed
            import torch

            with torch.no_grad():  # the narrowed sample may hold two rows where the given one held one
                same = all(a is b for a, b in zip(narrow.tensors, s.tensors))
                before2 = before if same else flat.reference(*narrow.tensors)
            probe2, after2, out2 = _grown_check(narrow, flat, before2, warnings_seen)
            retry = attempt(narrow, out2, probe2, after2, None if same else (s, before))
            if retry.name and retry.check.get("passed"):
                retry.attempts = {**{f"{k}, {how}": v for k, v in done.attempts.items()}, **retry.attempts}
                # the later steps run at the user's own sample (one row, where the file was written from two)
                source.sample, source.input_axes = s.as_dict(), dict(narrow.axes)
                done, s, fixed = retry, narrow, [*fixed, *also]
        if done.name:
            branches, said, patched = done.written
            warnings_seen.extend(w for w in said if w not in warnings_seen)
            result = make_result(target, done.files, "dynamo" if done.name == UPSTREAM else done.name, done.attempts,
                                 done.seconds, warnings_seen, source, done.check, s, fixed, dynamic,
                                 unverified_of(branches, done.attempts))
            result.patches = patched
            return result
    raise _all_failed(model, flat, s, done.attempts, done.errors, logs, source.instead)


def _no_translation(done: Any) -> bool:
    """Whether every exporter stopped on an operator with no ONNX translation (DINOv2's antialiased bicubic
    upsample): fixing the image size cannot help there, and a retry would only double the failing export's time."""
    from .torch_exporters import unsupported_operator

    return not done.name and len(done.errors) == len(done.attempts) and \
        all(unsupported_operator(str(e)) for e in done.errors.values())


def batch_only(s: Any, attempts: dict[str, str]) -> tuple[Any, list[Any], str] | None:
    """The sample with only its batch axes dynamic (two rows where it had one), the other axes it had dynamic as
    fixed ones, saying why (``attempts``: what each exporter did with them dynamic), and what the first try had
    that this one has not; None when it had neither another axis to give up nor a single row."""
    from .inputs import FixedAxis, Sample

    given_up = [(n, a) for n, spec in s.axes.items() for a in spec if a != 0]
    batched = {n for n, spec in s.axes.items() if 0 in spec}
    # a batch of one: torch.export fixes an axis of size 1 that the code branches on (VOLO's), where the same
    # code at two rows keeps it symbolic; the rows repeated, as the probe repeats them
    single = bool(batched) and all(t.shape[0] == 1 for n, t in zip(s.names, s.tensors) if n in batched)
    if not given_up and not single:
        return None
    said = "; ".join(f"{k}: {v.splitlines()[0][:120] if v else v}" for k, v in attempts.items())
    why = f"with it dynamic no exporter's file matched PyTorch ({said})"
    tensors = [t.repeat(2, *[1] * (t.dim() - 1)) if single and n in batched else t
               for n, t in zip(s.names, s.tensors)]
    narrow = Sample(list(s.names), list(tensors), s.as_kwargs, {n: {0: s.axes[n][0]} for n in batched})
    sizes = dict(zip(s.names, s.tensors))
    how = ", ".join([*(["sizes dynamic"] if given_up else []), *(["from one row"] if single else [])])
    return narrow, [FixedAxis(n, a, int(sizes[n].shape[a]), why) for n, a in given_up], how


def _cache_check(source: ModelSource, flat: Any, s: Any) -> tuple[Any, Any, Any]:
    """A second decode-step sample (other batch, new and cached lengths) and PyTorch's outputs there, for the
    export's check; the output axes of a cache graph are known."""
    import torch

    from ..caches import decoder as decoder_cache
    from .inputs import Sample

    layout = source.cache_layout
    other = decoder_cache.cache_sample(source.model, layout, seed=1, batch=3, sequence=2, past=6)
    probe = Sample(list(s.names), [other[n] for n in s.names], False, dict(s.axes))
    with torch.no_grad():
        after = flat.reference(*probe.tensors)
    axes = decoder_cache.cache_axes(layout)
    return probe, after, {n: axes[n] for n in flat.output_names} if s.axes else {}


def probe_axes(static: dict[str, str], flat: Any, s: Any) -> list[Any]:
    """Make every input axis that can vary dynamic (by running the model at a second size along it), but the ones
    ``static`` names (axis -> why); the ones that stay fixed come back with the reason."""
    from .inputs import probe_axes as probe

    return probe(lambda tensors: flat.flat(*tensors), s, static)


def _grown_check(s: Any, flat: Any, before: tuple[Any, ...], warnings_seen: list[str]) -> tuple[Any, Any, Any]:
    """The sample with every dynamic axis longer (or the module's own ``other_sample()``), PyTorch's outputs there,
    and the output axes that follow the input axes (found by comparing the two runs)."""
    import torch

    from . import inputs

    if not s.axes:
        return s, before, {}
    # a module whose inputs hang together (an image's patches and the tensors its grid gives) makes its own
    own = getattr(flat.model, "other_sample", None)
    other = own() if callable(own) else None
    grown = inputs.Sample(list(s.names), [other[n] for n in s.names], s.as_kwargs, dict(s.axes)) \
        if other is not None else inputs.grow(s)
    try:
        with torch.no_grad():
            after = flat.reference(*grown.tensors)
    except Exception as exc:  # noqa: BLE001 - reported, export goes on statically checked
        warnings_seen.append(f"The PyTorch model itself fails at shapes {grown.shapes()} "
                             f"({type(exc).__name__}: {first_line(exc, 200)}); checked at the sample's shape only.")
        return s, before, {}
    return grown, after, inputs.output_axes(s, grown, before, after, flat.output_names)


def unverified_of(branches: list[Any], attempts: dict[str, str]) -> list[str]:
    """Why the file is not verified: the trace recorded one branch of data-dependent control flow."""
    from .branches import FIX_HINT, data_dependent_failure

    found = [b.text() for b in branches]
    if branches or not data_dependent_failure(attempts.get("dynamo", "")):
        return found
    return [f"dynamo failed on a branch that depends on the inputs' values ({attempts['dynamo'][:200]}) and the "
            f"TorchScript fallback traced only the path this sample took. {FIX_HINT}"]


UPSTREAM = "dynamo with transformers' patches"  # the attempt that lends transformers' own patch set


def attempt_of(export: Any) -> str:
    """The attempt that wrote ``export``'s file (an ExportResult), to write it again (the search for a first
    diverging node): :data:`UPSTREAM` for a file traced under transformers' patch set, else its exporter."""
    return UPSTREAM if export.patch_set == "transformers" else export.exporter


def run_exporter(name: str, module: Any, s: Any, flat: Any, staged: Path,
                  axes: dict[str, dict[int, str]], opset: int, external: bool,
                  warnings_seen: list[str], native: list[str], branches: list[Any] | None = None,
                  theirs: list[str] | None = None) -> dict[str, list[str]]:
    """Run one exporter into ``staged``; returns, per patch, what it replaced (dynamo: :data:`UPSTREAM` lends
    transformers' patch set, ``theirs`` the patches it writes for this model (read from the model where not given),
    plain ``dynamo`` onnx-nb's). TorchScript traces are watched for data-dependent branches (appended to
    ``branches``): such a file only computes the path the sample took."""
    from ..patches import upstream
    from .branches import BranchWatch
    from .torch_exporters import export_dynamo, export_torchscript, quiet

    args = tuple(s.tensors)
    existing = set(staged.parent.iterdir())
    patched: dict[str, list[str]] = {}
    with quiet(warnings_seen, native):
        if name in ("dynamo", UPSTREAM):
            def export() -> None:
                patched.clear()
                patched.update(export_dynamo(
                    module, args, staged, s.names, flat.output_names, s.axes, opset, external,
                    related=bool(getattr(flat.model, "related_axes", False)),
                    upstream_patches=(theirs or upstream.registered_for(flat.model)) if name == UPSTREAM else None))

            dynamo_or_eager(flat.model, warnings_seen, export)
        else:
            with BranchWatch(args, flat.model) as watch:
                export_torchscript(module, args, staged, s.names, flat.output_names, axes, opset)
            if branches is not None:
                branches.extend(watch.found)
    import onnx

    proto = onnxfile.load_proto(staged)
    # a model's own metadata (YOLO's, in Ultralytics' keys) and what the source learnt for the runners
    own = {**(getattr(flat.model, "onnx_metadata", None) or {}), **getattr(flat, "onnx_metadata", {})}
    if own:
        onnx.helper.set_model_props(proto, {**{p.key: p.value for p in proto.metadata_props}, **own})
    onnxedit.name_folded_weights(proto)  # dynamo's val_99: the Linear weight it came from, transposed
    onnxedit.strip_prefix(proto, "inner.model.")
    onnxedit.tie_transposed(proto)  # a tied embedding and LM head: stored once
    known = {n for spec in s.axes.values() for n in spec.values()}
    # dynamo names derived lengths itself ("((audio_length//10)) - 1"); keep those.
    onnxedit.name_dims(proto, axes if name == "torchscript" else
                       {k: {a: n for a, n in v.items() if n in known} for k, v in axes.items()})
    data = staged.with_name(staged.name + ".data")
    onnxedit.consolidate_external(proto, staged.parent, data.name)  # one data file, not one loose file per weight
    for stray in set(staged.parent.iterdir()) - existing - {staged, data}:  # weights dropped since (tied ones)
        if stray.is_file():
            stray.unlink()
    onnx.save(proto, str(staged))
    return patched


EAGER_SAID = "Traced with eager attention (matmul, softmax, matmul):"


def dynamo_or_eager(model: Any, warnings_seen: list[str], export: Callable[[], Any]) -> None:
    """Run ``export`` (a dynamo export of ``model`` or a wrapper around it); when it stops at a view after the
    attention (:func:`_attention_strides`), once more with eager attention (transformers' or timm's), saying so."""
    try:
        export()
    except Exception as exc:
        from ..patches.attention import attention_holder, eager_attention, fused, runs_eager

        if not _attention_strides(exc) or (attention_holder(model) is None and not fused(model)) or \
                runs_eager(model, timm=True):
            raise  # not that failure, or eager attention already (a retry would fail the same way)
        with eager_attention(model, timm=True):  # the decomposed attention's layout, not the fused kernel's
            export()
        if not any(w.startswith(EAGER_SAID) for w in warnings_seen):  # once, though a retry meets it again
            warnings_seen.append(f"{EAGER_SAID} with the model's own attention, dynamo could not make a view at a "
                                 f"symbolic size once it decomposed the graph ({_attention_strides(exc)}).")


def _attention_strides(exc: BaseException) -> str | None:
    """The view dynamo could not make when, once torch's scaled_dot_product_attention is decomposed, a view after
    the attention meets other strides (its fused kernel lays the output out as the view expects, the decomposition
    does not: Inkling's ``reshape`` of the attention output); None for any other failure. Eager attention has no
    such step."""
    import re

    text = str(exc)
    found = re.search(r"Cannot view a tensor with shape [^!]*!", text)
    return found.group(0) if found and "decompose" in text else None


def make_result(target: Path, files: list[Path], exporter: str, attempts: dict[str, str],
            seconds: float, warnings_seen: list[str], source: ModelSource,
            check: ExportCheck, s: Any, fixed: list[Any], dynamic: Any, unverified: list[str]) -> ExportResult:
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
    from ....errors import SampleError

    return SampleError(
        f"{type(model).__name__} fails on the sample inputs {s.shapes()} "
        f"({type(exc).__name__}: {first_line(exc)}). "
        "Pass inputs the model accepts as sample=..."
    )


def _all_failed(model: Any, flat: Any, s: Any, attempts: dict[str, str],
                errors: dict[str, BaseException], logs: dict[str, str], instead: str) -> ExportError:
    from .torch_exporters import locate_operator, scope_of, unsupported_operator

    listing = "; ".join(f"{k}: {v}" for k, v in attempts.items())
    lean = f" {instead}" if instead else ""  # another route's offer (the source record's)
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
