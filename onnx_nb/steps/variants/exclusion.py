"""quantize()'s ``exclude="auto"``: the layers kept in float, one at a time, until the variant passes its parity
policy, at most 1 in 10, or until three in a row bring it no closer (INT8 does not serve the model: a detector whose
top-k picks flip gained nothing from a tenth of its layers and took over ten minutes to say so)."""

from __future__ import annotations

from typing import Any

from ...results.variant import Recipe, Variant

AUTO_EXCLUDE_GAP_DB = 3.0
AUTO_EXCLUDE_SHARE = 10  # at most 1 in 10 quantized layers stays float
AUTO_EXCLUDE_STALL = 3  # layers kept in float in a row that bring the failing outputs no closer: INT8 does not serve
AUTO_EXCLUDE_GAIN = 0.9  # closer: fewer failing rows, or the worst output's cosine gap (1 - cosine) down to 90% of
# the best so far or less


def auto_exclude(variant: Variant, excluded: list[str], recipe: Recipe, validate: bool, sample: Any,
                  remake: Any) -> Variant:
    """Keep in float, one at a time, the layer that loses the most accuracy on its own, until the variant
    passes its parity policy (or, without validation, every layer far below the median), at most 1 in 10."""
    from .debugging import quant_debug

    recipe["exclude_rule"] = (f"auto: the worst layers alone (quant_debug) until parity passes, at most 1 in "
                              f"{AUTO_EXCLUDE_SHARE}, or {AUTO_EXCLUDE_STALL} in a row that bring it no closer"
                              if validate else
                              f"auto: layers more than {AUTO_EXCLUDE_GAP_DB:g} dB below the median SQNR, "
                              f"at most 1 in {AUTO_EXCLUDE_SHARE}")
    # layers are measured only on a file that fails (or with no parity to say so): one that passes keeps none
    report = None if validate and variant else \
        quant_debug(None, variant, sample, gap_db=AUTO_EXCLUDE_GAP_DB, max_suggestions=10_000)
    cap = max(1, len(report.layers) // AUTO_EXCLUDE_SHARE) if report is not None else 0
    if not validate:
        assert report is not None
        excluded[:] = report.suggested[:cap]
        recipe["exclude"] = list(excluded)
        return remake() if excluded else variant  # the file is ours: made a moment ago
    best, stalled = closeness(variant), 0
    while not variant and len(excluded) < cap and stalled < AUTO_EXCLUDE_STALL:
        assert report is not None
        worst = next((layer.parent_node for layer in report.layers if layer.parent_node not in excluded), None)
        if worst is None:
            break
        excluded.append(worst)
        recipe["exclude"] = list(excluded)
        variant = remake()
        now = closeness(variant)
        closer = now[0] < best[0] or now[1] <= best[1] * AUTO_EXCLUDE_GAIN  # fewer failing rows, or nearer
        best, stalled = (min(now, best), 0) if closer else (best, stalled + 1)
        if not variant:  # the next worst layer, of the file that still fails
            report = quant_debug(None, variant, sample, gap_db=AUTO_EXCLUDE_GAP_DB, max_suggestions=10_000)
    recipe["exclude"] = list(excluded)
    variant.recipe = Recipe(**recipe)
    if not variant and variant.parity is not None and report is not None:
        worst = ", ".join(f"{layer.parent_node} ({layer.sqnr_db:.1f} dB)" for layer in report.layers[:3])
        why = (f"the last {AUTO_EXCLUDE_STALL} brought its outputs no closer: no fewer failing rows, and its worst "
               f"output's cosine gap down by less than a tenth each time (the best worst cosine {1 - best[1]:.3g})"
               if stalled >= AUTO_EXCLUDE_STALL else f"at most 1 in {AUTO_EXCLUDE_SHARE}")
        variant.parity.notes.append(
            f"INT8 does not serve this model: {len(excluded)} layer(s) kept in float ({why}) and its parity still "
            f"fails. The layers that lose the most alone: {worst} "
            "(onnx_nb.quant_debug). Keep the fp32 file, or try another method (fp16 on a GPU, INT4 weights).")
    return variant


def closeness(variant: Variant) -> tuple[int, float]:
    """How far the variant is from passing: its failing rows, and its worst output's cosine gap (1 - its lowest
    cosine; 1.0 where none is known: an output that failed to run, or no parity)."""
    rows = variant.parity.rows if variant.parity is not None else []
    cosines = [r.cosine for r in rows if r.cosine is not None]
    return sum(r.failed for r in rows), 1.0 - min(cosines) if cosines else 1.0
