"""Rows measured where the hardware is: a Ray cluster behind ``cluster=`` on ``benchmark()``,
``check_parity()`` and ``autotune()``.

Ray is imported here only, and only when ``cluster=`` is given. Each job (one latency row, one parity
session, one autotune candidate) goes to a node that offers the Ray resources its row needs: a GPU for
CUDA or TensorRT rows, the custom resources a :class:`Cluster` target names (``ray start
--resources='{"xeon": 1}'``). Model files travel through Ray's object store as bytes (the ``.onnx`` and its
external data), written once per node into a cache folder named by their hash; every result comes back
with the hardware of the node that made it, so rows from different machines are never mistaken for each
other. A job whose resources no live node offers is reported, not queued; a node that dies fails its rows
with the reason (after Ray's retry, where running again is safe); Ctrl-C cancels every remote job.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ClusterError, InvalidArgumentError, telling_lines
from .local_cluster import node_info

# Ray resources a row on these backends needs by default (``Cluster(needs=...)`` adds or replaces them)
DEFAULT_NEEDS: dict[str, dict[str, float]] = {"cuda": {"GPU": 1}, "tensorrt": {"GPU": 1}, "ort:cuda": {"GPU": 1},
                                              "ort:tensorrt": {"GPU": 1}}
FEASIBLE_EVERY_S = 2.0  # how often queued jobs are checked against the live nodes


@dataclass
class Cluster:
    """Where and how remote jobs run.

    ``address``: a running cluster (``"auto"``: the one ``ray start`` made on this machine, or
    ``"ray://host:10001"``, ``"host:6379"``); ``None`` starts a private Ray on this machine. When Ray is
    already initialised (``ray.init(address=...)`` in the notebook), that connection is used as it is.
    ``targets``: name -> Ray resources; every row runs once per target (``{"xeon": {"xeon": 1},
    "gpu": {"GPU": 1}}``), default one target that any node may serve. ``needs``: backend -> extra resources
    (defaults: :data:`DEFAULT_NEEDS`). ``cpus``: CPUs each job reserves (give as many as its ``threads``).
    ``timeout_s``: a job not done by then is cancelled and its rows fail with the reason. ``retries``: Ray's
    retries of a job whose worker or node died. ``runtime_env``: Ray's, e.g. ``{"pip": ["onnx-nb[hf]"]}``
    for nodes that lack onnx-nb.

    Example::

        cluster = onnx_nb.Cluster("ray://head:10001")
        onnx_nb.benchmark([result, int8], providers=["cuda", "cpu"], cluster=cluster)
    """

    address: str | None = "auto"
    targets: Mapping[str, Mapping[str, float]] | None = None
    needs: Mapping[str, Mapping[str, float]] | None = None
    cpus: float = 1.0
    timeout_s: float = 900.0
    retries: int = 1
    runtime_env: Mapping[str, Any] | None = None
    _shipped: dict[tuple[str, int, int], Any] = field(default_factory=dict, repr=False, compare=False)

    def connect(self) -> Any:
        """The ``ray`` module, initialised (a clear :class:`ClusterError` when the cluster cannot be reached)."""
        try:
            import ray
        except ImportError as exc:
            raise ClusterError("cluster= needs Ray: pip install 'onnx-nb[ray]'.") from exc
        if not ray.is_initialized():
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            try:
                import logging

                extra: dict[str, Any] = {} if self.address else {"include_dashboard": False}
                ray.init(address=self.address, runtime_env=dict(self.runtime_env or {}) or None,
                         logging_level=logging.ERROR, log_to_driver=False, **extra)
            except Exception as exc:
                raise ClusterError(
                    f"Cannot reach a Ray cluster at {self.address!r}: {telling_lines(exc, 300)}. Start one with "
                    "`ray start --head` (and `ray start --address=HEAD:6379` on each worker), or pass "
                    "cluster=onnx_nb.Cluster(address=None) for a private one on this machine.") from exc
        return ray

    def placements(self, backend: str) -> list[tuple[str, dict[str, float]]]:
        """(target name, Ray resources) for every place a row on ``backend`` runs."""
        needs = {**DEFAULT_NEEDS, **{k.lower(): dict(v) for k, v in (self.needs or {}).items()}}
        extra = needs.get(backend.lower(), needs.get(backend.split(":")[-1].lower(), {}))
        targets = dict(self.targets or {"any": {}})
        if not targets:
            raise InvalidArgumentError("Cluster(targets={}) names no target: leave it out, or name at least one.")
        return [(name, {"CPU": self.cpus, **dict(resources), **extra}) for name, resources in targets.items()]

    def unmet(self, resources: Mapping[str, float]) -> str:
        """Why no live node can run a job that needs ``resources`` ('' when one can)."""
        import ray

        alive = [n for n in ray.nodes() if n.get("Alive")]
        for node in alive:
            have = node.get("Resources", {})
            if all(have.get(k, 0.0) >= v for k, v in resources.items() if v):
                return ""
        offered = sorted({k for n in alive for k in n.get("Resources", {})
                          if not k.startswith(("node:", "object_store", "memory", "accelerator_type"))})
        return (f"no live node in the Ray cluster offers {dict(resources)} ({len(alive)} node"
                f"{'s' if len(alive) != 1 else ''} alive, offering {', '.join(offered) or 'nothing'}); start a node "
                "with those resources (ray start --resources=...) or change Cluster(targets=..., needs=...)")

    def ship(self, path: str | os.PathLike[str]) -> Any:
        """An object-store reference to the model's files (the .onnx and its external data), put once."""
        from .onnxfile import files_of, load_proto

        path = Path(path)
        stat = path.stat()
        key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
        if key not in self._shipped:
            import ray

            files = {p.name: p.read_bytes() for p in files_of(path, load_proto(path))}
            digest = hashlib.sha256()
            for name in sorted(files):
                digest.update(name.encode() + b"\0" + files[name])
            self._shipped[key] = ray.put(Bundle(path.name, digest.hexdigest()[:20], files))
        return self._shipped[key]

    def put(self, value: Any) -> Any:
        """An object-store reference to ``value`` (a PyTorch reference, inputs), shared by every job that uses it."""
        return self.connect().put(value)

    def node_for(self, resources: Mapping[str, float]) -> str | None:
        """The live node (its id) that a target's timed rows are pinned to: the first, by id, offering
        ``resources``; so a target's baseline and its ONNX rows come from the same machine."""
        import ray

        for node in sorted((n for n in ray.nodes() if n.get("Alive")), key=lambda n: n["NodeID"]):
            have = node.get("Resources", {})
            if all(have.get(k, 0.0) >= v for k, v in resources.items() if v):
                return str(node["NodeID"])
        return None

    def run(self, jobs: list[Job], *, title: str = "cluster", progress: bool = True) -> list[Outcome]:
        """Run every job on a node that offers its resources; outcomes in the jobs' order. Jobs pinned to a node
        (timed rows) run there one at a time, so no two timings share its cores. Never hangs: jobs no live node
        can run fail at once or as soon as their node is gone, the rest by ``timeout_s``; Ctrl-C cancels them."""
        from ..progress import Steps

        ray = self.connect()
        outcomes: list[Outcome | None] = [None] * len(jobs)
        waiting: dict[str | None, list[int]] = {}  # per pinned node, the jobs not yet sent (None: not pinned)
        pending: dict[Any, tuple[int, float]] = {}
        with Steps(len(jobs), title, progress) as steps:
            for i, job in enumerate(jobs):
                why = self.unmet(job.resources)
                if why:
                    outcomes[i] = Outcome(job.key, None, why, {}, unavailable=True)
                    steps.step(f"{job.what}: no node for it")
                else:
                    waiting.setdefault(job.pin, []).append(i)
            try:
                self._send(ray, jobs, waiting, pending)
                self._wait(ray, jobs, waiting, pending, outcomes, steps)
            except BaseException:  # Ctrl-C (KeyboardInterrupt) or anything else: no job keeps running
                for ref in pending:
                    ray.cancel(ref, force=True)
                raise
        return [o for o in outcomes if o is not None]

    def _send(self, ray: Any, jobs: list[Job], waiting: dict[str | None, list[int]],
              pending: dict[Any, tuple[int, float]]) -> None:
        busy = {jobs[i].pin for i, _ in pending.values() if jobs[i].pin}
        remote = ray.remote(_call)
        for pin, queue in waiting.items():
            while queue and (pin is None or pin not in busy):
                i = queue.pop(0)
                options = _ray_options(jobs[i].resources)
                if pin is not None:
                    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

                    options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=pin, soft=False)
                    busy.add(pin)
                ref = remote.options(max_retries=self.retries, retry_exceptions=False, **options).remote(
                    jobs[i].fn, *jobs[i].args)
                pending[ref] = (i, time.monotonic())

    def _wait(self, ray: Any, jobs: list[Job], waiting: dict[str | None, list[int]],
              pending: dict[Any, tuple[int, float]], outcomes: list[Outcome | None], steps: Any) -> None:
        checked = time.monotonic()
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
            for ref in done:
                i, _start = pending.pop(ref)
                outcome = outcomes[i] = _outcome(ray, jobs[i], ref)
                steps.step(f"{jobs[i].what} on {outcome.node['label']}" if outcome.node else f"{jobs[i].what} failed")
            now = time.monotonic()
            check = now - checked > FEASIBLE_EVERY_S
            alive = {str(n["NodeID"]) for n in ray.nodes() if n.get("Alive")} if check else set()
            for ref, (i, start) in list(pending.items()):
                why = ""
                if now - start > self.timeout_s:
                    why = f"not done after {self.timeout_s:g} s (Cluster(timeout_s=...)); cancelled"
                elif check and jobs[i].pin and jobs[i].pin not in alive:
                    why = f"the node it ran on ({str(jobs[i].pin)[:6]}) died"
                elif check and not jobs[i].pin:
                    unmet = self.unmet(jobs[i].resources)
                    why = f"queued, but {unmet} any more (the node that offered it died?)" if unmet else ""
                if why:
                    ray.cancel(ref, force=True)
                    pending.pop(ref)
                    outcomes[i] = Outcome(jobs[i].key, None, why, {})
                    steps.step(f"{jobs[i].what}: given up")
            if check:
                checked = now
                for pin in [p for p in waiting if p and p not in alive and waiting[p]]:
                    for i in waiting.pop(pin):  # jobs not yet sent to a node that died
                        outcomes[i] = Outcome(jobs[i].key, None, f"the node it was pinned to ({pin[:6]}) died "
                                              "before it ran", {})
                        steps.step(f"{jobs[i].what}: given up")
            self._send(ray, jobs, waiting, pending)


@dataclass
class Bundle:
    """A model's files as bytes: ``name`` is the .onnx file's, ``digest`` names the node's cache folder."""

    name: str
    digest: str
    files: dict[str, bytes]

    def materialize(self) -> Path:
        """The .onnx file on this node, written once per node (atomically: a folder renamed into place)."""
        import tempfile

        root = Path(tempfile.gettempdir()) / "onnx-nb-cluster"
        folder = root / self.digest
        if not (folder / self.name).exists():
            root.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=root))
            for name, data in self.files.items():
                (staging / name).write_bytes(data)
            try:
                staging.rename(folder)
            except OSError:  # another job on this node wrote it first
                import shutil

                shutil.rmtree(staging, ignore_errors=True)
        return folder / self.name


@dataclass
class Job:
    key: Any  # the caller's own handle for the outcome
    what: str  # for messages: "int8 on ort:cpu at batch=2"
    fn: Callable[..., Any]  # a module-level function (pickled by reference), run on the node
    args: tuple[Any, ...]
    resources: dict[str, float]
    pin: str | None = None  # a node id: timed rows run there, one at a time


@dataclass
class Outcome:
    key: Any
    value: Any  # what fn returned; None on failure
    error: str  # why it failed ('' when it did not)
    node: dict[str, Any]  # the hardware of the node that ran it (see node_info)
    unavailable: bool = False  # no node could run it at all


def as_cluster(value: Any) -> Cluster | None:
    """``cluster=`` as given: None/False (run here), True (the running cluster), an address, or a Cluster."""
    if value is None or value is False:
        return None
    if value is True:
        return Cluster()
    if isinstance(value, str):
        return Cluster(address=value)
    if isinstance(value, Cluster):
        return value
    raise InvalidArgumentError(f"cluster={value!r}: pass True (the Ray cluster this machine is part of), an address "
                               "such as 'ray://head:10001', or onnx_nb.Cluster(...).")


def _ray_options(resources: Mapping[str, float]) -> dict[str, Any]:
    custom = {k: v for k, v in resources.items() if k not in ("CPU", "GPU")}
    return {"num_cpus": resources.get("CPU", 1.0), "num_gpus": resources.get("GPU", 0.0),
            **({"resources": custom} if custom else {})}


def _outcome(ray: Any, job: Job, ref: Any) -> Outcome:
    try:
        value, node = ray.get(ref)
    except Exception as exc:  # noqa: BLE001 - a failed job is a row with its reason
        kind = type(exc).__name__
        if kind in ("WorkerCrashedError", "NodeDiedError", "OwnerDiedError", "ObjectLostError", "RaySystemError"):
            why = f"the Ray worker or node running it died ({kind}; Ray tried it again where that is safe)"
        elif kind == "TaskUnschedulableError":  # pinned to a node that is gone: Ray's retry had nowhere to run
            why = f"the node it ran on died or left the cluster ({kind}: the retry could not run there)"
        elif kind == "TaskCancelledError":
            why = "cancelled"
        else:
            cause = getattr(exc, "cause", None) or exc
            why = f"{type(cause).__name__}: {telling_lines(cause, 300)}"
        return Outcome(job.key, None, why, {})
    return Outcome(job.key, value, "", node)


def _call(fn: Callable[..., Any], *args: Any) -> tuple[Any, dict[str, Any]]:
    """What runs on the node: the job, then the node's hardware."""
    return fn(*args), node_info()


