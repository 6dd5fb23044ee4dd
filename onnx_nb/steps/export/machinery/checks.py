"""The export's own check: the written file run in ONNX Runtime at a shape the sample did not have, compared output
by output with what the source framework computed there (PyTorch, Keras, TensorFlow, scikit-learn or, for a file
made elsewhere, an independent reference). Numpy only: no framework is imported here."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ....errors import first_line

if TYPE_CHECKING:
    from ....results.export import ExportCheck


def check_arrays(path: Path, feed: dict[str, np.ndarray], want: dict[str, np.ndarray], shapes: dict[str, Any],
                 against: str = "PyTorch") -> ExportCheck:
    """Run the file at ``path`` in ONNX Runtime on ``feed`` and compare with ``want`` (output name -> array, in the
    file's output order); ``against`` names who computed ``want`` in the check's text."""
    from ....results.export import ExportCheck
    from ....runtime.sessions import session as open_session

    try:
        session = open_session(path)
        wanted = {i.name for i in session.get_inputs()}
        got = session.run(None, {n: v for n, v in feed.items() if n in wanted})
    except Exception as exc:  # noqa: BLE001 - ORT's own error types vary by version
        return ExportCheck(False, shapes=shapes, against=against, error=f"{type(exc).__name__}: {first_line(exc)}")
    from ....results import detections
    from ....results.tolerance import EXPORT_CHECK, measure

    names = list(want)
    tol = EXPORT_CHECK
    per_output: dict[str, float] = {}
    cosines: list[float] = []
    notes: list[str] = []
    passed = True
    ours, want = detections.align_per_box(dict(zip(names, got)), want, "fp32", tol.atol)
    for name in names:
        ref_np, value = want[name], ours[name]
        if detections.owns(name, detections.DETECTIONS in want):  # boxes matched, not row by row; masks by IoU
            agree, error, note = detections.judge(name, value, ref_np, "fp32", tol.atol)
            passed = passed and agree
            per_output[name] = error or 0.0
            notes.append(f"{name}: {note}")
            continue
        if ref_np.shape != value.shape:
            passed = False
            per_output[name] = float("inf")
            notes.append(f"{name}: ONNX Runtime gives shape {list(value.shape)}, {against} {list(ref_np.shape)}")
            continue
        stats, errors = measure(value, ref_np, name)
        per_output[name] = float(stats["max_abs"] or 0.0)
        if stats["cosine"] is not None:
            cosines.append(float(stats["cosine"]))
        verdict = errors.judge(tol)  # element-wise and at the output's own scale, as check_parity judges
        passed = passed and verdict["passed"]
        if verdict["note"]:
            notes.append(f"{name}: {verdict['note']}")
    worst = max(per_output.values(), default=0.0)
    return ExportCheck(passed, f"max abs diff {worst:.3g} at {shapes}" + (f" ({'; '.join(notes)})" if notes else ""),
                       shapes, against, worst, figures={"per_output": per_output, "cosine": min(cosines, default=None)})


def unsteady(first: dict[str, np.ndarray], again: dict[str, np.ndarray], against: str = "PyTorch") -> str:
    """Why no file can match the source, where ``against``'s two runs on the same inputs (``first``, ``again``: output
    name -> array) differ: the model draws random numbers in eval mode (dropout left on, sampled noise or lengths);
    "" where the two runs agree."""
    moved = []
    for name, a in first.items():
        b = again.get(name)
        if b is None:
            continue
        if a.shape != b.shape:
            moved.append(f"{name}: shape {list(a.shape)}, then {list(b.shape)}")
        elif not (np.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True) if a.dtype.kind == "f"
                  else np.array_equal(a, b)):
            moved.append(f"{name}: max abs diff {float(np.abs(a.astype(np.float64) - b).max()):.3g}")
    if not moved:
        return ""
    return (f"{against} itself gives other outputs on a second run of the same inputs ({'; '.join(moved)}): the "
            "model draws random numbers in eval mode (dropout left on, sampled noise or lengths), so no file can "
            "match it run for run; make those draws inputs, or switch them off, to export a file that can be checked")
