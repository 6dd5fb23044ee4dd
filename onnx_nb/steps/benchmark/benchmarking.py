"""``benchmark()``: latency per variant × backend × shape, measured the same way for every row."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError
from ...progress import Steps
from ...results.latency import LatencyRow, LatencyTable, summarize
from ...runtime.isolation import honours_isolate
from ...runtime.memory import gives_memory_back
from ...runtime.onnxfile import file_bytes
from ...runtime.timing import Clock
from .backends import BucketedTorchRunner, OpenVinoRunner, OrtRunner, TorchRunner
from .measuring import described, lineage, measure, resolved, rounds
from .roofline import CPU_BACKENDS, add_roofline, int8_file, work_gops

KEEP_SESSIONS_BELOW = 2**30  # models whose files exceed this are not kept open for the interleaved rounds


def openvino_file(obj: Any, path: Path, folder: str | Path) -> tuple[Path, str] | None:
    """For a variant whose file the OpenVINO runtime cannot read (ONNX Runtime's contrib operators), the file
    that serves that backend, made from the same export: the export itself for an optimized fp32 variant
    (OpenVINO fuses the graph on its own), the same INT8 recipe applied to the export for a quantized one
    (standard operators only). None when the file is readable as it is, or nothing can be made."""
    from ...runtime.onnxfile import contrib_ops

    contrib = contrib_ops(path, microsoft_only=True)
    reference = getattr(obj, "reference", None)
    export_path = getattr(reference, "path", None)
    if not contrib or export_path is None or contrib_ops(Path(export_path), microsoft_only=True):
        return None
    cannot = f"OpenVINO cannot read ONNX Runtime's {', '.join(contrib)}"
    recipe = getattr(obj, "recipe", None) or {}
    method = recipe.get("method")
    if method is None:
        return Path(export_path), f"ran the export {Path(export_path).name}: {cannot}; it fuses the graph itself"
    if method not in ("dynamic", "static"):
        return None
    from ..variants.quantizing import quantize

    call = getattr(getattr(obj, "remake", None), "keywords", None) or {}
    made = quantize(reference, method=method, per_channel=recipe.get("per_channel"), exclude=None, validate=False,
                    calibration=call.get("calibration") if method == "static" else None,
                    out=Path(folder) / f"{Path(path).stem}.openvino.onnx", overwrite=True)
    return made.path, (f"ran {made.path.name}: the same {method} INT8 recipe applied to the export, standard "
                       f"operators only ({cannot})")


def _models(models: Any) -> list[tuple[str, Any, Path]]:
    """(name, object, path) for each model; names from dict keys, variants, or file names."""
    if isinstance(models, Mapping):
        items = list(models.items())
    else:
        seq = models if isinstance(models, (list, tuple)) else [models]
        items = [(None, m) for m in seq]
    if not items:
        raise InvalidArgumentError("benchmark() needs at least one model: pass an .onnx path, an ExportResult, a "
                                   "variant, or a list or dict of them.")
    from ...runtime.generation_folders import decoder_file

    out = []
    for name, model in items:
        found = decoder_file(model)  # a tool's folder of one decoder file: that file, under the folder's name
        path = found or getattr(model, "path", model)
        if not isinstance(path, (str, os.PathLike)):
            raise InvalidArgumentError(
                f"Cannot benchmark a {type(model).__name__}: pass .onnx paths, ExportResults or variants "
                "(and the PyTorch model as reference=...)."
            )
        label = name or getattr(model, "name", None) or ("fp32" if hasattr(model, "exporter") else
                                                          Path(model if found is not None else path).stem)
        out.append((str(label), found or model, Path(path)))
    return out


def _backends(providers: Any) -> list[tuple[str, str | None, str]]:
    """(label, ORT provider or None for the OpenVINO runtime, unavailable reason or '')."""
    from ...runtime.providers import openvino_apart, providers_named

    want_openvino = providers == "available"
    if isinstance(providers, (list, tuple)):
        providers, want_openvino = openvino_apart(providers)
    result: list[tuple[str, str | None, str]] = []
    if providers:
        for p in providers_named(providers):
            label = f"ort-web:{p.name.split(':')[1]}" if p.name.startswith("browser:") else f"ort:{p.short}"
            result.append((label, p.name, "" if p.available else p.reason))
    if want_openvino:
        try:
            import openvino  # noqa: F401

            reason = ""
        except ImportError:
            reason = "the openvino package is not installed (pip install 'onnx-nb[openvino]')"
        result.append(("openvino-runtime:cpu", None, reason))
    return result


@gives_memory_back
@honours_isolate
def benchmark(models: Any, *, providers: Any = "available", sample: Any = None, shapes: Any = None,
              reference: Any = None, warmup: int = 5, runs: int | None = None, min_seconds: float = 1.0,
              threads: int | None = None, level: str = "all", profile: bool = False, progress: bool = True,
              clock: Clock = time.perf_counter, isolate: bool | None = None, cluster: Any = None) -> LatencyTable:
    """Latency of each model on each backend and shape, with PyTorch eager as the baseline.

    ``providers="available"`` runs every ONNX Runtime provider here plus the OpenVINO runtime when
    installed; missing ones asked for by name appear as unavailable rows. ``runs=None`` repeats
    until ``min_seconds`` (at least 10 runs). Warm-up and the first run are kept out of the statistics.
    ``cluster=`` (True, a Ray address or :class:`onnx_nb.Cluster`) measures every row on a Ray node instead
    (:mod:`onnx_nb.steps.benchmark.remote`); there ``providers="available"`` means the CPU provider: name the
    others (``["cuda", "cpu"]``) and the rows go to nodes that have them.

    Example::

        table = onnx_nb.benchmark([result, fast, int8], reference=result,
                                  shapes=[{"batch": 1}, {"batch": 8, "sequence": 128}], threads=2)
        table.to_pandas(), table.figure()
    """
    from ...runtime.cluster import as_cluster
    from ...runtime.files import scratch_dir
    from ...runtime.shapes import axis_sizes, label, make_feed, shape_specs

    if warmup < 0 or (runs is not None and runs < 1) or min_seconds < 0:
        raise InvalidArgumentError("warmup must be >= 0, runs >= 1 (or None) and min_seconds >= 0.")
    if level not in ("disable", "basic", "extended", "all"):
        raise InvalidArgumentError(f"level={level!r}: use 'disable', 'basic', 'extended' or 'all'.")
    entries = _models(models)
    on = as_cluster(cluster)
    if on is not None and profile:
        raise InvalidArgumentError("profile=True profiles on this machine only: leave out cluster= to profile.")
    backends = _backends(providers if on is None or providers != "available" else ("cpu",))
    if on is not None:  # the node says whether it has the provider
        backends = [(b, p, "") for b, p, _ in backends]
    if _has_cache(entries[0][2]) or _chained(entries[0][1]):  # prefill and decode steps, not one forward
        return _generation_table(entries, reference, backends, on, shapes, warmup, runs, min_seconds, threads, clock,
                                 progress)
    ref, feed0, axes = _reference_and_feed(reference, sample, entries)
    specs = shape_specs(shapes if shapes is not None else "sample", axis_sizes(feed0, axes), list(feed0))
    if on is not None:
        return _on_cluster(on, entries, backends, ref, feed0, axes, specs, progress,
                           {"warmup": warmup, "runs": runs, "min_seconds": min_seconds, "threads": threads,
                            "level": level})
    rows: list[LatencyRow] = []
    profiles: dict[str, Any] = {}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    skipping = ref is not None and any((getattr(obj, "runtime", None) or {}).get("unpad") for _, obj, _ in entries)
    total = len(specs) * (len(entries) * len(backends) + (1 if ref else 0) + (1 if skipping else 0) + 1)
    kept: list[tuple[LatencyRow, Any]] = []
    feeds: dict[str, dict[str, np.ndarray]] = {}  # each shape's inputs, by its label
    for_openvino: dict[Path, tuple[Path, str] | None] = {}
    # kept open to re-measure (a file of unknown size counts as large)
    small = {path: 0 < file_bytes(path) < KEEP_SESSIONS_BELOW for _, _, path in entries}
    with Steps(total, "benchmark", progress) as steps, scratch_dir("onnx-nb-prof-") as tmp:
        for spec in specs:
            feed = make_feed(feed0, axes, spec)
            tag = label(feed, axes, spec)
            feeds[tag] = feed
            batch = int(next(iter(feed.values())).shape[0]) if feed else 1
            if ref is not None:
                for label_, runner_type in [("PyTorch eager", TorchRunner)] + (
                        # padding-skip rows get a baseline with the same skip
                        [("PyTorch eager, padding skipped", BucketedTorchRunner)]
                        if skipping and "attention_mask" in feed else []):
                    steps.step(f"{label_} at {tag}")
                    row, runner = measure(label_, "torch:cpu", tag, batch, partial(runner_type, ref, feed, threads),
                                          warmup, runs, min_seconds, clock, threads)
                    rows.append(row)
                    kept.append((row, runner))
            for name, obj, path in entries:
                for backend, provider, reason in backends:
                    steps.step(f"{name} on {backend} at {tag}")
                    if reason:
                        rows.append(LatencyRow(name, backend, tag, status="unavailable", note=reason))
                        continue
                    if not provider and path not in for_openvino:  # the OpenVINO runtime: a file it can read
                        for_openvino[path] = openvino_file(obj, path, tmp)
                    row, runner = _file_row(name, obj, path, backend, provider, feed, tag, batch,
                                            for_openvino.get(path), level, (warmup, runs, min_seconds, clock, threads))
                    rows.append(row)
                    if runner is not None and small[path]:
                        kept.append((row, runner))
                    if profile and provider and row.status == "ok":
                        # A separate, profiled session: profiling slows every run, so it never
                        # touches the timed one.
                        folder = os.path.join(tmp, str(len(rows)))
                        os.makedirs(folder)
                        profiles[f"{name} · {backend} · {tag}"] = _profile(path, provider, feed, threads, level,
                                                                          folder)
            # this shape's rows in interleaved rounds, then their sessions go: one shape's sessions open at a time
            steps.step(f"interleaved rounds at {tag}")
            rounds(kept, clock, threads)
    described(entries, rows)
    notes = _table_notes(entries, load)
    roofline = _roofline(entries, rows, feeds, threads)
    return summarize(rows, profiles, notes + ([roofline] if roofline else []), lineage(entries, rows))


def _roofline(entries: list[tuple[str, Any, Path]], rows: list[LatencyRow], feeds: dict[str, dict[str, Any]],
              threads: int | None) -> str:
    """The rows' work and share of this machine's peak (:mod:`.roofline`): each file judged on the graph its lineage
    starts from (a variant's parent file, followed through the variants in the table); the note, or ""."""
    if not any(r.status == "ok" and r.backend in CPU_BACKENDS for r in rows):
        return ""  # no row the CPU's peaks judge: no graph is read
    objects = {resolved(path): obj for _name, obj, path in entries}
    roots: dict[str, str] = {}
    for name, obj, path in entries:
        here, at = Path(path), obj
        for _ in range(len(entries) + 1):
            parent = getattr(at, "parent", None)
            if parent is None or not Path(parent).is_file():
                break
            here = Path(parent)
            at = objects.get(resolved(here))
        roots[name] = str(here)
    work = {(root, tag): work_gops(Path(root), feed) for root in set(roots.values()) for tag, feed in feeds.items()}
    return add_roofline(rows, work, roots, {name: int8_file(path) for name, _, path in entries}, threads)


def _generation_table(entries: list[tuple[str, Any, Path]], reference: Any, backends: list[Any], on: Any,
                      shapes: Any, warmup: int, runs: int | None, min_seconds: float, threads: int | None,
                      clock: Clock, progress: bool) -> LatencyTable:
    """Files that generate (a decoder with its cache, files run as a chain): prefill and decode rows, against
    PyTorch eager with its cache and without (:mod:`.generation_latency`)."""
    if on is not None:
        raise InvalidArgumentError("benchmark(cluster=...) measures single-forward models; a decoder with its "
                                   "cache (prefill and decode rows) is measured on this machine only for now.")
    from .generation_latency import benchmark_generation

    source = getattr(reference, "source", None) or getattr(entries[0][1], "source", None)
    model = reference if reference is not None and not hasattr(reference, "source") else \
        getattr(source, "model", None)
    layout = getattr(source, "cache_layout", None) if model is getattr(source, "model", None) else None
    return benchmark_generation(entries, model, backends, shapes, warmup, runs, min_seconds, threads, clock,
                                progress, layout)


def _file_row(name: str, obj: Any, path: Path, backend: str, provider: Any, feed: dict[str, Any], tag: str,
              batch: int, for_openvino: tuple[Path, str] | None, level: str,
              timing: tuple[int, int | None, float, Clock, int | None]) -> tuple[LatencyRow, Any]:
    """One file's row on one backend at one shape (``provider`` None: the OpenVINO runtime, on the file made for
    it, ``for_openvino``), and its runner kept for the interleaved rounds."""
    warmup, runs, min_seconds, clock, threads = timing
    ran, why = (for_openvino or (path, "")) if not provider else (path, "")
    make: Callable[[], Any] = (partial(OrtRunner, path, provider, feed, threads, level, None,
                                       getattr(obj, "runtime", None))
                               if provider else partial(OpenVinoRunner, ran, feed, threads))
    row, runner = measure(name, backend, tag, batch, make, warmup, runs, min_seconds, clock, threads)
    if why:
        row.options["file"] = Path(ran).name
        row.note = f"{why}. {row.note}".strip()
    if row.options.get("browser"):  # which browser and which ORT Web made the row
        adapter = f", adapter {row.options['adapter']}" if row.options.get("adapter") else ""
        row.backend = f"{backend} ({row.options['browser']}, {row.options['runtime']}{adapter})"
    elif row.status == "error" and row.note.startswith("NoWebGpuError: "):  # the page has no GPU
        row.status, row.note = "unavailable", row.note.removeprefix("NoWebGpuError: ")
    return row, runner


def _table_notes(entries: list[tuple[str, Any, Path]], load: float | None) -> list[str]:
    """The load, the CPU, and what each file says of the CPU it was made for."""
    from ...runtime.cpu import file_notes, this_cpu
    from ...runtime.onnxfile import load_proto

    notes = [f"1-minute load average at start: {load:.2f} on {os.cpu_count()} cores"] if load is not None else []
    notes.append(f"CPU: {this_cpu().label}")
    for name, _obj, path in entries:  # an INT8 file made for another kind of CPU says so
        notes += [f"{name}: {note}" for note in file_notes(load_proto(path))]
    return notes


def _on_cluster(on: Any, entries: list[tuple[str, Any, Path]], backends: list[tuple[str, str | None, str]],
                ref: Any, feed0: dict[str, np.ndarray], axes: dict[str, Any], specs: list[dict[str, Any]],
                progress: bool, settings: dict[str, Any]) -> LatencyTable:
    """The same table, every row measured on a Ray node (:func:`remote.remote_rows`)."""
    from ...runtime.files import scratch_dir
    from ...runtime.shapes import label, make_feed
    from .remote import remote_rows

    cases = []
    for spec in specs:
        feed = make_feed(feed0, axes, spec)
        cases.append((label(feed, axes, spec), int(next(iter(feed.values())).shape[0]) if feed else 1, feed))
    skipping = ref is not None and any((getattr(obj, "runtime", None) or {}).get("unpad") for _, obj, _ in entries)
    torch_rows: list[tuple[str, type[TorchRunner]]] = [("PyTorch eager", TorchRunner)] + (
        [("PyTorch eager, padding skipped", BucketedTorchRunner)] if skipping and "attention_mask" in feed0 else [])
    with scratch_dir("onnx-nb-cluster-") as tmp:
        made = {path: openvino_file(obj, path, tmp) for _, obj, path in entries} \
            if any(p is None for _, p, _ in backends) else {}
        rows = remote_rows(on, entries, backends, cases, torch_rows, ref, made, settings, progress)
    nodes = sorted({r.hardware.get("summary", "") for r in rows if r.hardware})
    notes = ["Measured on a Ray cluster: " + "; ".join(nodes) + ". Speed-ups compare rows of the same node."]
    return summarize(rows, {}, notes, lineage(entries, rows))


def _reference_and_feed(reference: Any, sample: Any,
                        entries: list[tuple[str, Any, Path]]) -> tuple[Any, dict[str, np.ndarray], dict[str, Any]]:
    """PyTorch eager as the baseline when there is a reference (loaded again from its location when the result
    no longer holds it), and the inputs every row runs on, with their variable axes."""
    from ...runtime.feeds import feed_for
    from ..export.adapters.registry import adapter_of, resolve
    from ..export.machinery.references import torch_reference

    ref = None
    if reference is not None:
        source = getattr(reference, "source", None)
        adapter = adapter_of(reference) if source is not None else resolve(reference)
        if not adapter.eager or (source is not None and not source.eager):
            raise InvalidArgumentError(f"reference= sets PyTorch eager as the baseline row; this export's source is "
                                       f"{adapter.what}, with no PyTorch model: leave reference out and compare the "
                                       "files themselves.")
        if source is not None:  # an export: its model, loaded again when the result no longer holds it
            ref = torch_reference(adapter.reload(source, "benchmark"), sample, "PyTorch eager", adapter=adapter)
        else:  # the model itself, made flat and fed as its export was
            ref = adapter.reference_of_model(reference, entries[0][1], sample, label="PyTorch eager")
    if ref is not None and not hasattr(sample, "keys"):
        return ref, ref.sample, ref.axes
    feed, axes = feed_for(entries[0][2], entries[0][1], sample)
    return ref, feed, (ref.axes if ref is not None else axes)


def _chained(obj: Any) -> bool:
    """Files run together to generate (a vision-language model's): timed as generation."""
    from ..export.adapters.registry import adapter_of

    return not isinstance(obj, (str, Path)) and adapter_of(obj).step_files(obj) is not None


def _has_cache(path: Path) -> bool:
    from ...runtime.facts import file_facts
    from ...runtime.generation_folders import EXPORTER, folder_tool

    if folder_tool(path) == EXPORTER:  # its prefill and decode graphs
        return True
    try:
        return file_facts(path).generative
    except Exception:  # noqa: BLE001 - a bad file fails later, with its own clear error
        return False


PROFILE_RUNS = 10


def _profile(path: Path, provider: str, feed: dict[str, np.ndarray], threads: int | None, level: str,
             folder: str) -> Any:
    from ...runtime.profiling import parse_profile

    runner = OrtRunner(path, provider, feed, threads, level, folder)
    for _ in range(PROFILE_RUNS):
        runner()
    return parse_profile(runner.end_profiling())


