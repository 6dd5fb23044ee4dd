"""An open-vocabulary detector's text queries (its classes and its task prompt) encoded as tensor operations: every
row through the text tower, regrouped per image by gathers, in place of an embedding cache keyed by the tokens.

OmDet-Turbo keeps an LRU cache of its text tower's embeddings, keyed by each row's token ids as a Python tuple
(``tensor.tolist()``): a trace cannot read a tensor's values into a key, so torch.export failed on the first row.
Its regrouping of the flattened classes per image loops over ``classes_structure`` in Python (a slice and a pad per
image), which a trace unrolls for the sample's counts.

Within :func:`encoded_queries`, each module of the model with that cache (``get_cached_class_embeddings``,
``get_cached_task_embeddings`` and a ``language_backbone``) gets a ``get_language_embedding`` computing the same
tensors with no cache and no loop: the class rows through the tower at once, image ``b``'s ``j``-th class the row
``sum(classes_structure[:b]) + j`` for ``j < classes_structure[b]`` and zeros past it (the original's pad); the
task prompts through the tower at once, cut to the longest prompt as the original cuts them. The cache only ever
held what the tower computes, so the values are the same; a model used after the export keeps its cache.

Recognised by what the module defines, not by family.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from .contract import Patch

CACHED = ("get_cached_class_embeddings", "get_cached_task_embeddings", "language_backbone")


def _caches_queries(module: Any) -> bool:
    return all(hasattr(module, name) for name in CACHED) and hasattr(module, "get_language_embedding")


def get_language_embedding(self: Any, classes_input_ids: Any, classes_attention_mask: Any, tasks_input_ids: Any,
                           tasks_attention_mask: Any, classes_structure: Any) -> tuple[Any, Any, Any]:
    """``(class_embeddings [most classes, images, dim], task_embeddings [prompt, images, dim], task_mask)``, as the
    original returns them, of tensor operations."""
    import torch

    rows = self.language_backbone(classes_input_ids, encode_type="class")  # [class rows, dim]
    counts = classes_structure.to(rows.device, torch.long)
    most = counts.max()
    starts = counts.cumsum(0) - counts
    slots = torch.arange(classes_input_ids.size(0), device=rows.device)[:, None]  # at most every row in one image
    picked = starts[None, :] + slots  # [slot, image]: the row of image b's slot-th class
    real = (slots < counts[None, :]) & (picked < rows.size(0))  # past the rows given: zeros, as the slice pads
    # [slot, image, dim]: zeros past an image's classes (every index a real row: real ones only, else row 0)
    grouped = torch.where(real[..., None], rows[torch.where(real, picked, 0)], 0)
    length = int(most.item())
    torch._check(length >= 0)
    torch._check(length <= classes_input_ids.size(0))
    class_embeddings = grouped[:length]
    tasks, task_mask = self.language_backbone(tasks_input_ids, mask=tasks_attention_mask, encode_type="task")
    return class_embeddings, tasks, task_mask


@contextlib.contextmanager
def encoded_queries(model: Any) -> Iterator[list[str]]:
    """Within: every module of ``model`` caching its text queries' embeddings encodes them without the cache;
    yields the modules' names."""
    from .lending import lent_to_modules

    with lent_to_modules(model, _caches_queries, get_language_embedding, "get_language_embedding") as names:
        yield names


PATCH = Patch(
    name="text_queries",
    applies_to="modules caching their text tower's embeddings by token ids (get_cached_class_embeddings, "
               "get_cached_task_embeddings beside a language_backbone: OmDet-Turbo's)",
    replaces="the cache lookups keyed by each row's token ids and the Python loop regrouping the classes per image, by "
             "the tower on every row and gathers",
    why="torch.export cannot read a tensor's values into a Python key, and a trace unrolls the regrouping for the "
        "sample's class counts",
    during=encoded_queries)
