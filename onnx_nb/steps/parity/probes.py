"""Inputs that move a model off the path its sample took.

A parity check on the sample alone cannot see a branch the sample never takes (a trace that recorded
``x.sum() > 0`` as always true) or an input the export never saw (padding). So besides the sample's
shapes, ``check_parity`` runs the same shape with inputs drawn to differ: float inputs from another
distribution, negated and rescaled; token inputs with other ids and with right and left padding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError

PROBES: dict[str, str] = {
    "random": "float inputs drawn again, with the mean moved by one standard deviation and 3x the spread",
    "redrawn": "float inputs drawn again with the sample's own mean and spread",
    "negated": "float inputs x -1",
    "scaled": "float inputs x 10",
    "ids": "token ids drawn again across the whole vocabulary",
    "right-padded": "attention mask with rows padded on the right (lengths from full down to a quarter)",
    "left-padded": "attention mask with rows padded on the left (as batched generation pads)",
}
_NOT_IDS = ("position_ids", "token_type_ids")


# A quantized (or fp16) file is judged on inputs like the ones it was calibrated for: out-of-range floats
# would only measure saturation, and its control flow is the graph's, already checked on the fp32 export.
IN_DISTRIBUTION = ("redrawn", "ids", "right-padded", "left-padded")


def chosen(probes: Any, precision: str = "fp32") -> list[str]:
    """``"auto"``/True: every probe that applies (for a quantized or fp16 file, the in-distribution ones);
    None/False: none; or a list of names from :data:`PROBES`."""
    if probes in ("auto", True):
        return [p for p in PROBES if p != "redrawn"] if precision == "fp32" else list(IN_DISTRIBUTION)
    if probes in (None, False):
        return []
    names = [probes] if isinstance(probes, str) else list(probes)
    unknown = [p for p in names if p not in PROBES]
    if unknown:
        raise InvalidArgumentError(f"Unknown probe {unknown[0]!r}; choose from {', '.join(PROBES)}, or probes=False.")
    return names


def is_ids(name: str, value: np.ndarray, vocab: dict[str, int]) -> bool:
    return np.issubdtype(value.dtype, np.integer) and (name in vocab or ("ids" in name and name not in _NOT_IDS))


def _padded(mask: np.ndarray, left: bool) -> np.ndarray:
    rows, seq = mask.shape
    lengths = np.maximum(1, seq - (np.arange(rows) * (3 * seq // 4)) // max(rows - 1, 1))
    positions = np.arange(seq)[None, :]
    keep = positions >= (seq - lengths)[:, None] if left else positions < lengths[:, None]
    return keep.astype(mask.dtype)


def probe_feeds(feed: dict[str, np.ndarray], vocab: dict[str, int], names: Sequence[str],
                seed: int = 0) -> list[tuple[str, dict[str, np.ndarray]]]:
    """``(probe name, inputs)`` for each probe in ``names`` that applies to these inputs."""
    rng = np.random.default_rng(seed + 1)
    floats = [k for k, v in feed.items() if np.issubdtype(v.dtype, np.floating) and v.size]
    ids = [k for k, v in feed.items() if is_ids(k, v, vocab) and v.size]
    mask = feed.get("attention_mask")
    padding = mask is not None and mask.ndim == 2 and mask.shape[1] >= 2
    out: list[tuple[str, dict[str, np.ndarray]]] = []
    for name in names:
        new = dict(feed)
        if name in ("random", "redrawn", "negated", "scaled") and floats:
            for k in floats:
                v = feed[k].astype(np.float64)
                std = float(v.std()) or float(np.abs(v).max()) or 1.0
                if name == "random":
                    drawn = v.mean() + std * (1.0 + 3.0 * rng.standard_normal(v.shape))
                elif name == "redrawn":
                    drawn = v.mean() + std * rng.standard_normal(v.shape)
                else:
                    drawn = v * (-1.0 if name == "negated" else 10.0)
                # an array of the input's shape (a scalar input's arithmetic gives a numpy scalar)
                new[k] = np.asarray(drawn, feed[k].dtype).reshape(feed[k].shape)
        elif name == "ids" and ids:
            for k in ids:
                top = vocab.get(k) or int(feed[k].max()) + 1
                new[k] = rng.integers(0, max(top, 1), feed[k].shape).astype(feed[k].dtype)
        elif name in ("right-padded", "left-padded") and padding:
            assert mask is not None
            new_mask = _padded(mask, left=name == "left-padded")
            new["attention_mask"] = new_mask
            for k in ids:  # padded positions hold the pad id, as a tokenizer writes them
                if feed[k].shape == mask.shape:
                    new[k] = np.where(new_mask.astype(bool), feed[k], 0).astype(feed[k].dtype)
        else:
            continue
        out.append((name, new))
    return out


def default_prompts(model: Any, count: int = 3, seed: int = 0) -> list[list[int]]:
    """Prompts of different lengths (3, 6, 9 tokens) with ids inside the vocabulary, clear of special ids."""
    vocab = int(getattr(model.config, "vocab_size", 100) or 100)
    rng = np.random.default_rng(seed)
    low = min(3, vocab - 1)
    return [list(map(int, rng.integers(low, vocab, 3 * (i + 1)))) for i in range(count)]


def plain(length: int, pad: int, **more: Any) -> dict[str, Any]:
    """``generate()`` settings for exactly ``length`` tokens in all (prompt or decoder start included) with none of
    the model's generation-config rules: a reference both sides run the same way (the rules are checked apart,
    against transformers, by the tests of :func:`onnx_nb.generate`)."""
    # max_new_tokens=None: a generation config that sets it (SeamlessM4T's 256) would override max_length, and a
    # parity run would generate 256 tokens where it asked for 9
    return {"do_sample": False, "num_beams": 1, "max_length": length, "max_new_tokens": None, "min_length": length,
            "eos_token_id": None,
            "pad_token_id": pad, "forced_bos_token_id": None, "forced_eos_token_id": None, "no_repeat_ngram_size": 0,
            "repetition_penalty": 1.0, "bad_words_ids": None, "suppress_tokens": None, "begin_suppress_tokens": None,
            "length_penalty": 1.0, "early_stopping": False, **more}

