"""A file laid out as transformers.js reads it (the generation shapes' ``web`` answer).

transformers.js (4.x) feeds a decoder's cache by the names Optimum gave it (``past_key_values.{i}.key`` in,
``present.{i}.key`` out: onnx-nb's names) and makes the first step's empty cache from the graph's own input shapes:
a named axis ``batch_size`` is the batch, any other named axis is 0, numbers are kept. So the batch axis must be named
``batch_size`` (onnx-nb names it ``batch``) and the heads and head size must be numbers. Only axis names change: the
graph computes what it computed.

A multi-query model (``config.multi_query``: GPTBigCode, Falcon) is fed one ``past_key_values.{i}.key_value`` per
layer, as Optimum wrote them: keys and values of the one key/value head side by side, ``[batch, sequence, 2 x head
size]``. Its file then takes and returns that, split into and joined from the graph's own keys and values by a few
added nodes (Split, Unsqueeze; Squeeze, Concat).

A model that keeps a state per layer (onnx-nb's one-token file: ``past_key_values.{i}.conv.0``, ``.recurrent.0``) is
made to take a whole prompt (:mod:`onnx_nb.steps.web.prompt_loop`) and its states are named as transformers.js names
them per architecture (its ``getCacheNames``, 4.3.2): ``past_conv.{i}`` and ``past_ssm.{i}`` for the Mamba hybrids it
lists, ``past_conv.{i}`` and ``past_recurrent.{i}`` for the others (``present_*`` out)."""

from __future__ import annotations

import re
from typing import Any

from ...errors import InvalidArgumentError
from ...runtime.facts import is_cache, is_state, present_of
from ...runtime.onnxedit import rename_values
from .prompt_loop import whole_prompt

BATCH = "batch_size"  # the name transformers.js reads as the batch when it makes an empty cache
KEYS_VALUES = re.compile(r"past_key_values\.\d+\.(key|value)")
STATE_PREFIXES = ("past_conv.", "past_ssm.", "past_recurrent.")
SSM_NAMED = frozenset({"granitemoehybrid", "falcon_h1", "nemotron_h"})  # a recurrent state fed as past_ssm.{i}
# the layer kinds transformers.js matches for those ("mamba", "attention"), for the words transformers 5 writes
LAYER_KINDS_READ = {"linear_attention": "mamba", "full_attention": "attention"}


def decoder_layout(proto: Any, config: Any = None, export: Any = None) -> None:
    """Rename, in place, the batch axis of a decoder's cache (and every input and output naming it the same) to
    ``batch_size``, make a state file take the whole prompt with its states named as transformers.js feeds them,
    and fuse a multi-query model's keys and values (``config.multi_query``); refuse a cache transformers.js would
    feed otherwise (heads not fixed, a cache of another shape)."""
    if any(is_state(v.name) for v in proto.graph.input):
        whole_prompt(proto)
        state_names(proto, config)
    renamed: set[str] = set()
    for value in proto.graph.input:
        dims = value.type.tensor_type.shape.dim
        if value.name.startswith(STATE_PREFIXES) and dims[0].dim_param:
            renamed.add(dims[0].dim_param)
        if not is_cache(value.name):
            continue
        if not KEYS_VALUES.fullmatch(value.name) or len(dims) != 4:
            raise InvalidArgumentError(
                f"The decoder's cache input {value.name} is not keys or values of [batch, heads, sequence, head size]: "
                "transformers.js feeds a cache by the names and shapes Optimum gave it.")
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


def state_names(proto: Any, config: Any) -> None:
    """Name each layer's state as transformers.js feeds it for ``config``'s architecture, in place (inputs, outputs
    and the nodes reading or writing them)."""
    kind = getattr(getattr(config, "text_config", None), "model_type", None) or getattr(config, "model_type", "")
    renames: dict[str, str] = {}
    for value in proto.graph.input:
        if not is_state(value.name):
            continue
        _, layer, state, index = value.name.split(".")
        if index != "0":
            raise InvalidArgumentError(
                f"{kind} keeps several {state} states per layer ({value.name}); transformers.js feeds one per layer "
                "by its own names for this architecture, which onnx-nb does not write.")
        fed = "ssm" if state == "recurrent" and kind in SSM_NAMED else state
        renames[value.name] = f"past_{fed}.{layer}"
        renames[present_of(value.name)] = f"present_{fed}.{layer}"
    rename_values(proto.graph, renames)  # the top graph's own nodes (the prompt's Loop) read and write them
    parts = conv_parts(config) if kind == "olmo_hybrid" else None
    if parts:
        split_states(proto, "conv", parts)


def conv_parts(config: Any) -> list[tuple[str, int]]:
    """OLMo-Hybrid's convolution state in the three parts transformers.js feeds (its channels: the queries', the
    keys', the values', as the model concatenates them), with their sizes."""
    text = getattr(config, "text_config", None) or config
    keys = int(text.linear_key_head_dim) * int(text.linear_num_key_heads)
    values = int(text.linear_value_head_dim) * int(text.linear_num_value_heads)
    return [("query", keys), ("key", keys), ("value", values)]


def split_states(proto: Any, state: str, parts: list[tuple[str, int]]) -> None:
    """Each ``past_{state}.{i}`` fed as its channel parts (``past_{state}.{i}.{part}``, joined by a Concat before the
    graph's nodes) and each ``present_{state}.{i}`` returned as them (split after), in place."""
    from onnx import TensorProto, helper

    graph = proto.graph
    sizes = f"onnx_nb_web_{state}_parts"
    graph.initializer.append(helper.make_tensor(sizes, TensorProto.INT64, [len(parts)], [n for _, n in parts]))
    inputs, outputs, before, after = [], [], [], []
    for value in graph.input:
        if not value.name.startswith(f"past_{state}."):
            inputs.append(value)
            continue
        dims = value.type.tensor_type.shape.dim
        if dims[1].dim_value != sum(n for _, n in parts):
            raise InvalidArgumentError(f"{value.name} holds {dims[1].dim_value} channels, not the "
                                       f"{sum(n for _, n in parts)} of its parts {parts}.")
        present = "present" + value.name[len("past"):]
        before.append(helper.make_node("Concat", [f"{value.name}.{p}" for p, _ in parts], [value.name], axis=1))
        after.append(helper.make_node("Split", [present, sizes], [f"{present}.{p}" for p, _ in parts], axis=1))
        kind, (batch, _, *rest) = value.type.tensor_type.elem_type, [d.dim_param or d.dim_value for d in dims]
        inputs += [helper.make_tensor_value_info(f"{value.name}.{p}", kind, [batch, n, *rest]) for p, n in parts]
        outputs += [helper.make_tensor_value_info(f"{present}.{p}", kind, [batch, n, *rest]) for p, n in parts]
    split = {n.input[0] for n in after}
    _rewired(graph, inputs, [v for v in graph.output if v.name not in split] + outputs, before, after)


def config_as_read(settings: dict[str, Any]) -> dict[str, Any]:
    """``config.json``'s values (a dict, changed in place and returned) as transformers.js reads them: a Mamba
    hybrid's layer kinds in the words its cache names follow (``mamba``, ``attention``), where transformers 5 writes
    ``linear_attention``, ``full_attention`` (transformers.js 4.3.2 would then feed no cache at all)."""
    if settings.get("model_type") in SSM_NAMED:
        for key in ("layer_types", "layers_block_type"):
            if isinstance(settings.get(key), list):
                settings[key] = [LAYER_KINDS_READ.get(k, k) for k in settings[key]]
    return settings


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
    _rewired(graph, [v for v in graph.input if v.name not in fused] + keep_in,
             [v for v in graph.output if v.name not in gone] + keep_out, split, join)


def _rewired(graph: Any, inputs: list[Any], outputs: list[Any], before: list[Any], after: list[Any]) -> None:
    """``graph`` with these inputs and outputs, and nodes added before and after its own."""
    del graph.input[:], graph.output[:]
    graph.input.extend(inputs)
    graph.output.extend(outputs)
    nodes = [*before, *graph.node, *after]
    del graph.node[:]
    graph.node.extend(nodes)
