"""cluster=: benchmark, check_parity and autotune on a real local Ray cluster (a head and worker nodes with
custom resources, started here with ``ray start``): rows land with the node's hardware; a job that needs what no
node has is reported at once; a worker node killed mid-job fails its row with the reason; Ctrl-C cancels the
remote jobs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import onnx_nb
from helpers import installed
from onnx_nb.runtime.local_cluster import LocalRayCluster

installed("ray")


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRayCluster]:
    """A head (1 CPU, resource "head") and a worker (1 CPU, resource "edge"), each a real `ray start` node."""
    with LocalRayCluster(workers=[{"edge": 1}], head_resources={"head": 1}) as local:
        yield local


@pytest.fixture(scope="module")
def bert(bert_export: Any) -> Any:
    return bert_export  # read only (conftest's shared exports)


def test_rows_land_with_each_nodes_hardware(cluster: LocalRayCluster, bert: Any) -> None:
    on = onnx_nb.Cluster(address=cluster.address, targets={"head": {"head": 1}, "edge": {"edge": 1}})
    table = onnx_nb.benchmark(bert, reference=bert, providers=["cpu"], runs=10, min_seconds=0.0, cluster=on,
                              progress=False)
    ok = [r for r in table.rows if r.status == "ok"]
    assert len(ok) == 4, table  # PyTorch and ONNX, on each of the two targets
    nodes = {r.node for r in ok}
    assert len(nodes) == 2 and all(("[head]" in n) != ("[edge]" in n) for n in nodes), nodes
    import ray

    ids = {n["NodeID"][:6] for n in ray.nodes() if n["Alive"]}
    for row in ok:
        assert row.hardware["node_id"][:6] in ids and row.hardware["node_id"][:6] in row.node
        assert row.hardware["cores"] == os.cpu_count() and row.hardware["cpu"] and row.hardware["onnxruntime"]
        assert "@" in row.backend
        if not row.backend.startswith("torch"):  # each ONNX row is compared with the PyTorch row of its own node
            base = next(r for r in ok if r.backend.startswith("torch") and r.node == row.node)
            assert row.speedup == pytest.approx(base.p50_ms / row.p50_ms)
    assert "Ray cluster" in " ".join(table.notes) and "[head]" in table._repr_html_()


def test_parity_on_the_cluster_matches_parity_here(cluster: LocalRayCluster, bert: Any) -> None:
    on = onnx_nb.Cluster(address=cluster.address, targets={"edge": {"edge": 1}})
    here = onnx_nb.check_parity(bert, progress=False)
    there = onnx_nb.check_parity(bert, cluster=on, progress=False)
    assert there and len(there.rows) == len(here.rows)
    for a, b in zip(here.rows, there.rows):
        assert (a.output, a.shape, a.status) == (b.output, b.shape, b.status)
        assert b.provider.startswith("cpu @ ") and b.provider.endswith("[edge]")
        assert b.max_abs == pytest.approx(a.max_abs, abs=1e-6)


def test_a_job_no_node_can_run_is_reported_not_queued(cluster: LocalRayCluster, bert: Any) -> None:
    on = onnx_nb.Cluster(address=cluster.address, targets={"arm": {"arm64": 1}}, timeout_s=600)
    start = time.monotonic()
    table = onnx_nb.benchmark(bert, reference=bert, providers=["cpu", "cuda"], runs=5, min_seconds=0.0, cluster=on,
                              progress=False)
    assert time.monotonic() - start < 30
    assert {r.status for r in table.rows} == {"unavailable"}
    assert all("no live node" in r.note and "arm64" in r.note for r in table.rows)
    report = onnx_nb.check_parity(bert, providers=["cuda"], cluster=address_only(cluster), progress=False)
    assert [r.status for r in report.rows] == ["unavailable"] and "'GPU': 1" in report.rows[0].note


def address_only(cluster: LocalRayCluster) -> str:
    return cluster.address


def test_a_killed_worker_fails_its_row_with_the_reason(cluster: LocalRayCluster, bert: Any) -> None:
    import ray

    victim = cluster.add_worker({"victim": 1})
    on = onnx_nb.Cluster(address=cluster.address, targets={"victim": {"victim": 1}}, timeout_s=120)
    import threading

    def kill_when_busy() -> None:
        end = time.monotonic() + 60
        while time.monotonic() < end:
            if ray.available_resources().get("victim", 0) < 1:  # the row is running there (used up: not listed)
                time.sleep(1.0)
                cluster.kill(victim)
                return
            time.sleep(0.2)

    killer = threading.Thread(target=kill_when_busy)
    killer.start()
    start = time.monotonic()
    table = onnx_nb.benchmark(bert, providers=["cpu"], runs=None, min_seconds=60.0, cluster=on, progress=False)
    killer.join()
    assert time.monotonic() - start < 60, "the notebook waited for a dead node"
    assert [r.status for r in table.rows] == ["error"], table
    assert "died" in table.rows[0].note, table.rows[0].note


def test_ctrl_c_cancels_the_remote_jobs(cluster: LocalRayCluster, bert: Any, tmp_path: Path) -> None:
    import ray

    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(f"""
        import signal
        signal.signal(signal.SIGINT, signal.default_int_handler)  # even when the suite runs as a background job
        import onnx_nb
        on = onnx_nb.Cluster(address={cluster.address!r}, targets={{"edge": {{"edge": 1}}}})
        try:
            onnx_nb.benchmark({str(bert.path)!r}, providers=["cpu"], runs=None, min_seconds=120.0, cluster=on,
                              progress=False)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            raise SystemExit(3)
    """))
    driver = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 90
    while ray.available_resources().get("edge", 0) >= 1:  # used up: not listed
        assert time.monotonic() < deadline and driver.poll() is None, "the remote row never started"
        time.sleep(0.2)
    driver.send_signal(signal.SIGINT)
    out, _ = driver.communicate(timeout=30)
    assert driver.returncode == 3, out.decode(errors="replace")[-2000:]
    deadline = time.monotonic() + 30
    while ray.available_resources().get("edge", 0) < 1:  # the job was cancelled: its node is free again
        assert time.monotonic() < deadline, "the remote job kept running after Ctrl-C"
        time.sleep(0.2)


def test_autotune_fans_out_and_brings_the_files_back(cluster: LocalRayCluster, bert: Any, tmp_path: Path) -> None:
    on = onnx_nb.Cluster(address=cluster.address)
    result = onnx_nb.autotune(bert, candidates=["optimized(auto)", "int8 per-channel"], out=tmp_path / "tune",
                              min_seconds=0.0, runs=5, cluster=on, progress=False)
    names = {c.name: c for c in result.candidates}
    assert not any(c.error for c in result.candidates), result
    for name in ("optimized(auto)", "int8 per-channel"):
        variant = names[name].variant
        assert variant.path.parent == tmp_path / "tune" and variant.path.exists()
        assert variant.reference is bert and "built_on" in variant.recipe
        assert names[name].p50_ms and names[name].metric is not None
    assert sorted(p.name for p in (tmp_path / "tune").iterdir()) == ["int8-pc.onnx", "opt.onnx"]
    # the INT8 candidate started from the export (its parent, the unpadded graph, was not asked for)
    assert names["int8 per-channel"].variant.origin is bert
    assert result.latency.rows and all("@" in r.backend for r in result.latency.rows if r.status == "ok")


def test_cluster_argument_is_checked_and_ray_stays_unimported_without_it() -> None:
    with pytest.raises(onnx_nb.InvalidArgumentError, match="cluster="):
        onnx_nb.benchmark("x.onnx", cluster=3.5)
    code = ("import sys, onnx_nb; onnx_nb.benchmark; import onnx_nb.steps.benchmark.benchmarking; "
            "assert 'ray' not in sys.modules, 'ray imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_command_line_bench_on_the_cluster(cluster: LocalRayCluster, bert: Any) -> None:
    import json

    out = subprocess.run([sys.executable, "-m", "onnx_nb", "bench", str(bert.path), "--providers", "cpu", "--runs",
                          "5", "--cluster", cluster.address, "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads(out.stdout)["rows"]
    assert [r["status"] for r in rows] == ["ok"] and rows[0]["node"] and rows[0]["hardware"]["cpu"]
