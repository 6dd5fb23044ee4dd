"""Which INT8 method a graph takes (:func:`int8_method`: static QDQ for convolutional networks, dynamic for the rest)
and which INT8 scheme, for the CPU it will run on (:mod:`onnx_nb.runtime.cpu`): the rule, and on this machine the
measurement that picks among the schemes the rule leaves (the fastest that passes parity) and says
plainly when no INT8 file beats its fp32 parent here."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError, first_line
from ...results.variant import Recipe, Variant
from ...runtime.cpu import SCHEMES, Cpu, schemes_for, target

INT8_METHODS = ("dynamic", "static")
BUILD_EVERY_BELOW = 2**30  # weights under which every scheme the CPU allows is made and timed


def int8_method(path: Path) -> tuple[str, str]:
    """The INT8 method that serves this graph: static QDQ for convolutional networks (dynamic quantization
    re-measures every activation at run time and leaves convolutions slower than fp32 on CPU), dynamic for
    the rest (transformers keep their accuracy only with per-batch activation scales)."""
    from ...runtime.facts import facts_of_proto
    from ...runtime.onnxfile import load_proto, op_histogram

    proto = load_proto(path)
    if facts_of_proto(proto).unet:
        return "static", ("auto: a diffusion UNet: static QDQ on its convolutions and weight MatMuls (dynamic INT8 "
                          "runs it slower than fp32); calibration=onnx_nb.unet_calibration(sd) gives it the "
                          "pipeline's own inputs, else they are generated from the sample")
    ops = op_histogram(proto)
    convs = sum(n for op, n in ops.items() if op.split(".")[-1] in ("Conv", "FusedConv", "NhwcConv"))
    matmuls = ops.get("MatMul", 0) + ops.get("Gemm", 0)
    if convs and convs >= matmuls:
        return "static", f"auto: {convs} Conv against {matmuls} MatMul/Gemm, a convolutional network: static QDQ"
    return "dynamic", f"auto: {matmuls} MatMul/Gemm against {convs} Conv: dynamic (per-batch activation scales)"


def choose(method: str, scheme: str, target_cpu: Any, recipe: Recipe) -> tuple[Cpu, list[str]]:
    """(the CPU the file is for, the schemes to make: the first is made first; '' for a method without INT8
    products), the rule written into ``recipe``."""
    if scheme != "auto" and scheme not in SCHEMES:
        raise InvalidArgumentError(f"scheme={scheme!r}: choose 'auto' or one of {', '.join(map(repr, SCHEMES))}.")
    cpu = target(target_cpu)
    if method not in INT8_METHODS:
        return cpu, [""]
    if scheme != "auto":
        schemes, rule = [scheme], f"given (scheme={scheme!r})"
    else:
        schemes, rule = schemes_for(cpu)
        if len(schemes) > 1 and not cpu.here:
            schemes, rule = schemes[:1], rule.split(", whichever")[0] + f": {schemes[0]} (not measured: made " \
                "for another CPU than this one)"
    recipe.update({"int8_cpu": cpu.label, "int8_scheme_rule": rule})
    return cpu, schemes


def settings(scheme: str) -> Recipe:
    """The recipe's lines for one scheme."""
    weights, reduce_range, _ = SCHEMES[scheme]
    return {"int8_scheme": scheme, "weight_type": weights, "reduce_range": reduce_range}


def fastest_that_passes(first: Variant, schemes: list[str], build: Callable[[str, Any, bool], Variant], scratch: Path,
                        cpu: Cpu, known: dict[str, float] | None = None) -> Variant:
    """Every scheme in ``schemes`` made (``first`` is the first, already at its place; the others in ``scratch``);
    those within the accuracy policy (:func:`accurate`) timed interleaved on this CPU against the fp32 parent at a
    serving size, and the fastest kept (made again at ``first``'s place when it is not the first); a scheme outside
    the policy cannot be kept, so it is not timed. ``known``: the parent's and the first scheme's ms, timed already
    in one run with this very file (the attention route's choice), which serve when the first is the only scheme
    left to time. The timings go into the recipe and ``variant.speed``; a warning says so when the INT8 file is no
    faster than its parent here."""
    from ..benchmark.measuring import time_files

    made = {schemes[0]: first}
    if first.size_before > BUILD_EVERY_BELOW:  # quantizing a big file again costs minutes: the rule's first only
        first.recipe["int8_scheme_rule"] += (f"; {', '.join(schemes[1:])} not made: over "
                                             f"{BUILD_EVERY_BELOW >> 30} GiB of weights")
    else:
        for scheme in schemes[1:]:
            made[scheme] = build(scheme, scratch / f"{scheme}.onnx", True)
    timed = accurate(made) or [schemes[0]]  # none passes: the first stays, timed for what it is
    try:
        feed, shape = serving_feed(first)
        ms = dict(known) if known and timed == [schemes[0]] else \
            time_files({"fp32": first.parent, **{s: made[s].path for s in timed}}, feed, reference=("fp32",))
    except Exception as exc:  # noqa: BLE001 - the rule's choice stays, and the recipe says why it was not timed
        first.recipe["int8_timing"] = f"not timed: {type(exc).__name__}: {first_line(exc)[:200]}"
        return first
    best = min(timed, key=lambda s: ms[s])
    variant = made[best] if best == schemes[0] else build(best, first.path, True)
    variant.recipe.update({"int8_schemes_ms": {s: round(ms[s], 3) for s in timed}, "fp32_ms": round(ms["fp32"], 3),
                           "int8_timed_at": shape})
    if len(made) > 1:
        variant.recipe["int8_scheme_rule"] += "; " + ", ".join(
            f"{s} {f'{ms[s]:.3g} ms' if s in ms else 'not timed'}, largest error {worst_error(v):.3g}"
            f"{'' if v else ' (failed parity)'}" for s, v in made.items()) + f": {best} kept" + \
            ("" if len(timed) == len(made) else f" (a scheme whose error is over {ACCURACY_SLACK:g}x the most "
                                                 "accurate one's, or that fails parity, is not timed)")
    variant.speed = {"ms": round(ms[best], 4), "parent_ms": round(ms["fp32"], 4), "cpu": cpu.label, "shape": shape}
    if ms[best] >= ms["fp32"]:
        variant.warnings.append(
            f"On this CPU ({cpu.label}) no INT8 file beats its fp32 parent: {ms[best]:.3g} ms against "
            f"{ms['fp32']:.3g} ms at {shape}. Keep the fp32 file here (the pipeline does), or quantize on the CPU "
            "it will serve from (target_cpu=...).")
    return variant


ACCURACY_SLACK = 1.25  # a scheme's largest error may exceed the most accurate scheme's by this much


def accurate(made: dict[str, Variant]) -> list[str]:
    """The schemes within the accuracy policy: parity passes, and the largest error is within :data:`ACCURACY_SLACK`
    of the most accurate passing scheme's (7-bit weights must not cost more than they save: uint8 weights lose
    nothing against a VNNI CPU's full range); the fastest of them is kept."""
    errors = {s: worst_error(v) for s, v in made.items()}
    passing = [s for s, v in made.items() if v]
    floor = min((errors[s] for s in passing), default=0.0)
    return [s for s in passing if errors[s] <= ACCURACY_SLACK * floor or not floor]


def worst_error(variant: Variant) -> float:
    """The largest absolute error over the variant's parity rows (the same cases for every scheme: same seed)."""
    rows = getattr(variant.parity, "rows", None) or []
    return max((float(r.max_abs) for r in rows if getattr(r, "max_abs", None) is not None), default=0.0)


def serving_feed(variant: Variant) -> tuple[dict[str, np.ndarray], str]:
    """Inputs at a size the file will serve at: a transformer's token inputs tiled to 8 x 128 (INT8's gain is in
    its large products, the sample's few tokens hide it); other models' samples as they are."""
    from ...runtime.facts import file_facts
    from ...runtime.feeds import feed_for
    from ...runtime.onnxfile import load_proto, signature
    from .optimizing import timing_feed

    feed, _axes = feed_for(variant.path, variant)
    names = [i.name for i in signature(load_proto(variant.path))[0]]
    source = variant.source
    tokens = [n for n in names if n in feed and feed[n].ndim == 2 and feed[n].dtype.kind in "iu"]
    if tokens and source is not None and getattr(source, "model", None) is not None and \
            not file_facts(variant.path).generative:
        tiled = timing_feed(source)
        if all(n in tiled for n in names):
            feed = {n: tiled[n] for n in names}
    shape = ", ".join(f"{n}={list(np.shape(feed[n]))}" for n in names if n in feed)
    return feed, shape
