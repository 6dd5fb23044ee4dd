"""A library function or method replaced by onnx-nb's equal, faster one while a block runs, put back when the last
such block (in any thread) ends: ORT's per-channel weight quantization (:mod:`.per_channel`), its float16 weight
conversion (:mod:`.float16_weights`)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class Swap:
    """``owner.name`` replaced by ``replacement`` inside :meth:`active` blocks; :attr:`original` is the library's own
    (for a replacement that hands a case back to it)."""

    def __init__(self, replacement: Any) -> None:
        self.replacement = replacement
        self.original: Any = None
        self._lock = threading.Lock()
        self._depth = 0

    @contextmanager
    def active(self, owner: Any, name: str) -> Iterator[None]:
        with self._lock:
            if not self._depth:
                self.original = getattr(owner, name)
                setattr(owner, name, self.replacement)
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if not self._depth:
                    setattr(owner, name, self.original)
