"""The tasks :func:`onnx_nb.evaluate` measures on generated text, each candidate generating greedily from the same
inputs:

- ``speech`` (audio with its transcript; a speech-to-text model): word error rate (jiwer), each clip's features from
  the model's processor (or given as ``{"input_features": ...}``);
- ``generation`` (prompts: texts or a processor's output; an encoder-decoder, a vision-language model, a causal LM
  asked for it): the share of prompts whose text equals the baseline's (PyTorch's, else the first model's): the
  fallback where the task has no metric of its own, or no references."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import DataError
from . import metrics
from .candidates import Candidate
from .data import Examples
from .tasks import Prepared, Task, shown_line, tokenizer_of

MAX_NEW_TOKENS = 32
SAMPLING_RATE = 16_000


def _inputs(values: list[Any], candidate: Candidate, settings: dict[str, Any]) -> list[Any]:
    """What generate() takes per example: a text as it is, a dict of arrays as it is, audio through the processor's
    feature extractor (``{"array": ..., "sampling_rate": ...}`` as datasets give it, or a bare array at 16 kHz)."""
    out = []
    processor = settings.get("processor") or getattr(candidate.source, "preprocessor", None)
    for v in values:
        if isinstance(v, (str, dict)) and not (isinstance(v, dict) and "array" in v):
            out.append(v)
            continue
        audio, rate = (v["array"], v.get("sampling_rate", SAMPLING_RATE)) if isinstance(v, dict) else \
            (v, SAMPLING_RATE)
        extractor = getattr(processor, "feature_extractor", processor)
        if extractor is None:
            raise DataError("These examples are audio, and the model carries no processor: pass processor= "
                            "(transformers.AutoProcessor.from_pretrained(folder)), or give each example's features "
                            "as {'input_features': array}.")
        out.append(dict(extractor(np.asarray(audio, np.float32), sampling_rate=rate, return_tensors="np")))
    return out


def _prepare(examples: Examples, candidate: Candidate, settings: dict[str, Any], with_targets: bool) -> Prepared:
    columns = settings.get("columns")
    role = "audio" if with_targets and examples.column("audio", columns, required=False) else "input"
    values = examples.values(role, columns)  # a clip before a text column: its transcript is the target
    taken = examples.column(role, columns) or ""
    targets = examples.values("target", columns, avoid=(taken,), required=with_targets)
    if with_targets and not all(isinstance(t, str) for t in targets):
        raise DataError("Word error rate compares text: give each clip's transcript as a string.")
    tok = tokenizer_of(candidate, settings)
    return Prepared(_inputs(values, candidate, settings), targets, {**settings, "tokenizer": tok},
                    [shown_line(v) for v in values])


def _texts(candidate: Candidate, prepared: Prepared) -> list[str]:
    return candidate.texts(prepared.batches, prepared.settings["tokenizer"],
                           prepared.settings.get("max_new_tokens") or MAX_NEW_TOKENS)


def prepare_speech(examples: Examples, candidate: Candidate, settings: dict[str, Any]) -> Prepared:
    return _prepare(examples, candidate, settings, True)


def score_speech(candidate: Candidate, prepared: Prepared) -> metrics.Records:
    return metrics.word_errors(list(prepared.targets), _texts(candidate, prepared))


def prepare_generation(examples: Examples, candidate: Candidate, settings: dict[str, Any]) -> Prepared:
    return _prepare(examples, candidate, settings, False)


def score_generation(candidate: Candidate, prepared: Prepared) -> metrics.Records:
    """1 where the candidate's text equals the baseline's: the first candidate scored (PyTorch when measured) sets
    the texts the others are compared with."""
    texts = _texts(candidate, prepared)
    reference = prepared.settings.setdefault("reference_texts", texts)
    return {"agreement": np.array([float(" ".join(a.split()) == " ".join(b.split()))
                                   for a, b in zip(texts, reference)])}


TASKS = (
    Task("speech", "wer", metrics.wer, metrics.wer_examples, prepare_speech, score_speech, metrics.wer_draws),
    Task("generation", "agreement", metrics.means("agreement"), metrics.first_mean("agreement"), prepare_generation,
         score_generation, metrics.mean_draws(metrics.first_mean("agreement"))),
)
