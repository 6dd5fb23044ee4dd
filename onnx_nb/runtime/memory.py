"""Peak resident memory of a piece of work, read from the kernel.

On Linux, writing ``5`` to ``/proc/self/clear_refs`` resets the process's high-water mark (``VmHWM``) to its
current resident size, so the peak reached while the work ran, minus the resident size before it, is what the
work needed on top of what the process already held. Elsewhere the figure is unknown (``None``), never guessed.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Each step's peak memory above the process's, as a multiple of the weights it reads: measured (the comments say on
# what), and a step that would not fit is refused before it starts (require). One table: every step reads it.
FACTORS = {
    "session": 1.15,  # a CPU session holding its weights in memory (prepacked): 1.13x a 2.25 GiB fp32 MLP, one run
    "reload": 1.1,  # a checkpoint loaded again in PyTorch in its own dtype: 12.76 GiB for a 12.55 GiB bf16 7B
    "export": 3.1,  # a folder loaded (1x), traced and written (+2.06x): a 1.1B decoder with its cache
    "decoder route": 2.5,  # a decoder re-exported and rewritten for GroupQueryAttention: +2.43x (1.1B Llama)
    # quantize(): ONNX Runtime's quantizers on a 1.1B Llama export (benchmarks/lean_decoder.py --generic)
    "dynamic": 3.2, "static": 3.2, "fp16": 1.8, "int4": 2.4,
}

_STATUS = Path("/proc/self/status")
_CLEAR = Path("/proc/self/clear_refs")


def _field(name: str) -> int | None:
    try:
        match = re.search(rf"^{name}:\s+(\d+) kB", _STATUS.read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(match.group(1)) * 1024 if match else None


def _reset_peak() -> bool:
    try:
        _CLEAR.write_text("5")
    except OSError:
        return False
    return True


@dataclass
class Peak:
    """``added_bytes``: how far the resident size rose above where it stood at the start (None if unknown)."""

    added_bytes: int | None = None
    high_bytes: int | None = None  # the process's whole resident size at that peak

    @property
    def mb(self) -> float | None:
        return None if self.added_bytes is None else self.added_bytes / 1e6  # MB, as every figure shown


@contextlib.contextmanager
def peak_memory() -> Iterator[Peak]:
    """``with peak_memory() as peak: work()`` then ``peak.mb``: the resident memory the work added at its peak."""
    peak = Peak()
    start = _field("VmRSS")
    measurable = start is not None and _reset_peak()
    try:
        yield peak
    finally:
        high = _field("VmHWM") if measurable else None
        if high is not None and start is not None:
            peak.added_bytes = max(high - start, 0)
            peak.high_bytes = high


def available_bytes() -> int | None:
    """What the kernel says can still be allocated without swapping (``MemAvailable``); None where unknown."""
    try:
        match = re.search(r"^MemAvailable:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(match.group(1)) * 1024 if match else None


def require(needed: int, what: str, instead: str) -> None:
    """Raise :class:`InsufficientMemoryError` before work that would need ``needed`` bytes when the machine has less
    available (so the kernel is not killed halfway); ``instead`` says what to do."""
    from ..errors import InsufficientMemoryError
    from ..render import human_bytes

    have = available_bytes()
    if have is not None and needed > have:
        raise InsufficientMemoryError(f"{what} needs about {human_bytes(needed)} of memory; this machine has "
                                      f"{human_bytes(have)} available. {instead}")


def weight_bytes(model: Any) -> int:
    """Bytes of a PyTorch model's parameters and buffers: memory it held before a row was measured."""
    tensors = [*model.parameters(), *model.buffers()] if hasattr(model, "parameters") else []
    return sum(t.numel() * t.element_size() for t in tensors)
