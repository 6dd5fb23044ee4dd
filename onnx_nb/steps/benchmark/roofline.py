"""How far a latency row is from what this machine can do: the work it did (two operations per multiply-accumulate
of its matrix products and attention at the row's shapes, counted from the graph: ``inspect.structure.macs_at``) over
its p50, against this machine's peak for that arithmetic, measured once per process and thread count by a short
kernel: ONNX Runtime's own ``MatMul`` on 1024 x 1024 fp32 matrices, ``MatMulInteger`` (uint8 x int8) for a file whose
products run in INT8. The peak is what ONNX Runtime's best kernel reaches here, not the CPU's datasheet figure; a row
at 0.5 leaves half of it on the table (attention, layout, the operators between the products).

Every row of a model is given the work of one file's graph at that shape (the first file of the table: the export),
so a fused or quantized variant is judged on the same arithmetic as its parent, and PyTorch's row on it too."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np

SIDE = 1024  # the peak kernel's matrices: SIDE x SIDE x SIDE multiply-accumulates
INT8_OPS = ("MatMulInteger", "QLinearMatMul", "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "QAttention",
            "QLinearConv", "ConvInteger")
_PEAKS: dict[tuple[str, int], float] = {}


def work_gops(path: Path, feed: dict[str, np.ndarray]) -> float | None:
    """Billions of operations (2 x multiply-accumulates) one run of the file at ``path`` does on ``feed``'s shapes;
    None where the graph's shapes cannot be followed there."""
    from ...runtime.skim import skim
    from ..inspect.structure import macs_at

    try:
        proto, _ = skim(path)  # the graph without its weights' data: shapes are all the count needs
        macs, _unknown = macs_at(proto, {name: list(value.shape) for name, value in feed.items()})
    except Exception:  # noqa: BLE001 - a graph shape inference cannot follow: no work figure, said by its absence
        return None
    return 2 * macs / 1e9 if macs else None


def int8_file(path: Path) -> bool:
    """Whether the file's matrix products run in INT8 (its peak is the INT8 kernel's)."""
    from ...runtime.skim import skim

    try:
        proto, _ = skim(path)
    except Exception:  # noqa: BLE001 - unreadable here: judged as fp32
        return False
    return any(n.op_type in INT8_OPS for n in proto.graph.node)


def peak_gops(kind: str = "fp32", threads: int | None = None) -> float:
    """This machine's peak operations per second (billions) for ``kind`` ("fp32", "int8") with ``threads`` intra-op
    threads (ONNX Runtime's default where None): the best of five runs of a 1024^3 product, after two untimed."""
    key = (kind, threads or 0)
    if key not in _PEAKS:
        import onnx
        from onnx import TensorProto, helper, numpy_helper

        from ...runtime.sessions import graph_session

        rng = np.random.default_rng(0)
        a: np.ndarray
        b: np.ndarray
        if kind == "int8":
            a = rng.integers(0, 256, (SIDE, SIDE), dtype=np.uint8)
            b = rng.integers(-128, 128, (SIDE, SIDE), dtype=np.int8)
            node, out = helper.make_node("MatMulInteger", ["a", "b"], ["y"]), TensorProto.INT32
            elem = TensorProto.UINT8
        else:
            a = rng.standard_normal((SIDE, SIDE), dtype=np.float32)
            b = rng.standard_normal((SIDE, SIDE), dtype=np.float32)
            node, out, elem = helper.make_node("MatMul", ["a", "b"], ["y"]), TensorProto.FLOAT, TensorProto.FLOAT
        graph = helper.make_graph([node], "peak", [helper.make_tensor_value_info("a", elem, [SIDE, SIDE])],
                                  [helper.make_tensor_value_info("y", out, [SIDE, SIDE])],
                                  [numpy_helper.from_array(b, "b")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = min(model.ir_version, onnx.IR_VERSION, 10)
        session = graph_session(model, threads=threads)
        for _ in range(2):
            session.run(None, {"a": a})
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            session.run(None, {"a": a})
            best = min(best, time.perf_counter() - start)
        _PEAKS[key] = 2 * SIDE ** 3 / best / 1e9
    return _PEAKS[key]


def add_roofline(rows: list[Any], work: dict[str, float | None], int8: dict[str, bool],
                 threads: int | None) -> str:
    """Each CPU row of ``rows`` given ``work[row.shape]`` (billions of operations per run) and the share of this
    machine's peak its p50 reaches (``int8[row.variant]``: judged against the INT8 kernel's peak); the table's note
    (what the peaks are), "" where no row has a work figure."""
    done = False
    for row in rows:
        gops = work.get(row.shape)
        if gops is None or row.status != "ok" or not row.p50_ms or not row.backend.startswith(("ort:cpu", "torch")):
            continue
        row.work_gops = gops
        row.of_peak = gops / (row.p50_ms / 1e3) / peak_gops("int8" if int8.get(row.variant) else "fp32", threads)
        done = True
    if not done:
        return ""
    used = ", ".join(f"{kind} {value:.0f} G{'FLOP' if kind == 'fp32' else 'OP'}/s" for (kind, t), value in
                     sorted(_PEAKS.items()) if t == (threads or 0))
    return (f"of peak: the row's operations per second (work_gops: 2 x the multiply-accumulates of its matrix "
            f"products and attention at that shape, counted from the export's graph) over this machine's peak, "
            f"measured by ONNX Runtime's own {SIDE}^3 MatMul (MatMulInteger for INT8 files) on "
            f"{threads or os.cpu_count()} threads: {used}")
