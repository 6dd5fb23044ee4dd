"""A vision-language model (transformers' image-text-to-text: an object, a folder or a hub id whose config has a
vision tower and an image token): three files in one folder, ``vision``, ``embed`` and ``decoder``
(:mod:`.parts`), the decoder through the causal-LM route with its cache and embeddings in place of
token ids. The result is a :class:`~.result.VlmExport`; ``onnx_nb.generate(result, inputs,
images=...)`` runs the chain (:meth:`VlmAdapter.step_files`)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, ClassVar

from ...steps.export.adapters.base import Adapter, is_torch_module, require_float32_cpu
from ...steps.export.args import ExportArgs
from ..hf.adapter import HfAdapter, location_config

TASK = "image-text-to-text"


def _answers_in_text(architectures: Any) -> bool:
    """Whether a saved config's classes (``architectures``; none named: assumed) include one transformers maps to
    image-text-to-text: ModernVBERT has a vision tower and an image token, and is saved as a masked LM."""
    if not architectures:
        return True
    from transformers.models.auto import modeling_auto

    mapped = modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES.values()
    known = {c for v in mapped for c in ((v,) if isinstance(v, str) else v)}
    return any(a in known for a in architectures)


class VlmAdapter(HfAdapter):
    key = "vlm"
    several_files = True
    primary_part = "decoder"  # its variants and parity run on the chain (step_files)
    what = "a vision-language model"
    instead = ("; its three parts get their own samples and axes. Quantize a part afterwards: "
               "quantize(vlm.parts['decoder'], method='int4').")
    takes: ClassVar[frozenset[str]] = frozenset({"opset", "task"})
    quantize_auto = "auto"  # of the decoder part (primary_part), judged on the chain

    @staticmethod
    def recognises(model: Any, args: ExportArgs) -> bool:
        if args.task not in (None, TASK):
            return False
        if isinstance(model, (str, os.PathLike)):
            config = location_config(model)
            return bool(config.get("vision_config")) and any(
                isinstance(config.get(k), int) for k in ("image_token_id", "image_token_index")) and \
                _answers_in_text(config.get("architectures"))
        if not is_torch_module(model):
            return False
        return is_vlm(model)

    @classmethod
    def export(cls, model: Any, args: ExportArgs) -> Any:
        from ...errors import ExportError
        from ...steps.export.machinery.wrap import eval_mode
        from ...steps.export.machinery.writing import folder_for
        from .parts import deepstack_layers, image_token_of, parts, takes_grid
        from .patches import layer_inputs_shape, two_way_images
        from .prompts import takes_token_types
        from .result import VlmExport

        config = location_config(model) if isinstance(model, (str, os.PathLike)) else model.config.to_dict()
        if config.get("is_encoder_decoder"):
            raise ExportError(
                f"{config.get('model_type', type(model).__name__)} is an encoder-decoder vision-language model "
                "(Florence-2's shape: the image and the prompt through an encoder, the answer from a decoder that "
                "attends to it). onnx-nb's vision-language route writes decoder-only models as vision, embed and "
                "decoder files and does not export this shape yet.")
        record = cls.open(model, ExportArgs(task=TASK))  # loaded (a folder, a hub id) or wrapped, its processor too
        vlm = record.model
        first = next(vlm.parameters())
        require_float32_cpu(first.dtype, first.device, "The model", "model", "vlm.parts['vision']")
        record.name, folder = folder_for(model, args)
        token = image_token_of(vlm.config)
        assert token is not None
        with eval_mode(vlm):
            layout = cls.decoder_layout(vlm)
            layout.token_types = takes_token_types(vlm)
            layout.sections = 3 if takes_grid(vlm) else 0
            layout.deepstack = deepstack_layers(vlm)
            layout.layer_inputs, layout.mm_token_types = layer_inputs_shape(vlm), two_way_images(vlm)
            if layout.states and (layout.token_types or layout.deepstack or layout.layer_inputs or
                                  layout.mm_token_types):
                raise ExportError(
                    f"{type(vlm).__name__}'s decoder keeps per-layer states and also takes "
                    f"{'token types' if layout.token_types else 'other per-token inputs'} from its images: the "
                    "vision-language route carries such states one token per step without those inputs. Not "
                    "supported for now; the families this route serves are listed in "
                    "docs/supported-architectures.md.")
            folder, files, seconds = cls.write_chain(record, layout, parts(vlm), folder, args)
        result = VlmExport(folder, files, vlm, seconds, image_token=token, image_sizes=images_taken(files["vision"]))
        return cls.checked(result, check_chain)

    @classmethod
    def write_chain(cls, record: Any, layout: Any, built: dict[str, Any], folder: Any,
                    args: ExportArgs) -> tuple[Any, dict[str, Any], float]:
        """The tower and embed parts (``built``: name -> module, sample, axes) and the decoder part (the causal-LM
        route with ``layout``) written into ``folder`` together: the folder, the parts' results, the seconds."""
        from ...steps.export.machinery.staged import write_parts

        record.cache_layout, record.generation = layout, "decoder"

        def export_part(module: Any, sample: Any, **settings: Any) -> Any:
            if settings["name"] != "decoder":
                return vision_or_embed(module, sample, settings)
            return cls.export_decoder(record, settings)

        every = {**built, "decoder": (None, None, None)}
        return write_parts(cls.chained, lambda: every, record.name, folder, args.overwrite, args.progress, args.opset,
                           export_part)

    @classmethod
    def checked(cls, result: Any, check: Any) -> Any:
        """``result`` with its tower and decoder parts each knowing the files they run with (their variants are
        judged on the chain), and the chain checked by ``check(result)`` against the model's own forward."""
        tower, files = cls.chained[0], result.parts
        for name in (tower, "decoder"):
            files[name].parts = {other: files[other].path for other in cls.chained if other != name}
        files[tower].source.adapter = cls.key
        started = time.perf_counter()
        result.chain = check(result)
        result.export_seconds += time.perf_counter() - started
        return result

    @classmethod
    def decoder_layout(cls, model: Any) -> Any:
        """The decoder part's cache layout, fed embeddings (``embeds`` wide): keys and values, or per-layer states
        (Qwen3.5's linear attention: the decoder part then takes one embedding per step); refused, saying why, for a
        cache this route cannot carry step by step."""
        from ...errors import ExportError
        from ...steps.export.caches.decoder import NoKeyValueCache, layout_of

        try:
            layout = layout_of(model)
        except NoKeyValueCache as why:
            raise ExportError(
                f"{why}: {cls.what}'s route runs its decoder part step by step with its keys and values (or "
                "per-layer states) as the cache, and cannot carry this model's cache yet. Not "
                "supported for now; the families this route serves are listed in "
                "docs/supported-architectures.md.") from None
        layout.embeds = int(model.get_input_embeddings().embedding_dim)
        return layout

    @classmethod
    def export_decoder(cls, record: Any, settings: dict[str, Any]) -> Any:
        """The decoder part through the causal-LM route (dynamo first, its check at another batch and cache
        length), fed embeddings."""
        from ...progress import Steps
        from ...runtime.files import check_target
        from ...steps.export.machinery.torch_route import export_module

        args = ExportArgs(out=settings["out"], overwrite=True, progress=False, opset=settings.get("opset"))
        with Steps(3, "export", False) as steps:
            return export_module(cls, record, args, check_target(Path(settings["out"]), True), steps)

    # --- what later steps ask -----------------------------------------------------------------------------------
    reload = Adapter.reload  # the model itself: a result from another session exports again (no reload from a folder)

    # the files chained to generate, the token their tower's rows go to, the registry's shape that runs them
    chained: ClassVar[tuple[str, ...]] = ("vision", "embed", "decoder")
    token_key = "image_token"
    shape = "chain"

    @staticmethod
    def token_of(config: Any) -> int | None:
        from .parts import image_token_of

        return image_token_of(config)

    @classmethod
    def step_files(cls, result: Any, path: Path | None = None) -> dict[str, Any] | None:
        """What :func:`onnx_nb.generate` and generation parity chain for this export (the whole, its tower or
        decoder part, or a variant of either: ``path`` in that part's place): the tower, embed and decoder files
        (``chained``), the token their features go to, the model (:class:`~.runner.VlmDecoder`) and the registry's
        ``shape`` that runs them."""
        from ...results.export import export_of
        from ...results.parts import PartsExport
        from .prompts import VisionPart

        if isinstance(result, PartsExport):  # the whole: its decoder part's file
            result = result.parts["decoder"]
        part = export_of(result)
        role = set(cls.chained) - set(part.parts) if part is not None else set()
        if part is None or len(role) != 1:
            return None
        model = part.source.model
        if isinstance(model, VisionPart):  # the tower part's module: the model is inside
            model = model.model
        token = cls.token_of(model.config) if model is not None else None
        if token is None:
            return None
        here = Path(path if path is not None else getattr(result, "path", part.path))
        name = role.pop()
        return {**part.parts, name: here, "role": name, cls.token_key: token, "model": model, "shape": cls.shape}


def chain_files(obj: Any, path: Path | None = None) -> dict[str, Any]:
    """The files the chain shape runs for ``obj`` (an export, its part or a variant; ``path`` in that part's place):
    its adapter's ``step_files``, which is what made the registry choose this shape."""
    from ...steps.export.adapters.registry import adapter_of

    files = adapter_of(obj).step_files(obj, path=path)
    assert files is not None  # the shape "chain" is its adapter answering step_files
    return files


def images_taken(vision: Any) -> str:
    """Which images a vision file takes (:attr:`~.result.VlmExport.image_sizes`), from the module it was
    exported from: every grid, any image size, one grid or one image size (traced at the sample's), else the
    tower's size."""
    from ...runtime.facts import FIXED_INPUT, GRID_DERIVED, IMAGE_GRID, SIZED_BY
    from .parts import SHAPES

    meta = getattr(vision.source.model, "onnx_metadata", None) or {}
    if meta.get(GRID_DERIVED):
        return "every grid"
    if meta.get(SIZED_BY) or _any_patch_count(vision):  # cropped (Pixtral) or tiled (LLaVA-NeXT) by each
        return "any image size"                                   # image's size, or its patches in a row (Gemma 4)
    if FIXED_INPUT + IMAGE_GRID in meta or FIXED_INPUT + SHAPES in meta:  # (a NaFlex tower's rows and columns)
        return "one grid"
    return "one image size" if FIXED_INPUT + "image_sizes" in meta else "the tower's size"


def _any_patch_count(vision: Any) -> bool:
    """The vision file takes patches in a row with their positions, their count free (its inputs as the export
    read them)."""
    from .patches import POSITION_IDS

    return any(i.name == POSITION_IDS and 1 in i.dynamic_dims for i in getattr(vision, "inputs", None) or [])


def vision_or_embed(module: Any, sample: Any, settings: dict[str, Any]) -> Any:
    """A plain part through the PyTorch route; a vision part for every grid or image size that does not pass its
    check at another is traced at the sample's instead (its ``fallback``), saying why in the result's warnings."""
    from ...errors import OnnxNbError, first_line
    from ...runtime.facts import IMAGE_GRID
    from ..torch_module.adapter import export_part as plain

    fallback = getattr(module, "fallback", None)
    if fallback is None:
        return plain(module, sample, **settings)
    kind = getattr(module, "varies", None) or (
        "grid" if IMAGE_GRID in fallback[1] or hasattr(module, "other_grid") else "image size")
    try:
        done = plain(module, sample, **settings)
        if done.status == "verified":
            return done
        why = f"its file did not match PyTorch at another {kind} ({done.check.get('summary', done.status)})"
    except OnnxNbError as exc:  # no exporter's file passed, its sample failed, ...: the one-grid file instead
        why = f"{type(exc).__name__}: {first_line(exc)[:200]}"
    fixed, pixels, axes = fallback
    done = plain(fixed, pixels, **{**settings, "dynamic": axes})
    done.warnings.append(f"The {settings['name']} file is traced at the sample's {kind} only: the file for every "
                         f"{kind} failed ({why}).")
    return done


IMAGE_ROWS_CHECKED = 64  # image positions whose logits the export's chain check compares (evenly spaced)


def check_chain(result: Any) -> dict[str, Any]:
    """The three files chained in ONNX Runtime (vision, embed, the decoder's prefill) against the
    model's own forward with pixels, on a prompt of two images' tokens in a batch of two, judged as every export's
    check is."""
    import torch

    from .chain import chain_logits
    from .parts import features_of, pixel_sample
    from .prompts import prompt_extras, prompt_sample

    model = result.model
    pixels = pixel_sample(model, images=2, seed=3)
    rows = features_of(model, pixels).shape[0]
    ids = prompt_sample(result.image_token, rows, 2, int(model.get_input_embeddings().num_embeddings), seed=3)
    extra = prompt_extras(model, ids, result.image_token)
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=torch.ones_like(ids), **pixels, **extra,
                     return_dict=True).logits.float().numpy()
    return judged_chain(ids.numpy(), result.image_token, want, "image", lambda: chain_logits(
        Path(result.folder), {k: v.numpy() for k, v in pixels.items()}, ids.numpy(), result.image_token, model))


def judged_chain(ids: Any, token: int, want: Any, media: str, run: Any) -> dict[str, Any]:
    """The chain's logits (``run()``) against the model's (``want``) for two prompts with one ``media`` (image,
    audio clip) each, at every text position and at most :data:`IMAGE_ROWS_CHECKED` of the ``token`` positions,
    judged as every export's check is."""
    import numpy as np

    from ...results.tolerance import EXPORT_CHECK, measure

    rows = int((ids == token).sum())
    try:
        got = run()
    except Exception as exc:  # noqa: BLE001 - the files do not run together: the export failed its check
        from ...errors import first_line

        said = f"ONNX Runtime cannot run the three files together: {type(exc).__name__}: {first_line(exc)[:300]}"
        return {"passed": False, "max_abs_diff": float("nan"), "prompts": 2, "media_tokens": rows,
                "error": said, "summary": said}
    # every text position (each reads the media rows before it) and at most IMAGE_ROWS_CHECKED media positions:
    # the logits of a long image (LLaVA-OneVision's tiles: 1485 rows) over a large vocabulary would be gigabytes
    media_at = ids[0] == token
    kept = np.flatnonzero(~media_at).tolist() + np.flatnonzero(media_at)[
        np.unique(np.linspace(0, max(int(media_at.sum()) - 1, 0), IMAGE_ROWS_CHECKED).astype(int))].tolist()
    kept = sorted(set(kept))
    want, got = want[:, kept], np.asarray(got, np.float32)[:, kept]
    stats, errors = measure(got, want, "logits")
    verdict = errors.judge(EXPORT_CHECK)
    worst = float(stats["max_abs"] or 0.0)
    return {"passed": bool(verdict["passed"]), "max_abs_diff": worst, "prompts": 2, "media_tokens": rows,
            "positions": len(kept),
            "summary": f"logits of 2 prompts with an {media} each at {len(kept)} positions (every text one, "
                       f"{media} ones evenly spaced): max abs diff {worst:.3g}"
                       + (f" ({verdict['note']})" if verdict["note"] else "")}


def is_vlm(model: Any) -> bool:
    """A transformers image-text-to-text model with the multimodal interface of transformers 5
    (``get_image_features`` -> features placed at the image tokens, a language model fed embeddings)."""
    import inspect

    from .parts import image_token_of
    from .prompts import image_features

    config = getattr(model, "config", None)
    return (getattr(config, "vision_config", None) is not None and image_token_of(config) is not None
            and image_features(model) is not None
            and callable(getattr(model, "get_input_embeddings", None))
            and "inputs_embeds" in inspect.signature(model.forward).parameters)
