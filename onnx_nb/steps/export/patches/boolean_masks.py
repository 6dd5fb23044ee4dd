"""transformers' attention mask handed as the boolean one it stands for, to code that negates it (the cache-aware
FastConformer encoder of Nemotron ASR streaming, and Nemotron 3.5 ASR built on it).

The encoder builds its mask with ``create_bidirectional_mask``, which answers in the form the configured attention
implementation takes: boolean for sdpa (what the model runs), float for eager (0 where a frame attends, the dtype's
minimum elsewhere). The code reads it as boolean whatever it is: the attention masks ``attention_mask.logical_not()``
(on the float mask: every attended pair masked, every masked one kept) and the encoder's ``all_masked_rows`` (the
frames its convolutions zero) become the frames that see every frame. dynamo cannot view sdpa's decomposed output at a
symbolic length, so the export is retried with eager attention (``dynamo_or_eager``), and the file computed what
eager PyTorch computes: NaN everywhere (a softmax over wholly masked rows), at the sample's own length too.

Within :func:`boolean_masks` those modules' ``create_bidirectional_mask`` answers a float mask with ``mask == 0``
(exact: eager's mask holds 0 or the minimum); a boolean mask, a BlockMask and None pass as they are.

Recognised by what the code does, not by family: every source module of the model's modules holding
``create_bidirectional_mask`` whose source negates the mask (``attention_mask.logical_not()``).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import Any

from .contract import Patch

BUILDER = "create_bidirectional_mask"
NEGATES = "attention_mask.logical_not()"


def boolean_builder(original: Any) -> Any:
    """``original`` (transformers' mask builder) answering a float mask as the boolean one it stands for."""

    def build(*args: Any, **kwargs: Any) -> Any:
        import torch

        mask = original(*args, **kwargs)
        if isinstance(mask, torch.Tensor) and mask.is_floating_point():
            return mask == 0
        return mask

    return build


def _negates(module: Any) -> bool:
    try:
        return NEGATES in inspect.getsource(module)
    except (OSError, TypeError):  # no source (a compiled or built-in module)
        return False


@contextlib.contextmanager
def boolean_masks(model: Any) -> Iterator[list[str]]:
    """Within: every such source module of ``model`` builds boolean masks; yields the modules' names. Their
    globals come back as they were on leaving."""
    from .lending import lent, source_modules

    found = [s for s in source_modules(model) if callable(getattr(s, BUILDER, None)) and _negates(s)]
    with lent([(s, BUILDER, boolean_builder(getattr(s, BUILDER))) for s in found]):
        yield [s.__name__ for s in found]


PATCH = Patch(
    name="boolean masks",
    applies_to="the source modules of a model's modules that hold create_bidirectional_mask and negate the mask "
               "(attention_mask.logical_not(): the cache-aware FastConformer encoder)",
    replaces="transformers' float (eager) mask, by the boolean mask it stands for",
    why="the code negates the mask as a boolean: with eager attention (dynamo's retry when it cannot view sdpa's "
        "decomposed output) every attended pair was masked and the file gave NaN",
    during=boolean_masks)
