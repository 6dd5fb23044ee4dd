"""How far a latency row is from what this machine can do: the work it did (two operations per multiply-accumulate
of its matrix products and attention at the row's shapes, counted from the graph: ``inspect.structure.macs_at``) over
its p50, against this machine's peak for that arithmetic, measured once per process and thread count by a short
kernel: ONNX Runtime's own ``MatMul`` on 1024 x 1024 fp32 matrices, ``MatMulInteger`` (uint8 x int8) for a file whose
products run in INT8. The peak is what ONNX Runtime's best kernel reaches here, not the CPU's datasheet figure; a row
at 0.5 leaves half of it on the table (attention, layout, the operators between the products). A decode step reads
every weight and its cache once for one token: it is judged on the bytes it moves (``moved_gb``) against the read
bandwidth ONNX Runtime reaches here on that pattern (its ``MatMul`` of one row by a 256 MB weight given unpacked). A
row can pass it: a file's prepacked weights read faster, and a model smaller than the CPU's last-level cache (300 MB
on some server CPUs) is partly read from it.

Every row of a model is given the work of one file's graph at that shape (the first file of the table: the export),
so a fused or quantized variant is judged on the same arithmetic as its parent, and PyTorch's row on it too."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np

SIDE = 1024  # the peak kernel's matrices: SIDE x SIDE x SIDE multiply-accumulates
READ_SIDE = 8192  # the bandwidth kernel's weight: READ_SIDE x READ_SIDE fp32, 256 MB
INT8_OPS = ("MatMulInteger", "QLinearMatMul", "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "QAttention",
            "QLinearConv", "ConvInteger")
_PEAKS: dict[tuple[str, int], float] = {}  # ("fp32" | "int8" | "read", threads) -> billions a second


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


def bandwidth_gbs(threads: int | None = None) -> float:
    """The read bandwidth (GB/s) ONNX Runtime reaches here with ``threads`` on a decode step's pattern: its ``MatMul``
    of one row by a 256 MB fp32 weight handed to it as an input (unpacked), the best of five runs after one untimed."""
    key = ("read", threads or 0)
    if key not in _PEAKS:
        from onnx import TensorProto, helper

        from ...runtime.sessions import graph_session

        side = READ_SIDE
        node = helper.make_node("MatMul", ["x", "w"], ["y"])
        graph = helper.make_graph([node], "read", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, side]),
                                                   helper.make_tensor_value_info("w", TensorProto.FLOAT, [side, side])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, side])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 9
        session = graph_session(model, threads=threads)
        feed = {"x": np.ones((1, side), np.float32), "w": np.ones((side, side), np.float32)}
        session.run(None, feed)
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            session.run(None, feed)
            best = min(best, time.perf_counter() - start)
        _PEAKS[key] = side * side * 4 / best / 1e9
    return _PEAKS[key]


def add_bandwidth(rows: list[Any], threads: int | None) -> str:
    """Each decode row with the bytes it moves (``moved_gb``) given its share of this machine's read bandwidth
    (``of_peak``); the table's note, "" where no row has them."""
    done = [r for r in rows if r.moved_gb and r.status == "ok" and r.p50_ms]
    for row in done:
        row.of_peak = row.moved_gb / (row.p50_ms / 1e3) / bandwidth_gbs(threads)
    if not done:
        return ""
    return (f"of peak, on a decode row: the bytes it moves (moved_gb: the file's weights, or the model's, and the "
            f"cache it reads) per second over this machine's read bandwidth, {bandwidth_gbs(threads):.1f} GB/s "
            f"measured by ONNX Runtime's MatMul of one row by a 256 MB weight given unpacked, on "
            f"{threads or os.cpu_count()} threads (prepacked weights, or a model that fits the CPU's last-level "
            "cache, can read faster: over 100%)")
