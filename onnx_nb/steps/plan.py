"""The pipeline's steps, decided once: which steps run, in which order, what each needs, how each core function is
called, and which files a step may replace. :func:`onnx_nb.pipeline` runs the whole plan; the Studio runs it a step
at a time, and its front end draws its tabs and quantize choices from :func:`tabs` and :data:`QUANTIZE_METHODS`.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..results.report import Report, StepResult

QUANTIZE_METHODS = ("auto", "dynamic", "static", "int4", "fp16")
LABELS = {"export": "Export", "parity": "Parity", "optimize": "Optimize", "quantize": "Quantize",
          "latency": "Latency", "evaluate": "Evaluate", "report": "Report", "web": "transformers.js"}


@dataclass(frozen=True)
class Settings:
    """Everything a run of the plan is told; the front ends fill it from their arguments or controls."""

    sample: Any = None
    task: str | None = None
    optimize: bool = True
    quantize: str | None = "auto"
    benchmark: bool = True
    providers: Any = ("cpu",)
    shapes: Any = None  # latency shapes (default: the sample's)
    parity_shapes: Any = "auto"  # parity shapes ("auto": other sizes than the export's, the policy's own)
    threads: int | None = None
    min_seconds: float = 1.0
    out: str | os.PathLike[str] | None = None
    overwrite: bool = False
    name: str | None = None
    data: Any = None  # examples to judge every file by its task (evaluate()); None: no evaluate step
    task_metric: str = "auto"
    task_budget: Any = None

    @property
    def target(self) -> Path | None:
        return Path(self.out) / "model.onnx" if self.out is not None else None

    @property
    def replace_variants(self) -> bool:
        """Variants may replace earlier files of the same name when told to, or when they live in onnx-nb's own
        default folder beside an export this run wrote (the user named no folder)."""
        return self.overwrite or self.out is None


@dataclass(frozen=True)
class Step:
    key: str
    needs: tuple[str, ...]
    call: Callable[[Any, Settings, dict[str, Any]], Any]
    # steps whose results it reads when they ran (run first, and running one again makes this one stale), without
    # needing them: evaluate measures whichever variants there are
    reads: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return LABELS[self.key]


def _export(model: Any, s: Settings, _done: dict[str, Any]) -> Any:
    from .export.adapters.registry import resolve
    from .export.exporting import export

    out = s.target
    if s.out is not None and resolve(model).several_files:  # the folder itself holds the parts
        out = Path(s.out)
    return export(model, s.sample, task=s.task, out=out, overwrite=s.overwrite, progress=False, name=s.name)


def _subject(export: Any) -> Any:
    """What parity and the variants work on: the export, or of several files the one its adapter names (a
    vision-language model's decoder part, judged on the chain of its files)."""
    from .export.adapters.registry import subject_of

    return subject_of(export)


def _parity(_model: Any, s: Settings, done: dict[str, Any]) -> Any:
    from .parity.check import check_parity

    return check_parity(_subject(done["export"]), providers=s.providers, shapes=s.parity_shapes, progress=False)


def _optimize(_model: Any, s: Settings, done: dict[str, Any]) -> Any:
    from .variants.optimizing import optimize, precision_after

    return optimize(_subject(done["export"]), overwrite=s.replace_variants, providers=s.providers,
                    then=precision_after(s.quantize))


def _quantize(_model: Any, s: Settings, done: dict[str, Any]) -> Any:
    from .variants.quantizing import quantize

    base = done["optimize"] if s.optimize else _subject(done["export"])
    # static INT8 with no calibration data of the user's: calibration generated from the sample
    kwargs: dict[str, Any] = {"calibration": "generated"} if s.quantize == "static" else {}
    return quantize(base, method=s.quantize or "auto", overwrite=s.replace_variants, providers=s.providers, **kwargs)


def _latency(_model: Any, s: Settings, done: dict[str, Any]) -> Any:
    from .benchmark.benchmarking import benchmark

    models = {"export (fp32)": done["export"]}
    models.update({done[k].name: done[k] for k in ("optimize", "quantize") if done.get(k) is not None})
    export = done["export"]
    source = getattr(export, "source", None)  # a diffusion or SAM export has its parts' sources
    eager = source is None or source.has_torch_model  # PyTorch eager as the baseline, when there is one
    return benchmark(models, providers=s.providers, reference=export if eager else None, shapes=s.shapes,
                     threads=s.threads, min_seconds=s.min_seconds, progress=False)


def _evaluate(_model: Any, s: Settings, done: dict[str, Any]) -> Any:
    from .benchmark.benchmarking import openvino_file
    from .evaluate.evaluating import with_latency
    from .evaluate.scoring import scored

    files = {"export (fp32)": _subject(done["export"])}
    files.update({done[k].name: done[k] for k in ("optimize", "quantize") if done.get(k) is not None})
    found = scored(files, s.data, s.task_metric, budget=s.task_budget, providers=s.providers, progress=False,
                   substitute=openvino_file)
    return with_latency(found, done.get("latency"))


def plan(s: Settings) -> list[Step]:
    """The steps ``s`` asks for, in order."""
    steps = [Step("export", (), _export), Step("parity", ("export",), _parity)]
    if s.optimize:
        steps.append(Step("optimize", ("export",), _optimize))
    if s.quantize:
        steps.append(Step("quantize", ("optimize" if s.optimize else "export",), _quantize))
    if s.benchmark:
        steps.append(Step("latency", ("export",), _latency))
    if s.data is not None:  # after latency: its p50s are the evaluation's, the kept file the fastest in budget
        steps.append(Step("evaluate", ("export",), _evaluate, tuple(step.key for step in steps[2:])))
    return steps


def tabs(s: Settings) -> list[list[str]]:
    """The Studio's tabs: the plan's steps, the report, then the folder transformers.js loads (not a step of the
    plan: "Run all" leaves it)."""
    return [[step.key, step.label] for step in plan(s)] + [["report", LABELS["report"]], ["web", LABELS["web"]]]


class Run:
    """One model through the plan: each step's value and its :class:`StepResult` (status, time, error)."""

    def __init__(self, model: Any, settings: Settings) -> None:
        self.model = model
        self.settings = settings
        self.values: dict[str, Any] = {}
        self.records: dict[str, StepResult] = {}
        self.error: BaseException | None = None

    def configure(self, **changes: Any) -> None:
        self.settings = replace(self.settings, **changes)

    def step(self, key: str) -> Step:
        for step in plan(self.settings):
            if step.key == key:
                return step
        raise KeyError(key)

    def missing(self, key: str) -> list[str]:
        """The steps to run before ``key`` (its needs, theirs first), none of them run yet."""
        todo: list[str] = []
        step = self.step(key)
        for need in (*step.needs, *step.reads):
            if need not in self.values:
                todo += [k for k in self.missing(need) if k not in todo] + [need]
        return todo

    def run(self, key: str) -> Any:
        """Run one step; a failure is recorded (the step's record says how, ``error`` keeps the exception) and
        gives None. Running a step again drops what was built on its earlier value."""
        step = self.step(key)
        self._forget(key)
        absent = [n for n in step.needs if self.values.get(n) is None]
        if absent:
            self.records[key] = StepResult(key, "skipped", None, f"needs {', '.join(absent)}, which failed", 0.0)
            return None
        start = time.perf_counter()
        try:
            value = step.call(self.model, self.settings, self.values)
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # noqa: BLE001 - the record shows the failure; the run goes on
            self.records[key] = StepResult(key, "failed", None, f"{type(exc).__name__}: {exc}",
                                           time.perf_counter() - start, traceback.format_exc(limit=3))
            self.error = exc
            return None
        ok = bool(value) if hasattr(value, "__bool__") else True
        self.records[key] = StepResult(key, "ok" if ok else "failed-check", value, "", time.perf_counter() - start)
        self.values[key] = value  # a failed check still feeds the later steps (the report shows both)
        return value

    def _forget(self, key: str) -> None:
        """``key`` and every step built on it, records included: stale once ``key`` runs again."""
        stale = {key}
        for step in plan(self.settings):  # in order, so a need is marked before what needs it
            if stale & {*step.needs, *step.reads}:
                stale.add(step.key)
        for k in stale:
            self.values.pop(k, None)
            self.records.pop(k, None)

    def report(self, name: str | None = None) -> Report:
        export = self.values.get("export")
        model = name or self.settings.name or (export.source.name if export is not None else str(self.model))
        return Report(model, [self.records[s.key] for s in plan(self.settings) if s.key in self.records])
