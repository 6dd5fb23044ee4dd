"""An onnx-nb sentence-embedding file as a model of MTEB (the Massive Text Embedding Benchmark), so MTEB's tasks
(retrieval, STS, classification, clustering, reranking: any of its text tasks) score an exported file or a variant with
MTEB's own code: its data loading, its evaluators and its metrics (pytrec_eval for retrieval); onnx-nb only embeds.

``mteb_model(int8)`` satisfies ``mteb.models.EncoderProtocol`` (``encode`` over MTEB's batches, cosine ``similarity``),
``mteb_task(pairs)`` makes a retrieval task of MTEB's from (query, document) pairs of your own (no download), and
``pytorch=True`` gives the reference row from the PyTorch model the file came from."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError
from .candidates import Candidate, candidates
from .data import read
from .tasks import embed_texts


def mteb_model(model: Any, *, pytorch: bool = False, openvino: bool = False, tokenizer: Any = None,
               batch_size: int = 32, prefixes: dict[str, str] | None = None, name: str | None = None,
               provider: str = "cpu") -> Any:
    """An MTEB encoder (``mteb.models.EncoderProtocol``) over a sentence-embedding file or variant (the OpenVINO
    runtime's run of it with ``openvino=True``), or over the PyTorch model it was exported from (``pytorch=True``);
    ``pip install mteb``.

    Embeddings are the file's own sentence embedding when it gives one, else its token outputs mean-pooled over the
    attention mask (sentence-transformers' default), L2-normalised; ``similarity`` is their cosine. ``prefixes``
    puts text before queries and documents for models trained with them (``{"query": "query: ", "document":
    "passage: "}``).

    Example::

        import mteb
        tasks = mteb.get_tasks(tasks=["SciFact"])                    # or onnx_nb.mteb_task(pairs) offline
        results = mteb.evaluate(onnx_nb.mteb_model(int8), tasks, cache=None)
        results.task_results[0].get_score()
    """
    try:
        from mteb.models.model_meta import ModelMeta, ScoringFunction
    except ImportError as exc:
        raise InvalidArgumentError("mteb_model() needs MTEB: pip install mteb") from exc
    from ..benchmark.benchmarking import openvino_file

    if isinstance(model, (list, tuple, dict)):
        raise InvalidArgumentError("mteb_model() makes one encoder: pass one file, variant or export (one call each).")
    if pytorch and openvino:
        raise InvalidArgumentError("mteb_model(pytorch=True, openvino=True): the PyTorch model runs in PyTorch; "
                                   "choose one.")
    rows = candidates(model, pytorch=pytorch, provider=provider, openvino=openvino, substitute=openvino_file)
    row = rows[0] if pytorch or not openvino else rows[-1]
    settings = {"tokenizer": tokenizer, "batch_size": batch_size}
    label = name or f"onnx-nb/{re.sub(r'[^A-Za-z0-9._-]+', '-', row.name).strip('-') or 'model'}"
    meta = ModelMeta.create_empty(overwrites={"name": label, "revision": "local", "modalities": ["text"],
                                              "similarity_fn_name": ScoringFunction.COSINE})
    return MtebEncoder(row, settings, meta, dict(prefixes or {}))


class MtebEncoder:
    """MTEB's view of one onnx-nb candidate (see :func:`mteb_model`): texts in, normalised embeddings out."""

    def __init__(self, candidate: Candidate, settings: dict[str, Any], meta: Any, prefixes: dict[str, str]) -> None:
        self.candidate, self.settings, self.meta, self.prefixes = candidate, settings, meta, prefixes

    @property
    def mteb_model_meta(self) -> Any:
        return self.meta

    def encode(self, inputs: Any, *, task_metadata: Any = None, hf_split: str = "", hf_subset: str = "",
               prompt_type: Any = None, **kwargs: Any) -> np.ndarray:
        """The embeddings of every text in MTEB's batches (a document's ``text`` is its title and body joined)."""
        texts = [str(t) for batch in inputs for t in batch["text"]]
        prefix = self.prefixes.get(getattr(prompt_type, "value", "") or "", "")
        return embed_texts(self.candidate, [prefix + t for t in texts], self.settings).astype(np.float32)

    def similarity(self, a: Any, b: Any) -> np.ndarray:
        """Every pair's cosine: ``[len(a), len(b)]``."""
        x, y = _unit(a), _unit(b)
        return x @ y.T

    def similarity_pairwise(self, a: Any, b: Any) -> np.ndarray:
        """Each row's cosine with its counterpart: ``[len(a)]``."""
        return (_unit(a) * _unit(b)).sum(-1)

    def __repr__(self) -> str:
        return f"MtebEncoder({self.candidate.name!r}, {self.meta.name!r})"


def _unit(x: Any) -> np.ndarray:
    v = np.atleast_2d(np.asarray(x, dtype=np.float32))
    return v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12)


def mteb_task(data: Any, *, name: str = "OnnxNbRetrieval", columns: dict[str, str] | None = None,
              limit: int | None = None, seed: int = 0) -> Any:
    """An MTEB retrieval task (``AbsTaskRetrieval``, main score nDCG@10) from (query, document) pairs in any form
    :func:`onnx_nb.evaluate` reads, each query's own document the relevant one, every document the corpus; no
    download; MTEB's code then scores a file on them.

    Example::

        import mteb
        task = onnx_nb.mteb_task([("a query", "its document"), ...], name="MyDocs")
        mteb.evaluate(onnx_nb.mteb_model(int8), task, cache=None).task_results[0].get_score()
    """
    try:
        from mteb.abstasks.retrieval import AbsTaskRetrieval
        from mteb.abstasks.task_metadata import TaskMetadata
    except ImportError as exc:
        raise InvalidArgumentError("mteb_task() needs MTEB: pip install mteb") from exc
    examples = read(data, limit=limit, seed=seed)
    query_col = examples.column("query", columns)
    queries = [str(q) for q in examples.values("query", columns)]
    documents = [str(d) for d in examples.values("document", columns, avoid=(query_col or "",))]
    corpus = list(dict.fromkeys(documents))
    where = {d: i for i, d in enumerate(corpus)}
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise InvalidArgumentError(f"mteb_task(name={name!r}): letters, digits, '.', '_' and '-' only.")
    metadata = TaskMetadata(name=name, type="Retrieval", main_score="ndcg_at_10", category="t2t",
                            modalities=["text"], eval_langs=["eng-Latn"], eval_splits=["test"],
                            dataset={"path": f"local/{name}", "revision": "local"},
                            description=f"{len(queries)} queries from {examples.origin}, made by onnx_nb.mteb_task")

    def load_data(self: Any, num_proc: int | None = None, **kwargs: Any) -> None:
        """The pairs as MTEB's retrieval split (loaded again whenever MTEB has let it go)."""
        from datasets import Dataset

        if self.data_loaded:
            return
        self.dataset = {"default": {"test": {
            "corpus": Dataset.from_list([{"id": f"d{i}", "title": "", "text": d} for i, d in enumerate(corpus)]),
            "queries": Dataset.from_list([{"id": f"q{i}", "text": q} for i, q in enumerate(queries)]),
            "relevant_docs": {f"q{i}": {f"d{where[d]}": 1} for i, d in enumerate(documents)},
            "top_ranked": None}}}
        self.data_loaded = True

    task = type(name, (AbsTaskRetrieval,), {"metadata": metadata, "load_data": load_data})
    return task()
