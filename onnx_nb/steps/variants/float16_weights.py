"""ONNX Runtime's float32 -> float16 weight conversion (``onnxruntime.transformers.float16``, what ``quantize(...,
method="fp16")`` runs), computed in blocks with two masks instead of ORT's four full-size ``np.where`` passes and the
four gathers its debug messages make whether or not they print: 16 s of a 30 s fp16 conversion of a 2.15 GB model.
The numbers are ORT's own, bit for bit (``tests/test_variants.py`` compares them, edge values included): a nonzero
value nearer zero than ``min_positive_val`` becomes it with its sign, a finite one past ``max_finite_val`` becomes it
with its sign, NaN, zeros and infinities are kept; then the cast."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from .swaps import Swap

BLOCK = 1 << 20  # values per block: its temporaries stay in cache instead of a full-size array each


def to_float16(values: np.ndarray, min_positive_val: float = 5.96e-08, max_finite_val: float = 65504.0) -> np.ndarray:
    """``values`` (float32) as float16, as ORT's ``convert_np_to_float16`` gives them."""
    values = np.asarray(values)
    out = np.empty(values.shape, np.float16)
    flat, into = values.reshape(-1), out.reshape(-1)
    for start in range(0, flat.size, BLOCK):
        block = flat[start:start + BLOCK]
        size = np.abs(block)
        tiny = (size > 0) & (size < min_positive_val)
        huge = (size > max_finite_val) & (size < np.inf)
        if tiny.any() or huge.any():
            block = np.where(tiny, np.copysign(np.asarray(min_positive_val, block.dtype), block), block)
            block = np.where(huge, np.copysign(np.asarray(max_finite_val, block.dtype), block), block)
        into[start:start + BLOCK] = block
    return out


SWAP = Swap(to_float16)


@contextmanager
def fast_float16_weights() -> Iterator[None]:
    """ORT's float16 weight conversion done by :func:`to_float16` while the block runs (ORT's own put back when the
    last such block, in any thread, ends)."""
    from onnxruntime.transformers import float16

    with SWAP.active(float16, "convert_np_to_float16"):
        yield
