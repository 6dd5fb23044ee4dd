"""The contract every export-time rewrite of a model states: where it applies, what it replaces, and why."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass


@dataclass(frozen=True)
class Patch:
    """One rewrite of a model for its export.

    ``applies_to``: what in a model it recognises (a module's layout, never a family's name); ``replaces``: what of
    the model's it stands in for; ``why``: what the export does without it; ``during(model, **options)``: a context
    manager in which the model is rewritten, yielding the names of what it replaced (empty: nothing applied),
    everything given back on leaving."""

    name: str
    applies_to: str
    replaces: str
    why: str
    during: Callable[..., AbstractContextManager[list[str]]]

    def describe(self) -> str:
        return f"{self.name}: applies to {self.applies_to}; replaces {self.replaces}; because {self.why}"
