"""transformers' key/value cache under the name the installed release uses.

transformers renamed a model's cache argument and output field from ``past_key_values`` (and ``cache_params``) to
``cache`` (5.x; the old names warn and are due to go in 5.40). onnx-nb passes and reads the cache only through
:func:`cache_kwargs` and :func:`cache_of`, which ask the model's own ``forward`` signature and output fields, so the
same code runs on releases before and after the rename without a deprecation warning, and the next rename is one
place. Only the torch side uses it: the ONNX files keep ``past_key_values.{i}.key`` as their input names (the
convention Optimum, onnxruntime-genai and transformers.js read).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

NEW, OLD = "cache", "past_key_values"
_NAMES: dict[type, str] = {}


def cache_name(model: Any) -> str:
    """``"cache"`` when the model's ``forward`` takes it, else ``"past_key_values"`` (older releases)."""
    kind = type(model)
    if kind not in _NAMES:
        try:
            params = inspect.signature(model.forward).parameters
        except (TypeError, ValueError, AttributeError):
            params = {}  # type: ignore[assignment]
        _NAMES[kind] = NEW if NEW in params else OLD
    return _NAMES[kind]


def cache_kwargs(model: Any, cache: Any) -> dict[str, Any]:
    """``{name: cache}`` for a call of ``model`` given its cache (``None``: the model starts one)."""
    return {cache_name(model): cache}


def cache_of(output: Any) -> Any:
    """The cache a model call returned, read from the field the output class declares (reading the old name on a
    new release would warn)."""
    fields = {f.name for f in dataclasses.fields(output)} if dataclasses.is_dataclass(output) else set(output.keys())
    for name in (NEW, OLD, "cache_params"):
        if name in fields:
            return getattr(output, name)
    raise KeyError(f"{type(output).__name__} carries no cache (fields: {', '.join(sorted(fields))})")
