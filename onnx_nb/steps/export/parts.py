"""Models that :func:`onnx_nb.export` writes as several files: a diffusers pipeline (text encoder, UNet, VAE
decoder; :mod:`.diffusion`) and SAM (vision encoder, prompt encoder and mask decoder; :mod:`.sam`). Each part is
exported and checked by ``export`` itself; this module only recognizes such a model and refuses the arguments
that would be one part's; :mod:`.staged` writes the parts into one folder together."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ...errors import InvalidArgumentError, OnnxNbError


def _diffusion_pipeline(model: Any) -> bool:
    diffusers = sys.modules.get("diffusers")  # a pipeline object means diffusers is loaded already
    return diffusers is not None and isinstance(model, getattr(diffusers, "DiffusionPipeline", ()))


def _sam_location(model: Any) -> bool:
    """A folder or hub id whose config says SAM (a folder's config.json is read; a hub id's config is fetched as
    the export would fetch it)."""
    if not isinstance(model, (str, Path)):
        return False
    folder = Path(str(model)).expanduser()
    if folder.is_dir():
        try:
            return json.loads((folder / "config.json").read_text()).get("model_type") == "sam"
        except (OSError, ValueError):
            return False
    from .checkpoints import SUFFIXES as CHECKPOINT_SUFFIXES
    from .hf.loading import _HUB_ID, load_config

    if folder.suffix.lower() in (*CHECKPOINT_SUFFIXES, ".onnx", ".ort") or not _HUB_ID.match(str(model)):
        return False
    try:
        return getattr(load_config(str(model))[0], "model_type", None) == "sam"
    except OnnxNbError:
        return False  # the export's own loading says what is wrong


def _sam_object(model: Any) -> bool:
    if getattr(getattr(model, "config", None), "model_type", None) == "sam" or \
            (type(model).__name__ == "Sam" and hasattr(model, "image_encoder")):  # segment-anything's own
        from .sam import is_sam

        return is_sam(model)
    return False


def parts_export(model: Any, given: dict[str, bool], out: Any, overwrite: bool, progress: bool,
                 opset: int | None, name: str | None, export: Any) -> Any:
    """The parts' result (:class:`~onnx_nb.DiffusionExport`, :class:`~onnx_nb.SamExport`) when ``model`` is
    exported as several files, else None. ``given``: which single-file arguments the caller set (refused here)."""
    if _diffusion_pipeline(model):
        kind, what = "diffusion", "a diffusion pipeline"
        alone = ("onnx_nb.export(pipe.unet, sample, ...), or quantize(sd.parts['unet'], method='fp16') for another "
                 "precision")
    elif _sam_object(model) or _sam_location(model):
        kind, what = "sam", "a SAM model"
        alone = ("onnx_nb.export(SamVisionEncoderPart(model), sample, ...) (onnx_nb.steps.export.sam), or "
                 "quantize(sam.parts['vision_encoder'], method='fp16') for another precision")
    else:
        return None
    if any(given.values()):
        raise InvalidArgumentError(
            f"{', '.join(k for k, v in given.items() if v)}: not for {what}, whose parts get their own samples and "
            f"axes; export a part alone with {alone}.")
    if kind == "diffusion":
        from .diffusion import export_diffusion

        return export_diffusion(model, out, overwrite, progress, opset, export, name)
    from .sam import export_sam, load_sam

    return export_sam(load_sam(model), out, overwrite, progress, opset, export, name)
