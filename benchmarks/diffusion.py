"""A Stable Diffusion-like pipeline (random weights) through onnx-nb: export in one call, the ONNX pipeline's image
against PyTorch's (same prompt, seed and scheduler), time per image and per part, side by side in one run.

    .venv/bin/python benchmarks/diffusion.py [--rounds 3] [--steps 10] [--threads 2] [--size small|tiny]

``small``: a UNet with three levels (64/128/256 channels, cross-attention on the two lower ones, 24.8M parameters),
a four-level VAE, a 4-layer CLIP text encoder (hidden 256), 256x256 images from 32x32 latents, DDIM, classifier-free
guidance; ``tiny``: the tests' sizes (64x64 images). Candidates, visited in a shuffled order each round with an
untimed image first (``onnx_nb.runtime.timing.interleaved``): PyTorch eager, the ONNX pipeline (fp32 files), and
the ONNX pipeline with a dynamic INT8 UNet and with a static QDQ INT8 UNet calibrated on the pipeline's own UNet
inputs (``onnx_nb.unet_calibration``), each re-validated by ``quantize``. Prints ms per image, each part's ms per
call, the PSNR of each image against PyTorch's, and the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the tests' tiny CLIP tokenizer


def build(size: str, folder: Path) -> object:
    import diffusers
    import torch
    import transformers

    import tiny_models

    if size == "tiny":
        return tiny_models.build_diffusion(folder)
    torch.manual_seed(0)
    unet = diffusers.UNet2DConditionModel(
        block_out_channels=(64, 128, 256), layers_per_block=2, sample_size=32, in_channels=4, out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"), cross_attention_dim=256,
        attention_head_dim=8)
    vae = diffusers.AutoencoderKL(block_out_channels=[64, 128, 128, 128], in_channels=3, out_channels=3,
                                  latent_channels=4, down_block_types=["DownEncoderBlock2D"] * 4,
                                  up_block_types=["UpDecoderBlock2D"] * 4)
    text = transformers.CLIPTextModel(transformers.CLIPTextConfig(
        bos_token_id=0, eos_token_id=1, pad_token_id=1, hidden_size=256, intermediate_size=1024, num_attention_heads=4,
        num_hidden_layers=4, vocab_size=1000, max_position_embeddings=77))
    scheduler = diffusers.DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                                        clip_sample=False, set_alpha_to_one=False, steps_offset=1)
    pipe = diffusers.StableDiffusionPipeline(
        unet=unet.eval(), vae=vae.eval(), text_encoder=text.eval(), tokenizer=tiny_models.clip_tokenizer(folder),
        scheduler=scheduler, safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--size", choices=("small", "tiny"), default="small")
    args = parser.parse_args()

    import numpy as np
    import torch

    import onnx_nb
    from onnx_nb.kinds.diffusion.parity import psnr
    from onnx_nb.kinds.diffusion.pipeline import part_times, reset_times
    from onnx_nb.runtime.timing import interleaved

    torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="onnx-nb-sd-"))
    pipe = build(args.size, work / "tokenizer")
    result = onnx_nb.export(pipe, out=work / "onnx")
    print(result)
    dynamic = onnx_nb.quantize(result.parts["unet"], method="dynamic")
    calibration = onnx_nb.unet_calibration(result, steps=4)  # 4 prompts x 4 steps of the PyTorch pipeline
    static = onnx_nb.quantize(result.parts["unet"], method="static", calibration=calibration)
    for label, variant in (("dynamic", dynamic), ("static", static)):
        print(f"{label} INT8 UNet: parity {'passed' if variant.parity else 'FAILED'}, {variant.recipe.get('op_types')}")
    candidates = {"PyTorch eager": pipe, "onnx-nb (fp32 files)": onnx_nb.to_diffusers(result, threads=args.threads),
                  "onnx-nb, dynamic INT8 UNet": onnx_nb.to_diffusers(result, threads=args.threads, unet=dynamic),
                  "onnx-nb, static INT8 UNet": onnx_nb.to_diffusers(result, threads=args.threads, unet=static)}
    prompt = "a photo of an astronaut riding a horse on the moon"

    def image(candidate: object) -> np.ndarray:
        with torch.no_grad():
            out = candidate(prompt, num_inference_steps=args.steps,  # type: ignore[operator]
                            generator=torch.Generator().manual_seed(0), output_type="np").images
        return np.asarray(out, np.float32)

    images = {name: image(candidate) for name, candidate in candidates.items()}
    for candidate in candidates.values():
        reset_times(candidate)
    times = interleaved({name: (lambda c=c: image(c)) for name, c in candidates.items()}, rounds=args.rounds,
                        warmup=1, runs=1)
    eager = statistics.median(times["PyTorch eager"])
    side = images["PyTorch eager"].shape[1]
    print(f"\n{args.size}: {side}x{side} images, {args.steps} DDIM steps, guidance 7.5, {args.threads} threads")
    for name, values in times.items():
        median = statistics.median(values)
        quality = "" if name == "PyTorch eager" else \
            f"   PSNR vs PyTorch {psnr(images[name], images['PyTorch eager']):.1f} dB"
        print(f"  {name:24s} {median * 1e3:8.1f} ms per image   {eager / median:5.2f}x PyTorch eager{quality}")
        if name != "PyTorch eager":
            ms, calls = part_times(candidates[name])
            print("      " + ", ".join(f"{part} {v:.1f} ms x {calls[part]}" for part, v in ms.items()))
    print(f"  load average: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
