"""all-MiniLM-L6-v2's plain export in ONNX Runtime Web (headless Chromium, WASM) beside ONNX Runtime on the CPU,
measured side by side in one run, on real sentences.

    python benchmarks/browser.py [--rounds 3]

Per round, in a new shuffled order, each backend is timed with benchmark() on the same inputs (batch 1: one short
sentence; batch 8: the sentences of benchmarks/sentences.py, padded to the longest); the first round is untimed.
The browser row is timed inside the page. The headless page is cross-origin isolated, so ORT Web may use threads:
it is given as many as ONNX Runtime's CPU session uses (the machine's cores). Printed: p50 per backend and shape
(median over rounds), the ratio browser / CPU, the parity of the browser's outputs against PyTorch, the load
average before and after, the browser and ORT Web versions.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
from pathlib import Path
from statistics import median

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from sentences import BATCH, SHORT
    from transformers import AutoTokenizer

    import onnx_nb
    from onnx_nb.frontends.demo import default_model_path

    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores", flush=True)
    folder = default_model_path()
    result = onnx_nb.export(str(folder), out=Path(tempfile.mkdtemp()) / "model.onnx", progress=False)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    samples = {"batch 1": dict(tokenizer(SHORT[:1], return_tensors="np")),
               "batch 8": dict(tokenizer(BATCH, padding=True, return_tensors="np"))}
    report = onnx_nb.check_parity(result, sample=dict(samples["batch 8"]), providers=["browser"], progress=False)
    web = [r for r in report.rows if r.provider == "browser"]
    print(f"parity in the browser vs PyTorch on real tokens: {'PASSED' if report else 'FAILED'}, max abs "
          f"{max(r.max_abs for r in web):.2e}, min cosine {min(r.cosine for r in web):.6f}")
    p50: dict[tuple[str, str], list[float]] = {}
    label = ""
    for r in range(args.rounds + 1):
        order = random.sample(["cpu", "browser"], 2)
        for name, sample in samples.items():
            for provider in order:
                table = onnx_nb.benchmark(result, providers=[provider], sample=sample, min_seconds=1.0, progress=False)
                row = table.rows[0]
                if row.status != "ok":
                    raise SystemExit(f"{provider} at {name}: {row.note}")
                label = row.backend if provider == "browser" else label
                if r:  # the first round is untimed
                    p50.setdefault((name, provider), []).append(row.p50_ms or 0.0)
    print(f"\n{label}")
    for name in samples:
        cpu, web_ms = median(p50[(name, "cpu")]), median(p50[(name, "browser")])
        print(f"{name}: ONNX Runtime CPU {cpu:.2f} ms, ONNX Runtime Web {web_ms:.2f} ms: browser / CPU "
              f"{web_ms / cpu:.2f}x (median of {args.rounds} rounds)")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
