"""A text-to-speech length regulator (FastSpeech's: each token's embedding repeated its predicted duration's times)
as tensor operations: every row at once, its output length a size the trace follows.

ESPnet's ``length_regulator(encoded_embeddings, duration_labels, speaking_speed)``, as transformers' FastSpeech 2
Conformer keeps it, loops over the batch's rows (``repeat_interleave`` of one row at a time into a zero-filled
tensor) after a Python branch on the durations' sum. torch.export cannot trace the branch ("Could not guard on
data-dependent expression"), and TorchScript's trace unrolls the loop for the sample's rows: its file failed at
every other batch size (a ``Split`` into the sample's two rows).

Within :func:`regulated_durations`, each source module defining such a function gets one that computes the same
tensor with no loop and no branch: frame ``f`` of a row takes the token whose cumulative durations first pass
``f`` (a comparison with the cumulative sums, summed), frames past the row's total are zero, and a batch whose
durations are all zero takes one frame per token in each row, as the original's rule does. Its length (the rows'
longest total) is a size the trace follows, bounded by the model's relative position tables (``max_len`` entries,
5,000 frames in FastSpeech 2 Conformer, about 58 seconds at 22,050 Hz): PyTorch extends such a table for a longer
clip; the file's table stays at its size, and past it the file's slice of the table is the wrong size. One
difference is kept: on a batch whose durations are all zero, the original also writes its ones into the durations
it was given in place (the model's ``duration_outputs``); this one leaves them zero (the waveform is the same).

Recognised by what the code defines, not by family: a source module of the model's modules with a module-level
``length_regulator`` taking ``(encoded_embeddings, duration_labels, speaking_speed)``.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

from .contract import Patch

PARAMETERS = ["encoded_embeddings", "duration_labels", "speaking_speed"]


def _regulates(module: Any) -> bool:
    function = vars(module).get("length_regulator")
    try:
        return callable(function) and list(inspect.signature(function).parameters) == PARAMETERS
    except (TypeError, ValueError):  # a callable without a signature
        return False


def longest(model: Any) -> int | None:
    """The most frames the model's relative position tables cover (their ``max_len``), or None where it has none."""
    sizes = [m.max_len for m in model.modules() if isinstance(getattr(m, "max_len", None), int)
             and hasattr(m, "pos_enc")]
    return min(sizes) if sizes else None


def regulator(bound: int | None) -> Callable[..., Any]:
    """A ``length_regulator`` of tensor operations whose output has at most ``bound`` frames in a trace."""
    import torch

    def length_regulator(encoded_embeddings: Any, duration_labels: Any, speaking_speed: float = 1.0) -> Any:
        if speaking_speed <= 0:
            raise ValueError("`speaking_speed` must be greater than 0.")
        if speaking_speed != 1.0:
            duration_labels = torch.round(duration_labels.float() * speaking_speed).long()
        totals = duration_labels.sum(dim=1)
        # the original's rule: when the whole batch's durations are zero, each such row takes one frame per token
        empty = totals.eq(0) & totals.sum().eq(0)
        duration_labels = torch.where(empty[:, None], torch.ones_like(duration_labels), duration_labels)
        totals = duration_labels.sum(dim=1)
        ends = duration_labels.cumsum(dim=1)
        length = totals.max().item()
        torch._check(length >= 0)
        if bound is not None:
            torch._check(length <= bound)
        frames = torch.arange(length, device=ends.device)
        token = (frames[None, :, None] >= ends[:, None, :]).sum(-1).clamp(max=encoded_embeddings.size(1) - 1)
        width = encoded_embeddings.size(2)
        picked = torch.gather(encoded_embeddings, 1, token[..., None].expand(-1, -1, width))
        return torch.where((frames[None, :] < totals[:, None])[..., None], picked, 0).float()

    return length_regulator


@contextlib.contextmanager
def regulated_durations(model: Any) -> Iterator[list[str]]:
    """Within: every source module of ``model``'s modules with an ESPnet ``length_regulator`` has one of tensor
    operations in its place; yields the modules' names."""
    from .lending import lent_to_sources, source_modules

    found = [s for s in source_modules(model) if _regulates(s)]
    with lent_to_sources(found, "length_regulator", regulator(longest(model) if found else None)) as names:
        yield names


PATCH = Patch(
    name="durations",
    applies_to="the source modules of a model's modules defining ESPnet's length_regulator(encoded_embeddings, "
               "duration_labels, speaking_speed) (FastSpeech 2 Conformer's)",
    replaces="the regulator's loop over the batch's rows and its branch on the durations' sum, by tensor operations "
             "over every row",
    why="torch.export cannot guard on the branch, and TorchScript's trace unrolls the loop for the sample's rows: "
        "its file took no other batch size",
    during=regulated_durations)
