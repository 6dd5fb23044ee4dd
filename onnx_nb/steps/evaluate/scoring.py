"""The measuring half of :func:`onnx_nb.evaluate`: every candidate on the same examples with the task's metric, no
timing (what ``autotune(data=)`` and ``quantize(data=)`` call: they time files themselves, and the benchmark step
imports the variants)."""

from __future__ import annotations

import os
import time
from typing import Any

from ...errors import DataError, InvalidArgumentError, first_line
from ...progress import Steps
from ...results.evaluation import EvalRow, Evaluation
from . import metrics
from .candidates import PYTORCH, Candidate, candidates, openvino_name
from .catalog import BY_METRIC, BY_MODEL_TASK, TASKS
from .data import read

GENERATIVE = ("perplexity", "speech", "generation")  # tasks a candidate runs by generating or its LM logits


def scored(models: Any, data: Any, metric: str = "auto", *, budget: float | str | None = None,
           pytorch: bool | str = "auto", settings: dict[str, Any] | None = None, limit: int | None = None,
           provider: str = "cpu", seed: int = 0, progress: bool = True, timed: bool = False,
           providers: Any = None, openvino: bool | None = None, substitute: Any = None) -> Evaluation:
    """:func:`onnx_nb.evaluate` without its latency: the arguments are its own (``settings``: columns, tokenizer,
    processor, batch_size, window, stride, max_tokens); ``timed`` adds a progress step the caller fills;
    ``substitute``: benchmark's ``openvino_file``, for the OpenVINO rows of files it cannot read (the benchmark step
    imports the variants, which import this module: the caller hands it down); ``openvino=None`` follows
    ``providers`` (``"openvino-runtime"`` among them), ``False`` never adds the OpenVINO runtime's rows."""
    settings = dict(settings or {})
    with_openvino = False
    if providers is not None:  # a pipeline's providers: the first is the one the files run on here, the OpenVINO
        provider, with_openvino = split_providers(providers)  # runtime's rows when it is among them
    openvino = with_openvino if openvino is None else openvino
    if metric != "auto" and metric not in BY_METRIC:
        raise InvalidArgumentError(f"metric={metric!r}: choose 'auto' or one of {', '.join(BY_METRIC)}.")
    rows = candidates(models, pytorch=pytorch, provider=provider, openvino=openvino, substitute=substitute)
    examples = read(data, limit=limit, seed=seed)
    files = [c for c in rows if not c.is_torch]
    first = next((c for c in files if c.source is not None), files[0])
    task = TASKS[_task_name(metric, first, examples)]
    if openvino and task.name in GENERATIVE:
        raise InvalidArgumentError(f"openvino=True: the OpenVINO rows run encoders' tasks; {task.name} runs a causal "
                                   "LM or a generating model, in ONNX Runtime here (leave openvino off).")
    main = task.main if metric == "auto" else metric
    measure = metrics.METRICS[main]
    limit_budget, relative = _budget(budget, measure)
    measure = type(measure)(measure.name, measure.higher_is_better, measure.unit, limit_budget, relative)
    results: list[EvalRow] = []
    measured: dict[str, metrics.Measured] = {}
    with Steps(len(rows) + 1 + int(timed), "evaluate", progress) as steps:
        steps.step(f"reading {examples.origin}")
        prepared = task.prepare(examples, first, settings)
        for c in rows:
            steps.step(f"{c.name} on {len(examples)} examples")
            start = time.perf_counter()
            try:
                records = task.score(c, prepared)
                got = metrics.measure(records, task.compute, main, task.per_example, seed=seed,
                                      draws_of=task.draws_for(main))
            except DataError:
                raise
            except Exception as exc:  # noqa: BLE001 - one candidate failing (ONNX Runtime's own errors included) is a row
                results.append(EvalRow(c.name, parent=c.parent, error=f"{type(exc).__name__}: {first_line(exc)}",
                                       size_mb=_mb(c)))
                continue
            measured[c.name] = got
            low, high = got.interval or (None, None)
            results.append(EvalRow(c.name, got.values[main], low, high,
                                   values={main: got.values[main],
                                           **{k: v for k, v in got.values.items() if k != main}},
                                   size_mb=_mb(c), parent=c.parent, seconds=time.perf_counter() - start,
                                   per_example=got.per_example, draws=got.draws))
        baseline = PYTORCH if PYTORCH in measured else next((r.name for r in results if r.name in measured), "")
        for r in results:
            if r.name in measured and baseline in measured and r.name != baseline:
                r.delta_low, r.delta_high = metrics.difference_interval(measured[r.name], measured[baseline]) or \
                    (None, None)
    kept = {k: v for k, v in prepared.settings.items() if v is not None and k not in ("tokenizer", "processor")}
    return Evaluation(measure, task.name, results, baseline, limit_budget, examples.origin, prepared.shown,
                      measured_on=prepared.measured_on, settings=kept,
                      notes=[f"{c.name}: {c.note}" for c in rows if c.note])


def split_providers(providers: Any) -> tuple[str, bool]:
    """(the ONNX Runtime provider the files run on, whether the OpenVINO runtime's rows are asked for) from a
    benchmark-style providers list (``["cpu", "openvino-runtime"]``)."""
    import importlib.util

    from ...runtime.providers import openvino_apart, providers_named

    if providers == "available":  # benchmark()'s every provider, the OpenVINO runtime's rows where it is installed
        return providers_named("available")[0].short, importlib.util.find_spec("openvino") is not None
    ort, openvino = openvino_apart(providers)
    return (providers_named(ort)[0].short if ort else "cpu"), openvino



def _task_name(metric: str, first: Candidate, examples: Any) -> str:
    if metric != "auto":
        return BY_METRIC[metric]
    model_task = getattr(first.source, "task", None)
    if model_task in BY_MODEL_TASK:
        return BY_MODEL_TASK[model_task]
    if model_task is None and examples.column("target", required=False) is not None:
        return "classification"
    raise InvalidArgumentError(f"evaluate() has no metric of its own for a {model_task or 'file without a task'}: "
                               f"name one with metric= ({', '.join(BY_METRIC)}).")


def _budget(budget: float | str | None, metric: Any) -> tuple[float, bool]:
    """(the allowed loss, relative or not): a number in points of the metric, ``"0.5%"`` in percent of it."""
    if budget is None:
        return metric.budget, metric.relative
    if isinstance(budget, str):
        text = budget.strip()
        try:
            value = float(text.rstrip("%").strip())
        except ValueError:
            raise InvalidArgumentError(f"budget={budget!r}: give points of the metric (0.5) or a share ('1%').") \
                from None
        return value, text.endswith("%")
    if budget < 0:
        raise InvalidArgumentError(f"budget={budget}: a loss cannot be negative.")
    return float(budget), False


def _mb(c: Candidate) -> float | None:
    size = c.size_bytes
    return None if size is None else size / 1e6


def with_latency(ev: Evaluation, table: Any) -> Evaluation:
    """``ev`` with each row's p50 from a latency table (the first shape each row was timed at; PyTorch eager's row
    for PyTorch), the rows slower than their parents marked, and the budget's verdicts and front judged again."""
    if table is None or isinstance(table, str):
        ev.notes += [table] if table else []
        return ev
    first: dict[str, Any] = {}
    for row in table.rows:
        if row.status == "ok" and row.p50_ms is not None:
            name = PYTORCH if row.variant == "PyTorch eager" else row.variant
            first.setdefault(openvino_name(name) if row.backend.startswith("openvino-runtime") else name, row)
    for r in ev.rows:
        timed = first.get(r.name)
        r.p50_ms = timed.p50_ms if timed is not None else None
        r.slower = bool(timed is not None and timed.slower)  # the table's own rule: no faster than its parent
    shape = next((row.shape for row in table.rows if row.status == "ok"), "")
    ev.latency = table
    ev.notes.append(f"Latency: p50 at {shape or 'the export sample'}, interleaved rounds ({os.cpu_count()} cores "
                    "here).")
    ev.judge()
    return ev
