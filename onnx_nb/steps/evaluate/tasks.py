"""Each task :func:`onnx_nb.evaluate` knows: how the examples become inputs (once, shared by every candidate), how a
candidate's outputs become records (:mod:`.metrics`), and which metric is its main one.

- ``classification`` (texts, images, arrays with labels): accuracy, macro F1, top-5;
- ``retrieval`` (query and document pairs, each query's own document among all of them; sentence embeddings):
  recall@1 and @5, nDCG@10, MRR;
- ``perplexity`` (causal LMs): the texts joined, cut into windows of ``window`` tokens every ``stride``, each token
  scored once, the same windows for every candidate;
- ``question-answering`` (question, context, answers; extractive): SQuAD's exact match and F1.

The generating tasks (speech to text, agreement of generated text) are in :mod:`.generation_tasks`; the table of
every task, :mod:`.catalog`."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import DataError
from . import metrics
from .candidates import Candidate
from .data import Examples

BATCH = 16
WINDOW = 256
MAX_ANSWER_TOKENS = 30


@dataclass
class Prepared:
    """The examples made into inputs once: ``batches`` (feeds, or token windows), and what the records compare with."""

    batches: list[Any]
    targets: Any
    settings: dict[str, Any] = field(default_factory=dict)
    shown: list[str] = field(default_factory=list)  # one line per example, kept with the result
    measured_on: str = ""  # what the metric counts over, when not the examples (perplexity's tokens)


@dataclass(frozen=True)
class Task:
    name: str
    main: str
    compute: Callable[[metrics.Records], dict[str, float]]
    per_example: Callable[[metrics.Records], np.ndarray]
    prepare: Callable[[Examples, Candidate, dict[str, Any]], Prepared]
    score: Callable[[Candidate, Prepared], metrics.Records]
    draws: metrics.Draws  # the main metric over every resample at once

    def draws_for(self, metric: str) -> metrics.Draws | None:
        return self.draws if metric == self.main else None


# -- shared: texts, arrays and images into feeds --------------------------------------------------------------------

def tokenizer_of(candidate: Candidate, settings: dict[str, Any]) -> Any:
    tok = settings.get("tokenizer") or getattr(candidate.source, "preprocessor", None)
    if tok is None or not callable(tok):
        raise DataError("These examples are text, and the model carries no tokenizer: pass tokenizer= (the model's "
                        "own, e.g. transformers.AutoTokenizer.from_pretrained(folder)).")
    return getattr(tok, "tokenizer", tok)


def _feeds(inputs: list[Any], candidate: Candidate, settings: dict[str, Any]) -> tuple[list[dict[str, np.ndarray]],
                                                                                    list[list[int]]]:
    """Batches of named inputs and the examples each holds: texts tokenized (sorted by length, so a batch pads
    little), images through the model's processor, arrays stacked as the file's one input."""
    names = candidate.input_names()
    size = settings.get("batch_size") or BATCH
    paired = all(isinstance(i, tuple) and len(i) == 2 and all(isinstance(t, str) for t in i) for i in inputs)
    if paired or (all(isinstance(i, str) for i in inputs) and not all(_is_image_path(i) for i in inputs)):
        tok = tokenizer_of(candidate, settings)
        order = sorted(range(len(inputs)), key=lambda i: len(str(inputs[i])))
        groups = [order[i:i + size] for i in range(0, len(order), size)]
        feeds = []
        for g in groups:  # a sentence pair (premise, hypothesis) as the tokenizer joins them
            texts = [[inputs[i][0] for i in g], [inputs[i][1] for i in g]] if paired else [[inputs[i] for i in g]]
            enc = tok(*texts, padding=True, truncation=True, max_length=settings.get("max_length") or 512,
                      return_tensors="np")
            feeds.append(named_inputs(dict(enc), names))
        return feeds, groups
    groups = [list(range(i, min(i + size, len(inputs)))) for i in range(0, len(inputs), size)]
    processor = settings.get("processor") or getattr(candidate.source, "preprocessor", None)
    extractor: Any = getattr(processor, "feature_extractor", processor)
    if hasattr(extractor, "sampling_rate") and all(_is_audio(i) for i in inputs):  # audio classification
        rate = int(extractor.sampling_rate)
        return [named_inputs(dict(extractor([_waveform(inputs[i], rate) for i in g], sampling_rate=rate,
                                            padding=True, return_tensors="np")), names) for g in groups], groups
    if all(isinstance(i, (np.ndarray, list, tuple)) for i in inputs):
        if len(names) != 1:
            raise DataError(f"The examples are arrays and the model takes {len(names)} inputs ({', '.join(names)}): "
                            "give each example as a dict of them.")
        return [{names[0]: np.stack([np.asarray(inputs[i], np.float32) for i in g])} for g in groups], groups
    if processor is None:
        raise DataError("These examples are images, and the model carries no image processor: pass processor= "
                        "(transformers.AutoImageProcessor.from_pretrained(folder)), or arrays already made.")
    feeds = [named_inputs(dict(processor(images=[_image(inputs[i]) for i in g], return_tensors="np")), names)
             for g in groups]
    return feeds, groups


def _is_audio(value: Any) -> bool:
    """A clip: ``{"array": ..., "sampling_rate": ...}`` as datasets give it, or a 1-D waveform."""
    return (isinstance(value, dict) and "array" in value) or (isinstance(value, np.ndarray) and value.ndim == 1)


def _waveform(value: Any, rate: int) -> np.ndarray:
    if isinstance(value, dict) and value.get("sampling_rate", rate) != rate:
        raise DataError(f"A clip is sampled at {value['sampling_rate']} Hz; the model's feature extractor takes {rate} "
                        "Hz: resample it first (datasets' cast_column('audio', Audio(sampling_rate=...))).")
    return np.asarray(value["array"] if isinstance(value, dict) else value, np.float32)


def _is_image_path(value: str) -> bool:
    from .data import IMAGE_SUFFIXES

    return value.lower().endswith(IMAGE_SUFFIXES)


def _image(value: Any) -> Any:
    from PIL import Image

    if isinstance(value, (str, bytes)) or hasattr(value, "__fspath__"):
        with Image.open(value) as img:
            return img.convert("RGB")
    return value


def named_inputs(enc: dict[str, Any], names: list[str]) -> dict[str, np.ndarray]:
    """The tokenizer's arrays under the file's names, as int64; a token-type input it did not give as zeros."""
    out = {k: np.asarray(v) for k, v in enc.items() if k in names}
    for k, v in out.items():
        if np.issubdtype(v.dtype, np.integer):
            out[k] = v.astype(np.int64)
    missing = [n for n in names if n not in out]
    if missing == ["token_type_ids"] and "input_ids" in out:
        out["token_type_ids"] = np.zeros_like(out["input_ids"])
    elif missing:
        raise DataError(f"The model takes {', '.join(missing)}, which the examples' processor does not give "
                        f"(it gives {', '.join(enc)}).")
    return out


def _scatter(groups: list[list[int]], parts: list[np.ndarray]) -> np.ndarray:
    """Per-batch rows back into the examples' order."""
    n = sum(len(g) for g in groups)
    out = np.empty((n, *parts[0].shape[1:]), parts[0].dtype)
    for g, p in zip(groups, parts):
        out[g] = p
    return out


def _output(outputs: dict[str, np.ndarray], wanted: tuple[str, ...]) -> np.ndarray:
    """The output named first in ``wanted``, else the first with a float score per class (a scikit-learn file's
    ``probabilities``, not its ``label``), else the first."""
    for name in wanted:
        if name in outputs:
            return outputs[name]
    floats = [v for v in outputs.values() if np.issubdtype(np.asarray(v).dtype, np.floating) and np.ndim(v) >= 2]
    return floats[0] if floats else next(iter(outputs.values()))


def shown_line(value: Any) -> str:
    text = value if isinstance(value, str) else f"{type(value).__name__} {getattr(value, 'shape', '')}".strip()
    return text[:120]


# -- classification ---------------------------------------------------------------------------------------------------

def prepare_classification(examples: Examples, candidate: Candidate, settings: dict[str, Any]) -> Prepared:
    columns = settings.get("columns")
    inputs = examples.values("input", columns)
    taken = examples.column("input", columns) or ""
    pair = examples.column("pair", columns, required=False, avoid=(taken,))
    if pair is not None:  # sentence pairs (MRPC, MNLI): both sentences, as the tokenizer joins them
        inputs = [(a, b) for a, b in zip(inputs, examples.values("pair", columns, avoid=(taken,)))]
    targets = examples.values("target", columns, avoid=(taken, pair or ""))
    labels = _label_ids(targets, candidate)
    feeds, groups = _feeds(inputs, candidate, settings)
    return Prepared(list(zip(feeds, groups)), labels, dict(settings), [shown_line(i) for i in inputs])


def _label_ids(targets: list[Any], candidate: Candidate) -> np.ndarray:
    """Labels as class indices: ints as given, numerals read, names through the config's ``label2id``."""
    out = []
    config = getattr(getattr(candidate.source, "model", None), "config", None)
    names = {str(k).lower(): int(v) for k, v in (getattr(config, "label2id", None) or {}).items()}
    for t in targets:
        if isinstance(t, (int, np.integer)):
            out.append(int(t))
        elif isinstance(t, str) and t.strip().lstrip("-").isdigit():
            out.append(int(t))
        elif isinstance(t, str) and t.lower() in names:
            out.append(names[t.lower()])
        else:
            raise DataError(f"The label {t!r} is not a class index and not one of the model's label names "
                            f"({', '.join(list(names)[:8]) or 'none in its config'}).")
    return np.array(out)


def score_classification(candidate: Candidate, prepared: Prepared) -> metrics.Records:
    parts = [_output(candidate.run(feed), ("logits", "probabilities", "scores", "output"))
             for feed, _ in prepared.batches]
    scores = _scatter([g for _, g in prepared.batches], parts).reshape(len(prepared.targets), -1)
    if scores.shape[-1] == 1:  # one sigmoid or logit per example: class 1 above 0.5 (a probability) or 0 (a logit)
        edge = 0.5 if scores.min() >= 0 and scores.max() <= 1 else 0.0
        scores = np.concatenate([np.full_like(scores, edge), scores], -1)
    outside = [int(t) for t in prepared.targets if t < 0 or t >= scores.shape[-1]]
    if outside:
        raise DataError(f"A label ({outside[0]}) is outside the model's {scores.shape[-1]} classes (a test split "
                        "without labels marks them -1: evaluate on a split that has them).")
    return {"label": prepared.targets, "scores": scores.astype(np.float64)}


# -- retrieval --------------------------------------------------------------------------------------------------------

def prepare_retrieval(examples: Examples, candidate: Candidate, settings: dict[str, Any]) -> Prepared:
    columns = settings.get("columns")
    query_col = examples.column("query", columns)
    queries = examples.values("query", columns)
    documents = examples.values("document", columns, avoid=(query_col or "",))
    corpus = list(dict.fromkeys(documents))
    truth = np.array([corpus.index(d) for d in documents])
    q_feeds, q_groups = _feeds(queries, candidate, settings)
    d_feeds, d_groups = _feeds(corpus, candidate, settings)
    return Prepared([(q_feeds, q_groups), (d_feeds, d_groups)], truth, dict(settings),
                    [shown_line(q) for q in queries])


def _embed(candidate: Candidate, feeds: list[dict[str, np.ndarray]], groups: list[list[int]]) -> np.ndarray:
    """Sentence embeddings: an output made as one (``*embedding*``, 2-D), else the first token-level output
    mean-pooled over the attention mask (sentence-transformers' default); L2-normalised."""
    parts = []
    for feed in feeds:
        outputs = candidate.run(feed)
        pooled = next((v for k, v in outputs.items() if "embedding" in k.lower() and v.ndim == 2), None)
        if pooled is None:
            tokens = next((v for v in outputs.values() if v.ndim == 3), None)
            if tokens is None:
                pooled = next(iter(outputs.values())).reshape(len(next(iter(feed.values()))), -1)
            else:
                mask = feed.get("attention_mask", np.ones(tokens.shape[:2]))[..., None].astype(np.float64)
                pooled = (tokens * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)
        parts.append(np.asarray(pooled, np.float64))
    out = _scatter(groups, parts)
    return out / np.maximum(np.linalg.norm(out, axis=-1, keepdims=True), 1e-12)


def embed_texts(candidate: Candidate, texts: list[str], settings: dict[str, Any]) -> np.ndarray:
    """The candidate's L2-normalised sentence embeddings of ``texts``, in their order (batched as retrieval is)."""
    feeds, groups = _feeds(texts, candidate, settings)
    return _embed(candidate, feeds, groups)


def score_retrieval(candidate: Candidate, prepared: Prepared) -> metrics.Records:
    (q_feeds, q_groups), (d_feeds, d_groups) = prepared.batches
    sims = _embed(candidate, q_feeds, q_groups) @ _embed(candidate, d_feeds, d_groups).T
    own = sims[np.arange(len(sims)), prepared.targets]
    # ties count against the model (identical or NaN embeddings rank last, not first)
    rank = (sims >= own[:, None]).sum(-1) - 1
    return {"rank": np.where(np.isfinite(own), rank, sims.shape[1] - 1)}


# -- perplexity -------------------------------------------------------------------------------------------------------

def prepare_perplexity(examples: Examples, candidate: Candidate, settings: dict[str, Any]) -> Prepared:
    texts = examples.values("input", settings.get("columns"))
    if not all(isinstance(t, str) for t in texts):
        raise DataError("Perplexity is measured on text: give texts (a list, a .txt file, a text column).")
    tok = tokenizer_of(candidate, settings)
    ids = np.asarray(tok("\n\n".join(texts))["input_ids"], np.int64)
    if settings.get("max_tokens"):
        ids = ids[:settings["max_tokens"]]
    window = settings.get("window") or WINDOW
    stride = settings.get("stride") or window
    if not 0 < stride <= window:
        raise DataError(f"stride={stride}: give 0 < stride <= window ({window}).")
    if len(ids) < 2:
        raise DataError("The text is shorter than two tokens: nothing to predict.")
    windows, begin, last = [], 0, 1  # the text's first token has nothing before it
    while True:
        end = min(begin + window, len(ids))
        windows.append((begin, end, last - begin))  # the window's tokens from `last` on: each scored once
        if end == len(ids):
            break
        last = end
        # the next window keeps window - stride tokens of context and the last one scored (the first it predicts
        # from), so no token goes unscored at a window's start
        begin = max(begin + 1, end - (window - stride) - 1)
    size = settings.get("batch_size") or 4
    same: dict[int, list[tuple[int, int, int]]] = {}
    for w in windows:
        same.setdefault(w[1] - w[0], []).append(w)
    batches = [group[i:i + size] for group in same.values() for i in range(0, len(group), size)]
    counted = f"{len(ids):,} tokens in {len(windows)} windows of {window} every {stride}"
    return Prepared(batches, ids, {**settings, "window": window, "stride": stride, "tokens": len(ids)},
                    [f"window {i}: tokens {b} to {e}" for i, (b, e, _) in enumerate(windows)], counted)


def score_perplexity(candidate: Candidate, prepared: Prepared) -> metrics.Records:
    ids = prepared.targets
    nll, tokens = [], []
    for batch in prepared.batches:
        rows = np.stack([ids[b:e] for b, e, _ in batch])
        logp = metrics.log_softmax(candidate.logits(rows, np.ones_like(rows)))
        for row, (b, e, first) in enumerate(batch):
            picked = logp[row, first - 1:e - b - 1, :][np.arange(e - b - first), rows[row, first:]]
            nll.append(-picked.sum())
            tokens.append(e - b - first)
    return {"nll": np.array(nll), "tokens": np.array(tokens, float)}


# -- extractive question answering ------------------------------------------------------------------------------------

def prepare_qa(examples: Examples, candidate: Candidate, settings: dict[str, Any]) -> Prepared:
    columns = settings.get("columns")
    questions = examples.values("question", columns)
    contexts = examples.values("context", columns)
    answers = [_answers(a) for a in examples.values("target", columns, avoid=("question", "context"))]
    tok = tokenizer_of(candidate, settings)
    names = candidate.input_names()
    size = settings.get("batch_size") or BATCH
    batches = []
    for i in range(0, len(questions), size):
        enc = tok(questions[i:i + size], contexts[i:i + size], truncation="only_second", padding=True,
                  max_length=settings.get("max_length") or 384, return_offsets_mapping=True, return_tensors="np")
        spans = [(enc["offset_mapping"][r], np.array([s == 1 for s in enc.sequence_ids(r)]))
                 for r in range(len(enc["input_ids"]))]
        batches.append((named_inputs({k: v for k, v in enc.items() if k != "offset_mapping"}, names), spans,
                        contexts[i:i + size]))
    return Prepared(batches, answers, dict(settings), [shown_line(q) for q in questions])


def _answers(value: Any) -> list[str]:
    if isinstance(value, dict):  # SQuAD's {"text": [...], "answer_start": [...]}
        value = value.get("text", [])
    return [value] if isinstance(value, str) else [str(v) for v in value]


def _normalize(text: str) -> str:
    """SQuAD's answer normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def _f1(prediction: str, truth: str) -> float:
    pred, gold = _normalize(prediction).split(), _normalize(truth).split()
    common = sum((Counter(pred) & Counter(gold)).values())
    if not pred or not gold:
        return float(pred == gold)
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def score_qa(candidate: Candidate, prepared: Prepared) -> metrics.Records:
    predictions = []
    for feed, spans, contexts in prepared.batches:
        out = candidate.run(feed)
        starts, ends = out.get("start_logits"), out.get("end_logits")
        if starts is None or ends is None:
            starts, ends = list(out.values())[:2]
        for r, (offsets, in_context) in enumerate(spans):
            s = np.where(in_context, starts[r], -np.inf)
            e = np.where(in_context, ends[r], -np.inf)
            pair = s[:, None] + e[None, :]
            length = np.arange(len(s))[None, :] - np.arange(len(s))[:, None]
            pair[(length < 0) | (length >= MAX_ANSWER_TOKENS)] = -np.inf
            i, j = np.unravel_index(int(np.argmax(pair)), pair.shape)
            predictions.append(contexts[r][offsets[i][0]:offsets[j][1]] if np.isfinite(pair[i, j]) else "")
    em = [max(float(_normalize(p) == _normalize(t)) for t in truths) if truths else 0.0
          for p, truths in zip(predictions, prepared.targets)]
    f1 = [max(_f1(p, t) for t in truths) if truths else 0.0 for p, truths in zip(predictions, prepared.targets)]
    return {"exact_match": np.array(em), "squad_f1": np.array(f1)}
