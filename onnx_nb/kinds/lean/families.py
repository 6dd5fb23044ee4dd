"""The decoder families the lean route writes (:mod:`.lean`) and what differs between them, read from a Hugging Face
config: widths, norms, rotary tables, biases, experts."""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError
from ...steps.export.caches.gqa_io import rotary_tables

PRECISIONS = ("int4", "int8", "fp16", "fp32")

DENSE = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma", "granite")


MOE = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe")  # mixtures of experts: ONNX Runtime's MoE / QMoE op

FAMILIES = DENSE + MOE


@dataclass
class Family:
    """How one model type's checkpoint maps onto the graph."""

    model_type: str
    config: Any
    heads: int
    kv_heads: int
    head_size: int
    hidden: int
    layers: int
    eps: float
    activation: str  # "silu" or "gelu_tanh"
    norm_offset: float = 0.0  # Gemma's RMSNorm scales by (1 + weight)
    embed_scale: float = 1.0  # Gemma: sqrt(hidden); Granite: embedding_multiplier
    residual_scale: float = 1.0  # Granite's residual_multiplier
    logits_scale: float = 1.0  # Granite: 1 / logits_scaling
    attention_scale: float | None = None  # Granite's attention_multiplier; else the op's 1/sqrt(head)
    windows: list[int] = field(default_factory=list)  # per layer: sliding window, -1 for full attention
    packed: bool = False  # Phi-3: qkv_proj and gate_up_proj
    experts: int = 0  # a mixture of experts: experts per sparse layer, each token routed to top_k of them
    top_k: int = 0
    renormalize: bool = False  # the top-k routing weights rescaled to sum to 1 (Mixtral; norm_topk_prob)
    sparse: list[bool] = field(default_factory=list)  # per layer: a mixture of experts (else a dense MLP)


def family_of(config: Any) -> Family:
    """The layout of a supported decoder's config; refuses (with what to do) anything else."""
    kind = str(getattr(config, "model_type", ""))
    if kind not in FAMILIES:
        raise InvalidArgumentError(
            f"precision= builds decoders of the families {', '.join(FAMILIES)} straight from their checkpoint; "
            f"this one is {kind or 'unknown'!r}. Export it with export(model) (no precision=) and make the "
            "precision with quantize(export, method=...).")
    heads = int(config.num_attention_heads)
    hidden = int(config.hidden_size)
    head = int(getattr(config, "head_dim", None) or hidden // heads)
    layers = int(config.num_hidden_layers)
    if head % 16:
        raise InvalidArgumentError(f"ONNX Runtime's GroupQueryAttention takes head sizes that are multiples of 16; "
                                   f"this {kind} has {head}. Export it with export(model) (no precision=).")
    act = str(getattr(config, "hidden_activation", None) or getattr(config, "hidden_act", "silu"))
    if act not in ("silu", "gelu_pytorch_tanh", "gelu_tanh"):
        raise InvalidArgumentError(f"{kind}'s activation {act!r} is not one the lean route writes (silu, gelu tanh); "
                                   "export it with export(model) (no precision=).")
    fam = Family(kind, config, heads, int(getattr(config, "num_key_value_heads", None) or heads), head, hidden,
                 layers, float(config.rms_norm_eps), "silu" if act == "silu" else "gelu_tanh",
                 packed=kind == "phi3")
    if kind == "gemma":
        fam.norm_offset, fam.embed_scale = 1.0, math.sqrt(hidden)
    if kind == "granite":
        fam.embed_scale = float(config.embedding_multiplier)
        fam.residual_scale = float(config.residual_multiplier)
        fam.logits_scale = 1.0 / float(config.logits_scaling)
        fam.attention_scale = float(config.attention_multiplier)
    if kind in MOE:
        experts: Any = getattr(config, "num_local_experts", None) or getattr(config, "num_experts", 0)
        fam.experts = int(experts)
        fam.top_k = int(config.num_experts_per_tok)
        fam.renormalize = kind == "mixtral" or bool(getattr(config, "norm_topk_prob", False))
        step = int(getattr(config, "decoder_sparse_step", 1) or 1)
        dense_only = set(getattr(config, "mlp_only_layers", None) or [])
        fam.sparse = [i not in dense_only and (i + 1) % step == 0 for i in range(layers)]
    else:
        fam.sparse = [False] * layers
    window: Any = getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None)
    if types:
        fam.windows = [int(window) if t == "sliding_attention" and window else -1 for t in types]
    else:
        on = bool(window) and getattr(config, "use_sliding_window", True)
        fam.windows = [int(window) if on else -1] * layers
    return fam


def rotary_of(config: Any) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin tables from the family's own rotary module (built from the config alone: no weights)."""
    kind = config.model_type
    module = importlib.import_module(f"transformers.models.{kind}.modeling_{kind}")
    names = [n for n in dir(module) if n.endswith("RotaryEmbedding")]
    if not names:
        raise InvalidArgumentError(f"transformers' {kind} has no rotary embedding module; export it with "
                                   "export(model) (no precision=).")
    return rotary_tables(getattr(module, names[0])(config=config), config)
