"""transformers' eager attention (matmul, softmax, matmul) for a trace that needs the decomposed layout: the
attention route of ``optimize()`` re-exports with it for ONNX Runtime's fusions, and the TorchScript and
encoder-decoder routes trace with it (a fused kernel's layout is not what their translations expect)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


def attention_holder(model: Any) -> Any:
    """The module whose attention implementation transformers lets one switch: the model itself, or the
    transformer inside a wrapper (a SentenceTransformer's chain); None for any other model."""
    if hasattr(model, "set_attn_implementation"):
        return model
    return next((m for m in model.modules() if hasattr(m, "set_attn_implementation")), None)


@contextlib.contextmanager
def eager_attention(model: Any) -> Iterator[bool]:
    """Trace with transformers' eager attention (matmul, softmax, matmul), the implementation given back
    afterwards. Yields whether the model runs eager attention inside the block (False: it has no switch)."""
    holder = attention_holder(model)
    before = getattr(getattr(holder, "config", None), "_attn_implementation", None)
    if holder is None or before == "eager":
        yield holder is not None
        return
    holder.set_attn_implementation("eager")
    try:
        yield True
    finally:
        if before:
            holder.set_attn_implementation(before)
