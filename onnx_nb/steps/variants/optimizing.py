"""``optimize()``: ONNX Runtime graph levels and transformer fusion, verified every time.

``level="auto"`` on a transformer: fuse attention whatever attention implementation the export
used (onnxscript's ORT fusions handle the dynamo exporter's sdpa graphs; otherwise, when the
PyTorch source is known, it is re-exported with eager attention, which ORT's fusion recognises),
then ORT's transformer optimizer (model type, heads and hidden size from the Hugging Face config),
and mark the variant to skip padding at run time when its inputs carry an attention mask.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError, NotRewritableError, OptimizationError, first_line
from ...results.variant import Variant
from .variants import make, parent_of

LEVELS = ("auto", "basic", "extended", "all", "transformer")
TARGETS = (None, "web", "mobile")  # None: this machine's ONNX Runtime
# Hugging Face model_type -> ORT transformer optimizer model_type.
ORT_MODEL_TYPES = {"bert": "bert", "roberta": "bert", "distilbert": "bert", "xlm-roberta": "bert",
                   "camembert": "bert", "electra": "bert", "mpnet": "bert", "albert": "bert",
                   "deberta": "bert", "deberta-v2": "bert", "gpt2": "gpt2", "bart": "bart", "t5": "t5",
                   "vit": "vit", "clip": "clip", "swin": "swin", "whisper": "bert", "llama": "gpt2",
                   "mistral": "gpt2", "phi": "phi", "unet": "unet", "vae": "vae"}


def _config(source: Any) -> Any:
    model = getattr(source, "model", None)
    return getattr(model, "config", None)


def transformer_params(source: Any, model_type: str | None, num_heads: int | None,
                       hidden_size: int | None) -> tuple[str | None, int, int]:
    config = _config(source)
    text = getattr(config, "text_config", None) or config
    hf_type = getattr(config, "model_type", None)
    ort_type = model_type or ORT_MODEL_TYPES.get(hf_type or "")
    heads = num_heads or int(getattr(text, "num_attention_heads", 0) or getattr(text, "n_head", 0) or 0)
    hidden = hidden_size or int(getattr(text, "hidden_size", 0) or getattr(text, "n_embd", 0) or 0)
    return ort_type, heads, hidden


def _count(path: Path, ops: tuple[str, ...]) -> int:
    from ...runtime.onnxfile import load_proto

    return sum(1 for n in load_proto(path).graph.node if n.op_type in ops)


def _onnxscript_fusions(src: Path, dst: Path) -> dict[str, int]:
    import onnx_ir as ir
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    model = ir.load(str(src))
    result = optimize_for_ort(model)
    fused_model, counts = result if isinstance(result, tuple) else (model, {})
    ir.save(fused_model, str(dst))
    return {k: int(v) for k, v in dict(counts).items() if v}


def _eager_reexport(source: Any, dst: Path) -> None:
    """Export the PyTorch source again with eager attention (TorchScript), which ORT fuses."""
    from ..export.exporting import export
    from ..export.wrap import eager_attention

    with eager_attention(source.model) as eager:
        if not eager:
            raise OptimizationError("the model cannot switch to eager attention")
        sample = {k: v for k, v in source.sample.items()} if source.sample else None
        export(source.model, sample, out=dst, exporter="torchscript", overwrite=True, progress=False,
               dynamic=source.input_axes or True)


def _ort_transformer(src: Path, dst: Path, model_type: str, heads: int, hidden: int,
                     collected: list[str] | None = None) -> None:
    """ONNX Runtime's transformer optimizer; its warnings (not its progress lines) go to ``collected``."""
    import logging

    from onnxruntime.transformers import optimizer

    from ..export.exporters import quiet

    logging.getLogger("onnxruntime.transformers").setLevel(logging.ERROR)
    with quiet(collected if collected is not None else [], []):  # the optimizer prints its progress to stdout
        optimized = optimizer.optimize_model(str(src), model_type=model_type, num_heads=heads,
                                             hidden_size=hidden, opt_level=0)
        optimized.save_model_to_file(str(dst))


def _ort_level(src: Path, dst: Path, level: str) -> None:
    from ...runtime.onnxfile import files_of, load_proto
    from ...runtime.sessions import session

    external = len(files_of(Path(src), load_proto(src))) > 1  # the optimized file gets a data file of its own
    session(src, level=level, save_to=dst, save_external=external)


AUTO_LEVELS = ("extended", "basic")  # what level="auto" tries on a model with no transformer fusion


def _fastest_level(src: Path, staged: Path, scratch: Path, feed: dict[str, np.ndarray],
                   recipe: dict[str, Any]) -> str:
    """Save ``src`` at each of :data:`AUTO_LEVELS`, time the files interleaved on ``feed`` (each loaded the way a
    plain ONNX Runtime session loads a file, graph level "all"), and keep the fastest. A file saved at "extended"
    carries ORT's fused ops (FusedConv...), which can run slower than what ORT makes of the plain graph at load
    (ResNet-50: 55.2 against 51.4 ms); a "basic" file keeps standard ops and leaves the rest to the runtime."""
    import shutil

    from ..benchmark.measuring import time_files

    files = {}
    for level in AUTO_LEVELS:
        files[level] = scratch / f"level-{level}.onnx"
        _ort_level(src, files[level], level)
    ms = time_files(files, feed)
    best = min(ms, key=lambda k: ms[k])
    recipe["levels_ms"] = {k: round(v, 3) for k, v in ms.items()}
    recipe["level_rule"] = "the graph level whose file ran fastest on the sample (level='auto')"
    shutil.copyfile(files[best], staged)
    return best


DECODER_ROUTE = "re-exported with torch.export at opset 23, standard ONNX ops: "


def precision_after(quantize_method: str | None) -> str | None:
    """What ``then`` to optimize for when a quantize step with this method follows (pipeline, Studio)."""
    return "int8" if quantize_method in ("auto", "dynamic") else None


def _decoder_export(onnx_model: Any) -> bool:
    """A decoder-only model's export with its cache, its PyTorch model at hand."""
    from ...results.export import ExportResult

    if not isinstance(onnx_model, ExportResult) or onnx_model.source.model is None:
        return False
    if onnx_model.cache_layout is None:
        return False
    from ..export.decoder_cache import CacheLayout

    return isinstance(onnx_model.cache_layout, CacheLayout)


EAGER_ROUTE = "re-exported with eager attention"


def _fastest_route(candidates: dict[str, Path], staged: Path, scratch: Path, source: Any, recipe: dict[str, Any],
                   params: tuple[str, int, int]) -> str:
    """Finish each candidate with ORT's transformer optimizer, quantize each (dynamic INT8, per-channel) into the
    scratch folder, time those INT8 files interleaved on the sample, and keep the fp32 file whose INT8 file ran
    fastest: ORT's quantizer turns the eager route's attention (mask index) into QAttention, not the attention
    with a bias input that onnxscript's fusions write. The timings and the rule go into the recipe."""
    import shutil

    from ...runtime.cpu import schemes_for, this_cpu
    from ..benchmark.measuring import time_files
    from ..export.exporters import quiet
    from .ort_quantizer import run_quantizer

    finished: dict[str, Path] = {}
    quantized: dict[str, Path] = {}
    for i, (name, path) in enumerate(candidates.items()):
        finished[name] = scratch / f"route{i}.onnx"
        _ort_transformer(path, finished[name], *params)
        quantized[name] = scratch / f"route{i}.int8.onnx"
        with quiet([], []):  # ORT's quantizer logs to the root logger: nothing of it is about the route chosen
            run_quantizer("dynamic", finished[name], scratch / f"route{i}.prepared.onnx", quantized[name], True, [],
                          None, None, 32, scheme=schemes_for(this_cpu())[0][0])
    ms = time_files(quantized, _timing_feed(source))
    best = min(ms, key=lambda k: ms[k])
    recipe["routes_int8_ms"] = {k: round(v, 3) for k, v in ms.items()}
    recipe["route_rule"] = (f"the attention route whose dynamic INT8 file ran fastest on the sample tiled to "
                            f"{ROUTE_BATCH} x {ROUTE_SEQUENCE} (then='int8')")
    shutil.copyfile(finished[best], staged)
    if _count(staged, ("Attention", "MultiHeadAttention")) == 0:
        return f"{best} (ORT's optimizer fused no attention there; its INT8 file was still the faster)"
    return best


ROUTE_BATCH, ROUTE_SEQUENCE = 8, 128  # routes differ at serving sizes, not at the sample's few tokens


def _timing_feed(source: Any) -> dict[str, np.ndarray]:
    """The sample at a serving size: token inputs tiled to 8 x 128 (or the model's longest), a full mask."""
    config = getattr(source.model, "config", None)
    length = min(ROUTE_SEQUENCE, int(getattr(config, "max_position_embeddings", ROUTE_SEQUENCE) or ROUTE_SEQUENCE))
    feed = {}
    for name, value in (source.sample or {}).items():
        array = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
        if array.ndim == 2 and array.dtype.kind in "iu":
            array = np.ones((ROUTE_BATCH, length), array.dtype) if name == "attention_mask" else \
                np.resize(array, (ROUTE_BATCH, length))
        feed[name] = array
    return feed


PEAK_OF_DECODER_ROUTE = 2.5  # re-export + GroupQueryAttention rewrite of a decoder: +2.43x its weights (1.1B Llama)


def optimize(onnx_model: Any, *, level: str = "auto", reference: Any = None, model_type: str | None = None,
             num_heads: int | None = None, hidden_size: int | None = None, unpad: bool | str = "auto",
             simplify: bool = False, out: str | os.PathLike[str] | None = None, overwrite: bool = False,
             validate: bool = True, providers: Any = ("cpu",), sample: Any = None, then: str | None = None,
             target: str | None = None, attention: str = "auto") -> Variant:
    """An optimized variant of ``onnx_model`` (a path, an ExportResult or a Variant), re-validated.

    ``level``: ``"basic"``/``"extended"``/``"all"`` (ONNX Runtime's graph levels, saved offline),
    ``"transformer"`` (attention fusion + ORT's transformer optimizer), or ``"auto"`` (transformer
    fusion for transformer models; else the faster on the sample of ``"extended"`` and ``"basic"``, timings in
    ``recipe["levels_ms"]``). ``unpad``: skip padding at run time
    (``"auto"``: when the inputs carry an attention mask). ``simplify``: onnxscript's graph optimizer
    (constant folding, dead-code removal) first. ``then="int8"`` says a dynamic INT8 variant will be made from
    this one: for a transformer with two attention routes (onnxscript's fusions, or a re-export with eager
    attention that ORT's quantizer turns into QAttention) each route's INT8 file is timed on the sample and the
    faster route kept (``recipe["routes_int8_ms"]``). ``target="web"``: a variant ONNX Runtime Web runs in a
    browser (:func:`for_web`); ``target="mobile"``: the ORT-format file ONNX Runtime Mobile loads (``.ort``) and the
    reduced-operator config of a custom build beside the optimized ``.onnx`` it holds, the ``.ort`` re-checked in an
    ORT-format session (:func:`onnx_nb.steps.variants.mobile.for_mobile`).

    ``attention`` (a decoder's export with its cache): ``"gqa"`` rewrites the opset-23 re-export into one ONNX
    Runtime ``GroupQueryAttention`` per layer (packed QKV, rotary inside, a key/value buffer that past and present
    share: :mod:`onnx_nb.steps.generate.gqa`); ``"standard"`` keeps ONNX's own ops (any runtime); ``"auto"``:
    GroupQueryAttention when every validation provider is the CPU's (its fp32 kernel is CPU-only) and the model
    matches, else standard, the reason in ``recipe["attention_route"]``.

    Example::

        fast = onnx_nb.optimize(result)                    # attention fused, padding skipped, re-validated
        fast.recipe["attention_route"], fast.parity
    """
    if target not in TARGETS:
        raise InvalidArgumentError(f"target={target!r}: None (this machine's ONNX Runtime), 'web' (ONNX Runtime "
                                   "Web in a browser) or 'mobile' (ONNX Runtime Mobile: a .ort file).")
    if target == "web":
        return for_web(onnx_model, reference=reference, out=out, overwrite=overwrite, validate=validate,
                       providers=providers, sample=sample)
    if target == "mobile":
        from .mobile import for_mobile

        return for_mobile(onnx_model, reference=reference, out=out, overwrite=overwrite, validate=validate,
                          providers=providers, sample=sample)
    if attention not in ATTENTION_CHOICES:
        raise InvalidArgumentError(f"attention={attention!r}: one of {', '.join(ATTENTION_CHOICES)}.")
    if then not in (None, "fp32", "int8"):
        raise InvalidArgumentError(f"then={then!r}: None (fp32) or 'int8'.")
    if level not in LEVELS:
        raise InvalidArgumentError(f"level={level!r}: choose one of {', '.join(LEVELS)}.")
    parent, _ref, source = parent_of(onnx_model)
    ort_type, heads, hidden = transformer_params(source, model_type, num_heads, hidden_size)
    chosen = level
    decoder = _decoder_export(onnx_model)
    if attention != "auto" and not decoder:
        raise InvalidArgumentError(f"attention={attention!r} is for a decoder's own export with its cache "
                                   "(onnx_nb.export(causal_lm)); leave it 'auto' here.")
    if level == "auto":
        chosen = "transformer" if decoder or (ort_type and heads and hidden) else "extended"
    if chosen == "transformer" and not decoder and not (ort_type and heads and hidden):
        raise InvalidArgumentError(
            "Transformer fusion needs the model type, number of heads and hidden size; they come from the "
            "Hugging Face config when optimizing an ExportResult, or pass model_type=, num_heads=, hidden_size=."
        )
    from ...runtime.facts import file_facts

    skip_padding = file_facts(parent).padded_tokens if unpad == "auto" else bool(unpad)
    # a decoder's own export (a variant's changes would be lost): re-exported with standard attention ops
    reexport_decoder = decoder and chosen == "transformer" and not simplify
    recipe: dict[str, Any] = {"level": chosen, "simplify": simplify, "unpad": skip_padding,
                              **({"then": then} if then else {})}
    if chosen == "transformer" and not reexport_decoder:
        recipe.update(model_type=ort_type, num_heads=heads, hidden_size=hidden)

    def write(src: Path, staged: Path) -> list[str]:
        from ...runtime.files import scratch_dir

        with scratch_dir("onnx-nb-opt-") as scratch:
            return _write(src, staged, Path(scratch))

    def _write(src: Path, staged: Path, scratch: Path) -> list[str]:
        warnings: list[str] = []
        work = _simplified(src, scratch) if simplify else src
        if chosen != "transformer" and level == "auto":
            from ...runtime.feeds import feed_for

            recipe["level"] = _fastest_level(work, staged, scratch, feed_for(work, onnx_model, sample)[0], recipe)
        elif chosen != "transformer":
            _ort_level(work, staged, chosen)
        elif reexport_decoder and _decoder_route(source, staged, recipe, warnings, attention, providers):
            pass
        elif not (ort_type and heads and hidden):  # a decoder whose re-export failed, with no optimizer settings
            _ort_level(work, staged, "extended")
            recipe["attention_route"] = "ONNX Runtime's extended graph level (no re-export, no optimizer settings)"
        else:
            recipe.update(model_type=ort_type, num_heads=heads, hidden_size=hidden)
            from ...runtime.providers import providers_named

            _transformer_route(work, staged, scratch, source, (ort_type, heads, hidden), then, recipe, warnings,
                               cpu=all(p.name == "CPUExecutionProvider" for p in providers_named(providers)))
        return warnings

    def name() -> str:
        return f"optimized({recipe['level']})" + ("+unpad" if skip_padding else "")

    tag = "optimized" if level == "auto" or chosen == "transformer" else f"optimized-{chosen}"
    return make(onnx_model, tag, name, recipe, write, out=out, overwrite=overwrite, validate=validate,
                runtime={"unpad": True} if skip_padding else {}, providers=providers, sample=sample,
                reference=reference, needs=PEAK_OF_DECODER_ROUTE if reexport_decoder else None)


def _simplified(src: Path, scratch: Path) -> Path:
    """onnxscript's graph optimizer (constant folding, dead-code removal), into the scratch folder."""
    import onnx
    import onnxscript

    model = onnxscript.optimizer.optimize(onnx.load(str(src)))
    out = scratch / "simplified.onnx"
    onnx.save(model, str(out))
    return out


ATTENTION_CHOICES = ("auto", "gqa", "standard")
GQA_ROUTE = "GroupQueryAttention (ONNX Runtime contrib op: packed QKV, rotary inside, shared key/value buffer) x"


def _decoder_route(source: Any, staged: Path, recipe: dict[str, Any], warnings: list[str], attention: str = "auto",
                   providers: Any = ("cpu",)) -> bool:
    """A decoder's export re-exported at opset 23 with standard Attention, RMSNormalization and RotaryEmbedding,
    then (``attention``) rewritten for GroupQueryAttention; False (and a warning) when the re-export failed."""
    from ...runtime.onnxfile import load_proto, op_histogram
    from ..generate.generation import export_standard_ops

    try:
        export_standard_ops(source.model, staged)
    except Exception as exc:  # noqa: BLE001 - the transformer optimizer's route follows
        warnings.append(f"re-export at opset 23 failed: {type(exc).__name__}: {first_line(exc)[:150]}")
        return False
    counts = op_histogram(load_proto(staged))
    recipe["attention_route"] = DECODER_ROUTE + ", ".join(
        f"{op} x{counts[op]}" for op in ("Attention", "RMSNormalization", "RotaryEmbedding") if counts.get(op))
    if attention == "standard":
        return True
    why = _gqa_refusal(providers)
    if why is None:
        why = _gqa_rewrite(source.model, staged, recipe)
    if why is not None and attention == "gqa":
        raise NotRewritableError(f"attention='gqa': {why}. attention='standard' keeps ONNX's own attention op.")
    if why is not None:
        recipe["attention_route"] += f" (not GroupQueryAttention: {why})"
    return True


def _gqa_refusal(providers: Any) -> str | None:
    from ...runtime.providers import providers_named

    names = [p.name for p in providers_named(providers)]
    others = [n for n in names if n != "CPUExecutionProvider"]
    if others:
        return f"its fp32 kernel is the CPU's, and this variant is validated on {', '.join(others)}"
    return None


def _gqa_rewrite(model: Any, staged: Path, recipe: dict[str, Any]) -> str | None:
    """The opset-23 file at ``staged`` rewritten in place for GroupQueryAttention; the reason when it does not
    match (the file stays as it was)."""
    from ...runtime.memory import weight_bytes
    from ..export.exporting import EXTERNAL_DATA_BYTES
    from ..generate.gqa import NotRewritable, rewrite

    try:
        done = rewrite(staged, staged, model, big=weight_bytes(model) > EXTERNAL_DATA_BYTES)
    except NotRewritable as exc:
        return str(exc)
    recipe["attention_route"] = (f"{GQA_ROUTE}{done['layers']}, RMS norms as ORT's "
                                 f"(Skip)SimplifiedLayerNormalization x{done['norms']} ({done['nodes']} nodes), from "
                                 "the opset-23 re-export")
    recipe["kv_cache"] = "one buffer per key/value tensor, shared by past and present (generate() binds it)"
    return None


def _transformer_route(work: Path, staged: Path, scratch: Path, source: Any, params: tuple[str, int, int],
                       then: str | None, recipe: dict[str, Any], warnings: list[str], cpu: bool = True) -> None:
    """Attention fused whatever attention the export used (as exported, onnxscript's fusions, or a re-export with
    eager attention), then ORT's transformer optimizer; with ``then="int8"`` the faster route for INT8. On CPU, its
    SkipLayerNormalization nodes go back to Add + LayerNormalization where that is measured faster (``norms``)."""
    _attention_route(work, staged, scratch, source, params, then, recipe, warnings)
    if cpu:
        from .norms import apply

        apply(staged, params[2], recipe)


def _attention_route(work: Path, staged: Path, scratch: Path, source: Any, params: tuple[str, int, int],
                     then: str | None, recipe: dict[str, Any], warnings: list[str]) -> None:
    attention = ("Attention", "MultiHeadAttention")
    route = "as exported"
    if _count(work, attention) == 0:
        fused = scratch / "fused.onnx"
        try:
            counts = _onnxscript_fusions(work, fused)
            if _count(fused, attention):
                work, route = fused, f"onnxscript ORT fusions ({counts.get('attention', 0)} attention)"
        except Exception as exc:  # noqa: BLE001 - fall through to the next route
            warnings.append(f"onnxscript fusions failed: {type(exc).__name__}: {str(exc)[:150]}")
    has_model = source is not None and source.model is not None
    if _count(work, attention) == 0 and has_model:
        eager = scratch / "eager.onnx"
        try:
            _eager_reexport(source, eager)
            work, route = eager, EAGER_ROUTE
        except Exception as exc:  # noqa: BLE001
            warnings.append(f"eager re-export failed: {type(exc).__name__}: {str(exc)[:150]}")
    if then == "int8" and route.startswith("onnxscript") and has_model:
        eager = scratch / "eager.onnx"
        try:
            _eager_reexport(source, eager)
        except Exception as exc:  # noqa: BLE001 - the one route stays
            warnings.append(f"eager re-export failed: {type(exc).__name__}: {str(exc)[:150]}")
        else:
            recipe["attention_route"] = _fastest_route({route: work, EAGER_ROUTE: eager}, staged, scratch, source,
                                                       recipe, params)
            return
    _ort_transformer(work, staged, *params, collected=warnings)
    recipe["attention_route"] = route
    if _count(staged, attention) == 0:
        warnings.append("Attention could not be fused; the variant keeps unfused attention.")


def for_web(onnx_model: Any, *, reference: Any = None, out: str | os.PathLike[str] | None = None,
            overwrite: bool = False, validate: bool = True, providers: Any = ("cpu",), sample: Any = None) -> Variant:
    """A variant for ONNX Runtime Web (the ``"browser"`` backend): standard ONNX operators only (ONNX Runtime's
    "basic" level: constant folding and fusions into standard ops), an IR version the bundled ORT Web reads
    (<= :data:`WEB_MAX_IR`), the weights inside the one file (a page receives one buffer; under 2 GB). A file with
    ONNX Runtime's contrib operators (a transformer-fused or GPU-fused variant) is made again from its export; a
    dynamic or static INT8 file keeps its standard quantized operators (MatMulInteger, QDQ). Re-validated on the
    browser backend as well as ``providers`` when a browser is at hand."""
    import onnx

    from ...runtime.browser import ORT_WEB_VERSION, WEB_MAX_BYTES, WEB_MAX_IR, unavailable_reason
    from ...runtime.onnxfile import contrib_ops

    parent, ref, _source = parent_of(onnx_model)
    start = onnx_model
    recipe: dict[str, Any] = {"target": "web", "level": "basic", "runtime": f"onnxruntime-web {ORT_WEB_VERSION}"}
    contrib = contrib_ops(parent)
    if contrib:
        export_path = getattr(ref, "path", ref)
        if ref is None or ref is onnx_model or contrib_ops(Path(export_path)):
            raise OptimizationError(
                f"{parent.name} uses ONNX Runtime contrib operators ({', '.join(contrib)}) and no export without them "
                "is known: pass the ExportResult (or the plain .onnx export) to optimize(..., target='web').")
        start = ref
        recipe["started_from"] = (f"the export {Path(export_path).name}: {parent.name} has ONNX Runtime contrib "
                                  f"operators ({', '.join(contrib)}); quantize(web_variant, method='dynamic') makes "
                                  "an INT8 file with standard operators")

    def write(src: Path, staged: Path) -> list[str]:
        from ...runtime.files import scratch_dir

        with scratch_dir("onnx-nb-web-") as scratch:
            model = onnx.load(str(src), load_external_data=True)  # the weights into the one file first
            if model.ByteSize() > WEB_MAX_BYTES:
                raise OptimizationError(
                    f"{src.name} is {model.ByteSize() / 2**30:.1f} GB with its weights: a browser page takes the "
                    "model as one buffer of at most 2 GB. Quantize it first (INT8 is a quarter of the size).")
            inline, basic = Path(scratch) / "inline.onnx", Path(scratch) / "basic.onnx"
            onnx.save(model, str(inline))
            _ort_level(inline, basic, "basic")
            model = onnx.load(str(basic))
            recipe["ir_version"] = min(int(model.ir_version), WEB_MAX_IR)
            model.ir_version = recipe["ir_version"]
            onnx.save(model, str(staged))
        left = contrib_ops(staged)
        if left:
            raise OptimizationError(f"ONNX Runtime's basic level kept contrib operators ({', '.join(left)}).")
        return []

    checked = providers
    if validate and not unavailable_reason():
        from ...runtime.providers import providers_named

        names = [p.short for p in providers_named(providers)]
        checked = [*names, "browser"] if "browser" not in names else names
    variant = make(start, "web", "web(basic)", recipe, write, out=out, overwrite=overwrite, validate=validate,
                   providers=checked, sample=sample, reference=reference)
    if validate and unavailable_reason():
        variant.warnings.append(f"Checked on {', '.join(map(str, providers))} only: {unavailable_reason()}.")
    return variant
