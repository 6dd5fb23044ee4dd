"""``check_parity(..., cluster=...)``: the ONNX side of every case run on a Ray node
(:mod:`onnx_nb.runtime.cluster`), one job per provider and target; the comparison with the reference stays
here, so the report is judged exactly as a local one, its rows labelled with the node that ran them."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from ...results.parity import Row
from ...runtime.cluster import Cluster, Job
from ...runtime.local_cluster import describe


def feed_key(feed: dict[str, np.ndarray]) -> str:
    """The same inputs, the same key, on any machine."""
    digest = hashlib.sha256()
    for name in sorted(feed):
        value = np.ascontiguousarray(feed[name])
        digest.update(f"{name}:{value.dtype.str}:{value.shape}".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def run_feeds(bundle: Any, provider: str, feeds: list[dict[str, np.ndarray]],
              runtime: dict[str, Any] | None) -> dict[str, Any]:
    """On the node (a Ray job): open the file on ``provider`` and run every case; errors are kept per case."""
    import onnxruntime as ort

    from ...runtime.padding import open_session
    from ...runtime.shapes import cast_feed

    if provider not in ort.get_available_providers():
        return {"unavailable": f"this node's onnxruntime has no {provider}"}

    class _Model:  # what open_session reads: the file and its runtime (the padding skip)
        path = bundle.materialize()

    _Model.runtime = runtime or {}  # type: ignore[attr-defined]
    sess = open_session(_Model, provider)
    results: dict[str, Any] = {}
    for feed in feeds:
        cast = cast_feed(sess, feed)
        try:
            results[feed_key(cast)] = ("ok", list(sess.run(None, cast)))
        except Exception as exc:  # noqa: BLE001 - ONNX Runtime's message goes back as the row's note
            results[feed_key(cast)] = ("error", str(exc))
    return {"inputs": [(i.name, list(i.shape), i.type) for i in sess.get_inputs()],
            "outputs": [(o.name, list(o.shape), o.type) for o in sess.get_outputs()], "results": results}


class ReplayedSession:
    """What the node's session answered, served like a session: ``run`` returns the node's outputs for the same
    inputs, or raises the node's ONNX Runtime error."""

    def __init__(self, answer: dict[str, Any]) -> None:
        from ...runtime.onnxfile import NodeArg

        self._inputs = [NodeArg(*i) for i in answer["inputs"]]
        self._outputs = [NodeArg(*o) for o in answer["outputs"]]
        self._results = answer["results"]

    def get_inputs(self) -> list[Any]:
        return self._inputs

    def get_outputs(self) -> list[Any]:
        return self._outputs

    def run(self, output_names: Any, feed: dict[str, np.ndarray], run_options: Any = None) -> list[np.ndarray]:
        kind, value = self._results.get(feed_key(feed), ("error", "the node ran no case with these inputs"))
        if kind == "error":
            raise RuntimeError(value)
        return list(value)


def remote_sessions(cluster: Cluster, model: Any, wanted: list[Any], feeds: list[dict[str, np.ndarray]],
                    progress: bool) -> tuple[list[tuple[str, Any, str]], list[Row], list[str]]:
    """(label, session, provider) per provider and target that ran; rows for those that could not; a note per
    node with its hardware."""
    path = getattr(model, "path", model)
    bundle = cluster.ship(path)
    jobs = [Job((p, target), f"{p.short} [{target}]" if target != "any" else p.short, run_feeds,
                (bundle, p.name, feeds, getattr(model, "runtime", None)), resources)
            for p in wanted for target, resources in cluster.placements(p.short)]
    slots, rows, nodes = [], [], {}
    for outcome in cluster.run(jobs, title="parity on the cluster", progress=progress):
        p, target = outcome.key
        where = "" if target == "any" else f" [{target}]"
        answer = outcome.value or {}
        if outcome.value is None or "unavailable" in answer:
            status = "unavailable" if outcome.unavailable or "unavailable" in answer else "error"
            note = answer.get("unavailable", outcome.error)
            label = f"{p.short}{where}" + (f" @ {outcome.node['label']}" if outcome.node else "")
            rows.append(Row("*", "*", label, status, note=note))
            continue
        label = f"{p.short} @ {outcome.node['label']}{where}"
        nodes[outcome.node["label"]] = describe(outcome.node)
        slots.append((label, ReplayedSession(answer), p.name))
    notes = [f"Run on a Ray cluster: {'; '.join(nodes.values())}."] if nodes else []
    return slots, rows, notes
