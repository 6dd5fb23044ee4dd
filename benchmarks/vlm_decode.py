"""A vision-language model at a realistic width, side by side in one run: PyTorch eager (transformers' generate()
with its cache) against onnx-nb's chain of files (vision, embed, decoder) in fp32 and with an INT4 decoder part
(``quantize(vlm.parts["decoder"], method="int4")``): time to first token (the image encoding and the prefill) and
decode tokens per second, one prompt with one image, greedy, batch 1.

    .venv/bin/python benchmarks/vlm_decode.py [--layers 30] [--new-tokens 32] [--rounds 5]

The model is SmolVLM-256M's shape (a SigLIP tower of 12 layers at 768 wide on 512x512 images in 16x16 patches, pixel
shuffle by 4: 64 image tokens; a Llama decoder of 30 layers at 576 wide, 9 heads, 3 key/value heads, 49,280 tokens)
with random weights (the hub is not reachable here). Each round visits the candidates in a shuffled order, each
with one untimed generation first; a candidate's figures are the medians over its rounds. EOS is off, so every run
makes the same number of tokens. Prints the load average, peak RSS and the weights' size.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def build(layers: int) -> Any:
    import torch
    import transformers

    config = transformers.SmolVLMConfig(
        text_config={"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536,
                     "num_hidden_layers": layers, "num_attention_heads": 9, "num_key_value_heads": 3,
                     "vocab_size": 49280, "max_position_embeddings": 8192, "rope_theta": 100000.0,
                     "tie_word_embeddings": True},
        vision_config={"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                       "num_attention_heads": 12, "image_size": 512, "patch_size": 16},
        scale_factor=4, image_token_id=49190)
    torch.manual_seed(0)
    return transformers.SmolVLMForConditionalGeneration(config).eval()


class _Clock:
    """A logits processor that notes when each step's logits arrive (PyTorch's time to first token and steps)."""

    def __init__(self) -> None:
        self.marks: list[float] = []

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        self.marks.append(time.perf_counter())
        return scores


def torch_run(model: Any, inputs: dict[str, Any], new: int) -> tuple[float, float]:
    import torch
    from transformers import LogitsProcessorList

    clock = _Clock()
    start = time.perf_counter()
    with torch.no_grad():
        model.generate(**inputs, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                       logits_processor=LogitsProcessorList([clock]))
    first = (clock.marks[0] - start) * 1e3
    steps = [b - a for a, b in zip(clock.marks, clock.marks[1:])]
    return first, 1.0 / statistics.median(steps)


def onnx_run(model: Any, inputs: dict[str, Any], new: int) -> tuple[float, float]:
    import onnx_nb

    out = onnx_nb.generate(model, inputs, max_new_tokens=new, eos_token_id=-1)
    return out.prefill_ms, 1e3 / statistics.median(out.decode_ms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    import numpy as np
    import torch

    import onnx_nb
    from onnx_nb.kinds.vlm.parts import features_of, pixel_sample
    from onnx_nb.kinds.vlm.prompts import prompt_sample

    print(f"load average before: {os.getloadavg()}")
    model = build(args.layers)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    print(f"SmolVLM-256M-shaped, random weights: {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M "
          f"parameters, {weights / 2**20:.0f} MiB")
    folder = Path(tempfile.mkdtemp(prefix="vlm_bench_"))
    started = time.perf_counter()
    vlm = onnx_nb.export(model, out=folder / "smolvlm", progress=False)
    print(f"export: {time.perf_counter() - started:.0f} s, {vlm.status}, chain {vlm.chain.get('summary')}")
    started = time.perf_counter()
    int4 = onnx_nb.quantize(vlm.parts["decoder"], method="int4", algorithm="rtn")
    print(f"INT4 decoder part: {time.perf_counter() - started:.0f} s, parity "
          f"{'passed' if int4.parity else 'FAILED'} (random weights), {int4.size_after / 2**20:.0f} MiB "
          f"(fp32 decoder {int4.size_before / 2**20:.0f} MiB)")
    pixels = pixel_sample(model, 1, seed=0)
    rows = features_of(model, pixels).shape[0]
    ids = prompt_sample(vlm.image_token, rows, 1, 49280, seed=0)
    torch_inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), **pixels}
    onnx_inputs = {k: v.numpy() for k, v in torch_inputs.items()}
    candidates = {
        "PyTorch eager": lambda: torch_run(model, torch_inputs, args.new_tokens),
        "onnx-nb chain, fp32": lambda: onnx_run(vlm, onnx_inputs, args.new_tokens),
        "onnx-nb chain, INT4 decoder": lambda: onnx_run(int4, onnx_inputs, args.new_tokens),
    }
    print(f"one prompt of {ids.shape[1]} tokens ({rows} image tokens), {args.new_tokens} new tokens, "
          f"{args.rounds} rounds")
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in candidates}
    for _ in range(args.rounds):
        order = list(candidates)
        random.shuffle(order)
        for name in order:
            candidates[name]()  # untimed: the previous candidate's threads may still spin
            results[name].append(candidates[name]())
    base = statistics.median(r[1] for r in results["PyTorch eager"])
    base_first = statistics.median(r[0] for r in results["PyTorch eager"])
    print(f"{'candidate':30} {'first token ms':>15} {'decode tok/s':>13} {'decode vs eager':>16} "
          f"{'first token vs eager':>21}")
    for name, runs in results.items():
        first = statistics.median(r[0] for r in runs)
        rate = statistics.median(r[1] for r in runs)
        print(f"{name:30} {first:15.1f} {rate:13.1f} {rate / base:15.2f}x {base_first / first:20.2f}x")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    print(f"peak RSS {peak:.0f} MiB (weights {weights / 2**20:.0f} MiB); load average after: {os.getloadavg()}")
    np.random.seed(0)


if __name__ == "__main__":
    main()
