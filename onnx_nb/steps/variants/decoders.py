"""A decoder's own export in ``optimize()``: re-exported at opset 23 with standard Attention, RMSNormalization and
RotaryEmbedding (:func:`export_standard_ops`), then rewritten for ONNX Runtime's GroupQueryAttention (:mod:`.gqa`), its
key/value cache one buffer shared by past and present."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import NotRewritableError, first_line
from ...results.variant import Recipe

DECODER_ROUTE = "re-exported with torch.export at opset 23, standard ONNX ops: "


def decoder_export(onnx_model: Any) -> bool:
    """An export whose adapter lets this route export its model again (a decoder-only model with its cache, its
    PyTorch model at hand: :meth:`~onnx_nb.steps.export.adapters.base.Adapter.decoder_reexport`)."""
    from ...results.export import ExportResult
    from ..export.adapters.registry import adapter_of

    return isinstance(onnx_model, ExportResult) and adapter_of(onnx_model).decoder_reexport(onnx_model)


ATTENTION_CHOICES = ("auto", "gqa", "standard")


GQA_ROUTE = "GroupQueryAttention (ONNX Runtime contrib op: packed QKV, rotary inside, shared key/value buffer) x"


def decoder_route(source: Any, staged: Path, recipe: Recipe, warnings: list[str], attention: str = "auto",
                   providers: Any = ("cpu",)) -> bool:
    """A decoder's export re-exported at opset 23 with standard Attention, RMSNormalization and RotaryEmbedding,
    then (``attention``) rewritten for GroupQueryAttention; False (and a warning) when the re-export failed."""
    from ...runtime.onnxfile import load_proto, op_histogram

    try:
        export_standard_ops(source.model, staged, warnings)
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


def _gqa_rewrite(model: Any, staged: Path, recipe: Recipe) -> str | None:
    """The opset-23 file at ``staged`` rewritten in place for GroupQueryAttention; the reason when it does not
    match (the file stays as it was)."""
    from ...runtime import onnxfile
    from ...runtime.memory import weight_bytes
    from .gqa import NotRewritable, rewrite

    try:
        done = rewrite(staged, staged, model, big=weight_bytes(model) > onnxfile.EXTERNAL_DATA_BYTES)
    except NotRewritable as exc:
        return str(exc)
    recipe["attention_route"] = (f"{GQA_ROUTE}{done['layers']}, RMS norms as ORT's "
                                 f"(Skip)SimplifiedLayerNormalization x{done['norms']} ({done['nodes']} nodes), from "
                                 "the opset-23 re-export")
    recipe["kv_cache"] = "one buffer per key/value tensor, shared by past and present (generate() binds it)"
    return None


STANDARD_OPS_OPSET = 23  # ONNX's own Attention (with its cache), RMSNormalization and RotaryEmbedding


def export_standard_ops(model: Any, path: Path, warnings: list[str] | None = None) -> None:
    """The decoder with its cache again, through ``torch.export`` at opset 23: each layer's attention becomes one
    ONNX ``Attention`` op (past and present keys/values in and out), RMS norms ``RMSNormalization``, rotary
    embeddings ``RotaryEmbedding``, and the shape arithmetic a trace records goes away (a 2,145-node TorchScript
    graph of an 8-layer Llama becomes 428 nodes). Same inputs, outputs and axis names as :func:`export`'s file. A
    model whose attention output dynamo cannot view is traced with eager attention (no ``Attention`` op), saying so
    in ``warnings``."""
    import torch

    from ...runtime import onnxfile
    from ...runtime.memory import weight_bytes
    from ..export.caches.decoder import DecoderWithCache, cache_axes, cache_sample, input_names, layout_of, output_names
    from ..export.machinery.torch_exporters import export_dynamo, quiet
    from ..export.machinery.torch_route import dynamo_or_eager

    layout = layout_of(model)
    wrapper = DecoderWithCache(model, layout).eval()
    sample = cache_sample(model, layout)
    names = input_names(layout)
    big = weight_bytes(model) > onnxfile.EXTERNAL_DATA_BYTES
    with torch.no_grad(), quiet([], []):
        dynamo_or_eager(model, [] if warnings is None else warnings, lambda: export_dynamo(  # forward(first, *rest)
            wrapper, tuple(sample[n] for n in names), path, names, output_names(layout), cache_axes(layout),
            STANDARD_OPS_OPSET, big, varargs_from=1))
