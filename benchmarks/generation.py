"""Generation speed of a ~100M-parameter decoder (random weights, built from a config: a Llama of 8 layers by
default, GPT-2 small with ``--family gpt2``): ONNX files made by onnx-nb against PyTorch eager ``generate()``
with its cache and against the anchors, side by side in one run.

    .venv/bin/python benchmarks/generation.py [--family llama] [--new-tokens 64] [--prompt 128] [--rounds 3]
        [--genai-python SIDE/bin/python] [--optimum-python SIDE/bin/python]

onnx-nb's files are timed by ``anchors/onnxnb_generate.py`` in a process of their own, exactly as the anchors are;
every such process is started once and kept for the whole run (one generation per request), so rounds are cheap.
Anchors run in side environments (their pins differ from onnx-nb's): ``--genai-python`` is a Python with
``onnxruntime-genai onnx_ir torch transformers`` (its model builder makes fp32 and INT4 folders, timed by
``anchors/genai_generate.py``); ``--optimum-python`` one with ``optimum-onnx onnxruntime torch`` (``optimum-cli
export onnx --task text-generation-with-past``, timed by ``anchors/optimum_generate.py`` with
``ORTModelForCausalLM.generate()``). Both get the same prompt, token count and threads. With onnxruntime-genai the
two INT4 files are also swapped (genai's runtime on onnx-nb's file, onnx-nb's ``generate()`` on the builder's), and
the ratios printed at the end tell the file from the loop around it.

Prompt of 128 tokens, 64 new tokens, batch 1, 2 threads everywhere, greedy. Each candidate generates the same
tokens; decode tokens/s is one over the median of a generation's 63 decode steps (the first new token is the
prefill, reported as time to first token), each step timed the same way for every candidate (a Hugging Face
``streamer`` for PyTorch and Optimum, around ``generate_next_token()`` for onnxruntime-genai, onnx-nb's own step
times), with the plain total-time rate beside it. Candidates are visited in a shuffled order each round, each with
one untimed generation first (on 2 cores, the previous candidate's threads can still be spinning). Prints the load
average.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")


ANCHORS = Path(__file__).parent / "anchors"
INT4 = "onnx-nb optimize() (GroupQueryAttention) + INT4 weight-only"
GENAI_INT4 = "onnxruntime-genai builder INT4 (accuracy level 4)"
GENAI_RUNTIME = "onnx-nb generate(runtime='onnxruntime-genai') on its INT4 file"
SWAPPED = ("onnxruntime-genai's runtime on onnx-nb's INT4 file", "onnx-nb generate() on the builder's INT4 file")
sys.path.insert(0, str(ANCHORS))  # arguments.StepClock times Hugging Face generate()'s steps here too
from arguments import Served  # noqa: E402


def build(family: str, seed: int = 0) -> Any:
    import torch
    import transformers

    torch.manual_seed(seed)
    if family == "gpt2":
        config = transformers.GPT2Config(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024)
        return transformers.GPT2LMHeadModel(config).eval()
    config = transformers.LlamaConfig(hidden_size=768, intermediate_size=2048, num_hidden_layers=8,
                                      num_attention_heads=12, num_key_value_heads=4, vocab_size=32000,
                                      max_position_embeddings=1024, tie_word_embeddings=False)
    return transformers.LlamaForCausalLM(config).eval()


def save_folder(model: Any, folder: Path) -> Path:
    """The model as a Hugging Face folder the anchors' exporters read (with a tokenizer: the builder wants one;
    MiniLM's, from the bundled package: the anchors are fed token ids, never text)."""
    import transformers

    from onnx_nb.frontends.demo import default_model_path

    model.save_pretrained(folder)
    transformers.AutoTokenizer.from_pretrained(default_model_path()).save_pretrained(folder)
    return folder


class Anchor(Served):
    """A candidate in a process of its own (onnx-nb's files, or an anchor in a side environment), started once:
    it loads its model, then runs one generation per request (``anchors/arguments.serve``)."""

    def __init__(self, python: str, script: str, folder: Path, prompt: list[int], new: int, threads: int,
                 *extra: str) -> None:
        super().__init__([python, str(ANCHORS / script), str(folder), "--prompt", ",".join(map(str, prompt)),
                          "--new-tokens", str(new), "--threads", str(threads), *extra])

    def __call__(self) -> tuple[list[int], float, float, list[float]]:
        timed = self.request()
        return timed["tokens"], timed["ttft"], timed["decode"], timed["steps"]


def genai_folder(template: Path, model: Path, folder: Path) -> Path:
    """onnx-nb's file in a folder onnxruntime-genai reads: the builder's genai_config.json and tokenizer (the
    input and output names are the same: ``past_key_values.%d.key``, ``present.%d.key``), the model linked."""
    import shutil

    folder.mkdir()
    for item in template.iterdir():
        if item.suffix == ".json":
            shutil.copy(item, folder / item.name)
    (folder / "model.onnx").symlink_to(model)
    return folder


def make_anchors(args: Any, model: Any, work: Path, prompt: list[int], int4: Path) -> dict[str, Any]:
    """The anchors asked for; with onnxruntime-genai, also the two INT4 files swapped (each runtime on the other's
    file: the file and the loop around it measured apart)."""
    import subprocess

    found: dict[str, Any] = {}
    if not (args.genai_python or args.optimum_python):
        return found
    folder = save_folder(model, work / "hf")
    if args.genai_python:
        for precision in ("fp32", "int4"):
            out = work / f"genai-{precision}"
            extra = ["--extra_options", "int4_accuracy_level=4"] if precision == "int4" else []
            start = time.perf_counter()
            subprocess.run([args.genai_python, "-m", "onnxruntime_genai.models.builder", "-i", str(folder), "-o",
                            str(out), "-p", precision, "-e", "cpu", *extra], check=True, capture_output=True)
            print(f"onnxruntime-genai builder {precision}: {time.perf_counter() - start:.1f} s", flush=True)
            label = "onnxruntime-genai builder " + ("fp32" if precision == "fp32" else "INT4 (accuracy level 4)")
            found[label] = Anchor(args.genai_python, "genai_generate.py", out, prompt, args.new_tokens, args.threads)
        swapped = genai_folder(work / "genai-int4", int4, work / "onnx-nb-int4-for-genai")
        found[SWAPPED[0]] = Anchor(args.genai_python, "genai_generate.py", swapped, prompt, args.new_tokens,
                                   args.threads)
        found[SWAPPED[1]] = Anchor(sys.executable, "onnxnb_generate.py", work / "genai-int4" / "model.onnx", prompt,
                                   args.new_tokens, args.threads)
    if args.optimum_python:
        out = work / "optimum"
        cli = str(Path(args.optimum_python).parent / "optimum-cli")
        start = time.perf_counter()
        subprocess.run([cli, "export", "onnx", "--model", str(folder), "--task", "text-generation-with-past",
                        str(out)], check=True, capture_output=True)
        print(f"optimum-cli export: {time.perf_counter() - start:.1f} s", flush=True)
        found["Optimum ORTModelForCausalLM fp32"] = Anchor(args.optimum_python, "optimum_generate.py", out, prompt,
                                                           args.new_tokens, args.threads)
    return found


def torch_run(model: Any, prompt: list[int], new: int, cache: bool) -> tuple[list[int], float, float, list[float]]:
    """(tokens, time to first token s, decode s, each decode step s) with PyTorch eager generate()."""
    import torch
    from arguments import StepClock  # benchmarks/anchors, on the path

    ids = torch.tensor([prompt])
    with torch.inference_mode():
        start = time.perf_counter()
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=1, do_sample=False,
                       pad_token_id=0, use_cache=cache)
        first = time.perf_counter() - start
        clock = StepClock()
        start = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                             do_sample=False, pad_token_id=0, eos_token_id=None, use_cache=cache, streamer=clock)
        total = time.perf_counter() - start
    return out[0, len(prompt):].tolist(), first, max(total - first, 1e-9), clock.steps()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--family", choices=("llama", "gpt2"), default="llama")
    parser.add_argument("--genai-python", help="a Python with onnxruntime-genai (side environment)")
    parser.add_argument("--optimum-python", help="a Python with optimum-onnx (side environment)")
    args = parser.parse_args()

    import numpy as np
    import onnxruntime as ort
    import torch

    import onnx_nb

    torch.set_num_threads(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    model = build(args.family)
    params = sum(p.numel() for p in model.parameters())
    work = Path(tempfile.mkdtemp(prefix="onnx-nb-gen-"))
    start = time.perf_counter()
    export = onnx_nb.export(model, out=work / "model.onnx", progress=False)
    print(f"export {time.perf_counter() - start:.1f} s, {params / 1e6:.0f}M parameters, "
          f"cache {export.cache_layout.text()}", flush=True)
    import onnx

    routes = {}
    for attention in ("standard", "auto"):
        start = time.perf_counter()
        routes[attention] = onnx_nb.optimize(export, validate=False, attention=attention,
                                             out=work / f"model.optimized-{attention}.onnx")
        nodes = [len(onnx.load(str(p), load_external_data=False).graph.node)
                 for p in (export.path, routes[attention].path)]
        print(f"optimize(attention={attention!r}) {time.perf_counter() - start:.1f} s: "
              f"{routes[attention].recipe['attention_route']}; graph nodes {nodes[0]} exported, {nodes[1]} optimized",
              flush=True)
    fast = routes["auto"]
    start = time.perf_counter()
    int8 = onnx_nb.quantize(fast, exclude=None, validate=False, out=work / "model.int8.onnx")
    int4 = onnx_nb.quantize(fast, method="int4", validate=False, out=work / "model.int4.onnx")
    print(f"quantized in {time.perf_counter() - start:.1f} s", flush=True)
    gqa = " (GroupQueryAttention)" if fast.recipe["attention_route"].startswith("GroupQueryAttention") else ""
    variants = {"onnx-nb export() fp32": export.path,
                "onnx-nb optimize(attention='standard') fp32": routes["standard"].path,
                f"onnx-nb optimize() fp32{gqa}": fast.path,
                f"onnx-nb optimize(){gqa} + INT8 dynamic": int8.path,
                f"onnx-nb optimize(){gqa} + INT4 weight-only": int4.path}

    rng = np.random.default_rng(0)
    prompt = [int(t) for t in rng.integers(3, model.config.vocab_size, args.prompt)]
    by_genai = {}  # onnx-nb's INT4 file through generate(runtime="onnxruntime-genai"): the C++ loop
    if gqa and importlib.util.find_spec("onnxruntime_genai") is not None:
        by_genai[GENAI_RUNTIME] = Anchor(sys.executable, "onnxnb_generate.py", int4.path, prompt, args.new_tokens,
                                         args.threads, "--runtime", "onnxruntime-genai")
    candidates: dict[str, Any] = {
        "PyTorch eager generate() (cache)": lambda: torch_run(model, prompt, args.new_tokens, True),
        "PyTorch eager generate() (no cache)": lambda: torch_run(model, prompt, args.new_tokens, False),
        # each ONNX candidate in its own process, like the anchors (a session beside PyTorch's threads runs slower)
        **{name: Anchor(sys.executable, "onnxnb_generate.py", path, prompt, args.new_tokens, args.threads)
           for name, path in variants.items()},
        **by_genai,
        **make_anchors(args, model, work, prompt, int4.path),
    }
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; onnxruntime "
          f"{ort.__version__}, torch {torch.__version__}", flush=True)
    timings: dict[str, list[tuple[float, float, float]]] = {k: [] for k in candidates}
    tokens: dict[str, list[int]] = {}
    order = list(candidates)
    for round_ in range(args.rounds):
        random.Random(round_).shuffle(order)
        for name in order:
            candidates[name]()  # untimed: sessions warm, previous candidate's threads settled
            got, first, decode, steps = candidates[name]()
            tokens[name] = got
            timings[name].append((first, (len(got) - 1) / decode, 1 / statistics.median(steps)))
        print(f"round {round_ + 1} done, load average {os.getloadavg()[0]:.2f}", flush=True)
    base = statistics.median(m for _, _, m in timings["PyTorch eager generate() (cache)"])
    reference = tokens["PyTorch eager generate() (cache)"]
    print(f"\nprompt {args.prompt}, {args.new_tokens} new tokens, batch 1, {args.threads} threads, "
          f"median of {args.rounds} rounds")
    print(f"{'candidate':60} {'TTFT ms':>8} {'tok/s':>7} {'vs eager':>8} {'tok/s (all)':>11}  greedy = eager  "
          "(tok/s of each round)")
    for name in candidates:
        ttft = statistics.median(f for f, _, _ in timings[name]) * 1e3
        speed = statistics.median(m for _, _, m in timings[name])
        whole = statistics.median(t for _, t, _ in timings[name])
        same = sum(a == b for a, b in zip(tokens[name], reference))
        rounds = " ".join(f"{m:.0f}" for _, _, m in timings[name])
        print(f"{name:60} {ttft:8.1f} {speed:7.1f} {speed / base:7.2f}x {whole:11.1f}  {same:>2}/{len(reference)}"
              f"  ({rounds})")
    print("tok/s: one over the median decode step of a generation (robust to a moment's load on the host), median "
          "of the rounds; tok/s (all): the 63 decode steps over their total time")
    if SWAPPED[0] in timings and INT4 in timings:  # INT4: the file and the runtime, compared round by round
        def ratios(a: str, b: str) -> str:
            each = [x[2] / y[2] for x, y in zip(timings[a], timings[b])]
            return f"{statistics.median(each):.2f}x (rounds {min(each):.2f}-{max(each):.2f})"

        print(f"INT4, same runtime: onnx-nb's file / the builder's, under onnxruntime-genai "
              f"{ratios(SWAPPED[0], GENAI_INT4)}; under onnx-nb generate() {ratios(INT4, SWAPPED[1])}")
        print(f"INT4, same file: onnx-nb generate() / onnxruntime-genai, on onnx-nb's file "
              f"{ratios(INT4, SWAPPED[0])}; on the builder's file {ratios(SWAPPED[1], GENAI_INT4)}")
        print(f"INT4, both: onnx-nb (its file, generate()) / onnxruntime-genai (builder file, runtime) "
              f"{ratios(INT4, GENAI_INT4)}")
        if GENAI_RUNTIME in timings:
            print(f"INT4, onnx-nb's file through generate(runtime='onnxruntime-genai') / onnxruntime-genai "
                  f"(builder file, runtime) {ratios(GENAI_RUNTIME, GENAI_INT4)}")
    for candidate in candidates.values():
        if isinstance(candidate, Anchor):
            candidate.close()
    builder = work / "genai-int4"
    if GENAI_RUNTIME in timings and builder.is_dir():  # the INT4 comparison again, all in one process
        import subprocess

        subprocess.run([sys.executable, str(ANCHORS / "int4_one_process.py"), str(int4.path), str(builder),
                        "--prompt", ",".join(map(str, prompt)), "--new-tokens", str(args.new_tokens),
                        "--threads", str(args.threads)], check=True, cwd=ANCHORS, timeout=1800)
        print(f"load average after it: {os.getloadavg()[0]:.2f}")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
