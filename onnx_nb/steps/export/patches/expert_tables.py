"""A trace-friendly loop for the experts of a sparse MLP kept as a table of expert modules (Switch Transformers,
NLLB-MoE: an ``nn.ModuleDict`` of ``expert_0``, ``expert_1``, ... each a dense MLP), and for the router's cast of its
own classifier inside ``forward``.

Such a module loops in Python over the experts the batch hit (``torch.greater(mask.sum(...), 0).nonzero()``), so
the loop's length is data: TorchScript bakes the sample's experts (the file fails at another length, ONNX Runtime
splitting rows that are not there) and torch.export cannot trace it. Within :func:`traceable_tables` the module runs
every expert in turn, each on the rows routed to it (``torch.where`` of its mask: no rows is an empty batch, which
adds nothing), weighted and added back as the model's own loop does: the same arithmetic on the same rows, the
loop's length fixed by the table's size instead of by the data.

How a table names its routing is read from its ``forward``'s parameters (its layout, not its family):
``(hidden_states, selected_experts, routing_weights)``: a one-hot dispatch mask ``[tokens, slots, experts]``;
``(hidden_states, router_mask, router_probs)``: an integer mask ``[tokens, slots]`` of which each value picks an
expert (``one_hot``), and an evaluation-time token dropout's scale (``moe_token_dropout``). Both weigh a row by
``weights[token, slot]``.

A router that casts its classifier to its own dtype on every call (``self.classifier =
self.classifier.to(self.dtype)``) asks torch.export to swap the classifier's weights in place, which it refuses
("Cannot swap ... weakref"); within :func:`traceable_tables` a module's ``to`` that would change nothing returns
the module itself, as it does outside a trace.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

from .contract import Patch


def _one_hot_slots(experts: Any, selected: Any) -> Any:  # [tokens, slots, experts] -> [experts, slots, tokens]
    return selected.permute(2, 1, 0)


def _indexed_slots(experts: Any, mask: Any) -> Any:  # [tokens, slots] of expert ids -> [experts, slots, tokens]
    import torch

    return torch.nn.functional.one_hot(mask, num_classes=experts.num_experts).permute(2, 1, 0)


# a table's forward parameters -> its routing argument as the mask [experts, slots, tokens]
ROUTINGS: dict[tuple[str, ...], Callable[[Any, Any], Any]] = {
    ("self", "hidden_states", "selected_experts", "routing_weights"): _one_hot_slots,
    ("self", "hidden_states", "router_mask", "router_probs"): _indexed_slots,
}


def _routing(module: Any) -> Callable[[Any, Any], Any] | None:
    """The mask reader of an experts table in a layout above, else None."""
    import torch

    if not isinstance(module, torch.nn.ModuleDict) or "expert_0" not in module:
        return None
    if not isinstance(getattr(module, "num_experts", None), int) or len(
            [k for k in module if k.startswith("expert_")]) != module.num_experts:
        return None
    try:
        return ROUTINGS.get(tuple(inspect.signature(type(module).forward).parameters))
    except (TypeError, ValueError):  # pragma: no cover - a forward without a signature
        return None


def looped_forward(experts: Any, hidden_states: Any, routing: Any, weights: Any) -> Any:
    """``experts``' output with every expert of the table run in turn on the rows routed to it."""
    import torch

    mask = ROUTINGS[tuple(inspect.signature(type(experts).forward).parameters)](experts, routing)
    dropout = float(getattr(experts, "moe_token_dropout", 0.0) or 0.0)
    out = torch.zeros_like(hidden_states)
    for e in range(experts.num_experts):
        slot, rows = torch.where(mask[e])
        states = experts[f"expert_{e}"](hidden_states[rows]) * weights[rows, slot, None]
        if dropout > 0 and not experts.training:
            states = states * (1 - dropout)
        out = out.index_add(0, rows, states.to(hidden_states.dtype))
    return out


def _unchanged_to(module: Any) -> Any:
    """``module.to`` that returns the module itself when no parameter or buffer would change."""
    import torch

    own = type(module).to

    def to(*args: Any, **kwargs: Any) -> Any:
        device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        tensors = [*module.parameters(), *module.buffers()]
        if all((device is None or t.device == torch.device(device)) and
               (dtype is None or not (t.is_floating_point() or t.is_complex()) or t.dtype == dtype)
               for t in tensors):
            return module
        return own(module, *args, **kwargs)

    return to


@contextlib.contextmanager
def traceable_tables(model: Any) -> Iterator[list[str]]:
    """Within: every experts table of ``model`` in a layout of :data:`ROUTINGS` runs :func:`looped_forward`, and
    the modules of the sparse MLP holding it (its router's classifier) cast to what they are as a no-op; yields the
    tables' names."""
    from .lending import lent

    if not hasattr(model, "named_modules"):
        yield []
        return
    tables = [(name, m) for name, m in model.named_modules() if _routing(m) is not None]
    parents = {name.rpartition(".")[0] for name, _ in tables}
    cast = [m for name, m in model.named_modules() if tables and any(
        name == p or name.startswith(p + ".") for p in parents) and not name.split(".")[-1].startswith("expert")]
    with lent([*((m, "forward", looped_forward.__get__(m)) for _, m in tables),
               *((m, "to", _unchanged_to(m)) for m in cast)]):
        yield [name for name, _ in tables]


PATCH = Patch(
    name="experts tables",
    applies_to="an nn.ModuleDict of expert_0 ... expert_{num_experts-1} modules whose forward takes (hidden_states, "
               "selected_experts, routing_weights) or (hidden_states, router_mask, router_probs), and the modules "
               "of the sparse MLP around it",
    replaces="the table's Python loop over the experts the batch hit (a nonzero() over the mask), and a router's "
             "cast of its classifier to the dtype it already has",
    why="the loop's length is data: TorchScript fixes the sample's experts and torch.export cannot trace it; the "
        "cast asks torch.export to swap weights in place, which it refuses",
    during=traceable_tables)
