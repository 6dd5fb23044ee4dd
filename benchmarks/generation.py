"""Generation speed of a ~124M-parameter decoder (GPT-2 small's shape, random weights, built from its config):
ONNX files made by onnx-nb against PyTorch eager ``generate()`` with its cache, side by side in one run.

    .venv/bin/python benchmarks/generation.py [--new-tokens 64] [--prompt 128] [--rounds 3]

Prompt of 128 tokens, 64 new tokens, batch 1, 2 threads everywhere, greedy. Each candidate generates the same
tokens; decode tokens/s counts the tokens after the first (the first is the prefill, reported as time to first
token). Candidates are visited in a shuffled order each round, each with one untimed generation first (on 2
cores, the previous candidate's threads can still be spinning). Prints the load average.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def build(seed: int = 0) -> Any:
    import torch
    import transformers

    config = transformers.GPT2Config(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024)
    torch.manual_seed(seed)
    return transformers.GPT2LMHeadModel(config).eval()


def torch_run(model: Any, prompt: list[int], new: int, cache: bool) -> tuple[list[int], float, float]:
    """(tokens, time to first token s, decode s) with PyTorch eager generate()."""
    import torch

    ids = torch.tensor([prompt])
    with torch.inference_mode():
        start = time.perf_counter()
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=1, do_sample=False,
                       pad_token_id=0, use_cache=cache)
        first = time.perf_counter() - start
        start = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                             do_sample=False, pad_token_id=0, eos_token_id=None, use_cache=cache)
        total = time.perf_counter() - start
    return out[0, len(prompt):].tolist(), first, max(total - first, 1e-9)


def onnx_run(path: Path, prompt: list[int], new: int) -> tuple[list[int], float, float]:
    import onnx_nb

    result = onnx_nb.generate(path, [prompt], max_new_tokens=new, eos_token_id=-1)
    return result.tokens[0], result.prefill_ms / 1e3, sum(result.decode_ms) / 1e3


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import numpy as np
    import onnxruntime as ort
    import torch

    import onnx_nb

    torch.set_num_threads(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    model = build()
    params = sum(p.numel() for p in model.parameters())
    work = Path(tempfile.mkdtemp(prefix="onnx-nb-gen-"))
    start = time.perf_counter()
    export = onnx_nb.export(model, out=work / "gpt2.onnx", progress=False)
    print(f"export {time.perf_counter() - start:.1f} s, {params / 1e6:.0f}M parameters, "
          f"cache {export.cache_layout.text()}", flush=True)
    variants = {"onnx-nb fp32 (cache)": export.path}
    start = time.perf_counter()
    int8 = onnx_nb.quantize(export, exclude=None, validate=False, out=work / "gpt2.int8.onnx")
    int4 = onnx_nb.quantize(export, method="int4", validate=False, out=work / "gpt2.int4.onnx")
    print(f"quantized in {time.perf_counter() - start:.1f} s", flush=True)
    variants["onnx-nb INT8 dynamic"] = int8.path
    variants["onnx-nb INT4 weight-only"] = int4.path

    rng = np.random.default_rng(0)
    prompt = [int(t) for t in rng.integers(3, 50257, args.prompt)]
    candidates: dict[str, Any] = {
        "PyTorch eager generate() (cache)": lambda: torch_run(model, prompt, args.new_tokens, True),
        "PyTorch eager generate() (no cache)": lambda: torch_run(model, prompt, args.new_tokens, False),
        **{name: (lambda p=path: onnx_run(p, prompt, args.new_tokens)) for name, path in variants.items()},
    }
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; onnxruntime "
          f"{ort.__version__}, torch {torch.__version__}", flush=True)
    timings: dict[str, list[tuple[float, float]]] = {k: [] for k in candidates}
    tokens: dict[str, list[int]] = {}
    order = list(candidates)
    for round_ in range(args.rounds):
        random.Random(round_).shuffle(order)
        for name in order:
            candidates[name]()  # untimed: sessions warm, previous candidate's threads settled
            got, first, decode = candidates[name]()
            tokens[name] = got
            timings[name].append((first, (len(got) - 1) / decode))
        print(f"round {round_ + 1} done, load average {os.getloadavg()[0]:.2f}", flush=True)
    base = statistics.median(t for _, t in timings["PyTorch eager generate() (cache)"])
    reference = tokens["PyTorch eager generate() (cache)"]
    print(f"\nprompt {args.prompt}, {args.new_tokens} new tokens, batch 1, {args.threads} threads, "
          f"median of {args.rounds} rounds")
    print(f"{'candidate':40} {'TTFT ms':>9} {'decode tok/s':>13} {'vs eager':>9}  greedy tokens vs eager")
    for name in candidates:
        ttft = statistics.median(f for f, _ in timings[name]) * 1e3
        speed = statistics.median(t for _, t in timings[name])
        same = sum(a == b for a, b in zip(tokens[name], reference))
        print(f"{name:40} {ttft:9.1f} {speed:13.1f} {speed / base:8.2f}x  {same}/{len(reference)} identical")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
