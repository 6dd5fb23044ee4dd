"""``autotune(..., cluster=...)``: each candidate built and validated as a Ray job (:mod:`onnx_nb.runtime.cluster`),
side by side on the nodes; candidates that start from another (INT8 and INT4 from the fused graph) go in a second
wave. The files come back through the object store and are written into autotune's folder atomically; the returned
variants point at them and at the caller's own export."""

from __future__ import annotations

import shutil
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

from ...runtime.cluster import Cluster, Job
from ...runtime.local_cluster import describe


def step_named(step: str) -> Any:
    from .optimizing import optimize
    from .quantizing import quantize

    return {"optimize": optimize, "quantize": quantize}[step]


def build_candidate(step: str, model: Any, model_files: Any, parent: Any, parent_files: Any,
                    kwargs: dict[str, Any], file_name: str) -> tuple[Any, dict[str, bytes]]:
    """On the node (a Ray job): the export's (and the parent candidate's) files written here, the candidate built
    into a scratch folder; its Variant and its files' bytes go back."""
    from ...runtime.onnxfile import files_of, load_proto

    model.path = model_files.materialize()
    start = model
    if parent is not None:
        parent.path, parent.reference, parent.parent = parent_files.materialize(), model, model.path
        start = parent
    scratch = Path(tempfile.mkdtemp(prefix="onnx-nb-candidate-"))
    try:
        made = step_named(step)(start, **kwargs, out=scratch / file_name, overwrite=True)
        files = {p.name: p.read_bytes() for p in files_of(made.path, load_proto(made.path))}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    made.remake = None  # rebuilt here, against the caller's objects
    return made, files


def build_on_cluster(cluster: Cluster, plan: list[tuple[str, str, dict[str, Any], str | None, str]], model: Any,
                     folder: Path, common: dict[str, Any], progress: bool) -> list[tuple[str, Any, str]]:
    """(name, variant or None, error) per candidate, in the plan's order."""
    cluster.connect()
    shared = cluster.put(model)
    export_files = cluster.ship(model.path)
    done: dict[str, tuple[Any, str]] = {}
    waves = [[c for c in plan if c[3] is None], [c for c in plan if c[3] is not None]]
    for wave in waves:
        jobs = []
        for name, step, kwargs, parent_name, tag in wave:
            parent = done.get(parent_name or "", (None, ""))[0]
            args = (step, shared, export_files, parent, cluster.ship(parent.path) if parent is not None else None,
                    {**kwargs, **common}, f"{tag}.onnx")
            jobs.append(Job(name, f"building {name}", build_candidate, args, cluster.placements("cpu")[0][1]))
        for outcome in cluster.run(jobs, title="autotune candidates on the cluster", progress=progress):
            if outcome.value is None:
                done[outcome.key] = (None, outcome.error)
                continue
            variant, files = outcome.value
            done[outcome.key] = (_received(variant, files, folder, model, done, plan, outcome.key), "")
            variant.recipe = {**variant.recipe, "built_on": describe(outcome.node)}
    return [(name, *done.get(name, (None, "not built"))) for name, *_ in plan]


def _received(variant: Any, files: dict[str, bytes], folder: Path, model: Any, done: dict[str, tuple[Any, str]],
              plan: list[tuple[str, str, dict[str, Any], str | None, str]], name: str) -> Any:
    """The variant as if built here: its files written into ``folder`` (staged, then renamed into place), its
    links pointing at the caller's export and parent candidate."""
    from ...runtime.files import publish, staging_dir
    from .quantizing import quantize

    entry = next(c for c in plan if c[0] == name)
    parent = done.get(entry[3] or "", (None, ""))[0]
    target = folder / f"{entry[4]}.onnx"
    with staging_dir(target) as staged:
        for file_name, data in files.items():
            (staged / file_name).write_bytes(data)
        publish(staged / target.name, target)
    variant.path = target
    variant.reference, variant.source = model, getattr(model, "source", None)
    variant.origin = parent if parent is not None else model
    variant.parent = Path(getattr(variant.origin, "path", model.path))
    if entry[1] == "quantize":  # quant_debug's "run it again without these nodes", here
        variant.remake = partial(quantize, variant.origin, **{**entry[2]}, out=target, overwrite=True)
    return variant
