"""The task metrics :func:`onnx_nb.evaluate` reports, each computed from per-example records with the field's own
libraries where one exists (scikit-learn's accuracy, F1 and top-k accuracy; jiwer's word error rate), and the
bootstrap that gives each value its interval.

A task's records are arrays whose first axis is the example (a window of tokens for perplexity); ``compute`` turns
any subset of them into every metric the task reports, so the interval is the same code as the value: the records
resampled with replacement (:data:`RESAMPLES` times, one seeded draw shared by every candidate, so two candidates'
differences are paired), the 2.5th and 97.5th percentiles of the main metric."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ...results.evaluation import Metric

RESAMPLES = 1000
LEVEL = 0.95


METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("accuracy", True),
    Metric("f1", True),
    Metric("top5", True),
    Metric("recall@1", True),
    Metric("recall@5", True),
    Metric("ndcg@10", True),
    Metric("mrr", True),
    Metric("perplexity", False, unit="", budget=1.0, relative=True),
    Metric("wer", False),
    Metric("entity_f1", True),
    Metric("token_accuracy", True),
    Metric("exact_match", True),
    Metric("squad_f1", True),
    Metric("agreement", True),
)}


@dataclass
class Measured:
    """Every metric the task gives (``values``, the main one first), the main one's interval and its bootstrap
    draws (paired across candidates: the same resampled examples), and each example's own score."""

    values: dict[str, float]
    interval: tuple[float, float] | None
    draws: np.ndarray = field(repr=False)
    per_example: list[float] = field(default_factory=list, repr=False)


Records = dict[str, np.ndarray]


Draws = Callable[[Records, np.ndarray], np.ndarray]


def measure(records: Records, compute: Callable[[Records], dict[str, float]], main: str,
            per_example: Callable[[Records], np.ndarray], seed: int = 0, draws_of: Draws | None = None) -> Measured:
    """The values on every record and the main metric's bootstrap interval over resampled records (``draws_of``:
    the main metric of every resample at once, from a [resamples, n] index matrix; else ``compute`` on each)."""
    values = compute(records)
    n = len(next(iter(records.values())))
    index = np.random.default_rng(seed).integers(0, n, (RESAMPLES, n))
    if n < 2:
        draws = np.zeros(0)
    elif draws_of is not None:
        draws = draws_of(records, index)
    else:
        draws = np.array([compute({k: v[idx] for k, v in records.items()})[main] for idx in index])
    tail = (1 - LEVEL) / 2 * 100
    interval = (float(np.percentile(draws, tail)), float(np.percentile(draws, 100 - tail))) if n > 1 else None
    return Measured(values, interval, draws, [float(v) for v in per_example(records)])


def mean_draws(per_example: Callable[[Records], np.ndarray]) -> Draws:
    """Resampled means of a per-example score (accuracy, recall@1, exact match)."""
    def draws(records: Records, index: np.ndarray) -> np.ndarray:
        return per_example(records)[index].mean(1)
    return draws


def perplexity_draws(records: Records, index: np.ndarray) -> np.ndarray:
    return np.exp(records["nll"][index].sum(1) / np.maximum(records["tokens"][index].sum(1), 1))


def difference_interval(row: Measured, baseline: Measured) -> tuple[float, float] | None:
    """The interval of ``row - baseline`` in the main metric, from their paired draws."""
    if len(row.draws) == 0 or len(row.draws) != len(baseline.draws):
        return None
    diff = row.draws - baseline.draws
    tail = (1 - LEVEL) / 2 * 100
    return float(np.percentile(diff, tail)), float(np.percentile(diff, 100 - tail))


# -- each task's records -> values ------------------------------------------------------------------------------------

def classification(records: Records) -> dict[str, float]:
    """``label`` and ``scores`` (logits) per example: accuracy and macro F1 (scikit-learn), top-5 past 5 classes."""
    from sklearn.metrics import accuracy_score, f1_score, top_k_accuracy_score

    labels, scores = records["label"], records["scores"]
    predicted = scores.argmax(-1)
    out = {"accuracy": 100 * float(accuracy_score(labels, predicted)),
           "f1": 100 * float(f1_score(labels, predicted, average="macro", labels=np.unique(labels),
                                      zero_division=0))}
    if scores.shape[-1] > 5:
        out["top5"] = 100 * float(top_k_accuracy_score(labels, scores, k=5, labels=np.arange(scores.shape[-1])))
    return out


def classification_examples(records: Records) -> np.ndarray:
    return 100.0 * (records["scores"].argmax(-1) == records["label"])


def retrieval(records: Records) -> dict[str, float]:
    """``rank`` per query (0: its own document ranked first among all documents): recall@1 and @5, nDCG@10 and MRR
    with one relevant document per query."""
    rank = records["rank"]
    return {"recall@1": 100 * float(np.mean(rank < 1)), "recall@5": 100 * float(np.mean(rank < 5)),
            "ndcg@10": 100 * float(np.mean(np.where(rank < 10, 1 / np.log2(rank + 2), 0.0))),
            "mrr": 100 * float(np.mean(1 / (rank + 1)))}


def retrieval_examples(records: Records) -> np.ndarray:
    return 100.0 * (records["rank"] < 1)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Log-probabilities over the last axis, in float64, stable for large logits."""
    shifted = np.asarray(logits, np.float64) - np.max(logits, axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def perplexity(records: Records) -> dict[str, float]:
    """``nll`` (summed) and ``tokens`` per window: the exponent of the mean negative log-likelihood per token."""
    return {"perplexity": float(np.exp(records["nll"].sum() / max(records["tokens"].sum(), 1)))}


def perplexity_examples(records: Records) -> np.ndarray:
    return np.exp(records["nll"] / np.maximum(records["tokens"], 1))


def word_errors(references: list[str], hypotheses: list[str]) -> Records:
    """Per utterance, jiwer's errors (substitutions, deletions, insertions) and the reference's words, both texts
    lower-cased, without punctuation and with single spaces (jiwer's transforms): "Hello, world." is "hello world"."""
    import jiwer

    plain = jiwer.Compose([jiwer.ToLowerCase(), jiwer.RemovePunctuation(), jiwer.RemoveMultipleSpaces(),
                           jiwer.Strip()])
    errors, words = [], []
    for ref, hyp in zip(references, hypotheses):
        out = jiwer.process_words(plain(ref) or "-", plain(hyp) or "-")
        errors.append(out.substitutions + out.deletions + out.insertions)
        words.append(out.substitutions + out.deletions + out.hits)
    return {"errors": np.array(errors, float), "words": np.array(words, float)}


def wer(records: Records) -> dict[str, float]:
    """Word error rate over all utterances: their errors summed over their reference words summed (jiwer's)."""
    return {"wer": 100 * float(records["errors"].sum() / max(records["words"].sum(), 1))}


def wer_examples(records: Records) -> np.ndarray:
    return 100 * records["errors"] / np.maximum(records["words"], 1)


def wer_draws(records: Records, index: np.ndarray) -> np.ndarray:
    return 100 * records["errors"][index].sum(1) / np.maximum(records["words"][index].sum(1), 1)


def means(*names: str) -> Callable[[Records], dict[str, float]]:
    """Metrics that are each a mean of a per-example score in [0, 1] (exact match, SQuAD F1, agreement)."""
    def compute(records: Records) -> dict[str, float]:
        return {n: 100 * float(np.mean(records[n])) for n in names}
    return compute


def first_mean(name: str) -> Callable[[Records], np.ndarray]:
    def per(records: Records) -> np.ndarray:
        return 100.0 * records[name]
    return per
