"""``export("model.onnx")``: an ONNX file made elsewhere (a model zoo, a vendor, another team) adopted into the
pipeline where it is: its signature, axes and operators read, its graph checked, and ONNX Runtime's outputs
compared with an independent reference (:mod:`onnx_nb.runtime.independent`: ONNX's reference evaluator, OpenVINO,
or the outputs the file's author saved). Nothing is copied unless ``out=`` asks for a copy."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from ...results.export import ExportCheck, ExportResult, ModelSource
from .converting import foreign_result, grown, shapes_of

NO_REFERENCE = "no independent reference: {why}. Pass the outputs you trust beside the inputs (sample='io.npz')."
RECORDED = "the outputs saved beside the sample"


def adopt(path: Path, sample: Any, out: Any, overwrite: bool, name: str | None) -> ExportResult:
    """The :class:`~onnx_nb.ExportResult` of the file at ``path`` (see the module)."""
    from ...runtime import onnxfile
    from ...runtime.feeds import graph_sample
    from ...runtime.independent import independent_runner, read_saved

    started = time.perf_counter()
    proto = onnxfile.check_model(path)
    ins, outs = onnxfile.signature(proto)
    order = [o.name for o in outs]
    feed, recorded = read_saved(sample, [i.name for i in ins], order)
    # a dynamic axis 0 is the batch whatever the file calls it (tf2onnx writes unk__398): shapes={"batch": 8}
    axes = {i.name: {a: "batch" if a == 0 else n for a, n in i.dynamic_dims.items()} for i in ins if i.dynamic_dims}
    if feed is None:
        feed, _ = graph_sample(path, 0)
    files = onnxfile.files_of(path, proto)
    if out is not None:
        path, files = _copy(path, files, Path(out).expanduser(), overwrite)
    producer = " ".join(p for p in (proto.producer_name, proto.producer_version) if p) or None
    source = ModelSource("onnx", name or path.stem, location=str(path), model_type=producer, sample=feed,
                         input_axes=axes, as_kwargs=False, recorded=recorded, adapter="onnx", eager=False)
    unverified: list[str] = []
    if recorded:
        check = _check(path, feed, recorded, RECORDED, order)
    else:
        label, runner, why = independent_runner(path)
        if runner is None:
            check, unverified = ExportCheck(skipped=True, route="none"), [NO_REFERENCE.format(why=why)]
        else:
            probe = grown(feed, {k: {a: n for a, n in v.items() if a == 0} for k, v in axes.items()})  # another batch
            check = _check(path, probe, runner(probe), label or "", order)
    warnings = [] if check.get("passed", True) else [
        f"ONNX Runtime does not compute this file as {check['against']} does: {check.get('error') or check['summary']}"]
    return foreign_result(path, files, "adopted", {}, time.perf_counter() - started, warnings, source, check, [],
                          bool(axes), proto, unverified)


def _check(path: Path, feed: dict[str, np.ndarray], want: dict[str, np.ndarray], against: str,
           order: list[str]) -> ExportCheck:
    """ONNX Runtime on ``feed`` against ``want``, in the file's output order ``order``."""
    from ...steps.export.machinery.checks import check_arrays

    return check_arrays(path, feed, {n: want[n] for n in order if n in want}, shapes_of(feed), against)


def _copy(path: Path, files: list[Path], target: Path, overwrite: bool) -> tuple[Path, list[Path]]:
    """The file and its external data copied to ``target`` (staged beside it, then moved into place)."""
    from ...runtime.files import check_space, check_target, publish, staging_dir, total_size

    target = check_target(target, overwrite)
    if target.resolve() == path.resolve():
        return path, files
    check_space(target.parent, total_size(files))
    with staging_dir(target) as tmp:
        for f in files:
            shutil.copy2(f, tmp / (target.name if f == path else f.name))
        return target, publish(tmp / target.name, target)
