"""A learned position table whose cached step reads its position as a Python number (ProphetNet's decoder: with a
cache, every new token's position is ``int(padding_idx + past + length)``, "without the int() cast, it doesn't work
in some cases when exporting to ONNX", its comment says).

torch.export takes the ``int()`` of the cache's length for a guard and specialises it: the file then ran at the
sample's cache length only (another past length read the position of the sample's). Within
:func:`traced_positions` that step computes the same position from the length as the trace's own size arithmetic
(``ones * (padding_idx + past + length)``), and every other call (no cache yet, positions given) is the model's own.

Recognised by what the module is and takes, not by family: an ``nn.Embedding`` whose forward takes
``(inputs_shape, device, attention_mask, cache, position_ids)``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from .contract import Patch

CALL = ("self", "inputs_shape", "device", "attention_mask", "cache", "position_ids")


def cached_positions(self: Any, inputs_shape: Any, device: Any, attention_mask: Any = None, cache: Any = None,
                     position_ids: Any = None) -> Any:
    """The table's forward: a cached step's position as a size expression, anything else by the model's own."""
    import torch

    if position_ids is None and cache is not None and cache.get_seq_length() != 0:
        position_ids = torch.ones((1, 1), dtype=torch.long, device=device) * (
            self.padding_idx + inputs_shape[1] + cache.get_seq_length())
        return torch.nn.Embedding.forward(self, position_ids), position_ids
    return type(self).forward(self, inputs_shape, device, attention_mask, cache, position_ids)


def _is_table(module: Any) -> bool:
    import inspect

    import torch

    if not isinstance(module, torch.nn.Embedding) or type(module).forward is torch.nn.Embedding.forward:
        return False
    try:
        return tuple(inspect.signature(type(module).forward).parameters) == CALL
    except (TypeError, ValueError):  # pragma: no cover - a forward without a signature
        return False


@contextlib.contextmanager
def traced_positions(model: Any) -> Iterator[list[str]]:
    """Within: every such position table of ``model`` computes a cached step's position from sizes; yields their
    names. Their own forwards come back on leaving."""
    from .lending import lent_to_modules

    with lent_to_modules(model, _is_table, cached_positions) as names:
        yield names


PATCH = Patch(
    name="positions",
    applies_to="learned position tables (an nn.Embedding) whose forward takes (inputs_shape, device, attention_mask, "
               "cache, position_ids)",
    replaces="the cached step's int() of the position",
    why="torch.export specialises the int() of the cache's length: the file takes the sample's past length only",
    during=traced_positions)
