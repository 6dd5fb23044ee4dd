"""ONNX Runtime's graph levels saved offline, and ``level="auto"``'s choice among them for a model with no transformer
fusion: each level's file timed on the sample, the fastest kept."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...results.variant import Recipe


def ort_level(src: Path, dst: Path, level: str) -> None:
    from ...runtime.onnxfile import files_of, load_proto
    from ...runtime.sessions import session

    external = len(files_of(Path(src), load_proto(src))) > 1  # the optimized file gets a data file of its own
    session(src, level=level, save_to=dst, save_external=external)


AUTO_LEVELS = ("extended", "basic")  # what level="auto" tries on a model with no transformer fusion


def fastest_level(src: Path, staged: Path, scratch: Path, feed: dict[str, np.ndarray],
                   recipe: Recipe) -> str:
    """Save ``src`` at each of :data:`AUTO_LEVELS`, time the files interleaved on ``feed`` (each loaded the way a
    plain ONNX Runtime session loads a file, graph level "all"), and keep the fastest. A file saved at "extended"
    carries ORT's fused ops (FusedConv...), which can run slower than what ORT makes of the plain graph at load
    (ResNet-50: 55.2 against 51.4 ms); a "basic" file keeps standard ops and leaves the rest to the runtime."""
    from ...runtime.onnxedit import move_model
    from ..benchmark.measuring import time_files
    from .ort_quantizer import is_big

    files = {}
    for level in AUTO_LEVELS:
        files[level] = scratch / f"level-{level}.onnx"
        ort_level(src, files[level], level)
    rule = "the graph level whose file ran fastest on the sample (level='auto')"
    if is_big(src):  # two sessions of a file over 2 GB would hold (or map) its weights twice: one at a time
        ms = {level: time_files({level: path}, feed)[level] for level, path in files.items()}
        rule += ", each timed in a session of its own (a file over 2 GB: both open at once would hold it twice)"
    else:
        ms = time_files(files, feed)
    best = min(ms, key=lambda k: ms[k])
    recipe["levels_ms"] = {k: round(v, 3) for k, v in ms.items()}
    recipe["level_rule"] = rule
    move_model(files[best], staged)  # with its data file, for a file over 2 GB
    return best
