"""INT8 schemes against the CPU: the error and the speed of u8s8 full range, u8s8 with reduce_range and u8u8, side by
side with the fp32 file, on the CPU at hand (its flags in the header) and, for the errors, on an emulated AVX2 CPU
without VNNI.

    .venv/bin/python benchmarks/int8_cpu.py [--rounds 9] [--threads 2] [--no-emulate]

Two models: all-MiniLM-L6-v2 (real weights, optimized with onnx-nb's transformer route; 8 real sentences padded to
128; the error and the cosine are of the last hidden states, per sentence, padded positions included) and the tests'
tiny Qwen2 optimized to GroupQueryAttention
(next-token logits of a 2 x 12 prompt). Every file is timed in plain ONNX Runtime sessions, visited in a new shuffled
order each round with untimed runs first (``onnx_nb.runtime.timing.interleaved``). Errors are measured against the
model's own fp32 file on the same CPU. ``--no-emulate`` skips the second CPU (QEMU's EPYC-Rome, user mode: ONNX
Runtime dispatches its kernels on the emulated CPUID; only outputs are read there, never a time).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from sentences import BATCH

SCHEMES = ("u8s8", "u8s8-reduced", "u8u8")

ERRORS = """
    import json, sys
    import numpy as np, onnxruntime as ort
    from onnx_nb.runtime.cpu import this_cpu
    feeds = dict(np.load(sys.argv[1]))
    def run(path):
        s = ort.InferenceSession(path)
        names = [i.name for i in s.get_inputs()]
        return s.run(None, {n: feeds[n] for n in names})[0]
    base = run(sys.argv[2])
    out = {"cpu": this_cpu().label}
    for path in sys.argv[3:]:
        got = run(path)
        a, b = got.reshape(len(got), -1), base.reshape(len(base), -1)
        cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        out[path] = [float(np.abs(got - base).max()), float(cos.min())]
    print(json.dumps(out))
"""


def files(folder: Path) -> dict[str, tuple[dict[str, Path], dict[str, np.ndarray]]]:
    """Per model: fp32 and each scheme's INT8 file, and the inputs they run on."""
    import transformers

    import onnx_nb
    import tiny_models

    made = {}
    model_dir = onnx_nb.default_model_path()
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    enc = tok(BATCH, padding="max_length", max_length=128, truncation=True, return_tensors="np")
    minilm = onnx_nb.optimize(onnx_nb.export(model_dir, out=folder / "minilm.onnx", overwrite=True, progress=False),
                              out=folder / "minilm.opt.onnx", overwrite=True, validate=False)
    feed = {k: enc[k].astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
    made["all-MiniLM-L6-v2 (8 x 128)"] = (_schemes(minilm, folder, "minilm"), feed)
    qwen = onnx_nb.optimize(onnx_nb.export(tiny_models.build("qwen2"), out=folder / "qwen2.onnx", overwrite=True,
                                           progress=False), out=folder / "qwen2.gqa.onnx", overwrite=True,
                            validate=False)
    rng = np.random.default_rng(0)
    feed = {"input_ids": rng.integers(3, 100, (2, 12)), "attention_mask": np.ones((2, 12), np.int64)}
    feed.update({f"past_key_values.{i}.{kv}": np.zeros((2, 1, 0, 16), np.float32) for i in range(2)
                 for kv in ("key", "value")})
    made["tiny Qwen2, GroupQueryAttention (2 x 12)"] = (_schemes(qwen, folder, "qwen2"), feed)
    return made


def _schemes(parent: object, folder: Path, stem: str) -> dict[str, Path]:
    import onnx_nb

    out = {"fp32": Path(parent.path)}  # type: ignore[attr-defined]
    for scheme in SCHEMES:
        out[scheme] = onnx_nb.quantize(parent, scheme=scheme, validate=False, out=folder / f"{stem}.{scheme}.onnx",
                                       overwrite=True).path
    return out


def errors(python: list[str], made: dict[str, Path], feed: dict[str, np.ndarray], folder: Path) -> dict[str, list]:
    np.savez(folder / "feed.npz", **feed)
    done = subprocess.run([*python, "-c", textwrap.dedent(ERRORS), str(folder / "feed.npz"), str(made["fp32"]),
                           *(str(made[s]) for s in SCHEMES)], capture_output=True, text=True, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return {"cpu": result["cpu"], **{s: result[str(made[s])] for s in SCHEMES}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-emulate", action="store_true")
    args = parser.parse_args()

    from onnx_nb.runtime.cpu import this_cpu
    from onnx_nb.runtime.sessions import session
    from onnx_nb.runtime.timing import interleaved

    here = this_cpu()
    print(f"CPU: {here.label}; flags {' '.join(sorted(here.flags))}; u8s8 saturates here: {here.saturates}")
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores, threads={args.threads}")
    qemu = shutil.which("qemu-x86_64")
    emulate = [qemu, "-cpu", "EPYC-Rome", sys.executable] if qemu and not args.no_emulate else None
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for model, (made, feed) in files(folder).items():
            print(f"\n## {model}")
            runners = {}
            for name, path in made.items():
                s = session(path, threads=args.threads)
                own = {i.name: feed[i.name] for i in s.get_inputs()}
                runners[name] = (lambda s=s, own=own: s.run(None, own))
            times = interleaved(runners, rounds=args.rounds)
            ms = {name: float(np.median(t)) * 1e3 for name, t in times.items()}
            here_err = errors([sys.executable], made, feed, folder)
            emu_err = errors(emulate, made, feed, folder) if emulate else None
            head = f"{'file':14} {'p50 ms':>8} {'vs fp32':>8} {'max err here':>13} {'min cos here':>13}"
            print(head + (f" {'max err AVX2*':>14} {'min cos AVX2*':>14}" if emu_err else ""))
            for name in made:
                line = f"{name:14} {ms[name]:8.2f} {ms['fp32'] / ms[name]:7.2f}x"
                if name == "fp32":
                    print(line)
                    continue
                line += f" {here_err[name][0]:13.4g} {here_err[name][1]:13.6f}"
                if emu_err:
                    line += f" {emu_err[name][0]:14.4g} {emu_err[name][1]:14.6f}"
                print(line)
        if emulate:
            print(f"\n* {emu_err['cpu'] if emu_err else ''}: QEMU user mode, outputs only (never timed)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
