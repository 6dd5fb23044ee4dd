"""A diffusers pipeline: its text encoder, UNet and VAE decoder as three files in one folder, each exported by the
PyTorch route at its own sample and checked at other shapes (:mod:`onnx_nb.kinds.diffusion.export`); the result is a
:class:`~onnx_nb.DiffusionExport`, checked whole by :func:`onnx_nb.check_diffusion`."""

from __future__ import annotations

import sys
from typing import Any, ClassVar

from ...errors import InvalidArgumentError
from ...steps.export.adapters.base import Adapter, is_torch_module, require_float32_cpu
from ...steps.export.args import ExportArgs


class DiffusersAdapter(Adapter):
    key = "diffusers"
    several_files = True
    what = "a diffusion pipeline"
    instead = (", whose parts get their own samples and axes; export a part alone with onnx_nb.export(pipe.unet, "
               "sample, ...), or quantize(sd.parts['unet'], method='fp16') for another precision")
    takes: ClassVar[frozenset[str]] = frozenset({"opset"})

    @staticmethod
    def recognises(model: Any, args: ExportArgs) -> bool:
        diffusers = sys.modules.get("diffusers")  # a pipeline object means diffusers is loaded already
        return diffusers is not None and isinstance(model, getattr(diffusers, "DiffusionPipeline", ()))

    @classmethod
    def export(cls, model: Any, args: ExportArgs) -> Any:
        from ..torch_module.adapter import export_part as export
        from .export import export_diffusion

        check_supported(model)
        return export_diffusion(model, args.out, args.overwrite, args.progress, args.opset, export, args.name)

    @classmethod
    def expect(cls, result: Any, what: str) -> Any:
        """``result`` when it is this kind's export (``to_diffusers``, ``check_diffusion`` take nothing else)."""
        from .result import DiffusionExport

        if not isinstance(result, DiffusionExport):
            raise InvalidArgumentError(f"{what} takes what onnx_nb.export(pipeline) returns (a DiffusionExport), "
                                       f"not {type(result).__name__}.")
        return result


def is_diffusion_pipeline(model: Any) -> bool:
    """A diffusers pipeline object with a UNet, a VAE and a text encoder (Stable Diffusion 1.x/2.x-like)."""
    return all(hasattr(model, name) for name in ("unet", "vae", "text_encoder", "scheduler", "components")) and \
        not is_torch_module(model)


def check_supported(pipe: Any) -> None:
    """Refuse a pipeline of another make-up than Stable Diffusion 1.x/2.x's (what the converter knows)."""

    if not is_diffusion_pipeline(pipe):
        raise InvalidArgumentError(
            f"{type(pipe).__name__}: onnx-nb exports Stable Diffusion 1.x/2.x-like pipelines (a text encoder and "
            "tokenizer, a UNet, a VAE, a scheduler); this one has another make-up. Export its networks one by one "
            "with onnx_nb.export(module, sample).")
    unet = pipe.unet.config
    extra = [key for key in ("addition_embed_type", "time_cond_proj_dim", "class_embed_type", "num_class_embeds",
                             "encoder_hid_dim_type") if getattr(unet, key, None)]
    if getattr(pipe, "text_encoder_2", None) is not None:
        extra.append("a second text encoder")
    if unet.in_channels != pipe.vae.config.latent_channels:
        extra.append(f"{unet.in_channels} input channels for {pipe.vae.config.latent_channels} latent ones (an "
                     "inpainting or depth UNet)")
    if extra:
        raise InvalidArgumentError(
            f"{type(pipe).__name__}: its UNet takes more than latents, a timestep and text states ({', '.join(extra)}"
            "); onnx-nb exports Stable Diffusion 1.x/2.x-like text-to-image pipelines (one text encoder, such a UNet, "
            "a VAE). Export its parts one by one with onnx_nb.export(module, sample).")
    if getattr(pipe, "text_encoder", None) is None or getattr(pipe, "tokenizer", None) is None:
        raise InvalidArgumentError(f"{type(pipe).__name__} has no text encoder or tokenizer to export.")
    require_float32_cpu(pipe.unet.dtype, pipe.unet.device, "The pipeline", "pipe", "sd.parts['unet']")
