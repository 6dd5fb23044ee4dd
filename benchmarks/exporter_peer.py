"""onnx-nb's export beside transformers' own exporter and onnxruntime-genai's builder on one decoder of real width: a
Llama-shaped model (768 wide, 12 layers, random weights, the demo LM's 512-token tokenizer so the builder has one),
each tool's files made in a process of its own (seconds, peak resident memory), then each loaded in a fresh process
(peak memory at load), its prefill and per-token time through ``onnx_nb.generate`` (32-token prompt, 32 greedy
tokens; an untimed run first, rounds in a shuffled order, medians: onnx-nb's and the builder's files in onnx-nb's step
loop, the exporter's folder through transformers' own runner), its disk size, and its verdict from
``onnx_nb.check_parity`` against PyTorch (onnx-nb's file by its export, the others' folders by the model).

    .venv/bin/python benchmarks/exporter_peer.py [--layers 12] [--rounds 3] [--work /tmp/exporter-peer]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

MAKE = {  # each tool's files from the checkpoint folder (argv[1]) into argv[2]
    "onnx-nb": "import onnx_nb, sys; r = onnx_nb.export(sys.argv[1], out=sys.argv[2] + '/model.onnx', progress=False)",
    "transformers.exporters": (
        "import sys, torch, transformers\n"
        "from transformers.exporters import OnnxConfig, OnnxExporter\n"
        "m = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1]).eval()\n"
        "ids = torch.arange(3, 35)[None]\n"
        "OnnxExporter().export_for_generation(m, {'input_ids': ids, 'attention_mask': torch.ones_like(ids)},\n"
        "    OnnxConfig(dynamic=True)).save_pretrained(sys.argv[2])"),
    "onnxruntime-genai": ("import runpy, sys; sys.argv = ['builder', '-i', sys.argv[1], '-o', sys.argv[2], '-p', "
                          "'fp32', '-e', 'cpu', '-c', sys.argv[2] + '-cache']; "
                          "runpy.run_module('onnxruntime_genai.models.builder', run_name='__main__')"),
}
PEAK = "import resource; print('PEAK', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)"
# onnx-nb's own file checked where it was made (its export knows the model), after the figures above are taken
CHECK = {"onnx-nb": "print('VERDICT', 'PASSED' if onnx_nb.check_parity(r, progress=False) else 'FAILED')"}
RUN = """
import json, resource, sys, time
import onnx_nb
target = sys.argv[1] + ('/model.onnx' if sys.argv[2] == 'onnx-nb' else '')
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
prompt = list(range(3, 35))
onnx_nb.generate(target, [prompt], max_new_tokens=4, eos_token_id=-1)   # untimed: the session opened, warm
loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
made = [onnx_nb.generate(target, [prompt], max_new_tokens=32, eos_token_id=-1) for _ in range(3)]
print('RUN ' + json.dumps({"peak": loaded, "prefill": sorted(m.prefill_ms for m in made)[1],
                           "step": sorted(sum(m.decode_ms) / len(m.decode_ms) for m in made)[1],
                           "tokens": made[0].tokens[0]}))
"""


def checkpoint(folder: Path, layers: int) -> Path:
    import torch
    import transformers

    from onnx_nb.frontends import demo_tasks

    if (folder / "config.json").is_file():
        return folder
    small = demo_tasks.docs_lm(folder.parent / "tokenizer", steps=1)  # its tokenizer files, beside the weights
    config = transformers.LlamaConfig(hidden_size=768, intermediate_size=2048, num_hidden_layers=layers,
                                      num_attention_heads=12, num_key_value_heads=4, vocab_size=512,
                                      max_position_embeddings=1024, tie_word_embeddings=False)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).eval().save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_bytes((small / name).read_bytes())
    return folder


def median(runs: list[dict], key: str) -> float:
    return sorted(r[key] for r in runs)[len(runs) // 2] if runs else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path("/tmp/exporter-peer"))
    args = parser.parse_args()
    import torch
    import transformers

    import onnx_nb

    hf = checkpoint(args.work / "hf", args.layers)
    weights = sum(p.stat().st_size for p in hf.glob("*.safetensors"))
    made: dict[str, dict] = {}
    for tool, code in MAKE.items():
        out = args.work / tool
        timed = f"import time as _t\n_s = _t.perf_counter()\n{code}\nprint('SECONDS', _t.perf_counter() - _s)"
        done = subprocess.run([sys.executable, "-c", f"{timed}\n{PEAK}\n{CHECK.get(tool, '')}", str(hf), str(out)],
                              capture_output=True, text=True)
        said = dict(ln.split(" ", 1) for ln in done.stdout.splitlines() if ln.split(" ")[0] in
                    ("SECONDS", "PEAK", "VERDICT"))
        if done.returncode or "PEAK" not in said:
            made[tool] = {"error": (done.stderr.strip().splitlines() or ["?"])[-1][:200]}
            continue
        made[tool] = {"seconds": float(said["SECONDS"]), "build_peak": int(said["PEAK"]),
                      "verdict": said.get("VERDICT", "-"),
                      "disk": sum(p.stat().st_size for p in out.rglob("*") if p.suffix in (".onnx", ".data"))}
    model = transformers.AutoModelForCausalLM.from_pretrained(hf).eval()
    with torch.no_grad():
        ids = torch.arange(3, 35)[None]
        theirs = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=32, min_new_tokens=32,
                                do_sample=False)[0, 32:].tolist()
    runs: dict[str, list[dict]] = {t: [] for t in made if "error" not in made[t]}
    order = list(runs)
    for r in range(args.rounds):
        random.Random(r).shuffle(order)
        for tool in order:
            done = subprocess.run([sys.executable, "-c", RUN, str(args.work / tool), tool], capture_output=True,
                                  text=True)
            line = [ln for ln in done.stdout.splitlines() if ln.startswith("RUN ")]
            if line:
                runs[tool].append(json.loads(line[-1][4:]))
    for tool in runs:
        if tool != "onnx-nb":  # a folder another tool wrote: checked against the model it came from
            made[tool]["verdict"] = "PASSED" if onnx_nb.check_parity(model, args.work / tool, progress=False) \
                else "FAILED"
    gib = 2 ** 30
    print(f"Llama-shaped, {args.layers} layers x 768, {weights / 1e6:.0f} MB of fp32 weights; load average "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {args.rounds} rounds, medians")
    print(f"{'tool':24s} {'make s':>7s} {'make peak':>10s} {'disk MB':>8s} {'x weights':>9s} {'load peak':>10s} "
          f"{'prefill ms':>10s} {'step ms':>8s} {'tokens':>7s} {'parity':>7s}")
    for tool, m in made.items():
        if "error" in m:
            print(f"{tool:24s} failed: {m['error']}")
            continue
        rs = runs.get(tool) or []
        same = bool(rs) and rs[0]["tokens"] == theirs
        print(f"{tool:24s} {m['seconds']:7.1f} {m['build_peak'] / gib:9.2f}G {m['disk'] / 1e6:8.1f} "
              f"{m['disk'] / weights:9.2f} {median(rs, 'peak') / gib:9.2f}G {median(rs, 'prefill'):10.2f} "
              f"{median(rs, 'step'):8.2f} "
              f"{'same' if same else 'differ':>7s} {m.get('verdict', '-'):>7s}")


if __name__ == "__main__":
    main()
