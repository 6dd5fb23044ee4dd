"""An anchor for the diffusion pipeline: Optimum's ``ORTStableDiffusionPipeline`` (its own export of the same
random-weight pipeline) side by side with onnx-nb's ONNX pipeline and PyTorch eager, time per image in one run.

    .venv/bin/python benchmarks/diffusion_optimum.py [--rounds 3] [--steps 10] [--threads 2] [--size small|tiny]
        [--optimum-python /work/venvs/optimum/bin/python] [--folder DIR]

The pipeline comes from ``benchmarks/diffusion.py`` (``build``), saved with ``save_pretrained``; onnx-nb exports it
here, and a worker process in Optimum's environment (``--optimum-python``: optimum-onnx, diffusers, transformers 4.x)
exports it with ``ORTStableDiffusionPipeline.from_pretrained(folder, export=True)`` (when ``--folder`` has no
export of it yet), loads Optimum's files with ``intra_op_num_threads`` set and the source's saved DDIM scheduler,
and makes one image per request over stdin/stdout (JSON lines), timed inside the worker, the image saved as .npy.
Candidates are visited in a shuffled order each round with an untimed image first, as ``diffusion.py`` does.
Prints ms per image, the ONNX parts' ms per call, each image's PSNR against PyTorch's, and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PROMPT = "a photo of an astronaut riding a horse on the moon"
PARTS = ("text_encoder", "unet", "vae_decoder")


def worker(pipe_dir: Path, optimum_dir: Path, threads: int) -> None:
    """Runs in Optimum's environment: export when missing, load, then one image per JSON request on stdin."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)  # the protocol's own stdout; any library output goes to stderr
    os.dup2(2, 1)
    import diffusers
    import numpy as np
    import onnxruntime as ort
    import torch
    from optimum.onnxruntime import ORTStableDiffusionPipeline

    torch.set_num_threads(threads)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    export_s = None
    if not (optimum_dir / "unet" / "model.onnx").is_file():
        start = time.perf_counter()
        exported = ORTStableDiffusionPipeline.from_pretrained(str(pipe_dir), export=True)
        exported.save_pretrained(optimum_dir)
        export_s = time.perf_counter() - start
        del exported
    scheduler = diffusers.DDIMScheduler.from_pretrained(pipe_dir / "scheduler")  # the source's saved config
    pipe = ORTStableDiffusionPipeline.from_pretrained(str(optimum_dir), export=False, session_options=options,
                                                      scheduler=scheduler)
    pipe.set_progress_bar_config(disable=True)
    ms: dict[str, list[float]] = {name: [] for name in PARTS}
    for name in PARTS:
        session = getattr(pipe, name).session
        run = session.run

        def timed(*args: Any, _run: Any = run, _ms: list[float] = ms[name], **kwargs: Any) -> Any:
            start = time.perf_counter()
            out = _run(*args, **kwargs)
            _ms.append((time.perf_counter() - start) * 1e3)
            return out

        session.run = timed
    ids = pipe.tokenizer(PROMPT, padding="max_length", max_length=pipe.tokenizer.model_max_length).input_ids
    import optimum.version
    proto.write(json.dumps({
        "ready": True, "export_s": export_s, "ids": ids, "io_binding": pipe.unet.use_io_binding,
        "scheduler": {k: v for k, v in scheduler.config.items() if not k.startswith("_")},
        "versions": {"optimum": optimum.version.__version__, "diffusers": diffusers.__version__,
                     "onnxruntime": ort.__version__, "torch": torch.__version__},
        "timestep": str(pipe.unet.input_dtypes["timestep"])}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("reset"):
            for values in ms.values():
                values.clear()
            proto.write(json.dumps({"ok": True}) + "\n")
            continue
        if request.get("part_times"):
            proto.write(json.dumps({name: [statistics.median(v), len(v)] for name, v in ms.items() if v}) + "\n")
            continue
        start = time.perf_counter()
        with torch.no_grad():
            image = pipe(request["prompt"], num_inference_steps=request["steps"], guidance_scale=7.5,
                         height=request["height"], width=request["width"],
                         generator=torch.Generator().manual_seed(request["seed"]), output_type="np").images
        seconds = time.perf_counter() - start
        np.save(request["out"], np.asarray(image, np.float32))
        proto.write(json.dumps({"seconds": seconds}) + "\n")


class Optimum:
    """The worker process, called like a pipeline: one image per call (its time is the worker's own)."""

    def __init__(self, python: str, pipe_dir: Path, optimum_dir: Path, threads: int, folder: Path) -> None:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
        self.process = subprocess.Popen(
            [python, __file__, "--worker", "--pipe-dir", str(pipe_dir), "--optimum-dir", str(optimum_dir),
             "--threads", str(threads)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.folder, self.calls = folder, 0
        self.ready = self.ask(None)

    def ask(self, request: dict[str, Any] | None) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        if request is not None:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"The Optimum worker ended (exit status {self.process.wait()}); see its stderr above.")
        return json.loads(line)

    def image(self, steps: int, side: int) -> tuple[Any, float]:
        import numpy as np

        self.calls += 1
        out = self.folder / f"optimum-{self.calls}.npy"
        answer = self.ask({"prompt": PROMPT, "steps": steps, "seed": 0, "height": side, "width": side,
                           "out": str(out)})
        return np.load(out), answer["seconds"]

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


def fingerprint(pipe: Any) -> list[float]:
    import torch

    with torch.no_grad():
        return [round(float(sum(p.double().sum() for p in module.parameters())), 6)
                for module in (pipe.text_encoder, pipe.unet, pipe.vae)]


def hub_layout(path: Path) -> None:
    """transformers 5 saves CLIPTextModel's weights without their ``text_model.`` prefix; transformers 4.x would
    leave every weight of such a file at random (a warning only): write them under the hub's names, which both
    versions read."""
    from safetensors.torch import load_file, save_file

    weights = load_file(path)
    if not all(name.startswith("text_model.") for name in weights):
        save_file({f"text_model.{k}" if not k.startswith("text_model.") else k: v for k, v in weights.items()},
                  path, metadata={"format": "pt"})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--size", choices=("small", "tiny"), default="small")
    parser.add_argument("--optimum-python", default="/work/venvs/optimum/bin/python")
    parser.add_argument("--folder", type=Path, help="keeps the saved pipeline and Optimum's export between runs")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--pipe-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--optimum-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.pipe_dir, args.optimum_dir, args.threads)
        return

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import numpy as np
    import torch
    from diffusion import build

    import onnx_nb
    from onnx_nb.kinds.diffusion.parity import psnr
    from onnx_nb.kinds.diffusion.pipeline import part_times, reset_times

    torch.set_num_threads(args.threads)
    folder = args.folder or Path(tempfile.mkdtemp(prefix="onnx-nb-sd-optimum-"))
    folder.mkdir(parents=True, exist_ok=True)
    pipe = build(args.size, folder / "tokenizer")
    pipe_dir, optimum_dir, marker = folder / "pipe", folder / "optimum", folder / "pipe" / "fingerprint.json"
    if not marker.is_file() or json.loads(marker.read_text()) != fingerprint(pipe):
        shutil.rmtree(pipe_dir, ignore_errors=True)
        shutil.rmtree(optimum_dir, ignore_errors=True)
        pipe.save_pretrained(pipe_dir)
        vocab = next((folder / "tokenizer").rglob("vocab.json")).parent  # where build() wrote the tokenizer
        for name in ("vocab.json", "merges.txt"):  # transformers 5 saves tokenizer.json only; 4.x's CLIPTokenizer
            shutil.copy(vocab / name, pipe_dir / "tokenizer" / name)  # reads these two
        hub_layout(pipe_dir / "text_encoder" / "model.safetensors")
        marker.write_text(json.dumps(fingerprint(pipe)))

    start = time.perf_counter()
    result = onnx_nb.export(pipe, out=folder / "onnx", overwrite=True)
    onnx_nb_export_s = time.perf_counter() - start
    print(result)
    ours = onnx_nb.to_diffusers(result, threads=args.threads)
    optimum = Optimum(args.optimum_python, pipe_dir, optimum_dir, args.threads, folder)
    ready = optimum.ready
    source_scheduler = {k: v for k, v in pipe.scheduler.config.items() if not k.startswith("_")}
    if json.loads(json.dumps(source_scheduler)) != ready["scheduler"]:
        raise SystemExit(f"Scheduler configs differ: {source_scheduler} vs Optimum's {ready['scheduler']}")
    ids = pipe.tokenizer(PROMPT, padding="max_length", max_length=pipe.tokenizer.model_max_length).input_ids
    if list(ids) != ready["ids"]:
        raise SystemExit("The two tokenizers give different token ids for the prompt.")
    side = pipe.unet.config.sample_size * pipe.vae_scale_factor

    def image(candidate: Any) -> tuple[np.ndarray, float]:
        if candidate is optimum:
            return optimum.image(args.steps, side)
        start = time.perf_counter()
        with torch.no_grad():
            out = candidate(PROMPT, num_inference_steps=args.steps, guidance_scale=7.5, height=side, width=side,
                            generator=torch.Generator().manual_seed(0), output_type="np").images
        return np.asarray(out, np.float32), time.perf_counter() - start

    candidates = {"PyTorch eager": pipe, "onnx-nb": ours, "Optimum": optimum}
    images = {name: image(candidate)[0] for name, candidate in candidates.items()}  # one untimed image each
    reset_times(ours)
    optimum.ask({"reset": True})
    times: dict[str, list[float]] = {name: [] for name in candidates}
    order = list(candidates)
    for round_ in range(args.rounds):  # as onnx_nb.runtime.timing.interleaved(warmup=1, runs=1)
        random.Random(round_).shuffle(order)
        for name in order:
            image(candidates[name])
            times[name].append(image(candidates[name])[1])
    optimum_parts = optimum.ask({"part_times": True})
    optimum.close()

    median = {name: statistics.median(values) for name, values in times.items()}
    versions = ", ".join(f"{k} {v}" for k, v in ready["versions"].items())
    print(f"\n{args.size}: {side}x{side} images, {args.steps} DDIM steps, guidance 7.5, {args.threads} threads, "
          f"{args.rounds} rounds (median)")
    print(f"  export: onnx-nb {onnx_nb_export_s:.1f} s; Optimum "
          + (f"{ready['export_s']:.1f} s" if ready["export_s"] is not None else "reused from --folder")
          + f" (worker: {versions}; UNet timestep {ready['timestep']}, io_binding {ready['io_binding']})")
    for name, seconds in median.items():
        quality = "" if name == "PyTorch eager" else \
            f"   PSNR vs PyTorch {psnr(images[name], images['PyTorch eager']):.1f} dB"
        speedup = median["PyTorch eager"] / seconds
        print(f"  {name:14s} {seconds * 1e3:8.1f} ms per image   {speedup:5.2f}x PyTorch eager{quality}")
        if name == "onnx-nb":
            ms, calls = part_times(ours)
            print("      " + ", ".join(f"{part} {v:.1f} ms x {calls[part]}" for part, v in ms.items()))
        elif name == "Optimum":
            print("      " + ", ".join(f"{part} {v:.1f} ms x {n}" for part, (v, n) in optimum_parts.items()))
    print(f"  onnx-nb / Optimum: {median['onnx-nb'] / median['Optimum']:.3f} (time per image); "
          f"PSNR onnx-nb vs Optimum {psnr(images['onnx-nb'], images['Optimum']):.1f} dB")
    print(f"  load average: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
