"""Whether torch's fake-tensor dispatch cache speeds up onnx-nb's export, by model depth: the same ``export()`` of
tiny GPT-2s of 2, 6 and 12 layers, a tiny LLaVA (three files) and all-MiniLM-L6-v2, with the cache on (torch's
default) and off, side by side in one process, each pair in a new shuffled order per round after one untimed export
of each model. Prints each export's seconds, the median ratio off/on per model, the load average, and whether both
ways wrote the same graph (operators, attributes and weights).

    .venv/bin/python benchmarks/fake_tensor_cache.py [--rounds 4]

The test suite's models are two layers deep: its workers run with the cache off (tests/conftest.py); the package
leaves torch's default, which serves real depths.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # tiny_vlms: the tests' tiny LLaVA


def models() -> dict[str, Any]:
    import transformers
    from tiny_vlms import build_vlm

    import onnx_nb

    made: dict[str, Any] = {}
    for layers in (2, 6, 12):
        config = transformers.GPT2Config(n_embd=32, n_layer=layers, n_head=2, vocab_size=100, n_positions=128)
        made[f"GPT-2, {layers} layers"] = transformers.GPT2LMHeadModel(config).eval()
    made["LLaVA, 2 + 2 layers"] = build_vlm("llava")
    made["all-MiniLM-L6-v2"] = str(onnx_nb.default_model_path())
    return made


def graph_hash(result: Any) -> str:
    """The files' operators in order with their attributes, and their weights: the graph, up to its values' names
    (torch numbers a symbolic size by the order it met it: ``sym_size_int_8`` one way, ``_9`` the other)."""
    import onnx

    paths = [p.path for p in result.parts.values()] if hasattr(result, "parts") else [result.path]
    digest = hashlib.sha256()
    for path in sorted(str(p) for p in paths):
        graph = onnx.load(path, load_external_data=False).graph
        for node in graph.node:
            digest.update(node.op_type.encode())
            for attribute in node.attribute:
                digest.update(attribute.SerializeToString())
        for weight in graph.initializer:
            digest.update(weight.raw_data)
    return digest.hexdigest()[:12]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    import torch
    import torch._dynamo.config

    import onnx_nb

    torch.set_num_threads(1)
    print(f"load average at the start: {os.getloadavg()}")
    seconds: dict[tuple[str, bool], list[float]] = {}
    graphs: dict[str, set[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        made = models()
        count = itertools.count()

        def export(name: str, model: Any, cache: bool) -> float:
            torch._dynamo.config.fake_tensor_cache_enabled = cache
            started = time.perf_counter()
            result = onnx_nb.export(model, out=Path(tmp) / f"e{next(count)}", progress=False)
            took = time.perf_counter() - started
            graphs.setdefault(name, set()).add(graph_hash(result))
            return took

        for name, model in made.items():  # untimed: imports, the exporter's registry, the model's modules
            export(name, model, True)
        for rnd in range(args.rounds):
            order = [(name, cache) for name in made for cache in (True, False)]
            random.Random(rnd).shuffle(order)
            for name, cache in order:
                seconds.setdefault((name, cache), []).append(export(name, made[name], cache))
        torch._dynamo.config.fake_tensor_cache_enabled = True
    print(f"{'model':<22} {'cache on (s)':<28} {'cache off (s)':<28} off/on  same graph")
    for name in made:
        on, off = seconds[(name, True)], seconds[(name, False)]
        ratio = statistics.median(off) / statistics.median(on)
        print(f"{name:<22} {' '.join(f'{s:.2f}' for s in on):<28} {' '.join(f'{s:.2f}' for s in off):<28} "
              f"{ratio:5.2f}x  {'yes' if len(graphs[name]) == 1 else 'NO'}")
    print(f"load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
