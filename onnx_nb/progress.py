"""Progress for long steps: a bar in notebooks, a line per step on the terminal."""

from __future__ import annotations

import sys
import time
from typing import Any


def in_notebook() -> bool:
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    shell = ipython.get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


class Steps:
    """``with Steps(4, "export") as p: p.step("loading")`` ..."""

    def __init__(self, total: int, title: str, enabled: bool = True) -> None:
        self.total = total
        self.title = title
        self.enabled = enabled
        self.done = 0
        self.bar: Any = None
        self.start = time.perf_counter()

    def __enter__(self) -> Steps:
        if self.enabled and in_notebook():
            try:
                from tqdm.auto import tqdm

                self.bar = tqdm(total=self.total, desc=self.title, leave=False)
            except ImportError:  # pragma: no cover - tqdm is a core dependency
                self.bar = None
        return self

    def add(self, more: int) -> None:
        """More steps than planned (an exporter fell back to another): the total grows, so the counter never
        runs past it."""
        self.total += more
        if self.bar is not None:
            self.bar.total = self.total
            self.bar.refresh()

    def step(self, label: str) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            if self.done:
                self.bar.update(1)
            self.bar.set_description(f"{self.title}: {label}")
        else:
            elapsed = time.perf_counter() - self.start
            print(f"onnx-nb {self.title} [{self.done + 1}/{self.total}] {label} ({elapsed:.1f} s)",
                  file=sys.stderr, flush=True)
        self.done += 1

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.update(max(self.total - self.bar.n, 0))
            self.bar.close()
