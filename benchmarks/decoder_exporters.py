"""A decoder with its cache exported by the dynamo exporter (export()'s default since this change) against the
TorchScript trace (the default before it), side by side in one run: decode step and time to first token in
onnx-nb's ``generate()``, file size and node count, and whether both give PyTorch's greedy tokens.

    .venv/bin/python benchmarks/decoder_exporters.py [--families gpt2,llama,qwen2] [--layers 4] [--hidden 512]
        [--prompt 64] [--new-tokens 32] [--rounds 5]

Random weights from a config (GPT-2, Llama, Qwen2 at the same width and depth). Each round visits the files in a
shuffled order, each with one untimed generation first (on 2 cores the previous session's threads can still be
spinning); a file's decode step is the median over its rounds of each generation's median step. Batch 1, greedy,
ONNX Runtime's default threads. Prints the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def build(family: str, layers: int, hidden: int) -> Any:
    import torch
    import transformers

    torch.manual_seed(0)
    heads = hidden // 64
    if family == "gpt2":
        config: Any = transformers.GPT2Config(n_layer=layers, n_embd=hidden, n_head=heads, vocab_size=32000,
                                              n_positions=1024, bos_token_id=0, eos_token_id=0)
        return transformers.GPT2LMHeadModel(config).eval()
    common = {"hidden_size": hidden, "intermediate_size": hidden * 8 // 3, "num_hidden_layers": layers,
              "num_attention_heads": heads, "num_key_value_heads": max(1, heads // 4), "vocab_size": 32000,
              "max_position_embeddings": 1024}
    if family == "qwen2":
        return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**common)).eval()
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**common)).eval()


def main() -> None:
    import onnx
    import torch

    import onnx_nb

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default="gpt2,llama,qwen2")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"load average at the start: {os.getloadavg()[0]:.2f}")
    root = Path(tempfile.mkdtemp(prefix="decoder_exporters_"))
    prompt = [[(7 * i + 3) % 31000 + 10 for i in range(args.prompt)]]
    files: dict[tuple[str, str], Any] = {}
    eager: dict[str, list[int]] = {}
    for family in args.families.split(","):
        model = build(family, args.layers, args.hidden)
        with torch.no_grad():
            out = model.generate(torch.tensor(prompt), attention_mask=torch.ones(1, args.prompt, dtype=torch.long),
                                 max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False,
                                 pad_token_id=0)
        eager[family] = out[0, args.prompt:].tolist()
        for exporter in ("torchscript", "dynamo"):
            result = onnx_nb.export(model, out=root / f"{family}.{exporter}.onnx", exporter=exporter, cache=True,
                                    progress=False)
            assert result, repr(result)
            files[(family, exporter)] = result
        del model
    times: dict[tuple[str, str], list[float]] = {k: [] for k in files}
    firsts: dict[tuple[str, str], list[float]] = {k: [] for k in files}
    tokens: dict[tuple[str, str], list[int]] = {}
    order = list(files)
    for _ in range(args.rounds):
        random.shuffle(order)
        for key in order:
            run = {"max_new_tokens": args.new_tokens, "eos_token_id": -1}
            onnx_nb.generate(files[key], prompt, **run)  # untimed
            out = onnx_nb.generate(files[key], prompt, **run)
            times[key].append(statistics.median(out.decode_ms))
            firsts[key].append(out.prefill_ms)
            tokens[key] = out.tokens[0]
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    print(f"\n{args.layers} layers, width {args.hidden}, prompt {args.prompt}, {args.new_tokens} new tokens, "
          f"{args.rounds} shuffled rounds\n")
    print("| family | exporter | nodes | first token | decode step | step vs TorchScript | tokens = eager |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for family in args.families.split(","):
        base = statistics.median(times[(family, "torchscript")])
        for exporter in ("torchscript", "dynamo"):
            key = (family, exporter)
            step = statistics.median(times[key])
            nodes = len(onnx.load(str(files[key].path), load_external_data=False).graph.node)
            same = sum(a == b for a, b in zip(tokens[key], eager[family]))
            print(f"| {family} | {exporter} | {nodes} | {statistics.median(firsts[key]):.1f} ms | {step:.2f} ms | "
                  f"{base / step:.2f}x | {same}/{len(eager[family])} |")


if __name__ == "__main__":
    main()
