"""An encoder-decoder laid out as transformers.js reads it (the seq2seq shape's ``web`` answer): ``encoder_model``
(token ids and mask, a speech model's ``input_features`` or an image-to-text model's ``pixel_values`` in;
``last_hidden_state`` out) and
``decoder_model_merged``.

transformers.js (4.x) runs the encoder once, then feeds the merged decoder ``input_ids`` (the decoder's tokens),
``encoder_hidden_states``, ``encoder_attention_mask`` and a cache named ``past_key_values.{i}.decoder.key`` /
``.encoder.key``, which it makes empty for the first step from the graph's input shapes (the axis named ``batch_size``
is the batch, any other named axis 0). After that step it keeps the ``present.{i}.encoder.*`` outputs of the first
step as the cross-attention cache. onnx-nb's encoder file computes that cache itself, beside the encoder states; so
the merged decoder gets the encoder file's cross-attention projections inside an ``If``: an empty cross cache (the
first step) is computed from ``encoder_hidden_states``, a full one passed through (a decoder that took the cross cache
alone, Whisper's, gets the states as an input for it, and the cache's length axis named, so that transformers.js
feeds it empty). Only names, axes and that ``If`` are added: every value is computed as the two files computed it.
A vision encoder-decoder whose text decoder transformers.js gives its own cache alone (GPT-2's, named
``past_key_values.{i}.key``) gets the cross-attention projections at every step instead, without a cross cache."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError
from ...runtime.onnxedit import drop_unused, live_nodes, rename_values
from ...runtime.transformers_js import cross_cache_named

BATCH = "batch_size"  # the name transformers.js reads as the batch when it makes an empty cache
STATES = "encoder_hidden_states"  # onnx-nb's encoder states (an output of the encoder, an input of the decoder)
PREFIX = "cross_cache/"  # the names the encoder's projections take inside the merged decoder


def seq2seq_layout(proto: Any, config: Any, export: Any) -> dict[str, Any]:
    """The two files transformers.js loads, from the decoder file's graph ``proto`` (a variant's or the export's)
    and the export's encoder file: ``{"encoder_model": ..., "decoder_model_merged": ...}``."""
    import onnx

    part = export.parts["encoder"]
    encoder = onnx.load(str(Path(getattr(part, "path", part))), load_external_data=True)
    if STATES not in {o.name for o in encoder.graph.output}:
        raise InvalidArgumentError(f"The encoder file has no {STATES} output: it is not an onnx-nb encoder.")
    decoder = getattr(config, "decoder", None) if getattr(config, "model_type", "") == "vision-encoder-decoder" \
        else None
    if decoder is not None and not cross_cache_named(str(getattr(decoder, "model_type", "")), decoder):
        merged = _self_cache_only(proto, encoder)
    else:
        merged = _merged(proto, encoder)
    return {"encoder_model": _states_alone(encoder), "decoder_model_merged": merged}


def _states_alone(encoder: Any) -> Any:
    """The encoder with one output, ``last_hidden_state``, and only the nodes it needs (in place)."""
    cross = [o.name for o in encoder.graph.output if o.name != STATES]
    for name in cross:
        encoder.graph.output.remove(next(o for o in encoder.graph.output if o.name == name))
    rename_values(encoder.graph, {STATES: "last_hidden_state"})
    live = live_nodes(list(encoder.graph.node), {"last_hidden_state"})
    del encoder.graph.node[:]
    encoder.graph.node.extend(live)
    drop_unused(encoder)
    return encoder


def _merged(decoder: Any, encoder: Any) -> Any:
    """``decoder`` (in place) with its cross cache computed from ``encoder_hidden_states`` when it comes empty."""
    from onnx import TensorProto, helper, numpy_helper

    graph = decoder.graph
    inputs = {i.name: i for i in graph.input}
    cross = [o.name for o in encoder.graph.output if o.name != STATES]  # present.{i}.encoder.key / .value
    fed = {name: name.replace("present.", "past_key_values.", 1) for name in cross}
    missing = [p for p in fed.values() if p not in inputs]
    if missing:
        raise InvalidArgumentError(f"The decoder file does not take {', '.join(missing)}: it is not the decoder "
                                   "onnx-nb writes beside this encoder.")
    _takes_states(graph, encoder)  # (a decoder that reads the cross cache alone, Whisper's: for the If)
    for name in fed.values():  # fed empty on the first step: the encoder's length named, not fixed
        length = inputs[name].type.tensor_type.shape.dim[2]
        if length.HasField("dim_value"):
            length.dim_param = "encoder_sequence_length"
    nodes, weights = _projections(encoder, cross)
    past = set(fed.values())
    for node in graph.node:  # every reader of the cross cache now reads the If's output, present.{i}.encoder.*
        node.input[:] = [_present(n) if n in past else n for n in node.input]

    def branch(name: str, body: list[Any], outs: list[str]) -> Any:
        return helper.make_graph(body, name, [], [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                                                  for o in outs])

    computed = [PREFIX + c for c in cross]
    passed = [helper.make_node("Identity", [fed[c]], [f"{PREFIX}passed/{c}"]) for c in cross]
    first = fed[cross[0]]
    graph.initializer.extend([*weights, numpy_helper.from_array(np.array(2, np.int64), f"{PREFIX}sequence_axis"),
                              numpy_helper.from_array(np.array(0, np.int64), f"{PREFIX}zero")])
    head = [helper.make_node("Shape", [first], [f"{PREFIX}shape"], name=f"{PREFIX}shape"),
            helper.make_node("Gather", [f"{PREFIX}shape", f"{PREFIX}sequence_axis"], [f"{PREFIX}length"], axis=0,
                             name=f"{PREFIX}length"),
            helper.make_node("Equal", [f"{PREFIX}length", f"{PREFIX}zero"], [f"{PREFIX}empty"], name=f"{PREFIX}empty"),
            helper.make_node("If", [f"{PREFIX}empty"], [_present(fed[c]) for c in cross], name=f"{PREFIX}if_empty",
                             then_branch=branch("computed", nodes, computed),
                             else_branch=branch("passed", passed, [p.output[0] for p in passed]))]
    body = list(graph.node)
    del graph.node[:]
    graph.node.extend([*head, *body])
    graph.output.extend(helper.make_tensor_value_info(_present(fed[c]), TensorProto.FLOAT, None) for c in cross)
    return _named_as_read(decoder, {})


def _self_cache_only(decoder: Any, encoder: Any) -> Any:
    """``decoder`` (in place) for a vision encoder-decoder whose text decoder transformers.js gives its own cache
    alone (GPT-2's, as ``past_key_values.{i}.key``): the cross-attention keys and values are computed from
    ``encoder_hidden_states`` at every step, as that decoder's own forward computes them."""
    graph = decoder.graph
    cross = [o.name for o in encoder.graph.output if o.name != STATES]
    fed = {name.replace("present.", "past_key_values.", 1): PREFIX + name for name in cross}
    if not set(fed) <= {i.name for i in graph.input}:
        raise InvalidArgumentError("The decoder file does not take the cross-attention cache: it is not the decoder "
                                   "onnx-nb writes beside this encoder.")
    _takes_states(graph, encoder)
    nodes, weights = _projections(encoder, cross)
    for node in graph.node:  # the cache's readers read the projections, computed here each step
        node.input[:] = [fed.get(n, n) for n in node.input]
    for value in [i for i in graph.input if i.name in fed]:
        graph.input.remove(value)
    graph.initializer.extend(weights)
    body = list(graph.node)
    del graph.node[:]
    graph.node.extend([*nodes, *body])
    own = {v.name: v.name.replace(".decoder.", ".", 1) for v in [*graph.input, *graph.output]
           if v.name.startswith(("past_key_values.", "present.")) and ".decoder." in v.name}
    return _named_as_read(decoder, own)


def _takes_states(graph: Any, encoder: Any) -> None:
    """``graph`` given ``encoder_hidden_states`` as an input where its decoder read the cross cache alone."""
    if STATES not in {i.name for i in graph.input}:
        graph.input.append(next(o for o in encoder.graph.output if o.name == STATES))


def _named_as_read(decoder: Any, renamed: dict[str, str]) -> Any:
    """The decoder's token ids named ``input_ids`` (and ``renamed``'s values so), the batch axis ``batch_size``."""
    graph = decoder.graph
    rename_values(graph, {"decoder_input_ids": "input_ids", **renamed})
    batch = {d.dim_param for v in graph.input if v.name.startswith("past_key_values.")
             for d in v.type.tensor_type.shape.dim[:1] if d.dim_param}
    for value in [*graph.input, *graph.output]:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param in batch:
                dim.dim_param = BATCH
    return decoder


def _present(past: str) -> str:
    return past.replace("past_key_values.", "present.", 1)


def _projections(encoder: Any, outputs: list[str]) -> tuple[list[Any], list[Any]]:
    """The encoder's nodes from ``encoder_hidden_states`` to ``outputs`` (its cross-attention keys and values), and
    the weights they read, every name but the states' under :data:`PREFIX`; refused where they read anything else
    of the encoder (its token ids: the decoder is not given them)."""
    import copy

    producer = {o: n for n in encoder.graph.node for o in n.output}
    inits = {i.name: i for i in encoder.graph.initializer}
    needed: dict[int, Any] = {}
    stack = list(outputs)
    seen: set[str] = set()
    while stack:
        name = stack.pop()
        if name in seen or name == STATES or name in inits or not name:
            continue
        seen.add(name)
        node = producer.get(name)
        if node is None:
            raise InvalidArgumentError(f"The encoder's cross-attention cache reads {name}, not only its states: "
                                       "transformers.js gives the decoder the states alone.")
        needed[id(node)] = node
        stack.extend(node.input)
    order = [n for n in encoder.graph.node if id(n) in needed]
    renamed = {name for n in order for name in (*n.input, *n.output) if name and name != STATES}
    nodes = []
    for node in order:
        node = copy.deepcopy(node)
        node.input[:] = [PREFIX + n if n in renamed else n for n in node.input]
        node.output[:] = [PREFIX + n for n in node.output]
        node.name = PREFIX + node.name
        nodes.append(node)
    weights = []
    for name in sorted(renamed & set(inits)):
        weight = copy.deepcopy(inits[name])
        weight.name = PREFIX + name
        weights.append(weight)
    return nodes, weights
