"""What the routes of :mod:`.foreign` share: converting with each converter in turn into a staging folder, the
check in ONNX Runtime at other sizes, and the :class:`~onnx_nb.ExportResult`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import ExportError, UnsupportedOperatorError
from ...results.export import ExportCheck, ExportResult, ModelSource

TF2ONNX_MAX_OPSET = 18  # tf2onnx 1.17 knows IR versions up to opset 18
WHAT = {"keras": "a Keras model", "tensorflow": "a TensorFlow model", "sklearn": "a scikit-learn model",
        "onnx": "an ONNX file made elsewhere"}


def grown(feed: dict[str, np.ndarray], axes: dict[str, dict[int, str]], seed: int = 1,
          vocab: int | None = None) -> dict[str, np.ndarray]:
    """Inputs at other sizes along every axis in ``axes`` (:func:`onnx_nb.runtime.shapes.other_sizes`, the rule the
    PyTorch route's check follows): fresh values drawn like the sample's (integers within the sample's range, floats
    from a normal distribution scaled to it)."""
    from ...runtime.shapes import axis_sizes, other_sizes

    other = other_sizes(axis_sizes(feed, axes))
    rng = np.random.default_rng(seed)
    out = {}
    for name, value in feed.items():
        shape = list(value.shape)
        for axis, axis_name in axes.get(name, {}).items():
            shape[axis] = other[axis_name]
        if value.dtype.kind in "iu":
            high = int(vocab or value.max() + 1 if value.size else 2)
            out[name] = rng.integers(int(value.min()) if value.size else 0, max(high, 1), shape).astype(value.dtype)
        elif value.dtype.kind == "f":
            scale = float(value.std()) if value.size > 1 and value.std() > 0 else 1.0
            out[name] = (rng.standard_normal(shape) * scale + float(value.mean() if value.size else 0)).astype(
                value.dtype)
        else:
            out[name] = np.resize(value, shape)
    return out


def shapes_of(feed: dict[str, np.ndarray]) -> dict[str, list[int]]:
    return {k: list(v.shape) for k, v in feed.items()}


def convert_checked(kind: str, target: Path, order: list[str], convert: Callable[[str, Path], None],
                    axes: dict[str, dict[int, str]], probe: dict[str, np.ndarray],
                    want: Callable[[dict[str, np.ndarray], list[str]], dict[str, np.ndarray]],
                    source: ModelSource, against: str, steps: Any, warnings_seen: list[str],
                    fixed: list[Any], dynamic: bool) -> ExportResult:
    """Convert with each exporter in ``order`` into a staging folder until one gives a file that ONNX Runtime runs
    like the source framework at ``probe`` (``want(probe, output names)``), then publish it at ``target``.
    ``convert(name, staged)`` writes the file; an :class:`UnsupportedOperatorError` stops at once (no other
    converter knows the operator either)."""
    import onnx

    from ...runtime import onnxedit, onnxfile
    from ...steps.export.machinery.attempts import first_that_passes
    from ...steps.export.machinery.checks import check_arrays

    def write(name: str, staged: Path) -> Any:
        convert(name, staged)
        proto = onnxfile.load_proto(staged)
        outputs = [o.name for o in proto.graph.output]
        onnxedit.name_dims(proto, {**axes, **{o: {0: "batch"} for o in outputs if dynamic}})
        onnx.save(proto, str(staged))
        return proto

    def check(_name: str, staged: Path, proto: Any) -> ExportCheck:
        return check_arrays(staged, probe, want(probe, [o.name for o in proto.graph.output]), shapes_of(probe), against)

    done = first_that_passes(order, target, write, check, steps, verb="converting with", against=against,
                             stop_on=(UnsupportedOperatorError,))
    if done.name:
        if not done.check["passed"]:
            warnings_seen.append(f"ONNX Runtime does not match {against}: "
                                 f"{done.check.get('error') or done.check['summary']}")
        return foreign_result(target, done.files, done.name, done.attempts, done.seconds, warnings_seen, source,
                              done.check, fixed, dynamic, done.written)
    listing = "; ".join(f"{k}: {v}" for k, v in done.attempts.items())
    raise ExportError(f"Every converter failed for {WHAT[kind]}: {listing}.", done.attempts)


def foreign_result(target: Path, files: list[Path], exporter: str, attempts: dict[str, str], seconds: float,
                   warnings_seen: list[str], source: ModelSource, check: ExportCheck, fixed: list[Any],
                   dynamic: bool, proto: Any, unverified: list[str] | None = None) -> ExportResult:
    """The result of the file at ``target``, whose graph ``proto`` the caller has read already (without weights)."""
    from ...runtime import onnxfile
    from ...runtime.files import total_size

    ins, outs = onnxfile.signature(proto)
    return ExportResult(
        path=target, exporter=exporter, fallback_reason=attempts, opset=onnxfile.opset(proto), inputs=ins,
        outputs=outs, op_histogram=onnxfile.op_histogram(proto), parameters=onnxfile.parameter_count(proto),
        file_size=total_size(files), files=files, export_seconds=seconds, warnings=warnings_seen, source=source,
        check=check, fixed_axes=fixed, dynamic=dynamic, unverified=list(unverified or []))
