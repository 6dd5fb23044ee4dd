"""Peak resident memory of a piece of work, read from the kernel.

On Linux, writing ``5`` to ``/proc/self/clear_refs`` resets the process's high-water mark (``VmHWM``) to its
current resident size, so the peak reached while the work ran, minus the resident size before it, is what the
work needed on top of what the process already held. Elsewhere the figure is unknown (``None``), never guessed.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sys
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


@dataclass
class Peak:
    """``added_bytes``: how far the resident size rose above where it stood at the start (None if unknown)."""

    added_bytes: int | None = None
    high_bytes: int | None = None  # the process's whole resident size at that peak
    seen: int = 0  # high-water marks read by blocks nested inside, before their resets

    @property
    def mb(self) -> float | None:
        return None if self.added_bytes is None else self.added_bytes / 1e6  # MB, as every figure shown


_OPEN: list[Peak] = []  # the peak_memory blocks running now, outermost first
_PROCESS_HIGH = [0]  # the highest high-water mark read before any reset: the process's own peak


def _reset_peak() -> bool:
    """Reset the high-water mark, first handing the one it held to every block still measuring (an inner block's
    reset must not hide the outer block's peak) and to the process's own peak."""
    high = _field("VmHWM")
    if high is not None:
        _PROCESS_HIGH[0] = max(_PROCESS_HIGH[0], high)
        for peak in _OPEN:
            peak.seen = max(peak.seen, high)
    try:
        _CLEAR.write_text("5")
    except OSError:
        return False
    return True


def process_peak_bytes() -> int | None:
    """The resident memory this process has held at its peak since it started (``VmHWM``, kept across the resets
    :func:`peak_memory` makes): what a kernel needs of a machine such as Binder's 2 GB. None where unknown."""
    high = _field("VmHWM")
    return None if high is None else max(high, _PROCESS_HIGH[0])


@contextlib.contextmanager
def peak_memory() -> Iterator[Peak]:
    """``with peak_memory() as peak: work()`` then ``peak.mb``: the resident memory the work added at its peak
    (blocks nested inside included)."""
    peak = Peak()
    start = _field("VmRSS")
    measurable = start is not None and _reset_peak()
    _OPEN.append(peak)
    try:
        yield peak
    finally:
        _OPEN.remove(peak)
        high = _field("VmHWM") if measurable else None
        if high is not None and start is not None:
            high = max(high, peak.seen)
            peak.added_bytes = max(high - start, 0)
            peak.high_bytes = high


def gives_memory_back(fn: Any = None, *, full: bool = True) -> Any:
    """After the step (however it ends), the memory it freed goes back to the system (:func:`give_back`; ``full``:
    with a full collection, as the public steps do; their parts collect the young generations only). Freed heap
    otherwise stays in the process (MiniLM's export, optimize and quantize left a kernel at 1.65 GB resident that
    held 0.91 GB after a full collection and a trim, 1.28 GB after the young generations' and a trim), and each
    step's peak then starts higher."""
    if fn is None:
        return functools.partial(gives_memory_back, full=full)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        finally:
            give_back(full)

    return wrapper


FULL_COLLECTION_SECONDS = 1.0  # a full collection that took longer: this process holds too much to scan at each step
_FULL_TOO_SLOW = [False]


def give_back(full: bool = False) -> None:
    """Collect garbage (the young generations; ``full``: every generation, while a full collection here takes under
    :data:`FULL_COLLECTION_SECONDS`: about 0.3 s in a kernel with torch and transformers loaded, seconds in a process
    holding many models, where the young generations' collection is kept), then return free heap pages to the
    system where the C library can (glibc's ``malloc_trim``)."""
    import gc
    import time

    if full and not _FULL_TOO_SLOW[0]:
        start = time.perf_counter()
        gc.collect()
        _FULL_TOO_SLOW[0] = time.perf_counter() - start > FULL_COLLECTION_SECONDS
    else:
        gc.collect(1)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            ctypes.CDLL("libc.so.6").malloc_trim(0)


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
