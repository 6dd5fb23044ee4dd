"""A file laid out as transformers.js reads it (the generation shapes' ``web`` answer).

transformers.js (4.x) feeds a decoder's cache by the names Optimum gave it (``past_key_values.{i}.key`` in,
``present.{i}.key`` out: onnx-nb's names) and makes the first step's empty cache from the graph's own input shapes:
a named axis ``batch_size`` is the batch, any other named axis is 0, numbers are kept. So the batch axis must be named
``batch_size`` (onnx-nb names it ``batch``) and the heads and head size must be numbers. Only axis names change: the
graph computes what it computed.

A multi-query model (``config.multi_query``: GPTBigCode, Falcon) is fed one ``past_key_values.{i}.key_value`` per
layer, as Optimum wrote them: keys and values of the one key/value head side by side, ``[batch, sequence, 2 x head
size]``. Its file then takes and returns that, split into and joined from the graph's own keys and values by a few
added nodes (Split, Unsqueeze; Squeeze, Concat)."""

from __future__ import annotations

import re
from typing import Any

from ...errors import InvalidArgumentError
from ...runtime.facts import is_cache

BATCH = "batch_size"  # the name transformers.js reads as the batch when it makes an empty cache
KEYS_VALUES = re.compile(r"past_key_values\.\d+\.(key|value)")


def decoder_layout(proto: Any, config: Any = None, export: Any = None) -> None:
    """Rename, in place, the batch axis of a decoder's cache (and every input and output naming it the same) to
    ``batch_size``, and fuse a multi-query model's keys and values (``config.multi_query``); refuse a cache
    transformers.js would feed otherwise (states of fixed shape, heads not fixed)."""
    renamed: set[str] = set()
    for value in proto.graph.input:
        if not is_cache(value.name):
            continue
        dims = value.type.tensor_type.shape.dim
        if not KEYS_VALUES.fullmatch(value.name) or len(dims) != 4:
            raise InvalidArgumentError(
                f"The decoder's cache input {value.name} is not keys or values of [batch, heads, sequence, head size]: "
                "transformers.js feeds such states by names and shapes of its own per architecture (past_conv.N, "
                "past_ssm.N), which onnx-nb does not write yet.")
        if not (dims[1].HasField("dim_value") and dims[3].HasField("dim_value")):
            raise InvalidArgumentError(
                f"The decoder's cache input {value.name} has heads or head size not fixed in the graph "
                f"({[d.dim_param or d.dim_value for d in dims]}): transformers.js makes the first step's empty cache "
                "from those numbers.")
        if dims[0].dim_param:
            renamed.add(dims[0].dim_param)
    for value in [*proto.graph.input, *proto.graph.output]:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param in renamed:
                dim.dim_param = BATCH
    if getattr(config, "multi_query", False):
        fuse_key_values(proto)


def fuse_key_values(proto: Any) -> None:
    """Each layer's one-head keys and values as one ``key_value`` input and output ``[batch, sequence, 2 x head
    size]`` (transformers.js's feed of a multi-query model), in place."""
    from onnx import TensorProto, helper

    from ...runtime.onnxfile import opset

    if opset(proto) < 13:
        raise InvalidArgumentError("A multi-query model's file for transformers.js needs opset 13 or newer.")
    graph = proto.graph
    caches = [v for v in graph.input if KEYS_VALUES.fullmatch(v.name)]
    if any(v.type.tensor_type.shape.dim[1].dim_value != 1 for v in caches):
        raise InvalidArgumentError("transformers.js feeds a multi-query model one key/value head per layer; this "
                                   "file's cache has more.")
    layers = sorted({v.name.rsplit(".", 1)[0] for v in caches}, key=lambda n: int(n.split(".")[1]))
    kind = {v.name: v.type.tensor_type.elem_type for v in caches}
    size = {v.name: v.type.tensor_type.shape.dim[3].dim_value for v in caches}
    axis1 = "onnx_nb_web_axis1"
    graph.initializer.append(helper.make_tensor(axis1, TensorProto.INT64, [1], [1]))
    split, join, keep_in, keep_out = [], [], [], []  # nodes before the graph's own and after them
    for layer in layers:  # e.g. "past_key_values.0"
        key, value, head = f"{layer}.key", f"{layer}.value", size[f"{layer}.key"]
        halves = f"onnx_nb_web_{layer}.halves"
        graph.initializer.append(helper.make_tensor(halves, TensorProto.INT64, [2], [head, head]))
        fused_in, present = f"{layer}.key_value", "present" + layer[len("past_key_values"):]
        split += [helper.make_node("Split", [fused_in, halves], [f"{key}.3d", f"{value}.3d"], axis=-1),
                  helper.make_node("Unsqueeze", [f"{key}.3d", axis1], [key]),
                  helper.make_node("Unsqueeze", [f"{value}.3d", axis1], [value])]
        join += [helper.make_node("Squeeze", [f"{present}.key", axis1], [f"{present}.key.3d"]),
                 helper.make_node("Squeeze", [f"{present}.value", axis1], [f"{present}.value.3d"]),
                 helper.make_node("Concat", [f"{present}.key.3d", f"{present}.value.3d"], [f"{present}.key_value"],
                                  axis=-1)]
        keep_in.append(helper.make_tensor_value_info(fused_in, kind[key], [BATCH, "past_sequence_length", 2 * head]))
        keep_out.append(helper.make_tensor_value_info(f"{present}.key_value", kind[key],
                                                      [BATCH, "total_sequence_length", 2 * head]))
    fused = {n for layer in layers for n in (f"{layer}.key", f"{layer}.value")}
    gone = {"present" + n[len("past_key_values"):] for n in fused}
    inputs = [v for v in graph.input if v.name not in fused] + keep_in
    outputs = [v for v in graph.output if v.name not in gone] + keep_out
    del graph.input[:], graph.output[:]
    graph.input.extend(inputs)
    graph.output.extend(outputs)
    nodes = [*split, *graph.node, *join]
    del graph.node[:]
    graph.node.extend(nodes)
