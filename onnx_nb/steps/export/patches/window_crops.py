"""A shifted-window layer's crop back to the image's own size, traced whatever the sample's size.

A Swin layer (and the layers copied from it: Swin V2's, Donut's, MaskFormer's, CLAP's audio tower's, Swin2SR's,
DiNAT's) pads its feature map to a multiple of its window, attends within the windows, then crops the padding off
behind a Python branch on the padding (``if pad_values[3] > 0 or pad_values[5] > 0``). A sample whose feature map is
already a multiple of the window (224 x 224 with windows of 7: 56 x 56) traces the branch not taken, and the file
then fails at any other image size that needs padding (Grounding DINO's Swin at 320 x 320: a 80 x 80 map padded to
84 x 84 and reshaped as 6,400 positions).

Within :func:`cropped_windows`, each such layer's ``maybe_pad`` says the map was padded on both sides (the padding
itself is the original's), so the crop ``[:, :height, :width]`` is always traced: a no-op where nothing was padded.
Recognised by what the layer holds (``maybe_pad``, a ``window_size`` and ``layernorm_before``), not by family.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from .contract import Patch


def _windowed(module: Any) -> bool:
    return callable(getattr(type(module), "maybe_pad", None)) and hasattr(module, "window_size") and hasattr(
        module, "layernorm_before")


def maybe_pad(self: Any, hidden_states: Any, height: Any, width: Any) -> tuple[Any, tuple[Any, ...]]:
    """The layer's own padding, its padding values saying both sides were padded (the crop's branch taken)."""
    padded, values = type(self).maybe_pad(self, hidden_states, height, width)
    return padded, (*values[:3], 1, values[4], 1)


@contextlib.contextmanager
def cropped_windows(model: Any) -> Iterator[list[str]]:
    """Within: every shifted-window layer of ``model`` crops its padding off on every trace; yields their names."""
    from .lending import lent_to_modules

    with lent_to_modules(model, _windowed, maybe_pad, "maybe_pad") as names:
        yield names


PATCH = Patch(
    name="window_crops",
    applies_to="shifted-window attention layers padding their map to a multiple of the window (maybe_pad beside a "
               "window_size and layernorm_before: Swin's and the layers copied from it)",
    replaces="the Python branch that crops the padding off only when the sample's map was padded, by the crop on "
             "every trace",
    why="a sample whose map is a multiple of the window traces no crop, and the file fails at any image size that "
        "needs padding",
    during=cropped_windows)
