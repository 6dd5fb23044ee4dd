"""autotune() on one process against autotune(cluster=...) on a local Ray cluster, for the same candidates on
all-MiniLM-L6-v2 (real weights), wall time side by side in one run.

    python benchmarks/cluster.py [--workers 2] [--rounds 2]

The cluster is real `ray start` nodes on this machine (onnx_nb.runtime.local_cluster.LocalRayCluster): a head that
runs no jobs and --workers nodes of one CPU each. Each round runs both, in a new shuffled order; one untimed run of
each comes first (Ray's workers start, files are cached). Printed: the wall time of each run, the ratio, each
candidate's p50 as each run measured it, the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    import onnx_nb
    from onnx_nb.frontends.demo import default_model_path
    from onnx_nb.runtime.local_cluster import LocalRayCluster

    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores", flush=True)
    root = Path(tempfile.mkdtemp(prefix="onnx-nb-cluster-bench-"))
    export = onnx_nb.export(default_model_path(), out=root / "minilm" / "model.onnx", progress=False)
    with LocalRayCluster(workers=[{} for _ in range(args.workers)], head_cpus=0) as local:
        on = onnx_nb.Cluster(address=local.address)

        def run(where: str) -> tuple[float, Any]:
            folder = root / f"tune-{where}"
            shutil.rmtree(folder, ignore_errors=True)
            start = time.perf_counter()
            result = onnx_nb.autotune(export, out=folder, progress=False, cluster=on if where == "cluster" else None)
            return time.perf_counter() - start, result

        for where in ("one process", "cluster"):  # untimed
            run(where)
        times: dict[str, list[float]] = {"one process": [], "cluster": []}
        last: dict[str, Any] = {}
        for r in range(args.rounds):
            order = random.sample(list(times), len(times))
            for where in order:
                seconds, last[where] = run(where)
                times[where].append(seconds)
                print(f"round {r + 1}: {where}: {seconds:.1f} s", flush=True)
    shutil.rmtree(root, ignore_errors=True)
    best = {where: min(t) for where, t in times.items()}
    print(f"\nautotune of all-MiniLM-L6-v2 ({len(last['cluster'].candidates) - 1} candidates), best of "
          f"{args.rounds}: one process {best['one process']:.1f} s, local cluster ({args.workers} workers x 1 CPU) "
          f"{best['cluster']:.1f} s: {best['one process'] / best['cluster']:.2f}x")
    for where, result in last.items():
        print(f"{where}: best {result.best_candidate.name if result.best_candidate else '-'}; "
              + ", ".join(f"{c.name} {c.p50_ms:.2f} ms" for c in result.candidates if c.p50_ms))
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
