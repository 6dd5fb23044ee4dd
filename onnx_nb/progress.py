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
    """``with Steps(4, "export") as p: p.step("loading")`` ...

    In a notebook the bar is a plain display output updated in place (an HTML ``<progress>``), not a widget:
    it needs no widget model, so a reloaded page or a saved notebook never shows "Error displaying widget"
    for it. It is cleared when the step ends, and says where it stopped when the step failed."""

    def __init__(self, total: int, title: str, enabled: bool = True) -> None:
        self.total = total
        self.title = title
        self.enabled = enabled
        self.done = 0
        self.label = ""
        self.bar: Any = None
        self.start = time.perf_counter()

    def __enter__(self) -> Steps:
        if self.enabled and in_notebook():
            from IPython.display import display

            self.bar = display(self._view(), raw=True, display_id=True)
        return self

    def _view(self, failed: bool = False) -> dict[str, str]:
        from .render import esc

        elapsed = time.perf_counter() - self.start
        what = f"{self.title}: {self.label}" if self.label else self.title
        if failed:
            text = f"{what}: stopped after {elapsed:.1f} s"
            return {"text/plain": text, "text/html": f'<div class="onnxnb-progress" style="color:#b3261e;'
                                                     f'font-size:12px">{esc(text)}</div>'}
        count = f"{min(self.done, self.total)}/{self.total}"
        text = f"{what} [{count}] {elapsed:.1f} s"
        return {"text/plain": text,
                "text/html": f'<div class="onnxnb-progress" style="font-size:12px;color:#555">'
                             f'<progress value="{min(self.done, self.total)}" max="{max(self.total, 1)}" '
                             f'style="width:160px;vertical-align:middle"></progress> {esc(what)} '
                             f'<span style="color:#888">({count}, {elapsed:.1f} s)</span></div>'}

    def add(self, more: int) -> None:
        """More steps than planned (an exporter fell back to another): the total grows, so the counter never
        runs past it."""
        self.total += more
        if self.bar is not None:
            self.bar.update(self._view(), raw=True)

    def step(self, label: str) -> None:
        if not self.enabled:
            return
        self.label = label
        if self.bar is not None:
            self.bar.update(self._view(), raw=True)
        else:
            elapsed = time.perf_counter() - self.start
            print(f"onnx-nb {self.title} [{self.done + 1}/{self.total}] {label} ({elapsed:.1f} s)",
                  file=sys.stderr, flush=True)
        self.done += 1

    def __exit__(self, kind: object, *exc: object) -> None:
        if self.bar is not None:  # done: the bar goes (the result says the rest); failed: where it stopped stays
            self.bar.update(self._view(failed=True) if kind is not None else {"text/plain": ""}, raw=True)
