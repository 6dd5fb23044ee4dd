"""A real-size decoder checkpoint to an INT4 file: onnx-nb's lean route (``export(folder, precision="int4")``) against
onnxruntime-genai's model builder (``python -m onnxruntime_genai.models.builder -p int4 -e cpu``), one after the
other in one run, then the decode speed of each file under both loops (onnx-nb's ``generate()`` and
onnxruntime-genai's runtime).

    .venv/bin/python benchmarks/lean_decoder.py [--size 1b|7b|7b-4l] [--work onnx_nb_out/lean] [--rounds 3]
        [--new-tokens 64] [--prompt 16] [--no-builder] [--int8] [--mixes]
        [--llamacpp SIDE_PYTHON --llamacpp-src LLAMA_CPP_DIR]

``--llamacpp``: llama.cpp beside them, the engine most people run on a CPU: its own converter and quantizer write
Q4_K_M and Q8_0 GGUF files of the same checkpoint (time and peak memory each), and llama-cpp-python (built from
source in a side environment: ``pip install --no-binary llama-cpp-python llama-cpp-python``; its sdist's
``vendor/llama.cpp`` is the source tree) decodes them in the same rounds, same prompt ids, same threads. Each decode
row then says its read rate against the bandwidth ONNX Runtime reaches here, its prefill rate, its process's peak
memory and how many of its greedy tokens are PyTorch's (fp32, the same prompt).

``--size 1b``: a TinyLlama-shaped Llama (22 layers, hidden 2048, 4 kv heads, 1.10B parameters) saved in float32
(4.1 GiB). ``--size 7b``: a Llama-2-7B-shaped one (32 layers, hidden 4096, 6.74B parameters) saved in bfloat16
(12.6 GiB); ``--size 7b-4l``: its first 4 layers only (2.0 GiB), which the builder can build here. Random
weights (std 0.02, as transformers initializes), written tensor by tensor into safetensors shards (the model is
never built: its names and shapes come from a model on the meta device).

Each build runs in a process of its own, started by a small watcher that samples its resident memory every 20 ms
and stops it above ``--cap`` GiB (so a build that cannot fit here reports so instead of taking the machine down);
time is the child's wall time from start (imports and loading included: what a user waits for), memory its peak
resident set (``VmHWM``). onnx-nb's row is the file alone (``export_seconds`` after its process started, and the
process's peak up to then); its check against PyTorch (which loads the model) is printed on its own row.

Decode: batch 1, a prompt of ``--prompt`` tokens, ``--new-tokens`` greedy tokens, 2 threads, each candidate in a
process of its own kept for the whole run (``anchors/``), a shuffled order per round with one untimed generation
first; tokens/s is one over the median decode step. Prints the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

SIZES: dict[str, dict[str, Any]] = {
    "1b": {"dtype": "float32", "config": {
        "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32,
        "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 2048, "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2}},
    "7b": {"dtype": "bfloat16", "config": {
        "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2}},
}
# Llama-2-7B's layers, 4 of them (1.07B parameters, 2.0 GiB bf16): what the builder can build here (at 7B it cannot),
# so both files' decode per layer and their logits are compared at 7B's widths
SIZES["7b-4l"] = {"dtype": "bfloat16", "config": {**SIZES["7b"]["config"], "num_hidden_layers": 4}}
SHARD_BYTES = 2 * 2**30


def make_checkpoint(folder: Path, size: str) -> Path:
    """A Llama checkpoint of random weights, written tensor by tensor (never the whole model in memory)."""
    import torch
    import transformers
    from safetensors.torch import save_file

    from onnx_nb.frontends.demo import default_model_path

    if (folder / "config.json").is_file():
        return folder
    spec = SIZES[size]
    config = transformers.LlamaConfig(**spec["config"], architectures=["LlamaForCausalLM"])
    config.dtype = spec["dtype"]
    with torch.device("meta"):
        meta = transformers.LlamaForCausalLM(config)
    dtype = getattr(torch, spec["dtype"])
    folder.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    shard: dict[str, torch.Tensor] = {}
    weight_map: dict[str, str] = {}
    shards: list[list[str]] = []
    total = 0

    def flush() -> None:
        if shard:
            name = f"model-{len(shards) + 1:05d}.safetensors"
            save_file(shard, str(folder / name), metadata={"format": "pt"})
            shards.append(list(shard))
            weight_map.update({k: name for k in shard})
            shard.clear()

    held = 0
    for name, p in meta.named_parameters():
        t = torch.ones(p.shape, dtype=dtype) if name.endswith("norm.weight") else \
            (torch.randn(p.shape, generator=g) * 0.02).to(dtype)
        size_b = t.numel() * t.element_size()
        if held + size_b > SHARD_BYTES:
            flush()
            held = 0
        shard[name] = t
        held += size_b
        total += size_b
    flush()
    final: dict[str, str] = {}
    for i, names in enumerate(shards):  # the names the index promises: model-0000i-of-0000n
        old = folder / f"model-{i + 1:05d}.safetensors"
        new = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        old.rename(folder / new)
        final.update({k: new for k in names})
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": final}, indent=1))
    config.save_pretrained(folder)
    transformers.AutoTokenizer.from_pretrained(default_model_path()).save_pretrained(folder)  # the builder wants one
    return folder


WATCH = r"""
import json, subprocess, sys, threading, time
cap = float(sys.argv[1]) * 2**30
start = time.perf_counter()
child = subprocess.Popen(sys.argv[2:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
peak, anon, killed = 0, 0, False
def watch():
    global peak, anon, killed
    while child.poll() is None:
        try:
            with open(f"/proc/{child.pid}/status") as f:
                for line in f:
                    if line.startswith(("VmHWM:", "VmRSS:")):
                        peak = max(peak, int(line.split()[1]) * 1024)
                    elif line.startswith("RssAnon:"):  # memory the process holds (not mapped file pages)
                        anon = max(anon, int(line.split()[1]) * 1024)
        except OSError:
            break
        if peak > cap:
            killed = True
            child.kill()
        time.sleep(0.02)
threading.Thread(target=watch, daemon=True).start()
out = child.communicate()[0]
print(json.dumps({"seconds": time.perf_counter() - start, "peak": peak, "anon": anon, "rc": child.returncode,
                  "killed": killed,
                  "tail": out[-3000:]}))
"""


def watched(command: list[str], cap_gib: float) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", WATCH, str(cap_gib), *command], capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


ONNXNB = r"""
import json, os, sys, time
t0 = time.perf_counter()
import onnx_nb
called = time.perf_counter()
extra = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
r = onnx_nb.export(sys.argv[1], precision=sys.argv[3], out=sys.argv[2], overwrite=True, progress=False, **extra)
print(json.dumps({"file_seconds": called - t0 + r.export_seconds, "export_seconds": r.export_seconds,
                  "total_seconds": time.perf_counter() - t0, "memory": r.memory, "check": r.check["summary"]
                  if "summary" in r.check else r.check.get("error"), "passed": bool(r), "size": r.file_size}))
"""


ACCURACY = r"""
import json, sys
import numpy as np
from pathlib import Path
from onnx_nb.kinds.lean import export as lean
folder, files = sys.argv[1], sys.argv[2:]
rng = np.random.default_rng(0)
ids = rng.integers(3, 32000, (1, lean.CHECK_PROMPT + lean.CHECK_DECODE), dtype=np.int64)
ref, dtype = lean._reference_logits(folder, ids)  # PyTorch in the checkpoint's dtype, then freed
out = {"reference": dtype}
import transformers
config = transformers.AutoConfig.from_pretrained(folder)
info = {"layers": config.num_hidden_layers, "kv_heads": config.num_key_value_heads,
        "head_size": config.hidden_size // config.num_attention_heads, "cache_dtype": "float32"}
for f in files:
    got = lean._onnx_logits(Path(f), ids, info)
    cos = (got * ref).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(ref, axis=-1)
    out[f] = {"cosine": [round(float(c), 5) for c in cos],
              "top1": float((got.argmax(-1) == ref.argmax(-1)).mean())}
print(json.dumps(out))
"""


def gib(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**30:.2f} GiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="1b")
    parser.add_argument("--work", type=Path, default=Path("onnx_nb_out/lean"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cap", type=float, default=20.0, help="stop a build above this resident memory (GiB)")
    parser.add_argument("--no-builder", action="store_true", help="skip onnxruntime-genai's model builder")
    parser.add_argument("--int8", action="store_true", help="also onnx-nb's INT8 file, in the logits comparison")
    parser.add_argument("--decode-only", action="store_true", help="only time decoding of the files already made")
    parser.add_argument("--llamacpp", metavar="PYTHON", help="a side environment's python with llama-cpp-python "
                        "(built from source): llama.cpp's Q4_K_M and Q8_0 GGUF files of the same checkpoint beside "
                        "onnx-nb's, their make time and peak, decode speed, peak memory and tokens")
    parser.add_argument("--llamacpp-src", metavar="DIR", type=Path, help="a llama.cpp source tree (the "
                        "llama-cpp-python sdist's vendor/llama.cpp) whose convert_hf_to_gguf.py writes the GGUF")
    parser.add_argument("--mixes", action="store_true", help="also the route's other INT4 files from the checkpoint: "
                        "symmetric / asymmetric blocks with a 4- / 8-bit LM head (symmetric with a 4-bit head is "
                        "what precision='int4' wrote before), in the logits comparison and the decode")
    args = parser.parse_args()

    work = (args.work / args.size).resolve()
    folder = make_checkpoint(work / "hf", args.size)
    weights = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    print(f"checkpoint: {folder} ({gib(weights)} of {SIZES[args.size]['dtype']} safetensors)", flush=True)

    ours = work / "onnx-nb-int4" / "model.onnx"
    ours.parent.mkdir(parents=True, exist_ok=True)
    builder = work / "genai-int4"
    if args.decode_only:
        decode(args, ours, builder if (builder / "model.onnx").is_file() else None, work,
               llamacpp={q: work / "gguf" / f"model-{q}.gguf" for q in QUANTS if args.llamacpp
                         and (work / "gguf" / f"model-{q}.gguf").is_file()}, folder=folder)
        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return 0
    builds: list[tuple[str, Any]] = [("onnx-nb", [sys.executable, "-c", ONNXNB, str(folder), str(ours), "int4"])]
    if not args.no_builder:
        builds.append(("builder", [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(folder),
                                   "-o", str(builder), "-p", "int4", "-e", "cpu", "--extra_options",
                                   "int4_accuracy_level=4"]))
    rows: dict[str, dict[str, Any]] = {}
    for label, command in builds:
        done = watched(command, args.cap)
        rows[label] = done
        if done["killed"]:
            print(f"{label}: stopped at {gib(done['peak'])} (over --cap {args.cap} GiB) after {done['seconds']:.0f} s")
        elif done["rc"] != 0:
            print(f"{label}: failed (exit {done['rc']}): {done['tail'][-1500:]}")
        else:
            print(f"{label}: {done['seconds']:.1f} s, peak {gib(done['peak'])}", flush=True)
    made = rows.get("onnx-nb", {})
    detail = None
    if made.get("rc") == 0:
        detail = json.loads([line for line in made["tail"].splitlines() if line.startswith("{")][-1])
    print()
    print(f"{'INT4 file from the checkpoint':46s} {'time':>9s} {'peak RSS':>11s} {'x weights':>9s} {'file':>10s}")
    if detail is not None:
        m = detail["memory"]
        file_peak = m["build_process_peak_bytes"]  # the process's resident peak while it wrote the file
        print(f"{'onnx-nb export(precision=int4), file alone':46s} {detail['file_seconds']:8.1f}s "
              f"{gib(file_peak):>11s} {file_peak / weights:8.2f}x {gib(detail['size']):>10s}")
        print(f"{'  + its check against PyTorch (whole process)':46s} {detail['total_seconds']:8.1f}s "
              f"{gib(made['peak']):>11s} {made['peak'] / weights:8.2f}x  {detail['check']}")
    b = rows.get("builder")
    if b is not None and b["rc"] == 0:
        size = sum(p.stat().st_size for p in builder.glob("model.onnx*"))
        print(f"{'onnxruntime-genai builder -p int4 -e cpu':46s} {b['seconds']:8.1f}s {gib(b['peak']):>11s} "
              f"{b['peak'] / weights:8.2f}x {gib(size):>10s}")
        if detail is not None:
            print(f"onnx-nb / builder: time {detail['file_seconds'] / b['seconds']:.2f}x, "
                  f"peak memory {file_peak / b['peak']:.2f}x (below 1 is better)")
    if detail is None:
        return 1
    files = [str(ours)] + ([str(builder / "model.onnx")] if b is not None and b["rc"] == 0 else [])
    labels = ["onnx-nb INT4 (rtn_asym, head 8: the default)"] + (["builder INT4"] if len(files) > 1 else [])
    mixes: dict[str, Path] = {}
    for algorithm, head in ((("rtn_asym", 4), ("rtn", 8), ("rtn", 4)) if args.mixes else ()):
        label = f"{algorithm}, head {head}"
        path = work / f"onnx-nb-int4-{algorithm}-head{head}" / "model.onnx"
        done = watched([sys.executable, "-c", ONNXNB, str(folder), str(path), "int4",
                        json.dumps({"algorithm": algorithm, "lm_head_bits": head})], args.cap)
        if done["rc"] == 0:
            files.append(str(path))
            labels.append(label)
            mixes[label] = path
            print(f"onnx-nb export(precision='int4', algorithm={algorithm!r}, lm_head_bits={head}): "
                  f"{done['seconds']:.1f} s, peak {gib(done['peak'])}, "
                  f"{gib(sum(p.stat().st_size for p in path.parent.glob('model.onnx*')))}")
        else:
            print(f"onnx-nb {label}: failed (exit {done['rc']}): {done['tail'][-800:]}")
    if args.int8:
        int8 = work / "onnx-nb-int8" / "model.onnx"
        done = watched([sys.executable, "-c", ONNXNB, str(folder), str(int8), "int8"], args.cap)
        if done["rc"] == 0:
            files.append(str(int8))
            labels.append("onnx-nb INT8")
            print(f"onnx-nb export(precision=int8): {done['seconds']:.1f} s, peak {gib(done['peak'])}")
    acc = watched([sys.executable, "-c", ACCURACY, str(folder), *files], args.cap)
    if acc["rc"] == 0:
        found = json.loads([line for line in acc["tail"].splitlines() if line.startswith("{")][-1])
        print(f"\nnext-token logits against PyTorch ({found['reference']}), a prefill of {8} tokens + 3 decode "
              "steps (random weights: a deep random network amplifies any rounding, so INT4 cosines are low for "
              "both files)")
        for f, label in zip(files, labels):
            print(f"  {label:44s} cosine per step {found[f]['cosine']}, top-1 agreement {found[f]['top1']:.2f}")
    else:
        print(f"accuracy run failed: {acc['tail'][-800:]}")
    gguf = llamacpp_files(args, folder, work, weights) if args.llamacpp else {}
    decode(args, ours, builder if b is not None and b["rc"] == 0 else None, work, mixes, gguf, folder)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


QUANTS = {"Q4_K_M": 15, "Q8_0": 7}  # llama.cpp's file types (LLAMA_FTYPE_MOSTLY_*)
QUANTIZE = r"""
import sys, llama_cpp
params = llama_cpp.llama_model_quantize_default_params()
params.ftype, params.nthread = int(sys.argv[3]), int(sys.argv[4])
rc = llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), params)
raise SystemExit(rc)
"""
PYTORCH_TOKENS = r"""
import json, sys
import torch, transformers
model = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32).eval()
torch.set_num_threads(int(sys.argv[4]))
ids = torch.tensor([[int(t) for t in sys.argv[2].split(",")]])
with torch.no_grad():
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=int(sys.argv[3]), do_sample=False,
                         min_new_tokens=int(sys.argv[3]), pad_token_id=0)
print(json.dumps({"tokens": out[0, ids.shape[1]:].tolist()}))
"""


def llamacpp_files(args: Any, folder: Path, work: Path, weights: int) -> dict[str, Path]:
    """llama.cpp's GGUF files of the checkpoint: its converter to f32 (``anchors/llamacpp_convert.py``), then its
    quantizer to each of :data:`QUANTS`, each step timed with its peak memory."""
    out = work / "gguf"
    out.mkdir(exist_ok=True)
    f32 = out / "model-f32.gguf"
    steps = [("convert_hf_to_gguf.py --outtype f32", [sys.executable, str(HERE / "anchors" / "llamacpp_convert.py"),
                                                      str(args.llamacpp_src), str(folder), str(f32), "--outtype",
                                                      "f32"], f32)]
    steps += [(f"llama_model_quantize {q}", [args.llamacpp, "-c", QUANTIZE, str(f32), str(out / f"model-{q}.gguf"),
                                             str(t), str(args.threads)], out / f"model-{q}.gguf")
              for q, t in QUANTS.items()]
    for label, command, made in steps:
        done = watched(command, args.cap)
        ok = done["rc"] == 0 and made.is_file()
        print(f"llama.cpp {label:38s} {done['seconds']:8.1f}s {gib(done['peak']):>11s} "
              f"{done['peak'] / weights:8.2f}x {gib(made.stat().st_size) if ok else 'failed':>10s}"
              + ("" if ok else f"  {done['tail'][-600:]}"), flush=True)
    return {q: out / f"model-{q}.gguf" for q in QUANTS if (out / f"model-{q}.gguf").is_file()}


def step_bytes(path: Path, llamacpp_src: Path | None) -> int:
    """The weight bytes one decode step reads: every weight of the file but an embedding table only gathered from (one
    row a token; a tied LM head reads it whole and counts). An ONNX file (or a folder's model.onnx) or a GGUF file
    (read with the gguf package of ``llamacpp_src``)."""
    if path.suffix == ".gguf":
        sys.path.insert(0, str(Path(llamacpp_src) / "gguf-py"))
        from gguf import GGUFReader

        sizes = {t.name: int(t.n_bytes) for t in GGUFReader(str(path)).tensors}
        return sum(sizes.values()) - (sizes.get("token_embd.weight", 0) if "output.weight" in sizes else 0)
    import onnx

    model = path / "model.onnx" if path.is_dir() else path
    graph = onnx.load(str(model), load_external_data=False).graph
    users: dict[str, set[str]] = {}
    for node in graph.node:
        for name in node.input:
            users.setdefault(name, set()).add(node.op_type)
    total = 0
    for t in graph.initializer:
        size = next((int(e.value) for e in t.external_data if e.key == "length"), len(t.raw_data))
        total += 0 if users.get(t.name) == {"Gather"} else size
    return total


def decode(args: Any, ours: Path, builder: Path | None, work: Path, mixes: dict[str, Path] | None = None,
           llamacpp: dict[str, Path] | None = None, folder: Path | None = None) -> None:
    """Decode tokens/s of each INT4 file under each loop (and llama.cpp's GGUF files under llama.cpp), with each
    candidate process's peak memory, prefill tokens/s and its greedy tokens against PyTorch's."""
    from generation import Anchor, genai_folder

    from onnx_nb.runtime.onnxfile import load_proto
    from onnx_nb.steps.generate.genai import config_for

    prompt = list(range(5, 5 + args.prompt))
    candidates: dict[str, Any] = {
        "onnx-nb file, onnx-nb generate()": Anchor(sys.executable, "onnxnb_generate.py", ours, prompt,
                                                   args.new_tokens, args.threads),
    }
    for label, path in (mixes or {}).items():
        candidates[f"onnx-nb {label}, onnx-nb generate()"] = Anchor(sys.executable, "onnxnb_generate.py", path,
                                                                    prompt, args.new_tokens, args.threads)
    if builder is not None:
        swapped = work / "onnx-nb-int4-for-genai"
        if not swapped.exists():
            genai_folder(builder, ours, swapped)  # the builder's genai_config.json, onnx-nb's file linked
            (swapped / "model.onnx.data").symlink_to(ours.parent / "model.onnx.data")
        candidates["onnx-nb file, onnxruntime-genai runtime"] = Anchor(
            sys.executable, "genai_generate.py", swapped, prompt, args.new_tokens, args.threads)
        candidates["builder file, onnxruntime-genai runtime"] = Anchor(
            sys.executable, "genai_generate.py", builder, prompt, args.new_tokens, args.threads)
        candidates["builder file, onnx-nb generate()"] = Anchor(
            sys.executable, "onnxnb_generate.py", builder / "model.onnx", prompt, args.new_tokens, args.threads)
    else:
        own = work / "onnx-nb-int4-genai"
        if not own.exists():
            own.mkdir()
            (own / "model.onnx").symlink_to(ours)
            for extra in ours.parent.glob("model.onnx.data"):
                (own / extra.name).symlink_to(extra)
            (own / "genai_config.json").write_text(json.dumps(config_for(ours, load_proto(ours), args.threads),
                                                              indent=1))
        candidates["onnx-nb file, onnxruntime-genai runtime"] = Anchor(
            sys.executable, "genai_generate.py", own, prompt, args.new_tokens, args.threads)
    for quant, path in (llamacpp or {}).items():
        candidates[f"llama.cpp {quant}, llama.cpp"] = Anchor(args.llamacpp, "llamacpp_generate.py", path, prompt,
                                                            args.new_tokens, args.threads)
    read = {label: step_bytes(Path(c.command[2]), args.llamacpp_src) for label, c in candidates.items()}
    from onnx_nb.steps.benchmark.roofline import bandwidth_gbs

    bandwidth = bandwidth_gbs(args.threads)  # what ONNX Runtime reads a second here on a decode step's pattern
    steps: dict[str, list[float]] = {k: [] for k in candidates}
    firsts: dict[str, list[float]] = {k: [] for k in candidates}
    tokens: dict[str, list[int]] = {}
    for _ in range(args.rounds):
        order = list(candidates)
        random.shuffle(order)
        for label in order:
            candidates[label]()  # untimed: the previous candidate's threads may still spin
            got, first, _, each = candidates[label]()
            steps[label].extend(each)
            firsts[label].append(first)
            tokens[label] = got
    peaks = {label: c.peak_bytes() for label, c in candidates.items()}
    for c in candidates.values():
        c.close()
    reference = None
    if folder is not None and llamacpp:
        done = watched([sys.executable, "-c", PYTORCH_TOKENS, str(folder), ",".join(map(str, prompt)),
                        str(args.new_tokens), str(args.threads)], args.cap)
        lines = [line for line in done["tail"].splitlines() if line.startswith("{")]
        reference = json.loads(lines[-1])["tokens"] if lines else None
    print()
    print(f"decode, batch 1, prompt {args.prompt}, {args.new_tokens} new tokens, {args.threads} threads, "
          f"{args.rounds} rounds; prefill tokens/s = prompt / time to first token (median); peak = the candidate "
          "process's resident peak (its runtime, its model, its loop)")
    rates = {k: 1.0 / statistics.median(v) for k, v in steps.items()}
    for label, rate in rates.items():
        same = "same tokens" if tokens[label] == tokens["onnx-nb file, onnx-nb generate()"] else "other tokens"
        agree = "" if reference is None else (
            f", {sum(a == b for a, b in zip(tokens[label], reference))}/{len(reference)} tokens PyTorch's "
            f"(first differs at {next((i for i, (a, b) in enumerate(zip(tokens[label], reference)) if a != b), '-')})")
        print(f"  {label:44s} {rate:7.2f} tokens/s decode ({read[label] * rate / 1e9:5.1f} GB/s of weights "
              f"{read[label] / 1e9:.2f} GB a step, {read[label] * rate / 1e9 / bandwidth:.0%} of "
              f"{bandwidth:.1f} GB/s), "
              f"{args.prompt / statistics.median(firsts[label]):7.1f} prefill, peak {gib(peaks[label])}  ({same} as "
              f"onnx-nb's file under generate(){agree})")
    if builder is not None:
        mine = rates["onnx-nb file, onnxruntime-genai runtime"]
        theirs = rates["builder file, onnxruntime-genai runtime"]
        print(f"  under onnxruntime-genai's runtime, onnx-nb's file / the builder's: {mine / theirs:.2f}x")
    for label in mixes or {}:
        mine = rates["onnx-nb file, onnx-nb generate()"]
        print(f"  under generate(), onnx-nb's default INT4 file / its {label} file: "
              f"{mine / rates[f'onnx-nb {label}, onnx-nb generate()']:.2f}x")

if __name__ == "__main__":
    raise SystemExit(main())
