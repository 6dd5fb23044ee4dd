"""``pipeline()``: export, parity, optimize, quantize and latency in one call, into one :class:`Report`.

A failed step does not stop the run: the report shows the failure and what still ran.
"""

from __future__ import annotations

import os
from typing import Any

from ..progress import Steps
from ..results.report import Report
from ..runtime.isolation import honours_isolate
from ..runtime.memory import gives_memory_back


@gives_memory_back
@honours_isolate
def pipeline(model: Any, sample: Any = None, *, task: str | None = None, optimize: bool = True,
             quantize: str | None = "auto", providers: Any = ("cpu",), shapes: Any = None,
             benchmark: bool = True, threads: int | None = None, min_seconds: float = 1.0,
             out: str | os.PathLike[str] | None = None, overwrite: bool = False, name: str | None = None,
             progress: bool = True, isolate: bool | None = None, data: Any = None, task_metric: str = "auto",
             task_budget: float | str | None = None) -> Report:
    """Run every step on ``model`` and gather the results.

    ``quantize``: a :func:`onnx_nb.quantize` method (``"auto"``: the INT8 method that serves the family,
    static QDQ for CNNs and dynamic for transformers; ``"dynamic"``, ``"static"`` with generated
    calibration, ``"fp16"``, ``"int4"``) or None; ``"auto"`` for a scikit-learn model means None (its file holds
    trees and linear models in ``ai.onnx.ml``, nothing INT8 applies to). ``benchmark``: time the export and each
    variant against PyTorch eager on ``shapes`` (default: the sample's shape; no eager row for a model from beyond
    PyTorch or a file made elsewhere). ``data``: examples to judge the export and each variant by the task
    (:func:`onnx_nb.evaluate`, with ``task_metric`` and ``task_budget``): an Evaluate step after latency, whose
    headline names the fastest file within the budget and why.

    Example::

        report = onnx_nb.pipeline("path/to/bert-folder", shapes=[{"batch": 8, "sequence": 128}])
        report.save_html("report.html")
    """
    from .export.adapters.registry import adapter_of, resolve
    from .plan import Run, Settings, plan
    from .variants import autotuning  # noqa: F401 - warm the import so timings are not charged to a step

    if quantize == "auto":  # what "auto" means is the kind's own answer (None for scikit-learn's ai.onnx.ml file)
        quantize = resolve(model).quantize_auto

    run = Run(model, Settings(sample=sample, task=task, optimize=optimize, quantize=quantize, benchmark=benchmark,
                              providers=providers, shapes=shapes, threads=threads, min_seconds=min_seconds, out=out,
                              overwrite=overwrite, name=name, data=data, task_metric=task_metric,
                              task_budget=task_budget))
    steps = plan(run.settings)
    with Steps(len(steps), "pipeline", progress) as bar:
        for step in steps:
            bar.step(f"quantize ({quantize})" if step.key == "quantize" else step.key)
            run.run(step.key)
    report = run.report()
    export = run.values.get("export")
    if export is not None and model is not getattr(export.source, "model", None) and \
            adapter_of(export).reloadable(export.source):
        # the report keeps its files, tables and figures, not a second copy of the PyTorch model it loaded: a later
        # step on its export loads the model again from its folder (a kernel on Binder's 2 GB holds one copy less)
        export.source.model = None
    return report
