"""A diffusers Stable Diffusion-like pipeline to ONNX in one call: its text encoder, UNet and VAE decoder, each
exported and checked in ONNX Runtime at other shapes (a second image size for the UNet and the decoder), into one
folder (``text_encoder.onnx``, ``unet.onnx``, ``vae_decoder.onnx``). The scheduler, tokenizer and the rest of the
pipeline stay Python: ``onnx_nb.to_diffusers`` puts the files in the pipeline's place. Only imported by
:func:`onnx_nb.export` when it is given such a pipeline (torch and diffusers are loaded then)."""

from __future__ import annotations

from typing import Any

import torch

from .result import PARTS, DiffusionExport


class TextEncoderPart(torch.nn.Module):
    """The text encoder's hidden states and pooled output from token ids (the pipeline pads to the tokenizer's
    length: the sequence axis stays fixed, a CLIP encoder has that many positions)."""

    def __init__(self, encoder: Any) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.encoder(input_ids, return_dict=False)
        return out[0], out[1]


class UNetPart(torch.nn.Module):
    """The UNet's noise prediction from latents, a timestep (float, so every scheduler's timesteps fit) and the
    text encoder's states."""

    def __init__(self, unet: Any) -> None:
        super().__init__()
        self.unet = unet

    def forward(self, sample: torch.Tensor, timestep: torch.Tensor,
                encoder_hidden_states: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.unet(sample, timestep, encoder_hidden_states, return_dict=False)[0]
        return out


class VaeDecoderPart(torch.nn.Module):
    """The VAE's decoder: latents (already divided by the scaling factor) to an image in [-1, 1]."""

    def __init__(self, vae: Any) -> None:
        super().__init__()
        self.vae = vae

    def forward(self, latent_sample: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.vae.decode(latent_sample, return_dict=False)[0]
        return out


def samples(pipe: Any) -> dict[str, tuple[torch.nn.Module, dict[str, torch.Tensor], dict[str, dict[int, str]]]]:
    """Each part's module, sample inputs (batch 1 at the UNet's own sample size) and dynamic axes."""
    unet, vae, text = pipe.unet.config, pipe.vae.config, pipe.text_encoder.config
    length = int(min(pipe.tokenizer.model_max_length, text.max_position_embeddings))
    side = int(unet.sample_size if isinstance(unet.sample_size, int) else unet.sample_size[0])
    gen = torch.Generator().manual_seed(0)
    image = {0: "batch", 2: "height", 3: "width"}
    ids = torch.randint(0, text.vocab_size, (1, length), generator=gen)
    return {
        "text_encoder": (TextEncoderPart(pipe.text_encoder), {"input_ids": ids}, {"input_ids": {0: "batch"}}),
        "unet": (UNetPart(pipe.unet),
                 {"sample": torch.randn(1, unet.in_channels, side, side, generator=gen),
                  "timestep": torch.tensor(981.0),
                  "encoder_hidden_states": torch.randn(1, length, text.hidden_size, generator=gen)},
                 {"sample": image, "encoder_hidden_states": {0: "batch", 1: "sequence"}}),
        "vae_decoder": (VaeDecoderPart(pipe.vae),
                        {"latent_sample": torch.randn(1, vae.latent_channels, side, side, generator=gen)},
                        {"latent_sample": image}),
    }


def export_diffusion(pipe: Any, out: Any, overwrite: bool, progress: bool, opset: int | None, export: Any,
                     name: str | None = None) -> DiffusionExport:
    """Every part into ``out`` (a folder; default: one named after ``name`` or the pipeline's class) with
    ``export`` (:func:`onnx_nb.export`), each checked at another shape, all or nothing
    (:func:`~onnx_nb.steps.export.machinery.staged.write_parts`)."""
    from ...steps.export.machinery.staged import write_parts

    folder, parts, seconds = write_parts(
        PARTS, lambda: {k: (m.eval(), s, a) for k, (m, s, a) in samples(pipe).items()},
        name or type(pipe).__name__, out, overwrite, progress, opset, export)
    return DiffusionExport(folder, parts, pipe, seconds)
