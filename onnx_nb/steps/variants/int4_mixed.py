"""Which MatMuls of an INT4 file stay at 8 bits, chosen by measured error (``quantize(method="int4",
mixed_precision=...)``).

Each weight MatMul is measured alone twice with :func:`onnx_nb.quant_debug` (its quantized node run on the fp32
file's own input tensor, so error inherited from earlier layers does not count): in the file with every layer at
4 bits and in the file with every layer at 8. A layer's gain is the noise power (relative to its output's) it loses
at 8 bits, per weight it adds half a byte for. Layers are promoted in that order; candidates at growing shares of
the size budget (:data:`STEPS`) are made and checked like any variant, and the cheapest whose largest error is
within the error budget is kept (by default :data:`ERROR_SHARE` of the all-INT4 file's). When none is, the most
accurate candidate is kept where it cuts the all-INT4 error :data:`GAIN` times (or passes where it fails); else
every layer stays at 4 bits. The LM head is a layer like the others here: its bits follow the measurement.
The recipe says what was measured and kept; ``variant.layers`` holds the per-layer numbers and
``variant.bits_figure()`` draws them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...errors import InvalidArgumentError
from .int4_algorithms import carried
from .int8_schemes import BUILD_EVERY_BELOW, worst_error

SIZE_BUDGET = 1.15  # "auto": the file at most 1.15x the all-INT4 file
ERROR_SHARE = 0.5  # "auto": the largest error at most half the all-INT4 file's
STEPS = (0.125, 0.25, 0.5, 1.0)  # candidates at these shares of the size budget's extra bytes
GAIN = 1.25  # a candidate short of the error budget kept only when it cuts the largest error this much


def budgets(method: str, mixed: Any) -> tuple[float, float | None] | None:
    """(size budget, error budget or None for "a share of the all-INT4 file's"), or None when off; bad values
    refused before any work."""
    if mixed in (None, False, "off"):
        return None
    if method != "int4":
        if mixed == "auto":
            return None
        raise InvalidArgumentError(f"mixed_precision={mixed!r} is for method='int4' (which INT4 layers stay at 8 "
                                   f"bits); method={method!r} has none.")
    if mixed == "auto":
        return SIZE_BUDGET, None
    if isinstance(mixed, (int, float)) and not isinstance(mixed, bool) and mixed > 1:
        return float(mixed), None
    if isinstance(mixed, dict) and set(mixed) <= {"size", "error"} and mixed:
        size, error = mixed.get("size", SIZE_BUDGET), mixed.get("error")
        if isinstance(size, (int, float)) and size > 1 and (error is None or
                                                          (isinstance(error, (int, float)) and error > 0)):
            return float(size), None if error is None else float(error)
    raise InvalidArgumentError(
        f"mixed_precision={mixed!r}: choose 'auto' (the file at most {SIZE_BUDGET}x the all-INT4 file, the largest "
        f"error at most {ERROR_SHARE} of its), None (every layer at 4 bits), a size budget such as 1.3, or "
        "{'size': 1.3, 'error': 0.01} (the largest absolute error to reach).")


def layer_table(four: Any, eight: Any) -> list[dict[str, Any]]:
    """Per weight MatMul: its name, module, SQNR at 4 and at 8 bits, weights, and the noise it loses per weight at
    8 bits; ranked most gain per weight first."""
    from ...runtime.onnxfile import load_proto
    from .debugging import quant_debug, quantizer_name

    at8 = {layer.parent_node: layer.sqnr_db for layer in quant_debug(four.parent, eight).layers}
    sizes, bits = {}, {}
    for node in load_proto(four.path).graph.node:
        if node.op_type == "MatMulNBits":
            attrs = {a.name: a.i for a in node.attribute}
            name = quantizer_name(node)
            sizes[name], bits[name] = attrs.get("K", 0) * attrs.get("N", 0), attrs.get("bits", 4)
    rows = []
    for layer in quant_debug(four.parent, four).layers:
        weights = sizes.get(layer.parent_node, 0)
        if layer.op_type != "MatMulNBits" or not weights or layer.parent_node not in at8:
            continue
        s4, s8 = layer.sqnr_db, at8[layer.parent_node]
        gain = 10 ** (-s4 / 10) - 10 ** (-s8 / 10)
        rows.append({"node": layer.parent_node, "module": layer.module_path or layer.parent_node,
                     "sqnr_4bit_db": round(s4, 2), "sqnr_8bit_db": round(s8, 2), "weights": int(weights),
                     "gain_per_weight": gain / weights, "bits": bits[layer.parent_node]})
    return sorted(rows, key=lambda r: -r["gain_per_weight"])


def candidates(rows: list[dict[str, Any]], extra_bytes: float) -> list[list[str]]:
    """The promoted layers at each share of ``extra_bytes`` (:data:`STEPS`): in rank order, each that still fits
    (a layer too big for the share is passed over, not the end of it); distinct, non-empty."""
    out: list[list[str]] = []
    for share in STEPS:
        spent, names = 0.0, []
        for row in rows:
            if spent + row["weights"] / 2 <= share * extra_bytes:
                spent += row["weights"] / 2
                names.append(row["node"])
        if names and (not out or names != out[-1]):
            out.append(names)
    return out


def cheapest_mix(four: Any, build: Callable[[Any, Path, bool], Any], scratch: Path, size_budget: float,
             error_budget: float | None, head_given: bool = False) -> Any:
    """The INT4 variant ``four`` (every layer at 4 bits but a head given 8) or the cheapest mixed file that meets
    the error budget (``build(eight_bit, path, overwrite)`` makes one; ``"all"`` every layer at 8). ``head_given``:
    the LM head's bits were asked for (``lm_head_bits=4`` or 8), so it is not a candidate."""
    from ...runtime.onnxfile import load_proto
    from .ort_quantizer import lm_head

    e4 = worst_error(four)
    if four.size_before > BUILD_EVERY_BELOW:
        four.recipe["mixed_precision"] = {"rule": f"not measured: over {BUILD_EVERY_BELOW >> 30} GiB of weights "
                                                  "(each candidate is a file to quantize and check)"}
        return four
    rows = layer_table(four, build("all", scratch / "all_8bit.onnx", True))
    head = lm_head(load_proto(four.parent))
    open_rows = [r for r in rows if r["bits"] == 4 and not (head_given and r["node"] == head)]
    extra = (size_budget - 1) * four.size_after
    target = error_budget if error_budget is not None else ERROR_SHARE * e4
    tried: list[tuple[list[str], float, bool]] = []
    chosen: list[str] = []
    for names in candidates(open_rows, extra):
        made = build(names, scratch / f"mixed_{len(names)}.onnx", True)
        tried.append((names, worst_error(made), bool(made)))
        if made and tried[-1][1] <= target:
            chosen = names
            break
    if not chosen and tried:
        names, error, ok = min((t for t in tried if t[2]), key=lambda t: t[1], default=([], e4, False))
        if ok and (not four or error * GAIN <= e4):
            chosen = names
    variant = carried(build(chosen, four.path, True), four) if chosen else four
    for row in rows:
        row["bits"] = 8 if row["node"] in chosen else row["bits"]
    if head in chosen:
        variant.recipe["lm_head_bits"] = 8
    variant.layers = rows
    kept = f"{len(chosen)} of {len(open_rows)} layers measured moved to 8 bits" if chosen else \
        f"all {len(open_rows)} layers measured kept at 4 bits"
    variant.recipe["mixed_precision"] = {
        "rule": (f"measured: each layer's error at 4 and 8 bits alone, most error lost per byte first; the cheapest "
                 f"file within {size_budget:g}x the all-INT4 file (its whole size) whose largest error is at most "
                 f"{target:.3g} ({'given' if error_budget is not None else f'{ERROR_SHARE:g} of all-INT4'}) kept: "
                 f"{kept}"),
        "all_int4_error": float(f"{e4:.4g}"),
        "tried": "; ".join(f"{len(n)} at 8 bits: {e:.3g}{'' if ok else ' (failed parity)'}" for n, e, ok in tried)
                 or "none (the budget adds no layer)",
        "size_vs_all_int4": float(f"{variant.size_after / four.size_after:.4g}") if chosen else 1.0}
    return variant
