"""A masked-attention schedule held in a buffer (EoMT's ``attn_mask_probs``): per query block, the probability that
its queries attend through their predicted masks, annealed during training. The forward branches on those values in
Python (``probs[i] > 0`` to predict a mask at all, ``prob < 1`` to draw queries that ignore theirs).

torch.export lifts a buffer as an input, so both branches were data-dependent ("Could not guard on data-dependent
expression"), and TorchScript's trace fixed the path its sample took, marked unverified. The values are the model's
own state, never an input's: within :func:`constant_schedule` they are read once as Python numbers, so the trace
takes the branches the model takes for every input. A probability strictly between 0 and 1 still draws at random
(``torch.rand``) as the model does, and the file's check says so by failing.

Recognised by what the module holds: an ``attn_mask_probs`` buffer and a ``_disable_attention_mask`` method.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from .contract import Patch

BUFFER = "attn_mask_probs"


def _schedules(module: Any) -> bool:
    buffers = getattr(module, "_buffers", None)
    return isinstance(buffers, dict) and buffers.get(BUFFER) is not None \
        and callable(getattr(module, "_disable_attention_mask", None))


@contextlib.contextmanager
def constant_schedule(model: Any) -> Iterator[list[str]]:
    """Within: every such module of ``model`` reads its schedule as a tuple of Python floats (an instance attribute,
    found before the module's buffers); yields their names. The buffer itself stays where it is."""
    found = [(name or type(m).__name__, m) for name, m in
             (model.named_modules() if hasattr(model, "named_modules") else []) if _schedules(m)]
    try:
        for _, module in found:
            vars(module)[BUFFER] = tuple(float(v) for v in module._buffers[BUFFER].detach().cpu().tolist())
        yield [name for name, _ in found]
    finally:
        for _, module in found:
            vars(module).pop(BUFFER, None)


PATCH = Patch(
    name="mask_annealing",
    applies_to="modules holding an attn_mask_probs buffer and a _disable_attention_mask method (EoMT's masked "
               "attention schedule)",
    replaces="the buffer's values, read as Python numbers for the length of the export",
    why="torch.export lifts a buffer as an input, so the forward's branches on its values were data-dependent "
        "(dynamo failed) and TorchScript's trace fixed its sample's path (unverified)",
    during=constant_schedule)
