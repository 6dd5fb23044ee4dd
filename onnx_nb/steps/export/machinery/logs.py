"""Library log lines and warnings collected into a result's ``warnings`` instead of red lines under the cell."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

# Library log lines that say nothing to an onnx-nb user: ORT's quantizer asks for its pre-processing, which
# onnx-nb's prepare_for_quantization already did.
LOG_NOISE = ("pre-processing before quantization",)


class LogCollector(logging.Handler):
    """Library log lines of WARNING and above into ``collected`` (once each, 300 characters at most)."""

    def __init__(self, collected: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.collected = collected

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage().strip()
        if text and text not in self.collected and not any(n in text for n in LOG_NOISE):
            self.collected.append(text[:300])


@contextlib.contextmanager
def library_logs(collected: list[str]) -> Iterator[None]:
    """Log lines of the libraries onnx-nb calls (ONNX Runtime's quantizer and optimizer write to the root logger)
    go to ``collected``, the result's warnings, instead of the terminal or the cell: a handler on the root logger
    also stops ``logging.warning()`` from installing its own stderr handler."""
    root = logging.getLogger()
    handler = LogCollector(collected)
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)


@contextlib.contextmanager
def quiet_loading(collected: list[str], local: bool) -> Iterator[None]:
    """Loading a Hugging Face model without red lines under the cell: transformers' warnings go to
    ``collected`` (the export result's ``warnings``, shown folded), and a local folder loads without its
    per-weight progress bar (a hub download keeps its bars: they say how much is left)."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # a plain PyTorch module: nothing of transformers' to quieten
        yield
        return
    logger = hf_logging.get_logger()
    saved = logger.handlers[:], logger.propagate
    bars = hf_logging.is_progress_bar_enabled()
    logger.handlers, logger.propagate = [LogCollector(collected)], False
    if local:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        logger.handlers, logger.propagate = saved
        if local and bars:
            hf_logging.enable_progress_bar()
