"""ONNX Runtime's ``SkipLayerNormalization`` written back as ``Add`` + ``LayerNormalization`` where that runs faster.

ORT's transformer optimizer fuses each residual Add and LayerNorm into one ``SkipLayerNormalization``, and a session
at the default level fuses the pair again when it finds it. On some CPUs that fused kernel is the slow one: with
ONNX Runtime 1.32 on 2 cores of an AVX-512 Xeon it takes 1.2 ms on a ``[8, 128, 384]`` batch where ``Add`` +
``LayerNormalization`` take 0.22 ms, so the 12 of all-MiniLM-L6-v2 cost 19% of its INT8 run. The rewrite writes the
pair with the norm's axis counted from the front (``axis=2``), which the session's fusion does not match, so the
file keeps it. Whether it is faster is measured on this machine (:func:`timings`, once per hidden size), never
assumed: where the fused kernel wins, files keep it.
"""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from ...results.variant import Recipe

FASTER_BY = 1.2  # rewrite only when the pair is clearly faster
MARK = "/skipnorm_"  # in the names of the nodes written here


def written(proto: Any) -> list[str]:
    """The nodes :func:`unfuse` wrote: a quantizer keeps them in float, as it kept the fused op (static QDQ would
    otherwise quantize every residual Add and norm, and a BERT encoder loses its accuracy there)."""
    return [n.name for n in proto.graph.node if MARK in n.name]


def timings(hidden: int, threads: int = 0) -> tuple[float, float]:
    """(fused ms, unfused ms) of one norm on ``[8, 128, hidden]`` in ONNX Runtime on CPU, each timed after warm-up
    runs, the two taking turns (measured once per size: :func:`measured`)."""
    fused, unfused, _load = timed_with_load(hidden, threads)
    return fused, unfused


@functools.lru_cache(maxsize=8)
def timed_with_load(hidden: int, threads: int = 0) -> tuple[float, float, float]:
    """:func:`timings` and the machine's 1-minute load average when they were taken (-1 where the OS has none)."""
    from onnx import helper, numpy_helper

    from ...runtime.sessions import graph_session

    rng = np.random.default_rng(0)
    x, skip = (rng.standard_normal((8, 128, hidden)).astype(np.float32) for _ in range(2))
    weights = [numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32), n) for n in ("g", "b")]
    graphs = {
        "fused": [helper.make_node("SkipLayerNormalization", ["x", "s", "g", "b"], ["y", "", "", "sum"],
                                   domain="com.microsoft", epsilon=1e-12)],
        "unfused": [helper.make_node("Add", ["x", "s"], ["sum"]),
                    helper.make_node("LayerNormalization", ["sum", "g", "b"], ["y"], epsilon=1e-12, axis=2)],
    }
    sessions = {}
    for name, nodes in graphs.items():
        graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info(n, 1, [8, 128, hidden]) for n in "xs"],
                                  [helper.make_tensor_value_info(n, 1, None) for n in ("y", "sum")], weights)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                        helper.make_opsetid("com.microsoft", 1)])
        sessions[name] = graph_session(model, threads=threads, level=None)
    feed = {"x": x, "s": skip}
    best = {name: float("inf") for name in sessions}
    for _ in range(5):
        for name, sess in sessions.items():
            sess.run(None, feed)  # untimed: the other session's threads may still spin
            start = time.perf_counter()
            for _ in range(10):
                sess.run(None, feed)
            best[name] = min(best[name], (time.perf_counter() - start) / 10 * 1e3)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else -1.0
    return best["fused"], best["unfused"], load


def unfuse(proto: Any) -> int:
    """Each ``SkipLayerNormalization`` (no mean / inverse-std outputs read) of known rank becomes ``Add`` (+ its
    bias) + ``LayerNormalization`` over the last axis counted from the front; returns how many."""
    from onnx import helper

    ranks = _ranks(proto)
    read = {i for n in proto.graph.node for i in n.input} | {o.name for o in proto.graph.output}
    done = 0
    nodes: list[Any] = []
    for node in proto.graph.node:
        outs = list(node.output) + [""] * (4 - len(node.output))
        rank = ranks.get(node.input[0], 0) if node.input else 0
        if node.op_type != "SkipLayerNormalization" or node.domain != "com.microsoft" or rank < 2 or \
                any(o and o in read for o in outs[1:3]):
            nodes.append(node)
            continue
        eps = next((a.f for a in node.attribute if a.name == "epsilon"), 1e-12)
        base = node.name or outs[0]
        total = outs[3] or f"{base}/sum"
        inputs = list(node.input) + [""] * (5 - len(node.input))
        if inputs[4]:  # the bias: added before the norm, as the fused op does
            nodes.append(helper.make_node("Add", inputs[:2], [f"{base}/sum_nobias"], name=f"{base}{MARK}add"))
            nodes.append(helper.make_node("Add", [f"{base}/sum_nobias", inputs[4]], [total], name=f"{base}{MARK}bias"))
        else:
            nodes.append(helper.make_node("Add", inputs[:2], [total], name=f"{base}{MARK}add"))
        norm_inputs = [total, inputs[2]] + ([inputs[3]] if inputs[3] else [])
        nodes.append(helper.make_node("LayerNormalization", norm_inputs, [outs[0]], name=f"{base}{MARK}norm",
                                      axis=rank - 1, epsilon=eps))
        done += 1
    if done:
        proto.graph.ClearField("node")
        proto.graph.node.extend(nodes)
    return done


def _ranks(proto: Any) -> dict[str, int]:
    """Tensor name -> rank, from ONNX Runtime's symbolic shape inference (which knows its contrib ops: ONNX's own
    leaves the outputs of Attention or EmbedLayerNormalization unknown); empty when it fails."""
    try:
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

        inferred = SymbolicShapeInference.infer_shapes(proto, auto_merge=True)
    except Exception:  # noqa: BLE001 - ranks unknown: nothing is rewritten
        return {}
    return {v.name: len(v.type.tensor_type.shape.dim) for v in
            [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]
            if v.type.tensor_type.HasField("shape")}


def apply(path: Path, hidden: int, recipe: Recipe) -> None:
    """Rewrite the file at ``path`` in place when the unfused pair is measured faster; the timings and what was done
    go into ``recipe["skip_layernorm"]``."""
    from ...runtime.onnxfile import load_proto

    proto = load_proto(path)
    if not any(n.op_type == "SkipLayerNormalization" for n in proto.graph.node):
        return
    fused, unfused, load = timed_with_load(hidden)
    note: dict[str, Any] = {"fused_ms": round(fused, 3), "unfused_ms": round(unfused, 3)}
    if load >= 0:  # a busy machine makes a micro-benchmark less telling: the reader sees how busy it was
        note["load"] = f"{load:.2f} on {os.cpu_count()} cores"
    if fused > FASTER_BY * unfused and any(o.domain in ("", "ai.onnx") and o.version >= 17  # LayerNormalization
                                            for o in proto.opset_import):
        import onnx

        count = unfuse(proto)
        if count:
            onnx.save(proto, str(path))
        note["rule"] = (f"{count} SkipLayerNormalization written as Add + LayerNormalization: on this machine the pair "
                        f"ran {fused / unfused:.1f}x faster on [8, 128, {hidden}]")
    else:
        note["rule"] = "SkipLayerNormalization kept: its kernel is not slower here"
    recipe["skip_layernorm"] = note
