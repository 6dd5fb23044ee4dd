"""Image parity of an exported diffusion pipeline: the same prompt, seed and scheduler through PyTorch's pipeline
and the ONNX one (:func:`onnx_nb.to_diffusers`), the images compared by PSNR, each side timed per image and each
ONNX part per call."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError
from .adapter import DiffusersAdapter
from .result import PARTS, DiffusionExport, DiffusionParity


def psnr(a: np.ndarray, b: np.ndarray, peak: float = 1.0) -> float:
    """Peak signal-to-noise ratio in dB of two images with values in [0, peak] (inf when they are equal)."""
    mse = float(np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(peak * peak / mse)


def check_diffusion(result: DiffusionExport, prompt: str | list[str] = "a photo of an astronaut riding a horse", *,
                    steps: int = 4, seed: int = 0, guidance_scale: float = 7.5, height: int | None = None,
                    width: int | None = None, threshold_db: float = 40.0, provider: str = "cpu",
                    threads: int | None = None, **parts: Any) -> DiffusionParity:
    """The ONNX pipeline's image against PyTorch's for ``prompt`` with the same seed (``torch.Generator``), scheduler
    and ``steps``: PSNR in dB (pixels in [0, 1]) against ``threshold_db``, and milliseconds per image on each side
    (each pipeline runs once untimed first). ``parts``: ``text_encoder=``/``unet=``/``vae_decoder=`` another file for
    that part (an INT8 or fp16 variant), as :func:`onnx_nb.to_diffusers` takes them.

    Example::

        sd = onnx_nb.export(pipe, out="sd-onnx")
        parity = onnx_nb.check_diffusion(sd, "a photo of an astronaut riding a horse", steps=4)
        assert parity, parity.psnr_db
    """
    import torch

    from .pipeline import part_times, reset_times, to_diffusers

    DiffusersAdapter.expect(result, "check_diffusion")
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise InvalidArgumentError(f"{', '.join(unknown)}: not a part; the parts are {', '.join(PARTS)}.")
    if steps < 1:
        raise InvalidArgumentError(f"steps={steps}: at least 1.")
    source = result.pipeline
    onnx_pipe = to_diffusers(result, provider=provider, threads=threads, **parts)
    kwargs = {"num_inference_steps": steps, "guidance_scale": guidance_scale, "output_type": "np",
              "height": height, "width": width}

    def image(pipe: Any) -> tuple[np.ndarray, float]:
        with torch.no_grad():
            pipe(prompt, generator=torch.Generator().manual_seed(seed), **kwargs)  # untimed: sessions warm up
            reset_times(pipe)
            start = time.perf_counter()
            out = pipe(prompt, generator=torch.Generator().manual_seed(seed), **kwargs).images
        return np.asarray(out, np.float32), (time.perf_counter() - start) * 1e3

    want, torch_ms = image(source)
    got, onnx_ms = image(onnx_pipe)
    ms, calls = part_times(onnx_pipe)
    return DiffusionParity(psnr(got, want), threshold_db, float(np.abs(got - want).max()), onnx_ms, torch_ms, ms,
                           calls, steps, (int(got.shape[1]), int(got.shape[2])), (got[0], want[0]))


def unet_calibration(result: DiffusionExport, prompts: str | list[str] | None = None, *, steps: int = 4,
                     seed: int = 0, guidance_scale: float = 7.5, height: int | None = None,
                     width: int | None = None) -> list[dict[str, np.ndarray]]:
    """The UNet's own inputs while PyTorch's pipeline makes an image for each prompt (``steps`` calls each, with
    the classifier-free guidance batch): latents at every noise level the scheduler visits, those timesteps and the
    text encoder's states, as ``quantize(sd.parts["unet"], method="static", calibration=...)`` takes them. Noise
    around one sample (``calibration="generated"``) never shows a UNet its late, nearly clean latents.

    Example::

        int8 = onnx_nb.quantize(sd.parts["unet"], method="static", calibration=onnx_nb.unet_calibration(sd))
        onnx_pipe = onnx_nb.to_diffusers(sd, unet=int8)
    """
    import torch

    DiffusersAdapter.expect(result, "unet_calibration")
    if steps < 1:
        raise InvalidArgumentError(f"steps={steps}: at least 1.")
    prompts = [prompts] if isinstance(prompts, str) else list(prompts or CALIBRATION_PROMPTS)
    items: list[dict[str, np.ndarray]] = []

    def keep(_module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        sample, timestep = (list(args) + [kwargs.get("sample"), kwargs.get("timestep")][len(args):])[:2]
        states = kwargs["encoder_hidden_states"] if "encoder_hidden_states" in kwargs else args[2]
        items.append({"sample": sample.detach().float().cpu().numpy().copy(),
                      "timestep": np.asarray(float(timestep.reshape(-1)[0]) if torch.is_tensor(timestep)
                                             else float(timestep), np.float32),
                      "encoder_hidden_states": states.detach().float().cpu().numpy().copy()})

    pipe = result.pipeline
    handle = pipe.unet.register_forward_pre_hook(keep, with_kwargs=True)
    try:
        with torch.no_grad():
            for n, prompt in enumerate(prompts):
                pipe(prompt, num_inference_steps=steps, guidance_scale=guidance_scale, height=height, width=width,
                     generator=torch.Generator().manual_seed(seed + n), output_type="latent")
    finally:
        handle.remove()
    return items


CALIBRATION_PROMPTS = ("a photo of an astronaut riding a horse", "a watercolor painting of a lighthouse at dusk",
                       "a close-up of a cat's face", "a city street in the rain at night")
