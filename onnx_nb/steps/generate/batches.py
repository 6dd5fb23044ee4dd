"""Prompts of different lengths through one decoder loop, each prompt getting the tokens it gets alone.

Left padding is how a batch of prompts usually runs (the mask hides the padding, positions count the mask). Some
models do not follow the mask there: Blenderbot, Marian, Pegasus and BigBird-Pegasus as causal LMs take their
positions from the past length, so a left-padded row is shifted; a recurrent state (RWKV, Mamba) reads the padding.
Which kind a file is, the file says: its logits for the shortest prompt, alone and left-padded beside the longest,
are compared once per runner (:func:`pads_safely`). A file that changes them runs one batch per prompt length, the
batches in lockstep (one step of each per new token), so streaming, the generation rules and the stopping rows stay
those of one batch, and the result says how the prompts ran (``GenerationResult.batching``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ...results.generation import GenerationResult
from .runners import left_pad
from .sampling import accept, next_ids

PADDED = "one batch, left-padded"


def pads_safely(decoder: Any, prompts: list[list[int]], pad: int) -> bool:
    """Whether left padding leaves a row's logits as the row alone gives them, on this file (the verdict is kept on
    the runner, which ``generate()`` keeps between calls). Prompts of one length need no padding: True. The
    tolerance is loose (a thousandth of the logits' scale): a shifted position or a state that read the padding
    moves logits by far more, and a file judged wrongly only runs its prompts in more batches."""
    if len({len(p) for p in prompts}) == 1:
        return True
    known = getattr(decoder, "left_padding_safe", None)
    if known is not None:
        return bool(known)
    short, longest = min(prompts, key=len), max(prompts, key=len)
    alone = _last_logits(decoder, [short], pad)[0]
    padded = _last_logits(decoder, [short, longest], pad)[0]  # as the batch pads it, beside its longest row
    scale = max(1.0, float(np.abs(alone).max()))
    safe = bool(np.isfinite(padded).all() and float(np.abs(padded - alone).max()) <= 1e-3 * scale)
    decoder.left_padding_safe = safe
    return safe


def _last_logits(decoder: Any, prompts: list[list[int]], pad: int) -> np.ndarray:
    """The last position's logits of ``prompts`` as one left-padded batch, from an empty cache."""
    ids, mask = left_pad(prompts, pad)
    logits, _ = decoder.step(ids, mask, decoder.empty_cache(len(prompts), capacity=ids.shape[1]), keep=True)
    return np.asarray(logits[:, -1, :], np.float64)


def groups_for(decoder: Any, prompts: list[list[int]], pad: int) -> tuple[list[list[int]], str]:
    """The rows of each batch and how they were formed: every row in one left-padded batch, or one batch per
    prompt length where the file does not tolerate left padding."""
    if pads_safely(decoder, prompts, pad):
        return [list(range(len(prompts)))], PADDED
    by_length: dict[int, list[int]] = {}
    for row, p in enumerate(prompts):
        by_length.setdefault(len(p), []).append(row)
    why = getattr(decoder, "unpadded_because", None) or \
        "this file's logits change under left padding (positions from the past length, or a recurrent state)"
    return list(by_length.values()), f"{len(by_length)} batches by prompt length, run in lockstep: {why}"


class Batch:
    """Rows run together: their left-padded ids, the mask of every step (views of one array), their cache, and the
    rows as transformers sees them for the generation rules."""

    def __init__(self, decoder: Any, prompts: list[list[int]], rows: list[int], pad: int, max_new_tokens: int,
                 keep_rows: bool) -> None:
        ids, mask = left_pad(prompts, pad)
        self.rows, self.width = rows, ids.shape[1]
        self.begin, self.end = self.width, self.width + max_new_tokens
        self.cache = decoder.empty_cache(len(rows), capacity=self.end)
        self.whole = np.ones((len(rows), self.end), np.int64)
        self.whole[:, :self.width] = mask
        self.step_ids = ids
        self.seqs: list[list[int]] = ids.tolist() if keep_rows else []  # left padding included

    def scores(self, decoder: Any, rules: Any) -> np.ndarray:
        """One step: the last position's logits with the generation config's rules applied."""
        logits, self.cache = decoder.step(self.step_ids, self.whole[:, :self.width], self.cache, keep=False)
        last = logits[:, -1, :]
        return rules.apply(last, self.seqs, self.begin, self.end) if rules.active else last

    def advance(self, chosen: np.ndarray, done: list[bool], pad: int) -> None:
        self.step_ids = next_ids(chosen[self.rows], [done[r] for r in self.rows], pad)
        self.width += 1
        for row, token in zip(self.seqs, self.step_ids[:, 0].tolist()):
            row.append(token)


def decoder_loop(decoder: Any, prompts: list[list[int]], max_new_tokens: int, rules: Any, eos_set: set[int],
                 pad: int, tokenizer: Any, stream: Any, choose: Callable[[np.ndarray], np.ndarray],
                 groups: list[list[int]], batching: str) -> GenerationResult:
    """The loop of a decoder (or a chain of files run as one): each batch of ``groups`` (:func:`groups_for`, which
    says how they were formed: ``batching``) steps once per new token with its cache kept, the generation config's
    rules applied to its logits and ``choose`` picking its tokens; rows stop at EOS, the loop when every row has."""
    batches = [Batch(decoder, [prompts[r] for r in rows], rows, pad, max_new_tokens, rules.active)
               for rows in groups]
    done = [False] * len(prompts)
    new: list[list[int]] = [[] for _ in prompts]
    times: list[float] = []
    chosen = np.full(len(prompts), pad, np.int64)
    for _ in range(max_new_tokens):
        start = time.perf_counter()  # a step's time: the whole turn of the loop, the next step's inputs included
        for batch in batches:
            if not all(done[r] for r in batch.rows):
                chosen[batch.rows] = choose(batch.scores(decoder, rules))
        finished = accept(chosen, done, new, eos_set, stream)
        if not finished:
            for batch in batches:
                batch.advance(chosen, done, pad)
        times.append((time.perf_counter() - start) * 1e3)
        if finished:
            break
    text = [tokenizer.decode(t, skip_special_tokens=True) for t in new] if tokenizer is not None else None
    # time to first token: a vision-language model's image encoding counts too
    return GenerationResult(prompts, new, text, times[0] + getattr(decoder, "vision_ms", 0.0), times[1:],
                            images=getattr(decoder, "thumbnails", []), batching=batching)
