"""GPTQ's column updates, as the method defines them, for ONNX Runtime's GPTQ path.

ONNX Runtime's GPTQ (its bundled copy of Intel Neural Compressor, ``neural_compressor/weight_only.gptq``) stores the
weight as ``[in, out]`` and takes the upper Cholesky factor of the inverse Hessian, but reads that factor's column
below the diagonal (``Hinv1[i:, i]``, ``Hinv[i2:, i1:i2]``) where GPTQ reads its row: those entries are zero, so no
rounding error is ever pushed onto the columns not yet quantized and every block comes out as plain asymmetric
round-to-nearest (on all-MiniLM-L6-v2 its file carried the same bytes as ``algorithm="rtn_asym"``'s).
:func:`corrected` runs the quantizer with :func:`gptq` in its place: the same parameters and grid (per-group min/max,
the same damping and activation order), the updates read from the factor's rows. ONNX Runtime then writes the
result through ``quant_tensor``, which derives each block's grid again from the updated weights' own min and max and
so rounds some of them a second time; inside :func:`corrected` the blocks GPTQ rounded are written with GPTQ's own
integers, scales and zero points instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np


def _grid(weight: np.ndarray, maxq: int, symmetric: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per-column scale and zero point of ``weight`` (rows of one group), as ONNX Runtime's ``find_params`` makes
    them with ``mse=False``, ``perchannel=True``."""
    xmin = np.minimum(weight.min(axis=0), 0.0)
    xmax = np.maximum(weight.max(axis=0), 0.0)
    if symmetric:
        xmax = np.maximum(np.abs(xmin), xmax)
        xmin = np.where(xmin < 0, -xmax, xmin)
    flat = (xmin == 0) & (xmax == 0)
    xmin, xmax = np.where(flat, -1.0, xmin), np.where(flat, 1.0, xmax)
    scale = (xmax - xmin) / maxq
    zero = np.full(scale.shape, (maxq + 1) / 2) if symmetric else np.round(-xmin / scale)
    return scale, zero


def gptq(W: np.ndarray, H: np.ndarray, num_bits: int = 4, group_size: int = 32, scheme: str = "asym",
         blocksize: int = 128, percdamp: float = 0.01, actorder: bool = False, mse: bool = False,
         perchannel: bool = True) -> np.ndarray:
    """The fake-quantized weight ``[in, out]``: each input row rounded on its group's grid, its rounding error
    (scaled by the inverse Hessian's Cholesky factor) subtracted from the rows not yet rounded."""
    if mse or not perchannel:  # options onnx-nb never sets: ONNX Runtime's own function
        return _original()(W, H, num_bits, group_size, scheme, blocksize, percdamp, actorder, mse, perchannel)
    maxq, symmetric = 2**num_bits - 1, scheme == "sym"
    W = np.array(W, dtype=np.float64)
    H = np.array(H, dtype=np.float64)
    rows = W.shape[0]
    group_size = rows if group_size == -1 else group_size
    dead = np.diag(H) == 0
    H[dead, dead] = 1
    W[dead, :] = 0
    perm = np.argsort(np.diag(H))[::-1] if actorder else None
    if perm is not None:
        W, H = W[perm, :], H[perm, :][:, perm]
    H[np.arange(rows), np.arange(rows)] += percdamp * np.mean(np.diag(H))
    hinv = np.linalg.cholesky(np.linalg.inv(H)).T  # upper: row i holds what row i's error does to the rows after
    Q = np.zeros_like(W)
    codes = np.zeros(W.shape, dtype=np.uint8)
    scales, zeros = [], []
    scale = zero = np.zeros(W.shape[1])
    for i1 in range(0, rows, blocksize):
        i2 = min(i1 + blocksize, rows)
        block, errors, h = W[i1:i2].copy(), np.zeros((i2 - i1, W.shape[1])), hinv[i1:i2, i1:i2]
        for i in range(i2 - i1):
            if (i1 + i) % group_size == 0:  # the grid of the group this row starts, as GPTQ takes it
                scale, zero = _grid(W[i1 + i:i1 + i + group_size], maxq, symmetric)
                scales.append(scale)
                zeros.append(zero)
            w = block[i]
            code = np.clip(np.round(w / scale) + zero, 0, maxq)
            q = scale * (code - zero)
            Q[i1 + i], codes[i1 + i] = q, code
            err = (w - q) / h[i, i]
            block[i:] -= np.outer(h[i, i:], err)
            errors[i] = err
        W[i2:] -= hinv[i1:i2, i2:].T @ errors
    if perm is not None:  # groups of permuted rows are not the file's blocks: ONNX Runtime's writer rounds them
        return Q[np.argsort(perm)].astype(np.float32)
    result = Q.astype(np.float32)
    if _ACTIVE:  # inside corrected(): ONNX Runtime's writer is about to ask quant_tensor for this weight's blocks
        _ROUNDED[:] = [(result, codes, np.array(scales), np.array(zeros))]
    return result


_ROUNDED: list[tuple[np.ndarray, ...]] = []  # the last gptq() call's weight, integers, scales and zero points
_ACTIVE: list[bool] = []  # non-empty while corrected() has ONNX Runtime patched


def quant_tensor(data: np.ndarray, num_bits: int = 4, group_size: int = 32, scheme: str = "asym",
                 dtype: str = "int", ratio: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ONNX Runtime's ``quant_tensor`` (blocks ``[out * k_blocks, group_size]``, scale and zero point per block),
    which returns the integers and grid :func:`gptq` chose when ``data`` is its last weight (``[out, in]``, padded
    with zero rows to whole blocks), rather than deriving a grid again from it."""
    last = _ROUNDED.pop() if _ROUNDED else None
    if last is not None and dtype == "uint" and ratio == 1.0 and data.ndim == 2:
        weight, codes, scales, zeros = last
        rows, out = weight.shape
        blocks = -(-rows // group_size)
        if (data.shape == (out, blocks * group_size) and scales.shape == (blocks, out)
                and np.array_equal(data[:, :rows], weight.T) and not data[:, rows:].any()):
            padded = np.concatenate([codes, np.broadcast_to(zeros[-1], (blocks * group_size - rows, out))])
            return (padded.T.reshape(-1, group_size).astype(np.float64), scales.T.reshape(-1, 1),
                    zeros.T.reshape(-1, 1).astype(np.uint8))
    return _ORIGINAL_QUANT[0](data, num_bits, group_size, scheme, dtype, ratio)


_ORIGINAL_QUANT: list[Any] = []


_ORIGINAL: list[Any] = []  # ONNX Runtime's own gptq, kept the first time it is looked up


def _original() -> Any:
    if not _ORIGINAL:
        from onnxruntime.quantization.neural_compressor import weight_only

        _ORIGINAL.append(weight_only.gptq if weight_only.gptq is not gptq else None)
    return _ORIGINAL[0]


@contextlib.contextmanager
def corrected() -> Iterator[None]:
    """ONNX Runtime's GPTQ run with :func:`gptq` in place of its own column updates, its blocks written with
    GPTQ's own grid (:func:`quant_tensor`)."""
    from onnxruntime.quantization.neural_compressor import weight_only

    original = _original()
    if not _ORIGINAL_QUANT and weight_only.quant_tensor is not quant_tensor:
        _ORIGINAL_QUANT.append(weight_only.quant_tensor)
    weight_only.gptq, weight_only.quant_tensor = gptq, quant_tensor
    _ROUNDED.clear()
    _ACTIVE.append(True)
    try:
        yield
    finally:
        weight_only.gptq, weight_only.quant_tensor = original, _ORIGINAL_QUANT[0]
        _ROUNDED.clear()
        _ACTIVE.clear()


GROUP_BYTES = 256 << 20  # the activations one grouped run holds, over all the calibration items


class GroupedSession:
    """ONNX Runtime's GPTQ asks its session for one MatMul's input at a time, for each calibration item in turn:
    the whole model run once per MatMul input and item (a tiny CvT's 16 items: over ten minutes). This session
    answers such a call from one run of the item that computes the next inputs the quantizer will ask for (in the
    session's output order, which is the quantizer's), as many as fit in :data:`GROUP_BYTES` over all the items,
    each handed out once."""

    def __init__(self, session: Any, items: int) -> None:
        self._session = session
        self._names = [o.name for o in session.get_outputs()]
        self._items = max(1, items)
        self._group = 1  # outputs per run: from the last run's sizes
        self._kept: dict[tuple[str, int], Any] = {}
        self.runs = 0  # the model's runs this session made

    def _run(self, names: list[str], feed: Any, options: Any) -> Any:
        self.runs += 1
        return self._session.run(names, feed, options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    def run(self, names: Any, feed: Any, options: Any = None) -> Any:
        if not (isinstance(names, list) and len(names) == 1 and names[0] in self._names and isinstance(feed, dict)):
            return self._run(names, feed, options)
        key = (names[0], id(feed))
        if key not in self._kept:
            for stale in [k for k in self._kept if k[1] == id(feed)]:  # outputs the quantizer skipped
                del self._kept[stale]
            start = self._names.index(names[0])
            group = self._names[start:start + max(1, self._group)]
            values = self._run(group, feed, options)
            self._kept.update({(n, id(feed)): v for n, v in zip(group, values)})
            # the next group's size from these outputs' (the first run: one output, its size unknown before)
            self._group = max(1, GROUP_BYTES * len(values) // max(1, sum(v.nbytes for v in values) * self._items))
        return [self._kept.pop(key)]


@contextlib.contextmanager
def grouped_runs(items: int) -> Iterator[None]:
    """ONNX Runtime's GPTQ with its sessions answering from grouped runs (:class:`GroupedSession`) for ``items``
    calibration items."""
    import types

    from onnxruntime.quantization.neural_compressor import weight_only

    ort = weight_only.ort

    def session(*args: Any, **kwargs: Any) -> GroupedSession:
        return GroupedSession(ort.InferenceSession(*args, **kwargs), items)

    weight_only.ort = types.SimpleNamespace(**{**{k: getattr(ort, k) for k in dir(ort) if not k.startswith("__")},
                                               "InferenceSession": session})
    try:
        yield
    finally:
        weight_only.ort = ort
