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


def int8_route(model: Variant, scratch: Path, recipe: Recipe) -> tuple[Path | None, Path | None, dict[str, float]]:
    """What ``optimize(export, then="int8")`` does, for a variant made without it: the variant's own file and the
    eager route made from its export, each one's dynamic INT8 file timed, the faster route's fp32 file returned
    when it is not the variant's (None: the variant's own route is the faster, or the other could not be made),
    and the INT8 file timed for the file to quantize (its dynamic per-channel INT8 in this CPU's first scheme, in
    ``scratch``; None where there is none), and that INT8 file's ms and the variant's own (its fp32 parent's),
    timed in one run, as the scheme choice keys them (``{"fp32": .., <this CPU's first scheme>: ..}``; empty without
    the file). The timings and the choice go into ``recipe["int8_route"]``."""
    from .optimizing import route_scheme

    route: Recipe = {}
    notes: list[str] = []
    rerouted = scratch / "rerouted.onnx"
    params = (str(model.recipe["model_type"]), int(model.recipe["num_heads"]), int(model.recipe["hidden_size"]))
    timed: Path | None = None
    int8_ms = 0.0
    chosen = own = str(model.recipe["attention_route"])
    try:  # the variant's own file is its route's candidate as it is: only the other route is made
        chosen, timed, int8_ms = other_route_for_int8(model.path, own, rerouted, scratch, model.source, params,
                                                      route, norms="skip_layernorm" in model.recipe)
    except Exception as exc:  # noqa: BLE001 - the variant's own route stays, and the recipe says why
        notes.append(f"the other route could not be made: {type(exc).__name__}: {first_line(exc)[:150]}")
    timings = route.get("routes_int8_ms", {})
    switched = timed is not None and chosen != own  # only a choice that ran to its end switches
    recipe["int8_route"] = {
        "rule": "the attention route whose dynamic INT8 file ran fastest (as optimize(..., then='int8')); "
                + ("another route than the fp32 variant's: its fp32 file, made again from the export, was quantized"
                   if switched else "the fp32 variant's own route, quantized as it is"),
        "routes_int8_ms": timings, "chosen": chosen if switched else own, **({"notes": notes} if notes else {})}
    known = {"fp32": float(route["parent_ms"]), route_scheme(): int8_ms} if timed is not None else {}
    return (rerouted if switched else None), timed, known


def other_route_for_int8(own: Path, own_route: str, staged: Path, scratch: Path, source: Any,
                         params: tuple[str, int, int], recipe: Recipe, norms: bool = True) -> tuple[str, Path, float]:
    """``optimize(then="int8")``'s question for an fp32 variant already made (``own``, finished by ``own_route``):
    only the eager route is made, finished as ``own`` was (re-exported from ``source``, ORT's optimizer, and this
    CPU's norm choice where ``norms``: ``own`` had it), both quantized and timed, with ``own`` (the fp32 parent) in
    the same run (``recipe["parent_ms"]``). Returns the route chosen, whose fp32 file is at ``staged`` when it is not
    ``own_route``, the INT8 file timed for it (dynamic, per channel, this CPU's first scheme; in ``scratch``: the
    file quantize() would make of it) and that file's ms. The timings go into ``recipe``."""
    import shutil

    from ...runtime.memory import give_back, resident_bytes
    from .norms import apply
    from .optimizing import EAGER_ROUTE, eager_reexport, fastest_route, ort_transformer

    resident = resident_bytes()
    exported, eager = scratch / "eager.onnx", scratch / "eager.finished.onnx"
    eager_reexport(source, exported)
    ort_transformer(exported, eager, *params)
    give_back(full=True, before=resident)  # the optimizer's copies, before the file is read again
    norm_choice: Recipe = {}
    if norms:  # as ``own`` was finished: the INT8 file timed is the one quantize() makes
        apply(eager, params[2], norm_choice)
    int8_files: dict[str, Path] = {}
    chosen = fastest_route({own_route: own, EAGER_ROUTE: eager}, staged, scratch, source, recipe, params,
                            finished_already=(own_route, EAGER_ROUTE), int8_files=int8_files, parent=own)
    route = own_route if not chosen.startswith(EAGER_ROUTE) else EAGER_ROUTE
    if route == EAGER_ROUTE:
        shutil.copyfile(eager, staged)
        recipe.update(norm_choice)
    recipe["attention_route"] = own_route if route == own_route else chosen
    return recipe["attention_route"], int8_files[route], recipe["routes_int8_ms"][route]
