"""What every onnx-nb GroupQueryAttention decoder file shares, whichever route wrote it (``optimize()``'s rewrite,
:mod:`~onnx_nb.steps.variants.gqa`, or the lean checkpoint route, :mod:`~onnx_nb.kinds.lean.graph`): the
``seqlens_k`` / ``total_sequence_length`` nodes computed from ``attention_mask``, the rotary cos/sin tables from
the model's own rotary module, and the names. Only imported by functions that already need torch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ....errors import NotRewritableError as NotRewritable

SEQLENS, TOTAL = "gqa.seqlens_k", "gqa.total_sequence_length"
COS, SIN = "gqa.cos_cache", "gqa.sin_cache"
PRESENT_AXIS = "present_sequence"  # past and present share a buffer: present's length is the buffer's


def rotary_tables(rotary: Any, config: Any) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin for every position up to the config's ``max_position_embeddings``, ``[positions, rotary/2]``,
    from the model's own rotary module (its scaling rule included); position-dependent rules refuse."""
    import torch

    kind = str(getattr(rotary, "rope_type", "default"))
    if kind in ("dynamic", "longrope"):
        raise NotRewritable(f"rotary scaling {kind!r} depends on the sequence length")
    positions = int(getattr(config, "max_position_embeddings", 0) or 0)
    if positions <= 0:
        raise NotRewritable("the config has no max_position_embeddings")
    with torch.no_grad():
        cos, sin = rotary(torch.zeros(1, dtype=torch.float32), torch.arange(positions)[None])
    half = cos.shape[-1] // 2
    cos, sin = cos[0, :, :half].float().numpy(), sin[0, :, :half].float().numpy()
    return np.ascontiguousarray(cos), np.ascontiguousarray(sin)


def mask_nodes() -> tuple[list[Any], list[Any]]:
    """(nodes, initializers) computing ``seqlens_k`` (valid tokens - 1 per row, int32) and
    ``total_sequence_length`` (the mask's width, int32) from ``attention_mask``."""
    import onnx
    from onnx import helper, numpy_helper

    nodes = [
        helper.make_node("ReduceSum", ["attention_mask", "gqa.axis1"], ["gqa.valid"], keepdims=0, name="gqa/valid"),
        helper.make_node("Sub", ["gqa.valid", "gqa.one"], ["gqa.valid_1"], name="gqa/valid_1"),
        helper.make_node("Cast", ["gqa.valid_1"], [SEQLENS], to=onnx.TensorProto.INT32, name="gqa/seqlens"),
        helper.make_node("Shape", ["attention_mask"], ["gqa.mask_shape"], name="gqa/mask_shape"),
        helper.make_node("Gather", ["gqa.mask_shape", "gqa.one"], ["gqa.total64"], axis=0, name="gqa/total64"),
        helper.make_node("Cast", ["gqa.total64"], [TOTAL], to=onnx.TensorProto.INT32, name="gqa/total"),
    ]
    inits = [numpy_helper.from_array(np.array([1], np.int64), "gqa.axis1"),
             numpy_helper.from_array(np.array(1, np.int64), "gqa.one")]
    return nodes, inits
