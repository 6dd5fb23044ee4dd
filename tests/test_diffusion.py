"""A diffusion pipeline in one call: a tiny Stable Diffusion pipeline (random weights, diffusers' test sizes) exported
as its text encoder, UNet and VAE decoder, each checked at a second image size; the ONNX pipeline
(``onnx_nb.to_diffusers``) makes PyTorch's image with the same seed and scheduler (PSNR); a re-validated INT8 UNet
takes the UNet's place; bad input is a clear error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import onnx_nb
import tiny_models
from helpers import installed
from onnx_nb.errors import InvalidArgumentError, OutputExistsError
from onnx_nb.steps.variants.int8_schemes import int8_method

installed("diffusers")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> onnx_nb.DiffusionExport:
    folder = tmp_path_factory.mktemp("sd")
    pipe = tiny_models.build_diffusion(folder / "source")
    return onnx_nb.export(pipe, out=folder / "onnx", progress=False)


def test_pipeline_exports_its_parts_checked_at_a_second_size(exported: onnx_nb.DiffusionExport) -> None:
    assert isinstance(exported, onnx_nb.DiffusionExport) and exported.status == "verified" and bool(exported)
    assert sorted(exported.parts) == ["text_encoder", "unet", "vae_decoder"]
    assert sorted(p.name for p in exported.folder.glob("*.onnx")) == ["text_encoder.onnx", "unet.onnx",
                                                                      "vae_decoder.onnx"]
    assert not [p for p in exported.folder.iterdir() if p.name.startswith(".")]  # staged, then published
    assert all(part.path.parent == exported.folder and part.path.exists() for part in exported.parts.values())
    unet, vae = exported.parts["unet"], exported.parts["vae_decoder"]
    # exported at 32x32 latents, checked in ONNX Runtime at 64x64 (a UNet needs sizes its levels can halve)
    assert unet.check["passed"] and unet.check["shapes"]["sample"][2:] == [64, 64]
    assert vae.check["passed"] and vae.check["shapes"]["latent_sample"][2:] == [64, 64]
    assert exported.parts["text_encoder"].check["shapes"]["input_ids"] == [2, 77]  # CLIP's 77 positions stay
    html = exported._repr_html_()
    assert "unet.onnx" in html and "verified" in html and "vae_decoder" in repr(exported)


def test_onnx_pipeline_makes_pytorchs_image(exported: onnx_nb.DiffusionExport) -> None:
    """Same prompt, seed and DDIM scheduler: the ONNX pipeline's image is PyTorch's (PSNR at least 40 dB), at
    the default size and at another one."""
    pipe = onnx_nb.to_diffusers(exported)
    assert type(pipe) is type(exported.pipeline) and "ONNX Runtime" in repr(pipe.unet)
    report = onnx_nb.check_diffusion(exported, "a photo of the cat and the dog", steps=3)
    assert report.passed and report.psnr_db >= 40 and report.size == (64, 64)
    assert report.calls == {"text_encoder": 2, "unet": 3, "vae_decoder": 1}  # guidance: prompt and empty prompt
    assert report.onnx_ms > 0 and report.torch_ms > 0 and report.part_ms["unet"] > 0
    other = onnx_nb.check_diffusion(exported, "the moon", steps=2, seed=3, height=96, width=96)
    assert other.passed and other.size == (96, 96)
    ours, theirs = other.images
    assert ours.shape == (96, 96, 3) and float(np.std(theirs)) > 0.01  # a real image, not a flat one
    assert "PSNR" in report._repr_html_() and report.to_dict()["passed"] is True


def test_a_different_seed_is_told_apart(exported: onnx_nb.DiffusionExport) -> None:
    """The PSNR measures something: PyTorch's image at another seed is far from the ONNX pipeline's."""
    import torch

    onnx_pipe = onnx_nb.to_diffusers(exported)
    kwargs = {"num_inference_steps": 2, "output_type": "np"}
    ours = onnx_pipe("the sun", generator=torch.Generator().manual_seed(0), **kwargs).images
    theirs = exported.pipeline("the sun", generator=torch.Generator().manual_seed(1), **kwargs).images
    from onnx_nb.kinds.diffusion.parity import psnr

    assert psnr(ours, theirs) < 40


def test_an_int8_unet_takes_the_unets_place(exported: onnx_nb.DiffusionExport) -> None:
    """A quantized UNet is re-validated against the PyTorch UNet like any variant, then runs in the pipeline."""
    int8 = onnx_nb.quantize(exported.parts["unet"], method="dynamic")
    assert int8.parity is not None and int8.parity.passed
    report = onnx_nb.check_diffusion(exported, "a photo of the cat", steps=2, unet=int8)
    assert report.psnr_db > 20 and onnx_nb.to_diffusers(exported, unet=int8).unet.path == int8.path


def test_static_int8_and_fp16_unets(exported: onnx_nb.DiffusionExport) -> None:
    """Static QDQ (the INT8 that serves convolutions) calibrated on what the UNet sees while PyTorch's pipeline
    makes images: every timestep the scheduler visits, the guidance batch, the text encoder's states."""
    calibration = onnx_nb.unet_calibration(exported, ["a cat", "a dog"], steps=3)
    assert len(calibration) == 6 and calibration[0]["sample"].shape == (2, 4, 32, 32)  # guidance: 2 per call
    assert len({float(item["timestep"]) for item in calibration}) == 3  # one per step
    int8 = onnx_nb.quantize(exported.parts["unet"], method="static", calibration=calibration)
    assert int8.parity is not None and int8.parity.passed, int8.parity
    assert int8.recipe["op_types"] == ["Conv", "MatMul", "Gemm"] and "UNet" in int8.recipe["op_types_rule"]
    assert int8_method(exported.parts["unet"].path)[0] == "static"  # what method="auto" picks for a UNet
    assert int8_method(exported.parts["text_encoder"].path)[0] == "dynamic"
    assert int8.recipe["format"] == "QDQ" and "QuantizeLinear" in onnx_nb.summary(int8.path).ops
    report = onnx_nb.check_diffusion(exported, "a photo of the cat", steps=2, unet=int8)
    assert report.psnr_db > 20, report
    fp16 = onnx_nb.quantize(exported.parts["unet"], method="fp16")  # for GPU providers, re-validated the same way
    assert fp16.parity is not None and fp16.parity.passed, fp16.parity
    assert onnx_nb.to_diffusers(exported, unet=fp16).unet.path == fp16.path


def test_bad_input_is_a_clear_error(exported: onnx_nb.DiffusionExport, tmp_path: Path) -> None:
    with pytest.raises(OutputExistsError, match="overwrite=True"):
        onnx_nb.export(exported.pipeline, out=exported.folder, progress=False)
    with pytest.raises(OutputExistsError, match="overwrite=True"):  # a file's path names the folder: sd.onnx -> sd/
        onnx_nb.export(exported.pipeline, out=exported.folder.with_suffix(".onnx"), progress=False)
    with pytest.raises(InvalidArgumentError, match="DiffusionExport"):
        onnx_nb.to_diffusers(exported.parts["unet"])
    with pytest.raises(InvalidArgumentError, match="steps=0"):
        onnx_nb.check_diffusion(exported, steps=0)
    with pytest.raises(InvalidArgumentError, match="unet_calibration takes"):
        onnx_nb.unet_calibration(exported.parts["unet"])  # type: ignore[arg-type]
    pipe = onnx_nb.to_diffusers(exported)
    with pytest.raises(InvalidArgumentError, match="decoder"):
        pipe.vae.encode(None)
    import torch

    with pytest.raises(InvalidArgumentError, match="multiples of 2 latents"):  # 33 latents: not halvable
        pipe.unet(torch.randn(1, 4, 33, 33), torch.tensor(1.0), torch.randn(1, 77, 32))
    with pytest.raises(InvalidArgumentError, match="the UNet part takes"):
        onnx_nb.to_diffusers(exported, unet=exported.parts["vae_decoder"])
    with pytest.raises(InvalidArgumentError, match="unett: not a part"):
        onnx_nb.check_diffusion(exported, unett=exported.parts["unet"])
    with pytest.raises(InvalidArgumentError, match="sample: not for a diffusion pipeline"):
        onnx_nb.export(exported.pipeline, {"x": 1}, out=tmp_path / "other", progress=False)
    half = tiny_models.build_diffusion(tmp_path / "half").to(torch.float16)
    with pytest.raises(InvalidArgumentError, match="float32 on the CPU"):
        onnx_nb.export(half, out=tmp_path / "half-onnx", progress=False)
    assert not (tmp_path / "half-onnx").exists()


def test_a_bare_unet_whose_input_and_output_share_a_name(exported: onnx_nb.DiffusionExport, tmp_path: Path) -> None:
    """A diffusers UNet given its own sample (``sample`` in, ``sample`` out): one dynamo file, its output named
    ``out_sample`` as Optimum names it, every image axis dynamic and named after the input axis it follows."""
    import torch

    torch.manual_seed(0)
    sample = (torch.randn(1, 4, 16, 16), torch.tensor([10]), torch.randn(1, 7, 32))
    result = onnx_nb.export(exported.pipeline.unet, sample=sample, out=tmp_path / "unet.onnx", progress=False)
    assert result and result.exporter == "dynamo" and result.status == "verified", repr(result)
    assert result.inputs[0].name == "sample" and [o.name for o in result.outputs] == ["out_sample"]
    assert result.outputs[0].shape == ["batch", 4, "height", "width"]
