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
    # ... on a file over 2 GB, its weights read one at a time (steps/variants/by_reference.py; benchmarks/big_steps.py
    # on the same export: +0.39x, +0.68x, +0.30x)
    "dynamic by reference": 0.5, "fp16 by reference": 0.8, "int4 by reference": 0.4,
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


def resident_bytes() -> int | None:
    """The process's resident memory now (``VmRSS``); None where unknown."""
    return _field("VmRSS")


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
    with a full collection where the step left memory behind or where it costs little). Freed heap otherwise stays
    in the process (MiniLM's export, optimize and quantize left a kernel at 1.65 GB resident that held 0.91 GB after
    a full collection and a trim, 1.28 GB after the young generations' and a trim), and each step's peak then starts
    higher."""
    if fn is None:
        return functools.partial(gives_memory_back, full=full)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        before = resident_bytes()
        try:
            return fn(*args, **kwargs)
        finally:
            give_back(full, before)

    return wrapper


FULL_SHARE = 0.1  # a full collection runs when the last one took at most this share of the time since it ended,
LEFT_BEHIND = 100_000_000  # or when the step left this many bytes more resident than it found (after the young ones)
_LAST_FULL = {"seconds": 0.0, "ended": float("-inf")}  # the last full collection: how long it took, when it ended


def give_back(full: bool = False, before: int | None = None) -> None:
    """Collect the young generations' garbage and return free heap pages to the system where the C library can
    (glibc's ``malloc_trim``); ``full``: then every generation too, where the step left :data:`LEFT_BEHIND` bytes
    more resident than it found (``before``: its resident size at the start; unknown: always) or where the last full
    collection took at most :data:`FULL_SHARE` of the time since it ended. A full collection takes about 0.4 s in a
    kernel that has exported a model, over 0.5 s in a process holding many: after every step and sub-step, the test
    suite's workers spent most of a run there. The cyclic garbage it finds is big where a step leaves it (ORT's
    transformer optimizer's: 270 to 376 MB after MiniLM's), small elsewhere."""
    import gc
    import time

    gc.collect(1)
    _trim()
    start = time.perf_counter()
    now = resident_bytes()
    left = before is None or now is None or now - before > LEFT_BEHIND
    if full and (left or _LAST_FULL["seconds"] <= FULL_SHARE * (start - _LAST_FULL["ended"])):
        gc.collect()
        _trim()
        _LAST_FULL["ended"] = time.perf_counter()
        _LAST_FULL["seconds"] = _LAST_FULL["ended"] - start


def _trim() -> None:
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
