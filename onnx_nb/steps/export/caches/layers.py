"""Cache layers and caches of special kinds that a decoder's trace builds from its flat tensors: an indexed layer
(DeepSeek sparse attention's indexer keys beside the keys and values) and a cache that reads as not yet filled (a
prompt's two-way image block applied in a graph traced with a cache). Only imported by functions that already need
torch."""

from __future__ import annotations

import functools
from typing import Any

import torch


def indexed_layer(plain: Any, indexer_keys: torch.Tensor) -> Any:
    """transformers' indexed cache layer holding a plain layer's keys and values and ``indexer_keys``."""
    from transformers.cache_utils import DynamicIndexedLayer

    layer = DynamicIndexedLayer()
    for name in ("keys", "values", "dtype", "device", "is_initialized"):
        if hasattr(plain, name):
            setattr(layer, name, getattr(plain, name))
    layer.indexer_keys, layer.is_indexer_initialized = indexer_keys, True
    layer.indexer_dtype, layer.indexer_device = indexer_keys.dtype, indexer_keys.device
    return layer


@functools.cache
def first_step_cache() -> Any:
    """A DynamicCache that reads as not yet filled: PaliGemma applies its prompt's two-way block only while the
    cache is empty, which a graph traced with a cache would drop; with it the block is applied at every step where
    the token types mark one (a decode step's token is in none, so the step stays causal). Gemma 3 applies its
    block at every step anyway."""
    from transformers import DynamicCache

    class FirstStepCache(DynamicCache):
        @property
        def is_initialized(self) -> bool:
            return False

    return FirstStepCache
