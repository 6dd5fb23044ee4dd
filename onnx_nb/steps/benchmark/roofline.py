"""How far a latency row is from what this machine can do: the work it did (two operations per multiply-accumulate
of its matrix products and attention at the row's shapes, counted from the graph: ``inspect.structure.macs_at``) over
its p50, against this machine's peak for that arithmetic, measured once per process and thread count by a short
kernel: ONNX Runtime's own ``MatMul`` on 1024 x 1024 fp32 matrices, ``MatMulInteger`` (uint8 x int8) for a file whose
products run in INT8. The peak is what ONNX Runtime's best kernel reaches here, not the CPU's datasheet figure; a row
at 0.5 leaves half of it on the table (attention, layout, the operators between the products). A decode step reads
every weight and its cache once for one token: it is judged on the bytes it moves (``moved_gb``) against the read
bandwidth ONNX Runtime reaches here on that pattern (its ``MatMul`` of one row by a 256 MB weight given unpacked),
for a model of at least :data:`BANDWIDTH_ABOVE` (a smaller one is read from the CPU's caches). A row can pass it: a
file's prepacked weights read faster, and a model smaller than the CPU's last-level cache (300 MB on some server CPUs)
is partly read from it.

Every row of a model is given the work of the graph its variants were made from (its lineage's root: the export), so
a fused or quantized variant is judged on its parent's arithmetic; PyTorch's rows too, where every file of the table
comes from one root. Only rows on the CPU (ONNX Runtime's, PyTorch's) are judged: the peaks are the CPU's."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

SIDE = 1024  # the peak kernel's matrices: SIDE x SIDE x SIDE multiply-accumulates
READ_SIDE = 8192  # the bandwidth kernel's weight: READ_SIDE x READ_SIDE fp32, 256 MB
BANDWIDTH_ABOVE = 100 * 10**6  # bytes a decode step moves before it is judged against the memory's bandwidth
SAMPLE_SECONDS = 0.02  # each timed sample of a kernel repeats it for at least this long
INT8_OPS = ("MatMulInteger", "QLinearMatMul", "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "QAttention",
            "QLinearConv", "ConvInteger", "QGemm")
CPU_BACKENDS = ("ort:cpu", "torch:cpu")
_PEAKS: dict[tuple[str, int], float] = {}  # ("fp32" | "int8" | "read", threads) -> billions a second


def work_gops(path: Path, feed: dict[str, np.ndarray]) -> float | None:
    """Billions of operations (2 x multiply-accumulates) one run of the file at ``path`` does on ``feed``'s shapes;
    None where the graph's shapes cannot be followed there (a product left uncounted would understate it)."""
    from ...runtime.skim import skim
    from ..inspect.structure import macs_at

    try:
        proto, _ = skim(path)  # the graph without its weights' data: shapes are all the count needs
        macs, unknown = macs_at(proto, {name: list(value.shape) for name, value in feed.items()})
    except Exception:  # noqa: BLE001 - a graph shape inference cannot follow: no work figure, said by its absence
        return None
    return 2 * macs / 1e9 if macs and not unknown else None


def int8_file(path: Path) -> bool:
    """Whether the file's products run in INT8 (its peak is the INT8 kernel's): INT8 operators, or a static INT8
    file's DequantizeLinear of 8-bit weights, which ONNX Runtime fuses into INT8 products."""
    from onnx import TensorProto

    from ...runtime.skim import skim

    try:
        proto, _ = skim(path)
    except Exception:  # noqa: BLE001 - unreadable here: judged as fp32
        return False
    eight = {i.name for i in proto.graph.initializer if i.data_type in (TensorProto.INT8, TensorProto.UINT8)}
    return any(n.op_type in INT8_OPS or (n.op_type == "DequantizeLinear" and n.input[0] in eight)
               for n in proto.graph.node)


def _rate(make: Any, amount: float, threads: int | None) -> float:
    """Billions of ``amount`` a second the graph ``make()`` returns (model, feed) reaches: the best of five samples,
    each repeating the run for at least :data:`SAMPLE_SECONDS`, after one untimed run."""
    from ...runtime.sessions import graph_session

    model, feed = make()
    session = graph_session(model, threads=threads)
    start = time.perf_counter()
    session.run(None, feed)
    repeats = max(1, int(SAMPLE_SECONDS / max(time.perf_counter() - start, 1e-6)))
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeats):
            session.run(None, feed)
        best = min(best, (time.perf_counter() - start) / repeats)
    return amount / best / 1e9


def _graph(op: str, inputs: list[tuple[str, int, list[int]]], output: tuple[str, int, list[int]],
           weights: list[Any]) -> Any:
    from onnx import helper

    graph = helper.make_graph([helper.make_node(op, [i[0] for i in inputs] + [w.name for w in weights], ["y"])],
                              op, [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*output)], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def peak_gops(kind: str = "fp32", threads: int | None = None) -> float:
    """This machine's peak operations per second (billions) for ``kind``: "fp32" (ONNX Runtime's MatMul), "int8"
    (MatMulInteger, uint8 x int8), each a 1024^3 product, with ``threads`` intra-op threads."""
    from onnx import TensorProto, numpy_helper

    from ...runtime.providers import threads_for

    key = (kind, threads_for(threads) or 0)
    if key not in _PEAKS:
        rng = np.random.default_rng(0)
        square = [SIDE, SIDE]

        def make() -> Any:
            if kind == "int8":
                weight = numpy_helper.from_array(rng.integers(-128, 128, square, dtype=np.int8), "b")
                return _graph("MatMulInteger", [("a", TensorProto.UINT8, square)], ("y", TensorProto.INT32, square),
                              [weight]), {"a": rng.integers(0, 256, square, dtype=np.uint8)}
            weight = numpy_helper.from_array(rng.standard_normal(square, dtype=np.float32), "b")
            return _graph("MatMul", [("a", TensorProto.FLOAT, square)], ("y", TensorProto.FLOAT, square),
                          [weight]), {"a": rng.standard_normal(square, dtype=np.float32)}

        _PEAKS[key] = _rate(make, 2 * SIDE ** 3, threads)
    return _PEAKS[key]


def bandwidth_gbs(threads: int | None = None) -> float:
    """The read bandwidth (GB/s) ONNX Runtime reaches here with ``threads`` on a decode step's pattern: its ``MatMul``
    of one row by a 256 MB fp32 weight handed to it as an input (unpacked)."""
    from onnx import TensorProto

    from ...runtime.providers import threads_for

    key = ("read", threads_for(threads) or 0)
    if key not in _PEAKS:
        side = READ_SIDE

        def make() -> Any:
            feed = {"x": np.ones((1, side), np.float32), "w": np.ones((side, side), np.float32)}
            return _graph("MatMul", [("x", TensorProto.FLOAT, [1, side]), ("w", TensorProto.FLOAT, [side, side])],
                          ("y", TensorProto.FLOAT, [1, side]), []), feed

        _PEAKS[key] = _rate(make, side * side * 4, threads)
    return _PEAKS[key]


def add_roofline(rows: list[Any], work: dict[tuple[str, str], float | None], roots: dict[str, str],
                 int8: dict[str, bool], threads: int | None) -> str:
    """Each CPU row of ``rows`` given the work of its lineage's root at its shape (``work[(root, shape)]``,
    ``roots``: variant -> root; PyTorch's rows the one root's where there is one) and the share of this machine's peak
    its p50 reaches (``int8[variant]``: against the INT8 kernel's); the table's note, "" where no row has them. Rows
    that skip padding are left out: their work is less than the padded shape's."""
    from ...results.latency import skips_padding
    from ...runtime.providers import threads_shown

    distinct = set(roots.values())
    one_root = next(iter(distinct)) if len(distinct) == 1 else None
    kinds: set[str] = set()
    for row in rows:
        root = roots.get(row.variant) or (one_root if row.backend == "torch:cpu" else None)
        gops = work.get((root, row.shape)) if root else None
        if gops is None or row.status != "ok" or not row.p50_ms or row.backend not in CPU_BACKENDS or \
                skips_padding(row):
            continue
        kind = "int8" if int8.get(row.variant) else "fp32"
        row.work_gops = gops
        row.of_peak = gops / (row.p50_ms / 1e3) / peak_gops(kind, threads)
        kinds.add(kind)
    if not kinds:
        return ""
    used = ", ".join(f"{kind} {peak_gops(kind, threads):.0f} G{'FLOP' if kind == 'fp32' else 'OP'}/s"
                     for kind in sorted(kinds))
    return (f"of peak: the row's operations per second (work_gops: 2 x the multiply-accumulates of its matrix "
            f"products and attention at that shape, counted from the graph its file was made from) over this "
            f"machine's peak, measured by ONNX Runtime's own {SIDE}^3 MatMul (MatMulInteger for INT8 files), "
            f"intra-op threads {threads_shown(threads)}: {used}")


def add_bandwidth(rows: list[Any], threads: int | None) -> str:
    """Each CPU decode row moving at least :data:`BANDWIDTH_ABOVE` (``moved_gb``) given its share of this machine's
    read bandwidth (``of_peak``); the table's note, "" where no row has them. Measure :func:`bandwidth_gbs` before
    the rows' sessions open (its 256 MB are then not held beside them)."""
    from ...runtime.providers import threads_shown

    done = [r for r in rows if r.moved_gb and r.moved_gb * 1e9 >= BANDWIDTH_ABOVE and r.status == "ok" and r.p50_ms
            and r.backend in CPU_BACKENDS]
    for row in done:
        row.of_peak = row.moved_gb / (row.p50_ms / 1e3) / bandwidth_gbs(threads)
    if not done:
        return ""
    return (f"of peak, on a decode row: the bytes it moves (moved_gb: the file's weights, or the model's, and the "
            f"cache it reads) per second over this machine's read bandwidth, {bandwidth_gbs(threads):.1f} GB/s "
            f"measured by ONNX Runtime's MatMul of one row by a 256 MB weight given unpacked, intra-op threads "
            f"{threads_shown(threads)} (prepacked weights, or a model that fits the CPU's last-level "
            f"cache, can read faster: over 100%); models moving under {BANDWIDTH_ABOVE / 1e6:.0f} MB a step are "
            "read from the CPU's caches and not judged")
