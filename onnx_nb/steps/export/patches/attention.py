"""transformers' (and timm's) eager attention (matmul, softmax, matmul) for a trace that needs the decomposed
layout: the attention route of ``optimize()`` re-exports with it for ONNX Runtime's fusions, and the TorchScript and
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


def implementations(model: Any) -> list[tuple[Any, str | None]]:
    """Each module of ``model`` that can switch its attention, outermost first, with the implementation its config
    names now: a wrapper's config may say eager while a backbone inside runs sdpa (ZoeDepth's BEiT)."""
    holder = attention_holder(model)
    if holder is None:
        return []
    return [(m, getattr(getattr(m, "config", None), "_attn_implementation", None)) for m in holder.modules()
            if hasattr(m, "set_attn_implementation")]


def fused(model: Any) -> list[Any]:
    """timm's attention modules of ``model`` that run torch's fused kernel now (timm's own switch, ``fused_attn``;
    off, they compute matmul, softmax, matmul)."""
    return [m for m in model.modules() if getattr(m, "fused_attn", None) is True]


def runs_eager(model: Any, timm: bool = False) -> bool:
    """Whether every switchable module of ``model`` runs eager attention already (False: no switch); ``timm``:
    timm's attention modules count too."""
    found = implementations(model)
    kernels = timm and any(hasattr(m, "fused_attn") for m in model.modules())
    return (bool(found) or kernels) and all(name == "eager" for _, name in found) and not (timm and fused(model))


@contextlib.contextmanager
def eager_attention(model: Any, timm: bool = False) -> Iterator[bool]:
    """Trace with transformers' eager attention (matmul, softmax, matmul) in every module that can switch, each
    module's own implementation given back afterwards; ``timm``: timm's attention modules off their fused kernel
    too. Yields whether the model runs eager attention inside the block (False: it has no switch)."""
    found, kernels = implementations(model), fused(model) if timm else []
    eager = runs_eager(model, timm)
    if eager or not (found or kernels):
        yield eager
        return
    if found:
        found[0][0].set_attn_implementation("eager")
    for module, _ in found[1:]:
        if getattr(getattr(module, "config", None), "_attn_implementation", None) != "eager":
            module.set_attn_implementation("eager")
    for module in kernels:
        module.fused_attn = False
    try:
        yield True
    finally:
        for module in kernels:
            module.fused_attn = True
        for module, before in found:  # outermost first: an outer switch sets the inner ones, then each its own
            if before:
                module.set_attn_implementation(before)
