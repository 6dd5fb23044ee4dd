"""Outlier channels kept in float for dynamic INT8: a transformer's activations carry a few channels far larger than
the rest (BERT's layer norms write ~28 in one channel of the [CLS] token where the others stay under 3), and dynamic
INT8 gives a whole tensor one scale, so every other value loses most of its resolution. Measured on the file's own
sample, each MatMul whose input has such channels is split: the input with those channels zeroed goes to the INT8
MatMul, the channels alone to a float MatMul of the matching weight rows, and the two are added (the float path
is exact, the rest gets a scale set by its own range). ``quantize()`` applies it by default
(``outlier_channels="auto"``); the recipe says how many channels of how many inputs. LLM.int8() (Dettmers et al.,
2022) decomposes the same way per token; here the channels are chosen once, from the sample."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...results.variant import Recipe

RATIO = 8.0  # a channel is an outlier when its largest magnitude is over RATIO times the median channel's
PER_INPUT = 3  # the largest outlier channels split per MatMul input (most inputs have one or two; padding one more)
SUFFIX = "_outlier_channels"  # the float MatMuls' names end so: ORT's quantizer is told to leave them alone
MEASURED_UP_TO = 2**30  # bytes of a file whose channels are measured (a model, a copy with outputs, a session)


def split(path: Path, feed: dict[str, np.ndarray]) -> tuple[list[str], Recipe]:
    """Split, in the file at ``path`` (fp32, rewritten in place), every MatMul with a constant 2-D weight whose
    input has outlier channels on ``feed`` (:data:`RATIO`, at most :data:`PER_INPUT` per input). Returns the float
    MatMuls' names (for the quantizer's exclusions) and the recipe's line (empty where nothing was split). A file
    over :data:`MEASURED_UP_TO` bytes is left as it is (the measuring run holds the graph twice more), and says so."""
    import onnx

    from ...runtime.onnxedit import save_proto

    if path.stat().st_size > MEASURED_UP_TO:
        return [], {"outlier_channels": {"rule": RULE, "not_measured": f"over {MEASURED_UP_TO >> 30} GiB"}}
    model = onnx.load(str(path))
    readers = _weight_readers(model)
    if not readers:
        return [], {}
    try:
        ranges = _channel_ranges(model, list(readers), feed)
    except Exception as exc:  # noqa: BLE001 - every channel in INT8, as without the split; the recipe says why
        from ...errors import first_line

        return [], {"outlier_channels": {"rule": RULE, "not_measured": f"{type(exc).__name__}: {first_line(exc)}"}}
    chosen: dict[str, np.ndarray] = {}
    for name, nodes in readers.items():
        channels = _outliers(ranges.get(name), int(nodes[0][1].dims[0]))
        if channels is not None:
            chosen[name] = channels
    if not chosen:
        return [], {}
    floats = _rewrite(model, readers, chosen)
    save_proto(model, path, False)
    worst = max(float(ranges[n][c].max() / np.median(ranges[n])) for n, c in chosen.items())
    return floats, {"outlier_channels": {
        "rule": RULE, "inputs": len(chosen), "matmuls": len(floats),
        "channels": int(sum(len(c) for c in chosen.values())), "largest_ratio": round(worst, 1)}}


RULE = (f"channels of a MatMul's input over {RATIO:g}x its median channel's range on the sample (at most {PER_INPUT} "
        "per input) computed in float beside the INT8 MatMul")


def described(path: Path) -> Recipe:
    """The recipe's line for a file :func:`split` made (read from its float MatMuls' names), empty if none."""
    from ...runtime.onnxfile import load_proto

    floats = sum(n.name.endswith(SUFFIX) for n in load_proto(path).graph.node)
    return {"outlier_channels": {"rule": RULE, "matmuls": floats}} if floats else {}


def _weight_readers(model: Any) -> dict[str, list[tuple[Any, Any]]]:
    """Each activation read by MatMuls with a constant fp32 2-D weight: those MatMuls and their weights' protos
    (read as arrays only where a split needs their rows)."""
    inits = {i.name: i for i in model.graph.initializer}
    readers: dict[str, list[tuple[Any, Any]]] = {}
    for node in model.graph.node:
        if node.input and node.input[0] in inits:  # a constant times a constant: nothing measured at run time
            continue
        weight = inits.get(node.input[1]) if node.op_type == "MatMul" and node.domain in ("", "ai.onnx") and \
            len(node.input) == 2 else None
        if weight is not None and len(weight.dims) == 2 and weight.data_type == 1:  # FLOAT
            readers.setdefault(node.input[0], []).append((node, weight))
    return readers


def _channel_ranges(model: Any, names: list[str], feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The largest magnitude of each channel (last axis) of each named activation, the model run on ``feed``."""
    from onnx import TensorProto, helper

    from ...runtime.sessions import graph_session
    from ...runtime.shapes import cast_feed

    inputs = {i.name for i in model.graph.input}
    outputs = {o.name for o in model.graph.output}
    added = [n for n in names if n not in inputs and n not in outputs]
    model.graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in added)
    try:
        session = graph_session(model, level="basic", prepack=False)  # run twice: no time spent fusing or packing
    finally:
        del model.graph.output[len(model.graph.output) - len(added):]
    asked = [n for n in names if n not in inputs]
    ranges: dict[str, np.ndarray] = {}
    # padded rows too: a batch of texts is padded, and padding tokens write outliers of their own (MiniLM's [PAD]
    # one channel at 10, which the sample's real tokens never show); a model without a mask runs its sample once
    for one in _with_padding(feed):
        one = cast_feed(session, one)
        values = dict(zip(asked, session.run(asked, one)))
        values.update({n: one[n] for n in names if n in inputs and n in one})
        for n, v in values.items():
            if np.ndim(v) >= 1 and np.size(v):
                top = np.abs(np.asarray(v, np.float32)).reshape(-1, v.shape[-1]).max(axis=0)
                ranges[n] = np.maximum(ranges[n], top) if n in ranges and ranges[n].shape == top.shape else top
    return ranges


def _with_padding(feed: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """The sample, and where it has an attention mask, the sample right-padded to varied lengths."""
    from ...runtime.shapes import right_padded

    padded = right_padded(feed)
    return [feed] if padded is feed else [feed, padded]


def _outliers(ranges: np.ndarray | None, width: int) -> np.ndarray | None:
    """The channels to keep in float (sorted), or None. (Splitting only where the rest's range falls 1.3x or 2x
    saved a third of the splits on MiniLM and lost accuracy on short texts: 0.9939 -> 0.9899 / 0.9874.)"""
    if ranges is None or ranges.shape != (width,) or width <= PER_INPUT:
        return None
    median = float(np.median(ranges))
    if median <= 0:
        return None
    over = np.flatnonzero(ranges > RATIO * median)
    chosen = over[np.argsort(-ranges[over])][:PER_INPUT]
    if not len(chosen):
        return None
    return np.sort(chosen)


def _rewrite(model: Any, readers: dict[str, list[tuple[Any, Any]]], chosen: dict[str, np.ndarray]) -> list[str]:
    """The split written into ``model``; returns the float MatMuls' names."""
    from onnx import helper, numpy_helper

    producer = {o: i for i, n in enumerate(model.graph.node) for o in n.output}
    index = {id(n): i for i, n in enumerate(model.graph.node)}
    taken = {i.name for i in model.graph.initializer} | {o for n in model.graph.node for o in n.output} | \
        {n.name for n in model.graph.node}
    after: dict[int, list[Any]] = {}  # new nodes after the node at this index (-1: before every node)
    floats = []
    for name, channels in chosen.items():
        key = _unique(taken, name, ("_mask", "_channels", "_rest", "_outliers"))
        mask = np.ones(readers[name][0][1].dims[0], np.float32)
        mask[channels] = 0
        model.graph.initializer.extend([numpy_helper.from_array(mask, f"{key}_mask"),
                                        numpy_helper.from_array(channels.astype(np.int64), f"{key}_channels")])
        made_by = producer.get(name, -1)  # the split of a tensor is drawn with what made it (a norm, a GELU)
        after.setdefault(made_by, []).extend(_scoped(model.graph.node[made_by] if made_by >= 0 else None, [
            helper.make_node("Mul", [name, f"{key}_mask"], [f"{key}_rest"], name=f"{key}_rest"),
            helper.make_node("Gather", [name, f"{key}_channels"], [f"{key}_outliers"], axis=-1,
                             name=f"{key}_outliers")]))
        for node, weight in readers[name]:
            out = node.output[0]
            own = _unique(taken, node.name or out, ("_outlier_rows", "_int8_part", "_float_part", "_parts", SUFFIX))
            rows = numpy_helper.to_array(weight)[channels]
            model.graph.initializer.append(numpy_helper.from_array(rows, f"{own}_outlier_rows"))
            node.input[0], node.output[0] = f"{key}_rest", f"{own}_int8_part"
            floats.append(f"{own}{SUFFIX}")
            after.setdefault(index[id(node)], []).extend(_scoped(node, [
                helper.make_node("MatMul", [f"{key}_outliers", f"{own}_outlier_rows"], [f"{own}_float_part"],
                                 name=floats[-1]),
                helper.make_node("Add", [f"{own}_int8_part", f"{own}_float_part"], [out], name=f"{own}_parts")]))
    nodes = list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(after.get(-1, []))
    for i, node in enumerate(nodes):
        model.graph.node.append(node)
        model.graph.node.extend(after.get(i, []))
    return floats


def _scoped(node: Any, nodes: list[Any]) -> list[Any]:
    """``nodes`` in the PyTorch module of ``node`` (its exporter's scopes: the graph view and ``compare()`` group by
    them; none where it has none, the quantizer's :func:`~onnx_nb.runtime.scopes.carry_scopes` places them)."""
    from ...runtime.scopes import SCOPES, scopes_of

    scopes = scopes_of(node) if node is not None else None
    for node in nodes if scopes else ():
        node.metadata_props.add(key=SCOPES, value=scopes)
    return nodes


def _unique(taken: set[str], name: str, suffixes: tuple[str, ...]) -> str:
    """A prefix from ``name`` that, with each of ``suffixes``, names nothing in ``taken`` (which gets them); a
    TorchScript name keeps its path (``/model/encoder/layer.0/...``: the node's module is read from it)."""
    base = name or "x"
    key, n = base, 0
    while any(key + s in taken for s in suffixes):
        n += 1
        key = f"{base}_{n}"
    taken.update(key + s for s in suffixes)
    return key
