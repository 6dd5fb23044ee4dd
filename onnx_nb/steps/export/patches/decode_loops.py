"""A greedy decode loop that stops once every row has ended, written as one ``torch.while_loop`` (ONNX's ``Loop``).

SLANet's and SLANeXt's table-structure head runs up to ``max_text_length + 1`` steps of an attention GRU cell over
the image's features, feeding each step's argmax back as a one-hot, and stops (a Python ``break`` on a tensor) once
every row has emitted the end class (the last one). torch.export stops at that branch; TorchScript's trace keeps the
sample's count of steps, so every other input ran that many (an unverified file). Within :func:`looped_decoders`
the head runs the same steps in a ``while_loop`` whose condition is the model's (steps left, a row not ended): the
file runs the steps the model runs for each input, no more. Each step's scores fill a buffer of the largest count,
cut after the loop to the steps run: the model's output, as its softmax.

Recognised by layout, not by family: a module with a ``structure_attention_cell`` (``(features, context, one-hot)
-> (features, attention)``) and a ``structure_generator`` (features -> class scores), and a config naming
``max_text_length`` and ``out_channels``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from .contract import Patch


def _decodes(module: Any) -> bool:
    """Whether ``module`` is a decode head of the layout above."""
    config = getattr(module, "config", None)
    return all(callable(getattr(module, n, None)) for n in ("structure_attention_cell", "structure_generator")) \
        and isinstance(getattr(config, "max_text_length", None), int) \
        and isinstance(getattr(config, "out_channels", None), int)


def looped_forward(head: Any, hidden_states: Any, targets: Any = None, **kwargs: Any) -> Any:
    """``head``'s structure scores for ``hidden_states`` (``[batch, positions, channels]``), the steps run in one
    ``while_loop``; ``targets`` (teacher forcing, for training) is not what an export computes."""
    import torch
    import torch.nn.functional as F
    from torch._higher_order_ops.while_loop import while_loop
    from transformers.modeling_outputs import BaseModelOutput

    classes, most = int(head.config.out_channels), int(head.config.max_text_length) + 1
    rows = hidden_states.shape[0]
    context = hidden_states.float()

    def going(step: Any, features: Any, chars: Any, scores: Any, ended: Any) -> Any:
        return (step < most) & ~ended.all()

    def one(step: Any, features: Any, chars: Any, scores: Any, ended: Any) -> tuple[Any, ...]:
        features, _ = head.structure_attention_cell(features, context, F.one_hot(chars, classes).float())
        logits = head.structure_generator(features)
        chars = logits.argmax(dim=1)
        scores = scores.index_copy(1, step.reshape(1), logits.unsqueeze(1).to(scores.dtype))
        return step + 1, features, chars, scores, ended | chars.eq(classes - 1)

    start = (torch.zeros((), dtype=torch.long), torch.zeros(rows, head.config.hidden_size, dtype=torch.float32),
             torch.zeros(rows, dtype=torch.long), torch.zeros(rows, most, classes, dtype=torch.float32),
             torch.zeros(rows, dtype=torch.bool))
    step, _, _, scores, _ = while_loop(going, one, start)
    count = int(step.item())
    torch._check(count >= 1)
    torch._check(count <= most)
    out = F.softmax(scores[:, :count], dim=-1, dtype=torch.float32).to(hidden_states.dtype)
    return BaseModelOutput(last_hidden_state=out)


@contextlib.contextmanager
def looped_decoders(model: Any) -> Iterator[list[str]]:
    """Within: every decode head of ``model`` in the layout above runs :func:`looped_forward`; yields their names."""
    from .lending import lent_to_modules

    with lent_to_modules(model, _decodes, looped_forward) as names:
        yield names


PATCH = Patch(
    name="decode loops",
    applies_to="decode heads with a structure_attention_cell and a structure_generator whose config names "
               "max_text_length and out_channels (SLANet's, SLANeXt's table structure)",
    replaces="the Python loop over the steps that breaks once every row has emitted the end class",
    why="torch.export cannot trace a break on a tensor, and TorchScript's trace keeps the sample's count of steps "
        "for every input; a while_loop is ONNX's Loop, with the model's own condition",
    during=looped_decoders)
