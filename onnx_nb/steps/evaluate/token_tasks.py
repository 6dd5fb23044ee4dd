"""Token classification (named entities, part of speech) for :func:`onnx_nb.evaluate`: words with one tag each
(CoNLL's layout: ``tokens`` and ``ner_tags``), each word's tag read from its first sub-token, as transformers'
token-classification examples do.

Entity F1 is CoNLL's (conlleval, and seqeval's default): entities are runs of ``B-``/``I-`` tags of one type (an
``I-`` after another type or ``O`` starts one; ``E-``/``S-`` close one; a tag with no prefix is an entity of its own
type), a predicted entity counts when its type and both ends match. Per example, its true positives, predicted and
gold entities and its right words are kept, so the intervals resample examples, not words."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import DataError
from . import metrics
from .candidates import Candidate
from .data import Examples
from .tasks import BATCH, Prepared, Task, named_inputs, shown_line, tokenizer_of


def entities(tags: list[str]) -> set[tuple[str, int, int]]:
    """(type, first word, past the last word) of each entity in a sequence of tags."""
    found: set[tuple[str, int, int]] = set()
    start, kind = None, ""
    for i, tag in enumerate([*tags, "O"]):
        prefix, typ = tag.split("-", 1) if "-" in tag and tag[1:2] == "-" else ("O" if tag == "O" else "I", tag)
        if start is not None and (prefix in ("O", "B", "S") or typ != kind):
            found.add((kind, start, i))
            start = None
        if prefix in ("B", "S") or (prefix in ("I", "E") and start is None):
            start, kind = i, typ
        if prefix in ("E", "S") and start is not None:
            found.add((kind, start, i + 1))
            start = None
    return found


def _names(candidate: Candidate, tags: list[list[Any]]) -> dict[int, str]:
    config = getattr(getattr(candidate.source, "model", None), "config", None)
    given = {int(k): str(v) for k, v in (getattr(config, "id2label", None) or {}).items()}
    if any(isinstance(t, str) for row in tags for t in row):
        return given  # the tags are names already
    return given or {i: str(i) for i in {int(t) for row in tags for t in row}}


def prepare_tokens(examples: Examples, candidate: Candidate, settings: dict[str, Any]) -> Prepared:
    columns = settings.get("columns")
    words = examples.values("tokens", columns)
    taken = examples.column("tokens", columns) or ""
    tags = examples.values("target", columns, avoid=(taken,))
    if not all(isinstance(w, (list, tuple)) and isinstance(t, (list, tuple)) and len(w) == len(t)
               for w, t in zip(words, tags)):
        raise DataError("Token classification takes each example's words and one tag per word (CoNLL's 'tokens' and "
                        "'ner_tags'): give lists of equal length.")
    names = _names(candidate, tags)
    by_name = {v: k for k, v in names.items()}
    gold = [[str(t) if isinstance(t, str) else names.get(int(t), str(t)) for t in row] for row in tags]
    if any(isinstance(t, str) and t not in by_name for row in tags for t in row) and by_name:
        raise DataError(f"A tag is not one of the model's labels ({', '.join(list(by_name)[:8])}).")
    tok = tokenizer_of(candidate, settings)
    inputs = candidate.input_names()
    size = settings.get("batch_size") or BATCH
    batches = []
    for i in range(0, len(words), size):
        group = [list(map(str, w)) for w in words[i:i + size]]
        enc = tok(group, is_split_into_words=True, truncation=True, padding=True,
                  max_length=settings.get("max_length") or 512, return_tensors="np")
        batches.append((named_inputs(dict(enc), inputs), [enc.word_ids(r) for r in range(len(group))]))
    return Prepared(batches, gold, {**settings, "names": names}, [shown_line(" ".join(map(str, w))) for w in words])


def score_tokens(candidate: Candidate, prepared: Prepared) -> metrics.Records:
    names = prepared.settings["names"]
    tp, predicted, gold_count, right, counted = [], [], [], [], []
    row = 0
    for feed, word_ids in prepared.batches:
        out = candidate.run(feed)
        logits = out.get("logits", next(iter(out.values())))
        for r, ids in enumerate(word_ids):
            gold = prepared.targets[row]
            said = ["O"] * len(gold)  # words cut off by truncation are predicted O
            seen: set[int] = set()
            for position, word in enumerate(ids):
                if word is not None and word not in seen:  # the word's first sub-token
                    seen.add(word)
                    said[word] = names.get(int(np.argmax(logits[r, position])), "O")
            found, want = entities(said), entities(gold)
            tp.append(len(found & want))
            predicted.append(len(found))
            gold_count.append(len(want))
            right.append(sum(a == b for a, b in zip(said, gold)))
            counted.append(len(gold))
            row += 1
    return {k: np.array(v, float) for k, v in (("tp", tp), ("predicted", predicted), ("gold", gold_count),
                                                ("right", right), ("words", counted))}


def entity_f1(records: metrics.Records) -> dict[str, float]:
    both = records["predicted"].sum() + records["gold"].sum()
    return {"entity_f1": 100 * float(2 * records["tp"].sum() / both) if both else 0.0,
            "token_accuracy": 100 * float(records["right"].sum() / max(records["words"].sum(), 1))}


def entity_f1_examples(records: metrics.Records) -> np.ndarray:
    both = records["predicted"] + records["gold"]
    return np.where(both > 0, 200 * records["tp"] / np.maximum(both, 1), 100.0)


def entity_f1_draws(records: metrics.Records, index: np.ndarray) -> np.ndarray:
    both = records["predicted"][index].sum(1) + records["gold"][index].sum(1)
    return np.where(both > 0, 200 * records["tp"][index].sum(1) / np.maximum(both, 1), 0.0)


TASKS = (Task("token-classification", "entity_f1", entity_f1, entity_f1_examples, prepare_tokens, score_tokens,
              entity_f1_draws),)
