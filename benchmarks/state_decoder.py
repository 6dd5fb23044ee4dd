"""A causal LM whose cache is per-layer states (a Mamba of 12 layers, width 768, random weights: about 84M
parameters), exported with its states by one default ``onnx_nb.export(folder)``, timed by ``onnx_nb.benchmark``
against PyTorch eager in one run: the time to first token of a 32-token prompt (the file takes one token per step,
so its prefill is 32 steps; PyTorch's is its own multi-token scan) and one decode step after 32 tokens (both on the
model's one-token path, its states kept), with PyTorch's whole-sequence step beside them. Prints the load average.

    .venv/bin/python benchmarks/state_decoder.py [--layers 12] [--width 768] [--prompt 32] [--runs 20]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import transformers

    import onnx_nb

    print(f"load average at the start: {os.getloadavg()[0]:.2f}")
    config = transformers.MambaConfig(hidden_size=args.width, num_hidden_layers=args.layers, vocab_size=50280,
                                      state_size=16, expand=2, conv_kernel=4)
    torch.manual_seed(0)
    model = transformers.MambaForCausalLM(config).eval()
    print(f"Mamba: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
    with tempfile.TemporaryDirectory() as work:
        model.save_pretrained(work)
        started = time.perf_counter()
        result = onnx_nb.export(work, out=os.path.join(work, "onnx", "model.onnx"), progress=False)
        print(f"export: {time.perf_counter() - started:.1f} s, {result.exporter}, check "
              f"{'passed' if result else 'FAILED'}; cache: {result.cache_layout.text()}")
        table = onnx_nb.benchmark(result, reference=result, providers="cpu",
                                  shapes=[{"prompt": args.prompt}, {"past": args.prompt}], runs=args.runs, warmup=3,
                                  progress=False)
        print(table)
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
