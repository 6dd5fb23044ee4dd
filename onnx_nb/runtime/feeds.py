"""Where a step's inputs come from when the caller gives none: one rule for parity, benchmark, quantize's
generated calibration and quant_debug (:func:`feed_for`), and the inputs a bare ONNX graph can describe itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..errors import SampleError


def mask_positions(mask: np.ndarray, new: int) -> np.ndarray:
    """The positions of each row's last ``new`` tokens from its attention mask over cached + new tokens, counted over
    the row's own tokens (a left-padded row's first token is position 0), as transformers' ``generate()`` gives them."""
    return np.maximum((np.cumsum(mask, axis=1) - 1)[:, mask.shape[1] - new:], 0).astype(np.int64)


def feed_for(path: Path, model: Any = None, sample: Any = None,
             seed: int = 0) -> tuple[dict[str, np.ndarray], dict[str, dict[int, str]]]:
    """Named numpy inputs for the ONNX file at ``path`` and their variable axes: the caller's ``sample`` (a dict
    of input name -> array or tensor) when given; else the sample ``model`` (an ExportResult or a variant, whose
    export's sample it inherits) was exported with; else inputs made from the graph itself (:func:`graph_sample`)."""
    if sample is not None:
        if not hasattr(sample, "keys"):
            raise SampleError(f"Pass the sample as a dict of input name -> array (it is a {type(sample).__name__}): "
                              "an ONNX file's inputs are named.")
        feed = to_numpy(dict(sample))
        return feed, {k: {0: "batch"} for k, v in feed.items() if np.ndim(v) >= 1}
    for candidate in (model, getattr(model, "origin", None)):
        source: Any = getattr(candidate, "source", None)
        if source is not None and source.sample:
            return as_prefill_if_gqa(path, to_numpy(source.sample)), dict(source.input_axes)
    return graph_sample(path, seed)


def as_prefill_if_gqa(path: Path, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A decoder's sample (new tokens after a cache, in a batch) for a GroupQueryAttention file, which takes a
    batch of several new tokens only with an empty cache: the same tokens as a prompt, the cache empty."""
    from .facts import file_facts, is_cache

    if not any(is_cache(k) for k in feed) or not file_facts(path).gqa:
        return feed
    out = dict(feed)
    for name, value in feed.items():
        if is_cache(name):
            out[name] = value[:, :, :0]
    if "input_ids" in feed and "attention_mask" in feed:
        out["attention_mask"] = np.ones_like(feed["input_ids"], dtype=feed["attention_mask"].dtype)
    return out


def to_numpy(sample: Any) -> dict[str, np.ndarray]:
    """A dict of tensors or arrays (or a tokenizer's output) as numpy arrays."""
    return {k: (v.detach().numpy() if hasattr(v, "detach") else np.asarray(v)) for k, v in sample.items()}


def _dim_sizes(names: set[str]) -> dict[str, int]:
    """A size per named axis, the same wherever the name appears, and consistent for a decoder with its cache: past
    axes 3 long, new tokens 4, ``total*`` axes (attention masks, presents) past + new."""
    past = 3 if any(n.startswith("past") for n in names) else 0
    new = 4 if past else 8
    return {n: past if n.startswith("past") else past + new if n.startswith(("total", "present")) else new
            for n in names}


def graph_sample(path: Path, seed: int) -> tuple[dict[str, np.ndarray], dict[str, dict[int, str]]]:
    """Inputs for an ONNX model with no other source of samples: ids within the embedding's
    vocabulary, masks of ones, floats from a normal distribution; dynamic dims batch 2, others 8 (a decoder with
    its cache: 3 cached tokens, 4 new, masks over both, positions after the cached ones)."""
    from .onnxfile import load_proto, signature

    proto = load_proto(path)
    vocab = vocab_sizes(proto)
    rng = np.random.default_rng(seed)
    infos = signature(proto)[0]
    sizes = _dim_sizes({d for info in infos for i, d in enumerate(info.shape) if isinstance(d, str) and i})
    sample, axes = {}, {}
    for info in infos:
        shape = [d if isinstance(d, int) else 2 if i == 0 else sizes.get(str(d), 8) for i, d in enumerate(info.shape)]
        axes[info.name] = {i: (d if isinstance(d, str) else f"{info.name}_{i}")
                           for i, d in enumerate(info.shape) if not isinstance(d, int)}
        dtype = np.dtype(info.dtype) if info.dtype in np.sctypeDict else np.float32
        if np.issubdtype(dtype, np.floating):
            sample[info.name] = rng.standard_normal(shape).astype(dtype)
        elif "mask" in info.name:
            sample[info.name] = np.ones(shape, dtype)
        elif info.name == "position_ids" and shape:  # after the cached tokens
            past = next((v for k, v in sizes.items() if k.startswith("past")), 0)
            sample[info.name] = np.broadcast_to(np.arange(past, past + shape[-1]), shape).astype(dtype)
        elif "type" in info.name or dtype == np.bool_:
            sample[info.name] = np.zeros(shape, dtype)
        else:
            sample[info.name] = rng.integers(0, vocab.get(info.name, 2), shape).astype(dtype)
    return sample, axes


def vocab_sizes(proto: Any) -> dict[str, int]:
    """Graph input -> rows of the embedding table it indexes (a Gather on an initializer), for token ids."""
    inits = {i.name: list(i.dims) for i in proto.graph.initializer}
    inputs = {i.name for i in proto.graph.input}
    vocab: dict[str, int] = {}
    for node in proto.graph.node:
        if node.op_type == "Gather" and len(node.input) == 2 and node.input[0] in inits \
                and node.input[1] in inputs and inits[node.input[0]]:
            vocab.setdefault(node.input[1], inits[node.input[0]][0])
    return vocab


def export_sample(model: Any) -> dict[str, Any] | None:
    """The sample an ExportResult (or a variant of one) was exported with, when it carries one: the
    natural inputs for a plain module that cannot describe its own."""
    for candidate in (model, getattr(model, "origin", None)):
        sample = getattr(getattr(candidate, "source", None), "sample", None)
        if sample:
            return dict(sample)
    return None

