"""Which attention route a transformer's dynamic INT8 file is made from: a variant ``optimize()`` made for fp32
(onnxscript's attention fusions) may quantize slower than the other route (a re-export with eager attention that
ONNX Runtime's quantizer turns into QAttention), so both routes' INT8 files are timed and the faster kept, as
``optimize(export, then="int8")`` does. Read by :func:`onnx_nb.quantize`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import first_line
from ...results.variant import Recipe, Variant


def fused_route(model: Any) -> bool:
    """A transformer variant optimize() made for fp32 (onnxscript's attention fusions, no ``then="int8"``), whose
    export and PyTorch model are at hand: the other attention route may make the faster INT8 file."""
    recipe = getattr(model, "recipe", None) or {}
    source = getattr(model, "source", None)
    return isinstance(model, Variant) and recipe.get("level") == "transformer" and recipe.get("then") != "int8" \
        and not recipe.get("simplify") and str(recipe.get("attention_route", "")).startswith("onnxscript") \
        and all(recipe.get(k) for k in ("model_type", "num_heads", "hidden_size")) \
        and source is not None and getattr(source, "model", None) is not None


def int8_route(model: Variant, scratch: Path, recipe: Recipe) -> tuple[Path | None, Path | None]:
    """What ``optimize(export, then="int8")`` does, for a variant made without it: the variant's own file and the
    eager route made from its export, each one's dynamic INT8 file timed, the faster route's fp32 file returned
    when it is not the variant's (None: the variant's own route is the faster, or the other could not be made),
    and the INT8 file timed for the file to quantize (its dynamic per-channel INT8 in this CPU's first scheme, in
    ``scratch``; None where there is none). The timings and the choice go into ``recipe["int8_route"]``."""
    from .optimizing import other_route_for_int8

    route: Recipe = {}
    notes: list[str] = []
    rerouted = scratch / "rerouted.onnx"
    params = (str(model.recipe["model_type"]), int(model.recipe["num_heads"]), int(model.recipe["hidden_size"]))
    timed: Path | None = None
    try:  # the variant's own file is its route's candidate as it is: only the other route is made
        _chosen, timed = other_route_for_int8(model.path, str(model.recipe["attention_route"]), rerouted, scratch,
                                              model.source, params, route)
    except Exception as exc:  # noqa: BLE001 - the variant's own route stays, and the recipe says why
        notes.append(f"the other route could not be made: {type(exc).__name__}: {first_line(exc)[:150]}")
    timings = route.get("routes_int8_ms", {})
    chosen = str(route.get("attention_route", ""))
    switched = bool(timings) and chosen != model.recipe["attention_route"]
    recipe["int8_route"] = {
        "rule": "the attention route whose dynamic INT8 file ran fastest (as optimize(..., then='int8')); "
                + ("another route than the fp32 variant's: its fp32 file, made again from the export, was quantized"
                   if switched else "the fp32 variant's own route, quantized as it is"),
        "routes_int8_ms": timings, "chosen": chosen if switched else model.recipe["attention_route"],
        **({"notes": notes} if notes else {})}
    return (rerouted, timed) if switched else (None, timed if timings else None)
