"""Binder gives a session about 2 GB: every tutorial's kernel stays under this at its peak, the Studio's "Run all
steps" included where a tutorial offers it. The notebook tests (nbclient) and the browser tests (a real JupyterLab)
keep each kernel's peak here and fail past the budget."""

from __future__ import annotations

import json
from pathlib import Path

MEMORY_BUDGET_MB = 2000
# the kernel's resident peak since it started, in MB (VmHWM, kept across the resets onnx-nb's own peak figures make),
# as code the kernel evaluates (naming nothing in its namespace)
PEAK_EXPR = "round(__import__('onnx_nb.runtime.memory', fromlist=['_']).process_peak_bytes() / 1e6)"
MEMORY = Path(__file__).resolve().parent.parent / "build" / "notebook-memory"  # each peak of the last run


def keep_peak(key: str, notebook: str, kernel_mb: int, after: list[str]) -> None:
    """Keep ``notebook``'s kernel peak (MB, ``VmHWM``) as build/notebook-memory/``key``.json, ``after`` naming what
    ran after its cells; past :data:`MEMORY_BUDGET_MB` fails the test."""
    MEMORY.mkdir(parents=True, exist_ok=True)
    (MEMORY / f"{key}.json").write_text(json.dumps(
        {"notebook": notebook, "kernel_peak_mb": kernel_mb, "after": after, "budget_mb": MEMORY_BUDGET_MB}))
    assert kernel_mb <= MEMORY_BUDGET_MB, f"{notebook}: the kernel peaked at {kernel_mb} MB, over {MEMORY_BUDGET_MB} MB"
