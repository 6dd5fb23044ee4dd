"""``benchmark(..., cluster=...)``: every (variant × backend × shape) row as a job on a Ray node
(:mod:`onnx_nb.runtime.cluster`), measured there exactly as here (:func:`measuring.measure`, then its brief
re-measure), and labelled with the node that measured it. A target's rows, its PyTorch baseline included, are
pinned to one node and run there one at a time; speed-ups compare rows of the same node only."""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from ...results.latency import LatencyRow
from ...runtime.cluster import Cluster, Job
from ...runtime.local_cluster import describe
from .measuring import measure, rounds


def onnx_row(name: str, backend: str, provider: str | None, bundle: Any, feed: dict[str, np.ndarray], tag: str,
             batch: int, settings: dict[str, Any]) -> LatencyRow:
    """One ONNX row, on the node this runs on (a Ray job)."""
    from .backends import OpenVinoRunner, OrtRunner

    path = bundle.materialize()
    threads = settings["threads"]
    if provider:
        import onnxruntime as ort

        if provider not in ort.get_available_providers():
            return LatencyRow(name, backend, tag, status="unavailable",
                              note=f"this node's onnxruntime has no {provider}")
        make: Any = partial(OrtRunner, path, provider, feed, threads, settings["level"], None, settings["runtime"])
    else:
        make = partial(OpenVinoRunner, path, feed, threads)
    return _measured(name, backend, tag, batch, make, settings)


def torch_row(label: str, runner_type: type, reference: Any, feed: dict[str, np.ndarray], tag: str, batch: int,
              settings: dict[str, Any]) -> LatencyRow:
    """The PyTorch eager baseline, on the node this runs on (a Ray job)."""
    return _measured(label, "torch:cpu", tag, batch, partial(runner_type, reference, feed, settings["threads"]),
                     settings)


def _measured(name: str, backend: str, tag: str, batch: int, make: Any, settings: dict[str, Any]) -> LatencyRow:
    row, runner = measure(name, backend, tag, batch, make, settings["warmup"], settings["runs"],
                          settings["min_seconds"], time.perf_counter, settings["threads"])
    if runner is not None:
        rounds([(row, runner)], time.perf_counter, settings["threads"])
        row.rounds_ms = []  # timed alone in its own job: nothing to pair with another row's rounds
    return row


def remote_rows(cluster: Cluster, entries: list[tuple[str, Any, Path]], backends: list[tuple[str, str | None, str]],
                cases: list[tuple[str, int, dict[str, np.ndarray]]], torch_rows: list[tuple[str, type[Any]]],
                reference: Any, openvino_files: dict[Path, tuple[Path, str] | None], settings: dict[str, Any],
                progress: bool) -> list[LatencyRow]:
    """Every row of the table measured on the cluster: per target, per shape, the baselines then each model on
    each backend. Rows no node can run are 'unavailable' with the reason; failed jobs are 'error' rows."""
    cluster.connect()
    ref = cluster.put(reference) if reference is not None else None
    shipped: dict[Path, Any] = {}
    jobs: list[Job] = []
    for backend_label, provider, _reason in [("torch:cpu", None, ""), *backends]:
        for target, resources in cluster.placements(backend_label):
            pin = cluster.node_for(resources)
            for tag, batch, feed in cases:
                where = "" if target == "any" else f" [{target}]"
                if backend_label == "torch:cpu":
                    jobs += [Job((label, backend_label, tag, target), f"{label} at {tag}{where}", torch_row,
                                 (label, runner, ref, feed, tag, batch, settings), resources, pin)
                             for label, runner in (torch_rows if ref is not None else [])]
                    continue
                for name, obj, path in entries:
                    ran, why = (openvino_files.get(path) or (path, "")) if provider is None else (path, "")
                    if ran not in shipped:
                        shipped[ran] = cluster.ship(ran)
                    jobs.append(Job((name, backend_label, tag, target, why, Path(ran).name if why else ""),
                                    f"{name} on {backend_label} at {tag}{where}", onnx_row,
                                    (name, backend_label, provider, shipped[ran], feed, tag, batch,
                                     {**settings, "runtime": getattr(obj, "runtime", None)}),
                                    resources, pin))
    rows = []
    for outcome in cluster.run(jobs, title="benchmark on the cluster", progress=progress):
        name, backend, tag, target = outcome.key[:4]
        where = "" if target == "any" else f" [{target}]"
        if outcome.value is None:
            rows.append(LatencyRow(name, backend + where, tag,
                                   status="unavailable" if outcome.unavailable else "error", note=outcome.error))
            continue
        row: LatencyRow = outcome.value
        if len(outcome.key) > 4 and outcome.key[4]:  # OpenVINO ran a file made for it
            row.options["file"] = outcome.key[5]
            row.note = f"{outcome.key[4]}. {row.note}".strip()
        row.node = outcome.node["label"] + where
        row.backend = f"{row.backend} @ {row.node}"
        row.hardware = dict(outcome.node, summary=describe(outcome.node))
        rows.append(row)
    return rows
