"""A trace-friendly dispatch for the experts of a mixture of experts that has no transformers experts implementation.

transformers' experts classes carry ``@use_experts_implementation``, whose default ``grouped_mm`` dispatch traces
(rows sorted by expert, counted with ``histc``, one grouped matmul; :mod:`.translations` gives both an ONNX
translation). A family that writes its own experts loop instead (LongCat-Flash: ``for expert in expert_hit:
int(expert.item())``) cannot be traced: the loop's length is data, and TorchScript bakes an ``If`` ONNX Runtime
cannot type. :func:`traceable_experts` gives such a module, for the length of an export, the same grouped dispatch
through transformers' own ``grouped_mm_experts_forward``, on the module's own weights and its own gate
(``_apply_gate``, where the class has one: Step-3.7's clamp). Only a module that declares "zero-compute" experts
(``zero_expert_num``: a top-k slot that returns the token itself, scaled by its weight) adds them beside it; any other
slot past the computing experts adds nothing, as those loops skip it.

Recognised by layout, not by family: an ``nn.Module`` with 3-d ``gate_up_proj`` ``[experts, 2 * inner, hidden]``
and ``down_proj`` ``[experts, hidden, inner]``, an ``act_fn``, a ``forward(hidden_states, top_k_index,
top_k_weights)``, and no experts implementation of its own.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import Any

from .contract import Patch

ARGS = ["self", "hidden_states", "top_k_index", "top_k_weights"]


def _loops(module: Any) -> bool:
    """Whether ``module`` is experts in the layout above that transformers cannot dispatch itself."""
    gate_up: Any = getattr(module, "gate_up_proj", None)
    down: Any = getattr(module, "down_proj", None)
    if getattr(gate_up, "ndim", 0) != 3 or getattr(down, "ndim", 0) != 3:
        return False  # (first: asking a diffusers model for act_fn reads its config, with a deprecation warning)
    if hasattr(module, "has_gate") or not callable(getattr(module, "act_fn", None)):
        return False  # transformers' decorator sets has_gate: its own implementations trace
    if gate_up.shape[-1] != down.shape[1] or gate_up.shape[1] != 2 * down.shape[2]:
        return False
    try:
        return list(inspect.signature(type(module).forward).parameters) == ARGS
    except (TypeError, ValueError):  # pragma: no cover - a forward without a signature
        return False


class _Routed:
    """The attributes ``grouped_mm_experts_forward`` reads, over the experts that compute (the first ``routed``)."""

    has_gate, has_bias, is_transposed, has_post_expert_norm, _is_expert_parallel = True, False, False, False, False

    def __init__(self, experts: Any, routed: int) -> None:
        self.gate_up_proj, self.down_proj = experts.gate_up_proj[:routed], experts.down_proj[:routed]
        self.num_experts, self.act_fn = routed, experts.act_fn
        own = getattr(type(experts), "_apply_gate", None)
        self.own_gate = own.__get__(experts) if own is not None else None

    def _apply_gate(self, gate_up: Any) -> Any:
        if self.own_gate is not None:
            return self.own_gate(gate_up)
        gate, up = gate_up.chunk(2, dim=-1)
        return self.act_fn(gate) * up


def grouped_forward(experts: Any, hidden_states: Any, top_k_index: Any, top_k_weights: Any) -> Any:
    """``experts``' output by a grouped dispatch: each token's routed slots through their experts, weighted; a slot
    past the computing experts adds the token itself times its weight where the module declares zero-compute experts
    (``zero_expert_num``), else nothing. Such a slot is sent to expert 0 with weight 0, so every expert's rows keep
    one static shape."""
    import torch
    from transformers.integrations.moe import grouped_mm_experts_forward

    routed = int(experts.down_proj.shape[0])
    computes = top_k_index < routed
    none = torch.zeros_like(top_k_weights)
    out = grouped_mm_experts_forward(_Routed(experts, routed), hidden_states,
                                     torch.where(computes, top_k_index, torch.zeros_like(top_k_index)),
                                     torch.where(computes, top_k_weights, none))
    if not int(getattr(experts, "zero_expert_num", 0) or 0):
        return out
    itself = torch.where(computes, none, top_k_weights).sum(dim=-1, keepdim=True)
    return out + hidden_states * itself.to(hidden_states.dtype)


@contextlib.contextmanager
def _grouped_in_place_of_eager(model: Any) -> Iterator[list[str]]:
    """Within: transformers' experts modules (``@use_experts_implementation``) whose config picks the ``eager`` loop
    (the OpenAI privacy filter defaults to it: its authors keep eager's summation order) dispatch through
    ``grouped_mm``, which traces; yields their names. Every config of the model's modules has its own choice back on
    leaving (transformers' setter passes a choice down to sub-configs, so each is put back as it was)."""
    configs = {id(c): c for m in model.modules() if (c := getattr(m, "config", None)) is not None
               and hasattr(c, "_experts_implementation_internal")}
    before = {key: c._experts_implementation_internal for key, c in configs.items()}
    names, eager = [], {}
    for name, module in model.named_modules():
        config: Any = getattr(module, "config", None)
        if hasattr(module, "has_gate") and getattr(config, "_experts_implementation", None) == "eager":
            eager[id(config)] = config
            names.append(name)
    try:
        for config in eager.values():
            config._experts_implementation = "grouped_mm"
        yield names
    finally:
        for key, config in configs.items():
            config._experts_implementation_internal = before[key]


@contextlib.contextmanager
def traceable_experts(model: Any) -> Iterator[list[str]]:
    """Within: every experts module of ``model`` with its own loop dispatches as :func:`grouped_forward`, and
    transformers' own experts set to their ``eager`` loop dispatch as ``grouped_mm``; yields their names. The
    module's ``forward`` is restored on leaving (an instance forward already there, a hook's, comes back)."""
    from .lending import lent_to_modules

    with lent_to_modules(model, _loops, grouped_forward) as names, _grouped_in_place_of_eager(model) as switched:
        yield names + switched


PATCH = Patch(
    name="experts dispatch",
    applies_to="experts modules with 3-d gate_up_proj and down_proj weights, an act_fn and a forward(hidden_states, "
               "top_k_index, top_k_weights), and no transformers experts implementation of their own; transformers' "
               "experts modules whose config picks the eager loop",
    replaces="the module's own Python loop over the experts hit (int(expert.item()) per expert), or transformers' "
             "eager experts loop where a model's config picks it",
    why="the loop's length is data: torch.export cannot trace it, and TorchScript bakes an If ONNX Runtime cannot "
        "type; transformers' grouped dispatch traces and has an ONNX translation",
    during=traceable_experts)
