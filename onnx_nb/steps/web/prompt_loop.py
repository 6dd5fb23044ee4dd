"""A one-token state file made to take a whole prompt: its graph run once per token inside an ONNX ``Loop``.

onnx-nb's file of a model that keeps a state per layer (Mamba's convolution and SSM states, linear attention's:
:mod:`onnx_nb.steps.export.caches.states`) takes one token per step, because the model's own prefill runs a chunked
scan no trace makes dynamic; onnx-nb's runner feeds a prompt token by token. transformers.js feeds the whole prompt to
the first step. :func:`whole_prompt` rewrites the file, in place, so that it takes ``[batch, sequence]`` tokens: the
graph's nodes become the body of a ``Loop`` over the sequence, which hands each iteration one token (``input_ids`` and
``position_ids`` sliced at it), the attention mask up to it, and the states and keys/values the iteration before it
returned; the logits of every iteration are stacked into ``[batch, sequence, vocabulary]``, and the last iteration's
caches are the file's ``present.*``. Each iteration computes what the one-token file computed, so the tokens are
the ones onnx-nb's runner gets. A one-token call (every later step) runs the body once.

The weights stay in the outer graph (the body reads them from there): the file is no larger."""

from __future__ import annotations

from typing import Any

from ...errors import InvalidArgumentError
from ...runtime.facts import is_cache, present_of

STEP = "onnx_nb_step/"  # the prefix of every name the body makes (its names must not shadow the outer graph's)
PER_TOKEN = ("input_ids", "position_ids")  # sliced at the iteration's token ([batch, 1])
MASK = "attention_mask"  # sliced up to the iteration's token
SEQUENCE = "sequence_length"


def whole_prompt(proto: Any) -> None:
    """Rewrite a one-token file (``input_ids`` ``[batch, 1]``, ``past_key_values.*`` in, ``present.*`` out) in place
    so that it takes a whole prompt, its graph the body of a Loop over the tokens."""
    from onnx import TensorProto, helper

    from ...runtime.onnxfile import opset

    graph = proto.graph
    if opset(proto) < 13:
        raise InvalidArgumentError("Running a state file over a whole prompt takes opset 13 or newer (Unsqueeze "
                                   f"with axes as an input); this file has opset {opset(proto)}.")
    inputs = {v.name: v for v in graph.input}
    outputs = {v.name: v for v in graph.output}
    carried = [n for n in inputs if is_cache(n)]
    missing = [present_of(n) for n in carried if present_of(n) not in outputs]
    if "input_ids" not in inputs or missing:
        raise InvalidArgumentError("A state file run over a whole prompt takes input_ids and returns each cache it "
                                   f"takes; this one lacks {missing or ['input_ids']}.")
    presents = [present_of(n) for n in carried]
    stacked = [n for n in outputs if n not in presents]  # logits (and any other per-token output)
    sliced = [n for n in PER_TOKEN if n in inputs]
    unknown = [n for n in inputs if n not in (*carried, *sliced, MASK)]
    if unknown:
        raise InvalidArgumentError(f"The state file takes {', '.join(unknown)}, which a whole-prompt Loop does not "
                                   "know how to slice per token.")
    for name in stacked:
        dims = outputs[name].type.tensor_type.shape.dim
        if len(dims) < 2 or dims[1].dim_value != 1:
            raise InvalidArgumentError(f"The file's output {name} has no one-token axis to stack the prompt's along "
                                       f"({[d.dim_param or d.dim_value for d in dims]}).")

    made = {o for node in graph.node for o in node.output} | set(carried) | set(sliced) | \
        ({MASK} if MASK in inputs else set())
    body_nodes = [_renamed(node, made) for node in graph.node]
    step = [helper.make_node("Unsqueeze", ["iteration", "onnx_nb_axis0"], [STEP + "at"]),
            helper.make_node("Add", [STEP + "at", "onnx_nb_one"], [STEP + "next"])]
    for name in sliced:  # the token axis is the last ([batch, 1]; sectioned positions: [sections, batch, 1])
        step.append(helper.make_node("Slice", [name, STEP + "at", STEP + "next", "onnx_nb_last_axis"],
                                     [STEP + name]))
    if MASK in inputs:
        step += [helper.make_node("Add", ["onnx_nb_past", STEP + "next"], [STEP + "seen"]),
                 helper.make_node("Slice", [MASK, "onnx_nb_zero", STEP + "seen", "onnx_nb_axis1"], [STEP + MASK])]
    step.append(helper.make_node("Identity", ["condition"], [STEP + "condition"]))

    def typed(name: str, value: Any) -> Any:
        made_value = helper.make_tensor_value_info(name, value.type.tensor_type.elem_type, None)
        made_value.type.tensor_type.shape.CopyFrom(value.type.tensor_type.shape)
        return made_value

    body = helper.make_graph(
        [*step, *body_nodes], "onnx_nb_prompt_step",
        [helper.make_tensor_value_info("iteration", TensorProto.INT64, []),
         helper.make_tensor_value_info("condition", TensorProto.BOOL, []),
         *[typed(STEP + n, inputs[n]) for n in carried]],
        [helper.make_tensor_value_info(STEP + "condition", TensorProto.BOOL, []),
         *[typed(STEP + n, outputs[n]) for n in presents], *[typed(STEP + n, outputs[n]) for n in stacked]])

    graph.initializer.extend([helper.make_tensor("onnx_nb_axis0", TensorProto.INT64, [1], [0]),
                              helper.make_tensor("onnx_nb_axis1", TensorProto.INT64, [1], [1]),
                              helper.make_tensor("onnx_nb_last_axis", TensorProto.INT64, [1], [-1]),
                              helper.make_tensor("onnx_nb_one", TensorProto.INT64, [1], [1]),
                              helper.make_tensor("onnx_nb_zero", TensorProto.INT64, [1], [0]),
                              helper.make_tensor("onnx_nb_index1", TensorProto.INT64, [], [1])])
    outer = [helper.make_node("Shape", ["input_ids"], ["onnx_nb_ids_shape"]),
             helper.make_node("Gather", ["onnx_nb_ids_shape", "onnx_nb_index1"], ["onnx_nb_tokens"], axis=0)]
    if MASK in inputs:
        outer += [helper.make_node("Shape", [MASK], ["onnx_nb_mask_shape"]),
                  helper.make_node("Gather", ["onnx_nb_mask_shape", "onnx_nb_index1"], ["onnx_nb_total"], axis=0),
                  helper.make_node("Sub", ["onnx_nb_total", "onnx_nb_tokens"], ["onnx_nb_past_scalar"]),
                  helper.make_node("Unsqueeze", ["onnx_nb_past_scalar", "onnx_nb_axis0"], ["onnx_nb_past"])]
    outer.append(helper.make_node("Loop", ["onnx_nb_tokens", "", *carried],
                                  [*presents, *[f"onnx_nb_stacked.{n}" for n in stacked]], body=body))
    for name in stacked:  # [sequence, batch, 1, ...] -> [batch, sequence, ...]
        rank = len(outputs[name].type.tensor_type.shape.dim)
        outer += [helper.make_node("Squeeze", [f"onnx_nb_stacked.{name}", "onnx_nb_axis1_of_stack"],
                                   [f"onnx_nb_squeezed.{name}"]),
                  helper.make_node("Transpose", [f"onnx_nb_squeezed.{name}"], [name],
                                   perm=[1, 0, *range(2, rank)])]
    if stacked:
        graph.initializer.append(helper.make_tensor("onnx_nb_axis1_of_stack", TensorProto.INT64, [1], [2]))
    del graph.node[:]
    graph.node.extend(outer)
    graph.ClearField("value_info")
    for value, axis in [*((inputs[n], -1) for n in sliced), *((outputs[n], 1) for n in stacked)]:
        dim = value.type.tensor_type.shape.dim[axis]
        dim.Clear()
        dim.dim_param = SEQUENCE


def _renamed(node: Any, made: set[str]) -> Any:
    """A copy of ``node`` with every name the body makes (and every reference to one, in its subgraphs too)
    prefixed."""
    copy = type(node)()
    copy.CopyFrom(node)
    _rename_refs(copy, made)
    copy.output[:] = [STEP + o if o else o for o in copy.output]
    return copy


def _rename_refs(node: Any, made: set[str]) -> None:
    node.input[:] = [STEP + i if i in made else i for i in node.input]
    for attr in node.attribute:
        for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
            own = {o for inner in sub.node for o in inner.output} | {v.name for v in sub.input} | \
                {t.name for t in sub.initializer}
            for inner in sub.node:
                _rename_refs(inner, made - own)
            for value in [*sub.output, *sub.value_info]:  # a branch may return an outer name as it is
                if value.name in made - own:
                    value.name = STEP + value.name
