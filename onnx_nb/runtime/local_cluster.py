"""A Ray cluster on this machine for tests and tutorials (:class:`LocalRayCluster`: a head and workers with custom
resources, started and stopped for real), and the hardware a node reports (:func:`node_info`)."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ClusterError


def node_info() -> dict[str, Any]:
    """This node's hardware and library versions, with a short label that tells nodes apart."""
    import platform
    import socket
    from importlib.metadata import PackageNotFoundError, version

    import onnxruntime as ort

    try:
        ours = version("onnx-nb")
    except PackageNotFoundError:
        ours = "not installed"
    try:
        import ray

        node_id = ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 - outside Ray: this process
        node_id = ""
    host = socket.gethostname()
    info: dict[str, Any] = {"host": host, "node_id": node_id, "cpu": _cpu_model(), "cores": os.cpu_count(),
                            "gpus": _gpus(), "python": platform.python_version(), "onnxruntime": ort.__version__,
                            "providers": ort.get_available_providers(), "onnx_nb": ours}
    try:
        import openvino

        info["openvino"] = openvino.__version__
    except ImportError:
        pass
    info["label"] = f"{host}/{node_id[:6]}" if node_id else host
    return info


def describe(node: Mapping[str, Any]) -> str:
    """One line: label, CPU, cores, GPUs, ONNX Runtime version."""
    if not node:
        return ""
    gpus = ", ".join(node.get("gpus") or []) or "no GPU"
    return (f"{node.get('label')}: {node.get('cpu')}, {node.get('cores')} cores, {gpus}, "
            f"onnxruntime {node.get('onnxruntime')}")


def _cpu_model() -> str:
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpus() -> list[str]:
    import shutil
    import subprocess

    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


class LocalRayCluster:
    """A Ray cluster on this machine, made of real ``ray start`` nodes (a head, then workers with the resources
    you name): for trying ``cluster=`` on a laptop, for the tests and for ``benchmarks/cluster.py``.

        with LocalRayCluster(workers=[{"edge": 1}, {"edge": 1}]) as local:
            onnx_nb.benchmark(model, cluster=onnx_nb.Cluster(address=local.address))

    Each node runs in its own process group (``kill(node)`` stops one as a crash would); ``stop()`` ends them
    all and the driver's connection. ``quick_health_checks`` notices a dead node in about a second (Ray's
    default is half a minute).
    """

    def __init__(self, workers: list[Mapping[str, float]] | None = None, *, head_cpus: float = 1,
                 worker_cpus: float = 1, head_resources: Mapping[str, float] | None = None,
                 quick_health_checks: bool = True, timeout_s: float = 120.0) -> None:
        import socket
        import sys

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.address = f"127.0.0.1:{self.port}"
        self.ray = str(Path(sys.executable).parent / "ray")
        self.env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
        if quick_health_checks:
            self.env.update(RAY_health_check_period_ms="500", RAY_health_check_timeout_ms="500",
                            RAY_health_check_failure_threshold="2", RAY_health_check_initial_delay_ms="0")
        self.temp = Path("/tmp") / f"onnxnb-ray{self.port}"  # Ray's socket paths must stay short
        self.worker_cpus = worker_cpus
        self.nodes: list[Any] = []
        self.head = self._start(["--head", f"--port={self.port}", f"--num-cpus={head_cpus}",
                                 "--include-dashboard=false", f"--temp-dir={self.temp}",
                                 f"--resources={_json(head_resources or {})}"])
        try:
            self._wait(1, timeout_s)
            for resources in workers or []:
                self.add_worker(resources, timeout_s=timeout_s)
        except BaseException:
            self.stop()
            raise

    def _start(self, args: list[str]) -> Any:
        import subprocess

        proc = subprocess.Popen([self.ray, "start", "--block", "--disable-usage-stats", *args], env=self.env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.nodes.append(proc)
        return proc

    def _wait(self, count: int, timeout_s: float) -> None:
        import ray

        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if not ray.is_initialized():
                    import logging

                    ray.init(address=self.address, logging_level=logging.ERROR, log_to_driver=False)
                if sum(bool(n["Alive"]) for n in ray.nodes()) >= count:
                    return
            except ConnectionError:
                pass
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.nodes):
                raise ClusterError(f"the local Ray cluster did not reach {count} live nodes in {timeout_s:g} s")
            time.sleep(0.5)

    def add_worker(self, resources: Mapping[str, float], timeout_s: float = 120.0) -> Any:
        """Start one more worker node offering ``resources`` (and ``worker_cpus`` CPUs); returns its process."""
        import ray

        alive = sum(bool(n["Alive"]) for n in ray.nodes()) if ray.is_initialized() else 1
        proc = self._start([f"--address={self.address}", f"--num-cpus={self.worker_cpus}",
                            f"--resources={_json(resources)}"])
        self._wait(alive + 1, timeout_s)
        return proc

    def kill(self, proc: Any) -> None:
        """Stop a node at once (SIGKILL to its process group), as a crash or a pulled plug would."""
        import signal

        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)

    def stop(self) -> None:
        import shutil

        try:
            import ray

            ray.shutdown()
        finally:
            for proc in reversed(self.nodes):
                self.kill(proc)
            shutil.rmtree(self.temp, ignore_errors=True)

    def __enter__(self) -> LocalRayCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _json(value: Mapping[str, float]) -> str:
    import json

    return json.dumps(dict(value))
