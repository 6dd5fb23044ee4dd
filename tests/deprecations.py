"""A deprecation raised by onnx-nb's own call into torch, transformers, onnx, onnxruntime or onnxscript fails the test.

A library's warning names its caller through ``stacklevel``; when the call went through call plumbing (``nn.Module``'s
``__call__``, a decorator, transformers' output classes and logging), the caller is found by walking past it. A
warning whose first frame outside the libraries and that plumbing is onnx-nb's (or a test's) is ours and is recorded;
the fixture in conftest fails the test with the list. transformers' deprecations that go through its logger (the
cache rename's "``past_key_values``/``cache_params`` are deprecated") are checked the same way. Warnings the
libraries raise from their own internals are not ours and are left to pytest's summary.
"""

from __future__ import annotations

import logging
import sys
import warnings
from pathlib import Path
from types import FrameType
from typing import Any, ClassVar

ROOT = Path(__file__).resolve().parent.parent
OURS = (str(ROOT / "onnx_nb") + "/", str(ROOT / "tests") + "/", str(ROOT / "benchmarks") + "/")
CATEGORIES = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)
# Frames a call passes through between the caller and the deprecated function or message.
PLUMBING = ("/torch/nn/modules/module.py", "/torch/utils/_contextlib.py", "/functools.py", "/contextlib.py",
            "/warnings.py", "/logging/__init__.py", "/transformers/utils/generic.py",
            "/transformers/utils/deprecation.py", "/transformers/utils/logging.py",
            "/transformers/utils/output_capturing.py", "/transformers/modeling_utils.py")
LOGGERS = ("transformers", "torch", "onnxscript", "onnx_ir")


def _ours(frame: FrameType | None) -> str | None:
    """``file:line`` of the first frame from ``frame`` outward that is not plumbing, when it is ours."""
    while frame is not None:
        name = frame.f_code.co_filename
        if not any(p in name for p in PLUMBING):
            return f"{Path(name).name}:{frame.f_lineno}" if name.startswith(OURS) else None
        frame = frame.f_back
    return None


def _attributed(filename: str, lineno: int) -> FrameType | None:
    """The frame on the current stack a warning was attributed to."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename == filename and frame.f_lineno == lineno:
            return frame
        frame = frame.f_back
    return None


class Watch:
    """Installed for one test: wraps ``warnings.showwarning`` (pytest's recording goes on) and listens to the
    libraries' loggers."""

    active: ClassVar[list[Watch]] = []  # the innermost one records (a test may watch a call of its own)

    def __init__(self) -> None:
        self.found: list[str] = []
        self._show = warnings.showwarning
        self._handler = _Handler(self)

    def __enter__(self) -> Watch:
        Watch.active.append(self)
        warnings.showwarning = self._showwarning
        for name in LOGGERS:
            logging.getLogger(name).addHandler(self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        Watch.active.remove(self)
        warnings.showwarning = self._show
        for name in LOGGERS:
            logging.getLogger(name).removeHandler(self._handler)

    def check(self, message: str, kind: str, frame: FrameType | None) -> None:
        where = _ours(frame) if Watch.active and Watch.active[-1] is self else None
        if where:
            self.found.append(f"{kind} from our call at {where}: {message.splitlines()[0][:200]}")

    def _showwarning(self, message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None,
                     line: str | None = None) -> None:
        if issubclass(category, CATEGORIES):
            self.check(str(message), category.__name__, _attributed(filename, lineno) or sys._getframe(1))
        warnings._showwarnmsg_impl(warnings.WarningMessage(message, category, filename, lineno, file, line))  # type: ignore[attr-defined]


class _Handler(logging.Handler):
    def __init__(self, watch: Watch) -> None:
        super().__init__(logging.WARNING)
        self.watch = watch

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "deprecat" in text.lower():
            self.watch.check(text, f"{record.name} logger", sys._getframe(1))

