"""``len()`` of a tensor, as a size the trace follows (RT-DETR's and D-FINE's decoders take their batch size as
``len(source_flatten)``).

Python's ``len()`` must return an int, so torch.export answers it with the sample's size and a guard: the batch was
specialised to the sample's (2), the dynamo file refused every other batch, and TorchScript's trace baked it (its
file gave other boxes at batch 3). Within :func:`symbolic_lengths`, each source module of the model's modules gets
a module-level ``len`` (which its code then finds before the builtin) answering a tensor with ``shape[0]`` (the
same number in eager code, a size the exporter keeps symbolic in a trace) and anything else with the builtin.

The answer is a symbolic size in a trace, not an int: code that hashes it (a cache keyed by it) would fail, so only
model code gets it, never a library's layers (torch's, torchvision's, timm's, onnx-nb's, transformers' outside its
``models`` package).

Recognised by what the code uses, not by family: every Python module defining one of the model's modules whose
source calls ``len(`` and that has no ``len`` of its own.
"""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Iterator
from typing import Any

from .contract import Patch

LIBRARIES = ("builtins", "torch", "torchvision", "torchaudio", "timm", "onnx_nb")


def tensor_len(value: Any) -> Any:
    """``len(value)``: a tensor's first size (a symbolic size in a trace), else the builtin's answer."""
    import torch

    if isinstance(value, torch.Tensor) and value.dim() > 0:
        return value.shape[0]
    return builtins.len(value)


def _model_code(name: str) -> bool:
    """Whether a module is a model's own code: not a library's layers (see the module's docstring)."""
    top = name.split(".")[0]
    if top in LIBRARIES:
        return False
    return top != "transformers" or ".models." in name


def _calls_len(module: Any) -> bool:
    import inspect

    try:
        return "len(" in inspect.getsource(module)
    except (OSError, TypeError):  # no source (a compiled or built-in module)
        return False


@contextlib.contextmanager
def symbolic_lengths(model: Any) -> Iterator[list[str]]:
    """Within: every source module of ``model``'s modules that calls ``len(`` answers a tensor's ``len`` with its
    first size; yields the modules' names. Their globals come back as they were on leaving."""
    from .lending import lent_to_sources, source_modules

    found = [s for s in source_modules(model) if _model_code(s.__name__) and "len" not in vars(s) and _calls_len(s)]
    with lent_to_sources(found, "len", tensor_len) as names:
        yield names


PATCH = Patch(
    name="lengths",
    applies_to="the source modules of a model's modules that call len( (a tensor's len: RT-DETR's, D-FINE's batch "
               "size)",
    replaces="the builtin len() for a tensor, by its first size",
    why="len() must return an int: torch.export specialises the batch to the sample's and the file takes no other",
    during=symbolic_lengths)
