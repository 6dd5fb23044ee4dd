"""``autotune()``: build candidate variants, measure latency and accuracy of each, pick the fastest
within an accuracy budget, and show the Pareto front."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import InvalidArgumentError
from ...progress import Steps
from ...render import CSS, compact_table, cut, esc, text_table
from ...results.evaluation import pareto_front

METRICS = ("cosine", "max_abs")
# (name, step, its arguments, the candidate it starts from (None: the export), file tag), in build order
PLAN: list[tuple[str, str, dict[str, Any], str | None, str]] = [
    ("optimized(extended)", "optimize", {"level": "extended", "unpad": False}, None, "opt-ext"),
    ("optimized(auto)", "optimize", {"unpad": False}, None, "opt"),
    ("optimized(auto)+unpad", "optimize", {"unpad": "auto", "then": "int8"}, None, "opt-unpad"),
    ("int8 per-channel", "quantize", {}, "optimized(auto)+unpad", "int8-pc"),
    ("int8 per-tensor", "quantize", {"per_channel": False}, "optimized(auto)+unpad", "int8-pt"),
    ("int4 weight-only", "quantize", {"method": "int4"}, "optimized(auto)+unpad", "int4"),
    ("int4 every layer 4-bit", "quantize", {"method": "int4", "mixed_precision": None}, "optimized(auto)+unpad",
     "int4-all4"),
]


@dataclass
class Candidate:
    name: str
    variant: Any  # Variant, or the ExportResult / path for the plain export
    p50_ms: float | None
    metric: float | None
    within_budget: bool
    parity_passed: bool | None
    speedup: float | None = None  # against the plain fp32 export (or PyTorch eager when measured)
    error: str = ""
    task: float | None = None  # the task metric on the data given (autotune(data=...)), else None

    @property
    def size_mb(self) -> float | None:
        """The candidate's file with its external data, in MB (what a user ships)."""
        from ...runtime.onnxfile import file_bytes

        size = getattr(self.variant, "size_after", None) or getattr(self.variant, "file_size", None)
        if not size and isinstance(self.variant, (str, os.PathLike)):  # a bare .onnx file
            size = file_bytes(Path(self.variant))
        return size / 1e6 if size else None


@dataclass
class TuneResult:
    candidates: list[Candidate]
    metric: str
    budget: float
    best: Any  # the fastest Variant within the budget (or the export itself)
    pareto: list[str]
    latency: Any = None  # the LatencyTable behind the numbers
    notes: list[str] = field(default_factory=list)
    evaluation: Any = None  # the Evaluation on the data given: the task budget decides "within budget"

    def _budget_text(self) -> str:
        if self.evaluation is not None:
            ev = self.evaluation
            return f"{ev.metric.budget_text(ev.budget)} of {ev.baseline}"
        return f"{self.metric} budget {self.budget:g}"

    @property
    def best_candidate(self) -> Candidate | None:
        return next((c for c in self.candidates if c.variant is self.best), None)

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "budget": self.budget, "pareto": self.pareto,
                "best": self.best_candidate.name if self.best_candidate else None,
                "candidates": [{k: v for k, v in c.__dict__.items() if k != "variant"} for c in self.candidates],
                "notes": self.notes}

    def to_pandas(self) -> Any:
        import pandas as pd

        return pd.DataFrame([{k: v for k, v in c.__dict__.items() if k != "variant"} for c in self.candidates])

    def figure(self) -> Any:
        """Latency against accuracy per candidate; the Pareto front joined; the budget marked."""
        import plotly.graph_objects as go

        key = "task" if self.evaluation is not None else "metric"
        name = self.evaluation.metric.name if self.evaluation is not None else self.metric
        ok = [c for c in self.candidates if c.p50_ms is not None and getattr(c, key) is not None]
        fig = go.Figure()
        # names only on the Pareto front (alternating above and below, cut to 24 characters), the rest on hover:
        # a dozen full names on close points ran together into a smear
        front = sorted((c for c in ok if c.name in self.pareto), key=lambda c: c.p50_ms or 0.0)
        side = {c.name: ("top center" if i % 2 == 0 else "bottom center") for i, c in enumerate(front)}
        fig.add_trace(go.Scatter(x=[c.p50_ms for c in ok], y=[getattr(c, key) for c in ok], mode="markers+text",
                                 text=[cut(c.name, 24) if c.name in side else ""
                                       for c in ok],
                                 textposition=[side.get(c.name, "top center") for c in ok], name="candidates",
                                 hovertext=[c.name for c in ok], hoverinfo="text+x+y", textfont={"size": 11},
                                 marker={"size": 11, "color": ["#137333" if c.within_budget else "#b3261e"
                                                               for c in ok]}))
        fig.add_trace(go.Scatter(x=[c.p50_ms for c in front], y=[getattr(c, key) for c in front], mode="lines",
                                 name="Pareto front", line={"dash": "dot"}))
        if self.evaluation is None:
            fig.add_hline(y=self.budget, line_dash="dash", annotation_text=f"budget {self.metric} {self.budget:g}")
        fig.update_layout(title=f"Autotune: latency against {name if self.evaluation is not None else 'accuracy'}",
                          xaxis_title="p50 latency (ms)",
                          yaxis_title=name, template="plotly_white", height=440,
                          legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0})
        return fig

    def _rows(self) -> list[list[str]]:
        def f(v: float | None, spec: str) -> str:
            return "-" if v is None else format(v, spec)

        best = self.best_candidate
        task = [f(c.task, ".4g") for c in self.candidates] if self.evaluation is not None else []
        return [[("★ " if c is best else "") + c.name, f(c.p50_ms, ".2f"),
                 "-" if c.speedup is None else f"{c.speedup:.2f}x", f(c.size_mb, ".3g"), *task[i:i + 1],
                 f(c.metric, ".6g"), "yes" if c.within_budget else "no", "yes" if c.name in self.pareto else "",
                 c.error]
                for i, c in enumerate(self.candidates)]

    def _task_head(self) -> list[str]:
        return [self.evaluation.metric.name] if self.evaluation is not None else []

    def __repr__(self) -> str:
        head = ["candidate", "p50_ms", "speedup", "size_mb", *self._task_head(), self.metric, "in budget", "pareto",
                "error"]
        best = self.best_candidate
        lines = [f"TuneResult: best within {self._budget_text()}: {best.name if best else 'none'}",
                 text_table(head, self._rows())]
        return "\n".join(lines + [f"note: {n}" for n in self.notes])

    __str__ = __repr__

    def html_body(self) -> str:
        task = self._task_head()
        head = ["candidate", "p50 ms", "speed-up", "MB", *task, self.metric, "in budget", "Pareto", "error"]
        notes = "".join(f'<div class="warn">{esc(n)}</div>' for n in self.notes)
        table = compact_table(head, self._rows(), head[:-1], abbreviate=("candidate",), wrap=("error",), width=36,
                              numeric=("p50 ms", "speed-up", "MB", *task, self.metric), details="With errors")
        return f'<div class="onnxnb"><h4>Autotune</h4>{table}{notes}</div>'

    def _repr_html_(self) -> str:
        return CSS + self.html_body()


def _metric(report: Any, metric: str) -> float | None:
    rows = [r for r in getattr(report, "rows", []) if r.status in ("pass", "fail")]
    if not rows:
        return None
    if metric == "cosine":
        return min(r.cosine for r in rows if r.cosine is not None)
    return max(r.max_abs for r in rows if r.max_abs is not None)


def autotune(model: Any, *, metric: str = "cosine", budget: float | None = None, providers: Any = ("cpu",),
             sample: Any = None, shapes: Any = None, reference: Any = None, runs: int | None = None,
             min_seconds: float = 0.5, threads: int | None = None, candidates: Any = "auto",
             out: str | os.PathLike[str] | None = None, overwrite: bool = False, progress: bool = True,
             cluster: Any = None, data: Any = None, task_metric: str = "auto",
             task_budget: float | str | None = None) -> TuneResult:
    """Candidates (the export; ORT's extended level; transformer fusion with and without skipping padding;
    INT8 per-channel and per-tensor; INT4 weight-only), each validated and timed on the same inputs.

    ``metric="cosine"`` (lowest cosine over outputs and shapes; budget default 0.99) or ``"max_abs"``
    (largest absolute error; budget default 1e-4). Returns the table, the Pareto front, and ``best``:
    the fastest candidate within the budget.

    Given ``data`` (any examples :func:`onnx_nb.evaluate` reads), the task decides instead: every candidate is measured
    on it with ``task_metric`` (``"auto"``: the task's own), and ``best`` is the fastest whose loss against PyTorch
    stays within ``task_budget`` (points of the metric, default 1; ``"1%"`` relative, perplexity's default); the
    agreement metric stays in the table, and the notes say when it would have kept another candidate.

    ``cluster=`` (True, a Ray address or :class:`onnx_nb.Cluster`) builds and validates the candidates as Ray
    jobs, side by side on the nodes (INT8 and INT4 after the fused graph they start from), and times them there
    with ``benchmark(cluster=...)``; the files come back into ``out``.

    Example::

        tuned = onnx_nb.autotune(result, budget=0.99)
        tuned.best, tuned.figure()
    """
    from ...runtime.cluster import as_cluster
    from ..benchmark.benchmarking import benchmark
    from ..parity.check import check_parity
    from .variants import parent_of

    on = as_cluster(cluster)
    if metric not in METRICS:
        raise InvalidArgumentError(f"metric={metric!r}: choose 'cosine' or 'max_abs'.")
    budget = budget if budget is not None else (0.99 if metric == "cosine" else 1e-4)
    parent, ref, _source = parent_of(model)
    folder = Path(out) if out is not None else parent.parent / "autotune"
    if folder.exists() and any(folder.iterdir()) and not overwrite:
        from ...errors import OutputExistsError

        raise OutputExistsError(f"{folder} already holds autotune results; pass overwrite=True or another out=.")
    folder.mkdir(parents=True, exist_ok=True)
    plan = [c for c in PLAN if candidates == "auto" or c[0] in set(candidates)]
    common = {"providers": providers, "sample": sample, **({"reference": reference} if reference is not None else {})}
    results: list[Candidate] = []
    with Steps(len(plan) + 2, "autotune", progress) as steps:
        steps.step("checking the export")
        against = reference if reference is not None else ref
        if hasattr(against, "source") or (against is not None and not isinstance(against, (str, os.PathLike))):
            base = check_parity(against, model, sample, providers=providers, progress=False, cluster=on)
            results.append(Candidate("export (fp32)", model, None, _metric(base, metric), True, bool(base)))
        else:  # a bare .onnx file is its own reference
            results.append(Candidate("export (fp32)", model, None, 1.0 if metric == "cosine" else 0.0, True, None))
        if on is None:
            made = _build_here(plan, model, folder, common, steps)
        else:
            from .remote import build_on_cluster

            steps.step(f"building {len(plan)} candidates on the cluster")
            made = build_on_cluster(on, plan, model, folder, common, progress)
        for name, variant, error in made:
            value = None if variant is None else _metric(variant.parity, metric)
            results.append(Candidate(name, variant, None, value, False,
                                     None if variant is None else bool(variant.parity), error=error))
        evaluation = None
        if data is not None:
            from ..evaluate.scoring import scored

            steps.add(1)
            steps.step("measuring every candidate on the task")
            evaluation = scored({c.name: c.variant for c in results if c.variant is not None}, data, task_metric,
                                budget=task_budget, providers=providers, progress=False,
                                openvino=False)  # autotune keeps a file to run in ONNX Runtime
        steps.step("timing every candidate on the same inputs")
        timed = {c.name: c.variant for c in results if c.variant is not None}
        table = benchmark(timed, providers=providers, sample=sample, shapes=shapes, runs=runs,
                          min_seconds=min_seconds, threads=threads, progress=False, cluster=on)
    if evaluation is not None:  # its rows timed as autotune's: its best and why() say what autotune keeps
        from ..evaluate.scoring import with_latency

        evaluation = with_latency(evaluation, table)
    front, best, notes = _score(results, table, metric, budget, model, evaluation)
    return TuneResult(results, metric, budget, best, front, table, notes, evaluation)


def _build_here(plan: list[tuple[str, str, dict[str, Any], str | None, str]], model: Any, folder: Path,
                common: dict[str, Any], steps: Any) -> list[tuple[str, Any, str]]:
    """(name, variant or None, error) per candidate, built one after another in this process."""
    from .remote import step_named

    built: dict[str, Any] = {}
    made = []
    for name, step, kwargs, parent, tag in plan:
        steps.step(f"building {name}")
        try:
            variant = step_named(step)(built.get(parent or "") or model, **kwargs, **common,
                                       out=folder / f"{tag}.onnx", overwrite=True)
        except Exception as exc:  # noqa: BLE001 - a candidate that cannot be built is a row, not a crash
            made.append((name, None, f"{type(exc).__name__}: {str(exc)[:160]}"))
            continue
        built[name] = variant
        made.append((name, variant, ""))
    return made


def _score(results: list[Candidate], table: Any, metric: str, budget: float,
           model: Any, evaluation: Any = None) -> tuple[list[str], Any, list[str]]:
    """Each candidate's p50 (its first timed shape), speed-up over the export, and whether it is within the
    budget (the task's on data given, else the agreement's); the Pareto front; the best: the fastest within the
    budget, else the plain export."""
    first = {}
    for row in table.rows:
        if row.status == "ok" and row.variant not in first:
            first[row.variant] = row.p50_ms
    base_ms = first.get("export (fp32)")
    higher = metric == "cosine"
    for c in results:
        c.p50_ms = first.get(c.name)
        if c.p50_ms and base_ms:
            c.speedup = base_ms / c.p50_ms
        if c.metric is not None:
            c.within_budget = c.metric >= budget if higher else c.metric <= budget
    by_agreement = _fastest([c for c in results if c.within_budget and c.p50_ms is not None])
    notes = list(table.notes)
    if evaluation is not None:
        for c in results:
            row = evaluation.row(c.name)
            c.task = row.value if row is not None else None
            c.within_budget = bool(row is not None and (row.within_budget or row.name == evaluation.baseline))
        higher = evaluation.metric.higher_is_better
    key = "task" if evaluation is not None else "metric"
    pts = [(c.name, c.p50_ms, getattr(c, key)) for c in results if c.p50_ms is not None and getattr(c, key) is not None]
    front = pareto_front([(n, float(lat), float(met)) for n, lat, met in pts], higher)
    chosen = _fastest([c for c in results if c.within_budget and c.p50_ms is not None])
    best = chosen.variant if chosen else model
    if evaluation is not None:
        budget_text = evaluation.metric.budget_text(evaluation.budget)
        notes.append(f"Chosen by {evaluation.metric.name} on {evaluation.data} within {budget_text} of "
                     f"{evaluation.baseline}: {chosen.name if chosen else 'none (the plain export)'}"
                     + ("" if (by_agreement and by_agreement.name) == (chosen and chosen.name) else
                        f"; the {metric} budget {budget:g} alone would keep "
                        f"{by_agreement.name if by_agreement else 'the plain export'}") + ".")
    if chosen is None:
        notes.append("No candidate met the budget; best is the plain export.")
    return front, best, notes


def _fastest(ok: list[Candidate]) -> Candidate | None:
    return min(ok, key=lambda c: c.p50_ms or 0.0) if ok else None
