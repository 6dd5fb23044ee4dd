"""AWQ (activation-aware weight quantization, Lin et al. 2023) as a pass before ONNX Runtime's INT4 quantizer.

ONNX Runtime ships AWQ only through NVIDIA's ModelOpt (``nvidia_awq``: CUDA, a dataset download); its CPU
quantizer has none, so this pass writes it on the graph. For each weight MatMul ``y = x @ W`` it measures the mean
magnitude of each input channel on calibration inputs, and searches ``alpha`` in 0, 0.1, ..., 1 for the channel
scales ``s = mean|x| ** alpha`` that minimise the layer's output error once ``W * s`` is rounded to INT4 blocks:
salient channels (large activations) get finer steps. The weight is stored as ``W * s`` and the input divided by
``s`` through a ``Mul`` inserted before the MatMul (one elementwise op per layer; ``alpha = 0`` leaves a layer as
it was). Round-to-nearest then writes the MatMulNBits blocks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

ALPHAS = tuple(a / 10 for a in range(11))
ROWS = 4096  # activation rows kept per layer for the search


def fake_int4(w: np.ndarray, block: int) -> np.ndarray:
    """``w`` [K, N] rounded as symmetric INT4 blocks of ``block`` rows along K (MatMulNBits' layout), in float, as
    ONNX Runtime's symmetric blocks round (MLAS: the scale is the block's signed extreme over -8)."""
    k, n = w.shape
    pad = (-k) % block
    blocks = np.pad(w, ((0, pad), (0, 0))).reshape(-1, block, n)
    extreme = np.take_along_axis(blocks, np.abs(blocks).argmax(axis=1)[:, None, :], axis=1)
    scale = extreme / -8.0
    scale[scale == 0] = 1.0
    return (np.clip(np.round(blocks / scale), -8, 7) * scale).reshape(-1, n)[:k]


def rescale(model: Any, calib: list[dict[str, Any]], block: int, skip: set[str], scratch: Path) -> dict[str, float]:
    """``model`` (an ONNX proto, changed in place) with AWQ's channel scales folded in; the ``alpha`` kept per
    MatMul (0: unchanged). ``skip``: MatMuls left alone (kept in float or at 8 bits)."""
    from onnx import helper, numpy_helper

    from ...runtime.onnxedit import save_proto
    from ..parity.localize import run_all_each

    inits = {i.name: i for i in model.graph.initializer}
    uses: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1
    targets = [n for n in model.graph.node if n.op_type == "MatMul" and n.name and n.name not in skip
               and len(n.input) == 2 and n.input[1] in inits and uses.get(n.input[1]) == 1
               and len(inits[n.input[1]].dims) == 2]
    if not targets or not calib:
        return {}
    path = scratch / "awq_source.onnx"
    save_proto(model, path, False)
    rows: dict[str, list[np.ndarray]] = {n.name: [] for n in targets}
    for item, outputs in zip(calib, run_all_each(path, calib)):
        values = {**item, **outputs}  # a MatMul may read a graph input
        for node in targets:
            x = values.get(node.input[0])
            if x is not None and x.shape[-1] == inits[node.input[1]].dims[0]:
                rows[node.name].append(np.asarray(x, np.float32).reshape(-1, x.shape[-1]))
    chosen: dict[str, float] = {}
    rng = np.random.default_rng(0)
    for node in targets:
        if not rows[node.name]:
            continue
        x = np.concatenate(rows[node.name])
        x = x[rng.choice(len(x), ROWS, replace=False)] if len(x) > ROWS else x
        stored = numpy_helper.to_array(inits[node.input[1]])
        w = stored.astype(np.float32)
        magnitude = np.abs(x).mean(axis=0)
        magnitude = np.maximum(magnitude, 1e-4 * magnitude.max() + 1e-12)  # a channel idle on calibration: no 1/0
        reference = x @ w
        best, best_alpha, best_s = np.inf, 0.0, None
        for alpha in ALPHAS:
            s = magnitude ** alpha
            s = s / np.sqrt(s.max() * s.min())
            error = float(np.mean((x @ (fake_int4(w * s[:, None], block) / s[:, None]) - reference) ** 2))
            if error < best:
                best, best_alpha, best_s = error, alpha, s
        chosen[node.name] = best_alpha
        if best_alpha == 0 or best_s is None:
            continue
        weight = inits[node.input[1]]
        weight.CopyFrom(numpy_helper.from_array((w * best_s[:, None]).astype(stored.dtype), weight.name))
        inverse = f"{node.name}_awq_inverse_scale"
        model.graph.initializer.append(numpy_helper.from_array((1.0 / best_s).astype(stored.dtype), inverse))
        scaled = f"{node.input[0]}_awq_{node.name}"
        at = list(model.graph.node).index(node)
        model.graph.node.insert(at, helper.make_node("Mul", [node.input[0], inverse], [scaled],
                                                     name=f"{node.name}_awq_scale"))
        node.input[0] = scaled
    return chosen
