"""The patches every dynamo export applies, in one block: the module patches (:mod:`.experts`, :mod:`.expert_tables`,
:mod:`.windows`, :mod:`.scans`, :mod:`.blocks`, :mod:`.positions`, :mod:`.sliding`, :mod:`.lengths`,
:mod:`.audio_windows`, :mod:`.series_rows`, :mod:`.keypoints`, :mod:`.stages`, :mod:`.image_patches`,
:mod:`.mask_annealing`, :mod:`.unmasked_attention`, :mod:`.pooled_patches`, the unlisted span attention of
:mod:`.vision_towers`, :mod:`.boolean_masks`, :mod:`.decode_loops`, :mod:`.durations`, :mod:`.text_queries`,
:mod:`.window_crops`) and the exporter's own (:mod:`.matching`, :mod:`.torchlib`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from . import (
    audio_windows,
    blocks,
    boolean_masks,
    decode_loops,
    durations,
    expert_tables,
    experts,
    image_patches,
    keypoints,
    lengths,
    mask_annealing,
    matching,
    pooled_patches,
    positions,
    scans,
    series_rows,
    sliding,
    stages,
    text_queries,
    torchlib,
    unmasked_attention,
    vision_towers,
    window_crops,
    windows,
)
from .contract import Patch

MODEL_PATCHES: tuple[Patch, ...] = (experts.PATCH, expert_tables.PATCH, windows.PATCH, scans.PATCH, blocks.PATCH,
                                    positions.PATCH, sliding.PATCH, lengths.PATCH, audio_windows.PATCH,
                                    series_rows.PATCH, keypoints.PATCH, stages.PATCH, image_patches.PATCH,
                                    mask_annealing.PATCH, unmasked_attention.PATCH, pooled_patches.PATCH,
                                    vision_towers.UNLISTED, boolean_masks.PATCH, decode_loops.PATCH,
                                    durations.PATCH, text_queries.PATCH, window_crops.PATCH)
EXPORTER_PATCHES: tuple[Patch, ...] = (matching.PATCH, torchlib.PATCH)


@contextlib.contextmanager
def applied(model: Any, own: bool = True) -> Iterator[dict[str, list[str]]]:
    """Within: every patch of :data:`MODEL_PATCHES` that applies to ``model`` in place (``own``; without, only the
    exporter's: transformers' patch set stands in for onnx-nb's rewrites), and the exporter's
    (:data:`EXPORTER_PATCHES`); yields, per model patch, what it replaced (only those that replaced some: the
    exporter's are speed-ups, no rewrite of the model). Everything is given back on leaving."""
    with contextlib.ExitStack() as stack:
        replaced = {p.name: stack.enter_context(p.during(model)) for p in (MODEL_PATCHES if own else ())}
        for p in EXPORTER_PATCHES:
            stack.enter_context(p.during(model))
        yield {name: found for name, found in replaced.items() if found}
