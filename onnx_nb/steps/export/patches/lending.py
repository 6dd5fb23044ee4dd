"""Lending an object an attribute of the export's for the length of a block: the trace-friendly forms of
:mod:`.experts`, :mod:`.expert_tables`, :mod:`.windows`, :mod:`.scans`, :mod:`.blocks`, :mod:`.positions`,
:mod:`.sliding`, :mod:`.lengths`, :mod:`.audio_windows`, :mod:`.keypoints`, :mod:`.stages`, :mod:`.image_patches`,
:mod:`.unmasked_attention`, :mod:`.pooled_patches`, :mod:`.durations` and :mod:`.text_queries` are set on the
instances (or source modules) they replace, and what each had of its own comes back after, a hook's ``forward``
included."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any


@contextlib.contextmanager
def lent(loans: Sequence[tuple[Any, str, Any]]) -> Iterator[None]:
    """Within: each ``(holder, attribute, value)`` set on the holder itself; after: the holder's own value back (even
    None), or none (its class's again). For plain attributes: a torch module's parameters and submodules are not in
    its ``__dict__``."""
    own = [(name in vars(holder), vars(holder).get(name)) for holder, name, _ in loans]
    try:
        for holder, name, value in loans:
            setattr(holder, name, value)
        yield
    finally:
        for (holder, name, _), (had, prior) in zip(loans, own):
            if had:
                setattr(holder, name, prior)
            else:
                vars(holder).pop(name, None)


@contextlib.contextmanager
def lent_to_modules(model: Any, recognises: Callable[[Any], bool], function: Callable[..., Any],
                    attribute: str = "forward") -> Iterator[list[str]]:
    """Within: every module of ``model`` that ``recognises`` has ``function`` bound to it as ``attribute``; yields
    their names (the model's class name for the model itself). What each had of its own comes back on leaving."""
    found = [(name or type(m).__name__, m) for name, m in
             (model.named_modules() if hasattr(model, "named_modules") else []) if recognises(m)]
    with lent([(m, attribute, function.__get__(m)) for _, m in found]):
        yield [name for name, _ in found]


def source_modules(model: Any) -> list[Any]:
    """The Python modules defining ``model``'s modules (loaded ones, by name): where a patch lends a global."""
    names = sorted({type(m).__module__ for m in (model.modules() if hasattr(model, "modules") else [])})
    return [sys.modules[n] for n in names if n in sys.modules]


@contextlib.contextmanager
def lent_to_sources(sources: Sequence[Any], name: str, value: Any) -> Iterator[list[str]]:
    """Within: each of ``sources`` (Python modules) has the global ``name`` set to ``value``; yields their names."""
    with lent([(s, name, value) for s in sources]):
        yield [s.__name__ for s in sources]
