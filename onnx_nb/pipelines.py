"""``pipeline()``: export, parity, optimize, quantize and latency in one call, into one :class:`Report`.

A failed step does not stop the run: the report shows the failure and what still ran.
"""

from __future__ import annotations

import os
import time
import traceback
from pathlib import Path
from typing import Any

from .isolation import honours_isolate
from .progress import Steps
from .results.report import Report, StepResult


@honours_isolate
def pipeline(model: Any, sample: Any = None, *, task: str | None = None, optimize: bool = True,
             quantize: str | None = "auto", providers: Any = ("cpu",), shapes: Any = None,
             benchmark: bool = True, threads: int | None = None, min_seconds: float = 1.0,
             out: str | os.PathLike[str] | None = None, overwrite: bool = False, name: str | None = None,
             progress: bool = True, isolate: bool | None = None) -> Report:
    """Run every step on ``model`` and gather the results.

    ``quantize``: a :func:`onnx_nb.quantize` method (``"auto"``: the INT8 method that serves the family,
    static QDQ for CNNs and dynamic for transformers; ``"dynamic"``, ``"static"`` with generated
    calibration, ``"fp16"``, ``"int4"``) or None. ``benchmark``: time the export and each variant
    against PyTorch eager on ``shapes`` (default: the sample's shape).
    """
    from . import autotuning  # noqa: F401 - warm the import so timings are not charged to a step
    from .benchmarking import benchmark as run_benchmark
    from .exporting import export
    from .optimizing import optimize as run_optimize
    from .optimizing import precision_after
    from .parity.check import check_parity
    from .quantizing import quantize as run_quantize

    steps: list[StepResult] = []
    state: dict[str, Any] = {}
    target = Path(out) / "model.onnx" if out is not None else None
    planned = ["export", "parity"] + (["optimize"] if optimize else []) + (["quantize"] if quantize else []) + \
        (["latency"] if benchmark else [])

    def run(step: str, fn: Any, needs: tuple[str, ...] = ()) -> Any:
        missing = [n for n in needs if state.get(n) is None]
        if missing:
            steps.append(StepResult(step, "skipped", None, f"needs {', '.join(missing)}, which failed", 0.0))
            return None
        start = time.perf_counter()
        try:
            value = fn()
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # noqa: BLE001 - the report shows the failure and goes on
            steps.append(StepResult(step, "failed", None, f"{type(exc).__name__}: {exc}",
                                    time.perf_counter() - start, traceback.format_exc(limit=3)))
            return None
        ok = bool(value) if hasattr(value, "__bool__") else True
        steps.append(StepResult(step, "ok" if ok else "failed-check", value, "", time.perf_counter() - start))
        state[step] = value
        return value

    with Steps(len(planned), "pipeline", progress) as bar:
        bar.step("export")
        run("export", lambda: export(model, sample, task=task, out=target, overwrite=overwrite, progress=False,
                                     name=name))
        bar.step("parity")
        run("parity", lambda: check_parity(state["export"], providers=providers, progress=False), ("export",))
        if optimize:
            bar.step("optimize")
            run("optimize", lambda: run_optimize(state["export"], overwrite=overwrite or out is None,
                                                 providers=providers, then=precision_after(quantize)),
                ("export",))
        if quantize:
            bar.step(f"quantize ({quantize})")
            base = "optimize" if optimize else "export"
            kwargs: dict[str, Any] = {"calibration": "generated"} if quantize == "static" else {}
            run("quantize", lambda: run_quantize(state[base], method=quantize, overwrite=overwrite or out is None,
                                                 providers=providers, **kwargs), (base,))
        if benchmark:
            bar.step("latency")
            models = {"export (fp32)": state.get("export")}
            for step in ("optimize", "quantize"):
                if state.get(step) is not None:
                    models[state[step].name] = state[step]
            run("latency", lambda: run_benchmark({k: v for k, v in models.items() if v is not None},
                                                 providers=providers, reference=state["export"], shapes=shapes,
                                                 threads=threads, min_seconds=min_seconds, progress=False),
                ("export",))
    return Report(name or (state["export"].source.name if state.get("export") else str(model)), steps)
