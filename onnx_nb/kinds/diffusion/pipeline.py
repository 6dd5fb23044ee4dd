"""The exported parts of a diffusion pipeline as a diffusers pipeline: :func:`to_diffusers` builds the source
pipeline's own class (its scheduler, tokenizer, guidance and image processing as they are) with ONNX Runtime in
place of the text encoder, the UNet and the VAE decoder, as Optimum's ``ORTStableDiffusionPipeline`` does. Only
imported by functions that already need torch and diffusers."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...errors import InvalidArgumentError
from .adapter import DiffusersAdapter


class _OnnxPart(torch.nn.Module):
    """One part's file in a session, standing where the pipeline expects its torch module: the module's config,
    a CPU device and fp32 dtype, and each call's time (``ms``)."""

    INPUTS: tuple[str, ...] = ()

    def __init__(self, path: Path, provider: str, threads: int | None, config: Any) -> None:
        super().__init__()
        from ...runtime.sessions import session

        # between two runs the scheduler steps in torch: ONNX Runtime's threads stop spinning after each run
        self.session = session(path, provider, threads=threads, stop_spinning=True)
        self.path, self.config = path, config
        names = sorted(i.name for i in self.session.get_inputs())
        if names != sorted(self.INPUTS):
            raise InvalidArgumentError(
                f"{path.name} takes {', '.join(names)}; the {type(self).__name__[4:]} part takes "
                f"{', '.join(self.INPUTS)}: pass that part's file (an export's part, or a variant of it).")
        self.ms: list[float] = []

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32

    def run(self, **feed: np.ndarray) -> list[np.ndarray]:
        start = time.perf_counter()
        out = self.session.run(None, feed)
        self.ms.append((time.perf_counter() - start) * 1e3)
        return list(out)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path.name}: ONNX Runtime)"


def _host(tensor: torch.Tensor, dtype: Any = np.float32) -> np.ndarray:
    return np.ascontiguousarray(tensor.detach().cpu().numpy(), dtype=dtype)


class OnnxTextEncoder(_OnnxPart):
    INPUTS = ("input_ids",)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                output_hidden_states: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if attention_mask is not None:
            raise InvalidArgumentError("The text encoder's file takes token ids only (CLIP's attention mask is "
                                       "causal inside it); the pipeline passes a mask when the encoder's config "
                                       "sets use_attention_mask: unset it.")
        if output_hidden_states:
            raise InvalidArgumentError("The text encoder's file returns its last hidden states and pooled output "
                                       "only: clip_skip needs the layers' states; leave clip_skip unset.")
        hidden, pooled = self.run(input_ids=_host(input_ids, np.int64))
        return torch.from_numpy(hidden), torch.from_numpy(pooled)


class OnnxUNet(_OnnxPart):
    INPUTS = ("sample", "timestep", "encoder_hidden_states")

    def forward(self, sample: torch.Tensor, timestep: Any, encoder_hidden_states: torch.Tensor,
                timestep_cond: Any = None, cross_attention_kwargs: Any = None, added_cond_kwargs: Any = None,
                return_dict: bool = True, **kwargs: Any) -> Any:
        if timestep_cond is not None or added_cond_kwargs or cross_attention_kwargs or \
                any(v is not None for v in kwargs.values()):
            raise InvalidArgumentError("The UNet's file takes latents, a timestep and text states only (no "
                                       "LoRA scale, IP-adapter or ControlNet residuals).")
        if isinstance(timestep, torch.Tensor) and timestep.numel() != 1:
            raise InvalidArgumentError(f"The UNet's file takes one timestep for the batch, not {timestep.numel()}.")
        levels = 2 ** (len(self.config.block_out_channels) - 1)
        if sample.shape[-1] % levels or sample.shape[-2] % levels:
            raise InvalidArgumentError(
                f"Latents of {sample.shape[-2]}x{sample.shape[-1]}: the UNet's file joins its {levels}x halved "
                f"levels again only at sizes that are multiples of {levels} latents (PyTorch's UNet resizes to fit "
                f"other sizes; the exported path does not). Pick height and width that are multiples of "
                f"{levels} x the VAE's scale (SD 1.x/2.x: 64 pixels).")
        step = np.asarray(float(timestep) if isinstance(timestep, torch.Tensor) else timestep, np.float32)
        (noise,) = self.run(sample=_host(sample), timestep=step, encoder_hidden_states=_host(encoder_hidden_states))
        out = torch.from_numpy(noise)
        if not return_dict:
            return (out,)
        from diffusers.models.unets.unet_2d_condition import UNet2DConditionOutput

        return UNet2DConditionOutput(sample=out)


class OnnxVaeDecoder(_OnnxPart):
    INPUTS = ("latent_sample",)

    def decode(self, z: torch.Tensor, return_dict: bool = True, generator: Any = None) -> Any:
        (image,) = self.run(latent_sample=_host(z))
        out = torch.from_numpy(image)
        if not return_dict:
            return (out,)
        from diffusers.models.autoencoders.vae import DecoderOutput

        return DecoderOutput(sample=out)

    def encode(self, *args: Any, **kwargs: Any) -> Any:
        raise InvalidArgumentError("Only the VAE's decoder is exported: image-to-image and inpainting need its "
                                   "encoder too (text-to-image runs).")

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.decode(*args, **kwargs)


def to_diffusers(result: Any, *, provider: str = "cpu", threads: int | None = None, text_encoder: Any = None,
                 unet: Any = None, vae_decoder: Any = None) -> Any:
    """The pipeline ``onnx_nb.export(pipe)`` came from, rebuilt with ONNX Runtime in place of its text encoder,
    UNet and VAE decoder: the same class, scheduler and tokenizer, so ``pipe(prompt, generator=...)`` runs as it
    did. ``text_encoder``/``unet``/``vae_decoder``: another file for that part (a variant from ``optimize()`` or
    ``quantize()``, or a path), e.g. an INT8 UNet.

    Example::

        onnx_pipe = onnx_nb.to_diffusers(sd)
        image = onnx_pipe("a photo of an astronaut riding a horse").images[0]
    """
    from ...runtime.providers import providers_named

    DiffusersAdapter.expect(result, "to_diffusers")
    source = result.pipeline
    if source is None:
        raise InvalidArgumentError("This DiffusionExport has no source pipeline (its scheduler and tokenizer); "
                                   "export the pipeline object again.")
    named = providers_named([provider])[0].name
    chosen = {"text_encoder": text_encoder, "unet": unet, "vae_decoder": vae_decoder}
    paths = {name: Path(getattr(chosen[name], "path", chosen[name]) if chosen[name] is not None else part.path)
             for name, part in result.parts.items()}
    components = dict(source.components)
    components["scheduler"] = copy.deepcopy(source.scheduler)  # its state (timesteps, step index) is its own
    components["text_encoder"] = OnnxTextEncoder(paths["text_encoder"], named, threads, source.text_encoder.config)
    components["unet"] = OnnxUNet(paths["unet"], named, threads, source.unet.config)
    components["vae"] = OnnxVaeDecoder(paths["vae_decoder"], named, threads, source.vae.config)
    _, optional = source._get_signature_keys(source)  # settings the class takes beside its modules
    extra = {key: source.config[key] for key in optional if key not in components and key in source.config}
    pipe = type(source)(**components, **extra)
    pipe.set_progress_bar_config(**getattr(source, "_progress_bar_config", {}))
    return pipe


def onnx_parts(pipe: Any) -> dict[str, _OnnxPart]:
    """The ONNX Runtime parts of a pipeline by part name (none for a PyTorch pipeline)."""
    found = {"text_encoder": pipe.text_encoder, "unet": pipe.unet, "vae_decoder": pipe.vae}
    return {name: part for name, part in found.items() if isinstance(part, _OnnxPart)}


def reset_times(pipe: Any) -> None:
    """Forget the parts' timings so far (after untimed warm-up runs)."""
    for part in onnx_parts(pipe).values():
        part.ms.clear()


def part_times(pipe: Any) -> tuple[dict[str, float], dict[str, int]]:
    """Each ONNX part's median milliseconds per call and its number of calls so far."""
    parts = onnx_parts(pipe)
    return ({name: float(np.median(p.ms)) for name, p in parts.items() if p.ms},
            {name: len(p.ms) for name, p in parts.items()})
