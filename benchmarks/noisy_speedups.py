"""Speed-ups on a quiet and on a busy machine: the same latency table (all-MiniLM-L6-v2: PyTorch eager, the export,
its INT8 variant; batch 8 x 128, 2 threads) measured once with the machine to itself and once while two processes
work in bursts on both cores, as a laptop with a browser and an IDE open does. Prints each table's speed-up cells
(the ratio with its 90% interval over the interleaved rounds, or the interval alone where the run cannot support a
ratio), the rounds run and the load average: what a busy machine does to the figures and what the table says of it.

    python benchmarks/noisy_speedups.py
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path


def spin(stop: float, seed: int) -> None:
    """Bursts of work (0.3-2 s) with pauses between (0.3-2 s): a machine busy now and then, as a laptop is."""
    import random

    rng, x = random.Random(seed), 0
    while time.time() < stop:
        until = time.time() + rng.uniform(0.3, 2.0)
        while time.time() < until:
            x = (x * 31 + 7) % 1_000_003
        time.sleep(rng.uniform(0.3, 2.0))


def table(result: object, int8: object, feed: dict) -> object:
    import onnx_nb

    return onnx_nb.benchmark([result, int8], reference=result, sample=feed, providers="cpu", threads=2,
                             min_seconds=0.5, progress=False)


def show(label: str, t: object) -> None:
    rows = t.rows  # type: ignore[attr-defined]
    load = os.getloadavg()[0]
    print(f"\n{label} (1-minute load average now {load:.2f} on {os.cpu_count()} cores)")
    for r in rows:
        print(f"  {r.variant[:34]:34s} {r.backend:8s} p50 {r.p50_ms:8.2f} ms  rounds {len(r.rounds_ms):2d}  "
              f"speedup {r.speedup_text():32s} {'noisy' if r.noisy else ''}")


def main() -> int:
    import onnx_nb

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    work = Path(tempfile.mkdtemp(prefix="noisy-"))
    result = onnx_nb.export(onnx_nb.default_model_path(), out=work / "model.onnx", progress=False)
    int8 = onnx_nb.quantize(result, method="dynamic")
    feed = dict(result.source.preprocessor(["short one"] * 6 + ["a much longer sentence " * 12] * 2,
                                           padding="max_length", max_length=128, truncation=True,
                                           return_tensors="np"))
    table(result, int8, feed)  # untimed: every session and kernel warmed once
    show("quiet", table(result, int8, feed))
    stop = time.time() + 120
    procs = [multiprocessing.Process(target=spin, args=(stop, i)) for i in range(2)]
    for p in procs:
        p.start()
    try:
        time.sleep(2)
        show("busy: two processes working in bursts on the two cores", table(result, int8, feed))
    finally:
        for p in procs:
            p.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
