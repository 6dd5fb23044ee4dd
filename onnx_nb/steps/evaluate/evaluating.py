"""``evaluate()``: PyTorch and every given file or variant measured on the task, on the same examples, with the
metric the task calls for; each value with its interval, each file's loss against the baseline judged by a task
budget, the latency and size beside it, and the variant that budget keeps."""

from __future__ import annotations

from typing import Any

from ...errors import OnnxNbError, first_line
from ...progress import Steps
from ...results.evaluation import Evaluation
from ..benchmark.benchmarking import benchmark, openvino_file
from .candidates import Candidate, candidates
from .scoring import scored, with_latency


def evaluate(models: Any, data: Any, metric: str = "auto", *, budget: float | str | None = None,
             pytorch: bool | str = "auto", columns: dict[str, str] | None = None, limit: int | None = None,
             tokenizer: Any = None, processor: Any = None, batch_size: int | None = None, window: int | None = None,
             stride: int | None = None, max_tokens: int | None = None, max_new_tokens: int | None = None,
             latency: bool = True, openvino: bool = False,
             provider: str = "cpu", seed: int = 0, progress: bool = True) -> Evaluation:
    """Measure PyTorch and every file or variant in ``models`` (an ExportResult, a Variant, an .onnx path, or a list
    or dict of them) on ``data`` with the task's metric.

    ``metric="auto"`` follows the export's task: accuracy (and macro F1, top-5) for classification, recall@1 (and
    recall@5, nDCG@10, MRR) for sentence embeddings on (query, document) pairs, CoNLL's entity F1 (and token
    accuracy) for token classification on words with a tag each, perplexity for causal LMs (the texts
    joined, cut after ``max_tokens``, into ``window``-token windows every ``stride`` tokens: each token after the
    first scored once, the same windows for every candidate), exact match (and SQuAD F1) for extractive question
    answering, word error rate for speech to text (jiwer; texts lower-cased, punctuation dropped), for generating
    models the agreement of each prompt's greedy text with PyTorch's (``max_new_tokens``, default 32); or name one
    of them (``sentence2``/``hypothesis`` columns make sentence pairs). ``data``: a list of texts or (input,
    target) pairs, dicts, a dict of columns, ``(X, y)`` arrays, a file (.txt, .jsonl, .json, .csv, .tsv, .npz), a
    folder of images by class, a ``datasets`` split, or a Hugging Face dataset by name (``"stanfordnlp/imdb:test"``);
    ``columns`` names the columns (``{"input": "sentence", "target": "label"}``), ``limit`` keeps that many examples
    (a seeded draw).

    Every value comes with its 95% bootstrap interval over the examples, and every file's difference from the
    baseline (PyTorch, else the first model) with a paired interval. ``budget``: the loss a file may have and still
    be kept: points of the metric (default 1), or, for perplexity, percent of it (default ``"1%"``; a string such as
    ``"0.5%"`` asks a relative budget of any metric). ``latency=True`` times every candidate with
    :func:`onnx_nb.benchmark` (interleaved rounds, PyTorch eager beside them); ``best`` is the fastest file within
    the budget, never one slower than its parent. ``openvino=True`` adds each file run by the OpenVINO runtime
    (``"int8 · OpenVINO"``: its CPU device at its own precision, bf16 where the CPU has it, the notes say which;
    a file with ONNX Runtime's own operators runs as :func:`onnx_nb.benchmark`'s OpenVINO rows run it), measured
    and timed beside the rest (encoders' tasks).

    Example::

        ev = onnx_nb.evaluate([result, int8], data=[("a query", "its document"), ...])
        ev.best, ev.figure()
    """
    ev = scored(models, data, metric, budget=budget, pytorch=pytorch, limit=limit, provider=provider, seed=seed,
                progress=progress, openvino=openvino, substitute=openvino_file,
                settings={"columns": columns, "tokenizer": tokenizer, "processor": processor,
                          "batch_size": batch_size, "window": window, "stride": stride,
                          "max_tokens": max_tokens, "max_new_tokens": max_new_tokens})
    if latency:
        with Steps(1, "evaluate", progress) as steps:
            steps.step("timing every candidate")
            ev = with_latency(ev, _time(candidates(models, pytorch=pytorch, provider=provider), provider, openvino))
    return ev


def _time(rows: list[Candidate], provider: str, openvino: bool = False) -> Any:
    """Every file's latency at the export's sample shape from :func:`onnx_nb.benchmark` (PyTorch eager beside them
    when it ran, the OpenVINO runtime's rows with ``openvino``); the reason when they could not be timed."""
    files = {c.name: c.model for c in rows if not c.is_torch}
    export = next((c.export for c in rows if c.is_torch), None)
    try:
        return benchmark(files, providers=[provider, *(["openvino-runtime"] if openvino else [])], reference=export,
                         progress=False, min_seconds=0.3)
    except (OnnxNbError, RuntimeError, ValueError) as exc:
        return f"Not timed: {type(exc).__name__}: {first_line(exc)}"
