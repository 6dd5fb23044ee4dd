"""``optimize()``: ONNX Runtime graph levels and transformer fusion, verified every time.

``level="auto"`` on a transformer: fuse attention whatever attention implementation the export
used (onnxscript's ORT fusions handle the dynamo exporter's sdpa graphs; otherwise, when the
PyTorch source is known, it is re-exported with eager attention, which ORT's fusion recognises),
then ORT's transformer optimizer (model type, heads and hidden size from the Hugging Face config),
and mark the variant to skip padding at run time when its inputs carry an attention mask.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError, OptimizationError
from ...results.variant import Recipe, Variant
from ...runtime.memory import FACTORS, gives_memory_back
from ...runtime.onnxedit import sort_file
from .decoders import ATTENTION_CHOICES, decoder_export, decoder_route
from .levels import fastest_level, ort_level
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


@gives_memory_back  # each route's copies of the graph go before the next is made
def _onnxscript_fusions(src: Path, dst: Path) -> dict[str, int]:
    import onnx_ir as ir
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    from ..export.patches.matching import linear_matching
    from ..export.patches.translations import exact_no_ops

    exact_no_ops()  # a norm's epsilon of 1e-8 is not "+ 0"
    model = ir.load(str(src))
    with linear_matching():
        result = optimize_for_ort(model)
    fused_model, counts = result if isinstance(result, tuple) else (model, {})
    ir.save(fused_model, str(dst))
    return {k: int(v) for k, v in dict(counts).items() if v}


@gives_memory_back  # each route's copies of the graph go before the next is made
def eager_reexport(source: Any, dst: Path) -> None:
    """Export the PyTorch source again with eager attention (TorchScript), which ORT fuses."""
    from ..export.exporting import export
    from ..export.patches.attention import eager_attention

    with eager_attention(source.model) as eager:
        if not eager:
            raise OptimizationError("the model cannot switch to eager attention")
        sample = {k: v for k, v in source.sample.items()} if source.sample else None
        export(source.model, sample, out=dst, exporter="torchscript", overwrite=True, progress=False,
               dynamic=source.input_axes or True)


@gives_memory_back  # each route's copies of the graph go before the next is made
def ort_transformer(src: Path, dst: Path, model_type: str, heads: int, hidden: int,
                    collected: list[str] | None = None) -> None:
    """ONNX Runtime's transformer optimizer; its warnings (not its progress lines) go to ``collected``."""
    import logging

    from onnxruntime.transformers import optimizer

    from ..export.machinery.torch_exporters import quiet

    logging.getLogger("onnxruntime.transformers").setLevel(logging.ERROR)
    with quiet(collected if collected is not None else [], []):  # the optimizer prints its progress to stdout
        optimized = optimizer.optimize_model(str(src), model_type=model_type, num_heads=heads,
                                             hidden_size=hidden, opt_level=0)
        optimized.save_model_to_file(str(dst))
    sort_file(dst)  # its sort, as it saves, leaves a Loop before what its body reads


def precision_after(quantize_method: str | None) -> str | None:
    """What ``then`` to optimize for when a quantize step with this method follows (pipeline, Studio)."""
    return "int8" if quantize_method in ("auto", "dynamic") else None


EAGER_ROUTE = "re-exported with eager attention"
PARENT = "the fp32 parent"


def fastest_route(candidates: dict[str, Path], staged: Path, scratch: Path, source: Any, recipe: Recipe,
                  params: tuple[str, int, int], finished_already: tuple[str, ...] = (),
                  int8_files: dict[str, Path] | None = None, parent: Path | None = None) -> str:
    """Finish each candidate with ORT's transformer optimizer (not those named in ``finished_already``), quantize
    each (dynamic INT8, per-channel) into the scratch folder, time those INT8 files interleaved on the sample, and
    keep the fp32 file whose INT8 file ran fastest (at ``staged``, unless it was finished already): ORT's quantizer
    turns the eager route's attention (mask index) into QAttention, not the attention with a bias input that
    onnxscript's fusions write. The timings and the rule go into the recipe; ``int8_files`` (when given) gets each
    candidate's INT8 file, left in the scratch folder. ``parent``: an fp32 file timed in the same run (quantize()'s
    parent, whose time it reports beside its INT8 file's), in ``recipe["parent_ms"]``."""
    import shutil

    from ...runtime.feeds import feed_for
    from ..benchmark.measuring import time_files
    from ..export.machinery.torch_exporters import quiet
    from .ort_quantizer import run_quantizer

    finished: dict[str, Path] = {}
    quantized: dict[str, Path] = {}
    for i, (name, path) in enumerate(candidates.items()):
        finished[name] = path if name in finished_already else scratch / f"route{i}.onnx"
        if name not in finished_already:
            ort_transformer(path, finished[name], *params)
        quantized[name] = scratch / f"route{i}.int8.onnx"
        with quiet([], []):  # ORT's quantizer logs to the root logger: nothing of it is about the route chosen
            run_quantizer("dynamic", finished[name], scratch / f"route{i}.prepared.onnx", quantized[name], True, [],
                          None, None, 32, scheme=route_scheme(),
                          outlier_feed=feed_for(finished[name], None, source.sample)[0])
    if int8_files is not None:
        int8_files.update(quantized)
    ms = time_files({**quantized, **({PARENT: parent} if parent is not None else {})}, timing_feed(source),
                    reference=(PARENT,))
    if parent is not None:
        recipe["parent_ms"] = ms.pop(PARENT)
    best = min(ms, key=lambda k: ms[k])
    recipe["routes_int8_ms"] = {k: round(v, 3) for k, v in ms.items()}
    recipe["route_rule"] = (f"the attention route whose dynamic INT8 file ran fastest on the sample tiled to "
                            f"{ROUTE_BATCH} x {ROUTE_SEQUENCE} (then='int8')")
    if best not in finished_already:  # one finished already is where its caller keeps it
        shutil.copyfile(finished[best], staged)
    if _count(finished[best], ("Attention", "MultiHeadAttention")) == 0:
        return f"{best} (ORT's optimizer fused no attention there; its INT8 file was still the faster)"
    return best


def route_scheme() -> str:
    """The INT8 scheme the route choice quantizes each candidate in: this CPU's first."""
    from ...runtime.cpu import schemes_for, this_cpu

    return schemes_for(this_cpu())[0][0]


ROUTE_BATCH, ROUTE_SEQUENCE = 8, 128  # routes differ at serving sizes, not at the sample's few tokens


def timing_feed(source: Any) -> dict[str, np.ndarray]:
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


@gives_memory_back
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
    share: :mod:`onnx_nb.steps.variants.gqa`); ``"standard"`` keeps ONNX's own ops (any runtime); ``"auto"``:
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
        from .web import for_web

        return for_web(onnx_model, reference=reference, out=out, overwrite=overwrite, validate=validate,
                       providers=providers, sample=sample)
    if target == "mobile":
        from .mobile import for_mobile

        return for_mobile(onnx_model, reference=reference, out=out, overwrite=overwrite, validate=validate,
                          providers=providers, sample=sample)
    _check_choices(level, attention, then)
    parent, _ref, source = parent_of(onnx_model)
    ort_type, heads, hidden = transformer_params(source, model_type, num_heads, hidden_size)
    decoder = decoder_export(onnx_model)
    chosen = _level_for(level, attention, decoder, bool(ort_type and heads and hidden))
    from ...runtime.facts import file_facts

    skip_padding = file_facts(parent).padded_tokens if unpad == "auto" else bool(unpad)
    # a decoder's own export (a variant's changes would be lost): re-exported with standard attention ops
    reexport_decoder = decoder and chosen == "transformer" and not simplify
    recipe: Recipe = {"level": chosen, "simplify": simplify, "unpad": skip_padding}
    if then:
        recipe["then"] = then
    if chosen == "transformer" and not reexport_decoder:
        recipe.update({"model_type": ort_type, "num_heads": heads, "hidden_size": hidden})

    def write(src: Path, staged: Path) -> list[str]:
        from ...runtime.files import scratch_dir

        with scratch_dir("onnx-nb-opt-") as scratch:
            return _write(src, staged, Path(scratch))

    def _write(src: Path, staged: Path, scratch: Path) -> list[str]:
        warnings: list[str] = []
        work = _simplified(src, scratch) if simplify else src
        if chosen != "transformer" and level == "auto":
            from ...runtime.feeds import feed_for

            recipe["level"] = fastest_level(work, staged, scratch, feed_for(work, onnx_model, sample)[0], recipe)
        elif chosen != "transformer":
            ort_level(work, staged, chosen)
        elif reexport_decoder and decoder_route(source, staged, recipe, warnings, attention, providers):
            pass
        elif not (ort_type and heads and hidden):  # a decoder whose re-export failed, with no optimizer settings
            ort_level(work, staged, "extended")
            recipe["attention_route"] = "ONNX Runtime's extended graph level (no re-export, no optimizer settings)"
        else:
            recipe.update({"model_type": ort_type, "num_heads": heads, "hidden_size": hidden})
            from ...runtime.providers import providers_named

            transformer_route(work, staged, scratch, source, (ort_type, heads, hidden), then, recipe, warnings,
                               cpu=all(p.name == "CPUExecutionProvider" for p in providers_named(providers)))
        return warnings

    def name() -> str:
        return f"optimized({recipe['level']})" + ("+unpad" if skip_padding else "")

    tag = "optimized" if level == "auto" or chosen == "transformer" else f"optimized-{chosen}"
    return make(onnx_model, tag, name, recipe, write, out=out, overwrite=overwrite, validate=validate,
                runtime={"unpad": True} if skip_padding else {}, providers=providers, sample=sample,
                reference=reference, needs=FACTORS["decoder route"] if reexport_decoder else None)


def _check_choices(level: str, attention: str, then: str | None) -> None:
    """``optimize()``'s choices refused before any file is read."""
    if attention not in ATTENTION_CHOICES:
        raise InvalidArgumentError(f"attention={attention!r}: one of {', '.join(ATTENTION_CHOICES)}.")
    if then not in (None, "fp32", "int8"):
        raise InvalidArgumentError(f"then={then!r}: None (fp32) or 'int8'.")
    if level not in LEVELS:
        raise InvalidArgumentError(f"level={level!r}: choose one of {', '.join(LEVELS)}.")


def _level_for(level: str, attention: str, decoder: bool, transformer: bool) -> str:
    """The level ``optimize()`` applies (``"auto"``: the transformer route for a decoder's export or a model whose
    optimizer settings are known, else ``"extended"``, timed against ``"basic"``)."""
    if attention != "auto" and not decoder:
        raise InvalidArgumentError(f"attention={attention!r} is for a decoder's own export with its cache "
                                   "(onnx_nb.export(causal_lm)); leave it 'auto' here.")
    chosen = ("transformer" if decoder or transformer else "extended") if level == "auto" else level
    if chosen == "transformer" and not decoder and not transformer:
        raise InvalidArgumentError(
            "Transformer fusion needs the model type, number of heads and hidden size; they come from the "
            "Hugging Face config when optimizing an ExportResult, or pass model_type=, num_heads=, hidden_size=."
        )
    return chosen


def _simplified(src: Path, scratch: Path) -> Path:
    """onnxscript's graph optimizer (constant folding, dead-code removal), into the scratch folder."""
    import onnx
    import onnxscript

    from ..export.patches.translations import exact_no_ops

    exact_no_ops()
    model = onnxscript.optimizer.optimize(onnx.load(str(src)))
    out = scratch / "simplified.onnx"
    onnx.save(model, str(out))
    return out


def transformer_route(work: Path, staged: Path, scratch: Path, source: Any, params: tuple[str, int, int],
                       then: str | None, recipe: Recipe, warnings: list[str], cpu: bool = True) -> None:
    """Attention fused whatever attention the export used (as exported, onnxscript's fusions, or a re-export with
    eager attention), then ORT's transformer optimizer; with ``then="int8"`` the faster route for INT8. On CPU, its
    SkipLayerNormalization nodes go back to Add + LayerNormalization where that is measured faster (``norms``)."""
    from ...runtime.memory import give_back, resident_bytes

    resident = resident_bytes()
    _attention_route(work, staged, scratch, source, params, then, recipe, warnings)
    if cpu:
        from .norms import apply

        give_back(full=True, before=resident)  # the fusions' and the optimizer's copies, before the file is read again

        apply(staged, params[2], recipe)


def _attention_route(work: Path, staged: Path, scratch: Path, source: Any, params: tuple[str, int, int],
                     then: str | None, recipe: Recipe, warnings: list[str]) -> None:
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
            eager_reexport(source, eager)
            work, route = eager, EAGER_ROUTE
        except Exception as exc:  # noqa: BLE001
            warnings.append(f"eager re-export failed: {type(exc).__name__}: {str(exc)[:150]}")
    if then == "int8" and route.startswith("onnxscript") and has_model:
        eager = scratch / "eager.onnx"
        started = time.perf_counter()
        try:
            eager_reexport(source, eager)
        except Exception as exc:  # noqa: BLE001 - the one route stays
            warnings.append(f"eager re-export failed: {type(exc).__name__}: {str(exc)[:150]}")
        else:
            recipe["attention_route"] = fastest_route({route: work, EAGER_ROUTE: eager}, staged, scratch, source,
                                                       recipe, params)
            # what then='int8' costs: the re-export, both routes optimized, quantized and timed (the pipeline's
            # optimize step says so beside its time)
            recipe["routes_seconds"] = round(time.perf_counter() - started, 1)
            return
    ort_transformer(work, staged, *params, collected=warnings)
    recipe["attention_route"] = route
    if _count(staged, attention) == 0:
        warnings.append("Attention could not be fused; the variant keeps unfused attention.")


