"""Choosing and accepting tokens, shared by the decoder-only and the encoder-decoder generation loops: greedy or
sampled picks (temperature, top-k, top-p) and end-of-sequence bookkeeping."""

from __future__ import annotations

from typing import Any

import numpy as np


def pick(logits: np.ndarray, do_sample: bool, temperature: float, top_k: int, top_p: float,
          rng: np.random.Generator) -> np.ndarray:
    if not do_sample:
        return np.argmax(logits, axis=-1)
    scores = logits.astype(np.float64) / max(temperature, 1e-6)
    if top_k:
        kth = np.sort(scores, axis=-1)[:, -min(top_k, scores.shape[-1])][:, None]
        scores = np.where(scores < kth, -np.inf, scores)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    if top_p < 1.0:
        order = np.argsort(-probs, axis=-1)
        sorted_p = np.take_along_axis(probs, order, -1)
        keep = np.cumsum(sorted_p, -1) - sorted_p < top_p
        mask = np.zeros_like(probs, dtype=bool)
        np.put_along_axis(mask, order, keep, -1)
        probs = np.where(mask, probs, 0.0)
        probs /= probs.sum(-1, keepdims=True)
    return np.array([rng.choice(probs.shape[-1], p=row) for row in probs])




def accept(chosen: np.ndarray, done: list[bool], new: list[list[int]], eos: set[int], stream: Any) -> bool:
    """Append each unfinished row's token (rows stop at EOS, which is kept), stream the step; True when every
    row is done. Python ints and lists: this runs between two decode steps, where every numpy call is slow."""
    tokens = chosen.tolist()
    for row, token in enumerate(tokens):
        if not done[row]:
            new[row].append(token)
            done[row] = token in eos
    if stream is not None:
        stream(tokens)
    return all(done)


def next_ids(chosen: np.ndarray, done: list[bool], pad: int) -> np.ndarray:
    """The next step's ``[batch, 1]`` ids: each row's pick, ``pad`` for the rows that are done."""
    if any(done):
        chosen = np.where(done, pad, chosen)
    return chosen[:, None].astype(np.int64, copy=False)
