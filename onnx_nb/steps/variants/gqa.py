"""A decoder's opset-23 file (:func:`~onnx_nb.steps.generate.generation.export_standard_ops`) rewritten for ONNX
Runtime's ``GroupQueryAttention`` (com.microsoft), the op onnxruntime-genai's model builder writes:

- each layer's three Q/K/V projections become one MatMul on weights concatenated side by side (one packed QKV
  tensor; biases likewise), and the layer's RotaryEmbedding x2 + key/value Concat x2 + repeat-kv + ONNX
  ``Attention`` + transposes become one ``GroupQueryAttention`` with the rotary embedding inside (``do_rotary``,
  cos/sin tables for every position computed by the model's own rotary module);
- the causal/padding mask arithmetic goes: the op takes ``seqlens_k`` (valid tokens - 1 per row) and
  ``total_sequence_length``, both computed in the graph from ``attention_mask``; rotary positions come from them,
  so the file has no ``position_ids`` input;
- its key/value inputs and outputs keep their names and layout (``[batch, kv_heads, sequence, head_size]``), and
  the op can read and write one buffer for both: :class:`~onnx_nb.steps.generate.generation.SharedBufferDecoder`
  binds ``past_key_values.{i}.*`` and ``present.{i}.*`` to the same preallocated buffer, so a decode step writes
  one token in place instead of copying the grown cache out (the shared buffer onnxruntime-genai's runtime keeps).

Prompts are right-padded for such a file (the op reads each row's first ``seqlens_k + 1`` positions); the decoder
class hides that from callers, who keep handing it left-padded batches. Only imported by functions that already
need torch.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import NotRewritableError as NotRewritable
from ...runtime.facts import PRESENT_PREFIX
from ...runtime.onnxedit import drop_unused, live_nodes, save_proto
from ...runtime.onnxfile import GQA_OP
from ..export.caches.gqa_io import COS, PRESENT_AXIS, SEQLENS, SIN, TOTAL, mask_nodes
from ..export.caches.gqa_io import rotary_tables as tables_of

__all__ = ["GQA_OP", "NotRewritable", "rewrite", "rotary_tables"]

def rotary_tables(model: Any) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin for every position (:func:`~onnx_nb.steps.export.caches.gqa_io.rotary_tables`) from the rotary module
    inside ``model``."""
    rotary = next((m for m in model.modules() if hasattr(m, "inv_freq") and "Rotary" in type(m).__name__), None)
    if rotary is None:
        raise NotRewritable("no rotary embedding module in the model")
    return tables_of(rotary, model.config)


class _Graph:
    def __init__(self, proto: Any) -> None:
        from onnx import numpy_helper

        self.proto, self.graph = proto, proto.graph
        self.producer = {o: n for n in self.graph.node for o in n.output}
        self.consumers: dict[str, list[Any]] = defaultdict(list)
        for n in self.graph.node:
            for i in n.input:
                self.consumers[i].append(n)
        self.inits = {t.name: t for t in self.graph.initializer}
        self._np = numpy_helper

    def const(self, name: str) -> np.ndarray | None:
        if name in self.inits:
            return self._np.to_array(self.inits[name])
        node = self.producer.get(name)
        if node is not None and node.op_type == "Constant":
            return self._np.to_array(node.attribute[0].t)
        return None

    def made_by(self, name: str, op: str) -> Any:
        node = self.producer.get(name)
        if node is None or node.op_type != op:
            found = "a graph input" if node is None else node.op_type
            raise NotRewritable(f"{name} comes from {found}, not {op}")
        return node

    def projection(self, heads_bnsh: str) -> tuple[str, np.ndarray, np.ndarray | None]:
        """(x, weight, bias) of ``Transpose(Reshape(MatMul(x, W) [+ b]))``."""
        transpose = self.made_by(heads_bnsh, "Transpose")
        reshape = self.made_by(transpose.input[0], "Reshape")
        linear = self.producer.get(reshape.input[0])
        bias = None
        if linear is not None and linear.op_type == "Add":
            a, b = (self.const(i) for i in linear.input)
            bias = a if a is not None else b
            inner = linear.input[1] if a is not None else linear.input[0]
            linear = self.producer.get(inner)
        if linear is None or linear.op_type != "MatMul" or (bias is not None and bias.ndim != 1):
            raise NotRewritable(f"the projection into {heads_bnsh} is not MatMul (+ bias)")
        weight = self.const(linear.input[1])
        if weight is None or weight.ndim != 2:
            raise NotRewritable(f"the projection into {heads_bnsh} has no constant 2-D weight")
        return linear.input[0], weight, bias

    def only_consumer(self, name: str, op: str) -> Any:
        found = self.consumers.get(name, [])
        if len(found) != 1 or found[0].op_type != op:
            raise NotRewritable(f"{name} is not consumed by one {op}")
        return found[0]


def _attr(node: Any, name: str, default: Any) -> Any:
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def rewrite(src: Path, dst: Path, model: Any, big: bool = False) -> dict[str, int]:
    """Rewrite ``src`` (an opset-23 decoder file with its cache) into ``dst`` with one GroupQueryAttention per
    layer; raises :class:`NotRewritable` (and writes nothing) when a layer does not match."""
    import onnx
    from onnx import helper, numpy_helper

    config = model.config
    window = getattr(config, "sliding_window", None)
    if window and getattr(config, "use_sliding_window", True) and window < config.max_position_embeddings:
        raise NotRewritable(f"sliding-window attention ({window} tokens)")
    cos, sin = rotary_tables(model)
    proto = onnx.load(str(src))
    g = _Graph(proto)
    outputs = {o.name for o in proto.graph.output}
    layers = sorted({int(o.split(".")[1]) for o in outputs if o.startswith("present.")})
    if not layers:
        raise NotRewritable("no present.{i}.key/value outputs")
    by_input: dict[str, int] = {}
    parts: dict[int, dict[str, Any]] = {}
    for i in layers:
        key_cat = g.made_by(f"present.{i}.key", "Concat")
        value_cat = g.made_by(f"present.{i}.value", "Concat")
        if list(key_cat.input[:1]) != [f"past_key_values.{i}.key"] or \
                list(value_cat.input[:1]) != [f"past_key_values.{i}.value"]:
            raise NotRewritable(f"layer {i}'s cache is not Concat(past, new)")
        k_rot = g.made_by(key_cat.input[1], "RotaryEmbedding")
        kx, wk, bk = g.projection(k_rot.input[0])
        vx, wv, bv = g.projection(value_cat.input[1])
        if kx != vx:
            raise NotRewritable(f"layer {i}'s key and value read different inputs")
        by_input[kx] = i
        parts[i] = {"x": kx, "k": (wk, bk), "v": (wv, bv), "k_rot": k_rot, "cats": (key_cat, value_cat)}
    rotary_dim = 2 * cos.shape[1]
    for node in proto.graph.node:
        if node.op_type != "Attention" or node.domain not in ("", "ai.onnx"):
            continue
        q_rot = g.made_by(node.input[0], "RotaryEmbedding")
        qx, wq, bq = g.projection(q_rot.input[0])
        if qx not in by_input:
            raise NotRewritable(f"attention {node.name} reads no layer's key/value input")
        part = parts[by_input[qx]]
        for rot in (q_rot, part["k_rot"]):
            if _attr(rot, "interleaved", 0):
                raise NotRewritable("interleaved rotary embedding")
            if _attr(rot, "rotary_embedding_dim", 0) not in (0, rotary_dim):
                raise NotRewritable("the rotary width differs from the model's rotary module")
        back = g.only_consumer(node.output[0], "Transpose")
        part.update(q=(wq, bq), q_rot=q_rot, attention=node, out=g.only_consumer(back.output[0], "Reshape"),
                    heads=int(_attr(q_rot, "num_heads", 0)), kv_heads=int(_attr(part["k_rot"], "num_heads", 0)))
    if any("attention" not in p for p in parts.values()):
        raise NotRewritable("a layer's attention was not found")
    past = {i.name: i for i in proto.graph.input}[f"past_key_values.{layers[0]}.key"]
    head_size = past.type.tensor_type.shape.dim[3].dim_value
    if rotary_dim > head_size:
        raise NotRewritable("the rotary tables are wider than a head")

    front, new_inits = mask_nodes()
    new_inits += [numpy_helper.from_array(cos, COS), numpy_helper.from_array(sin, SIN)]
    replaced: dict[str, list[Any]] = {}  # the node a layer's new nodes go in place of
    for i, p in parts.items():
        weights = [p["q"][0], p["k"][0], p["v"][0]]
        dtype = weights[0].dtype
        new_inits.append(numpy_helper.from_array(np.concatenate(weights, axis=1).astype(dtype), f"gqa.{i}.qkv.weight"))
        nodes = [helper.make_node("MatMul", [p["x"], f"gqa.{i}.qkv.weight"], [f"gqa.{i}.qkv"], name=f"gqa/{i}/qkv")]
        qkv = f"gqa.{i}.qkv"
        if any(b is not None for _, b in (p["q"], p["k"], p["v"])):
            bias = np.concatenate([b if b is not None else np.zeros(w.shape[1], dtype)
                                   for w, b in (p["q"], p["k"], p["v"])])
            new_inits.append(numpy_helper.from_array(bias.astype(dtype), f"gqa.{i}.qkv.bias"))
            nodes.append(helper.make_node("Add", [qkv, f"gqa.{i}.qkv.bias"], [f"gqa.{i}.qkv_b"], name=f"gqa/{i}/b"))
            qkv = f"gqa.{i}.qkv_b"
        attention = p["attention"]
        attrs: dict[str, Any] = {"num_heads": p["heads"], "kv_num_heads": p["kv_heads"], "do_rotary": 1,
                                 "rotary_interleaved": 0}
        if _attr(attention, "scale", None) is not None:
            attrs["scale"] = float(_attr(attention, "scale", None))
        if _attr(attention, "softcap", 0.0):
            attrs["softcap"] = float(_attr(attention, "softcap", 0.0))
        nodes.append(helper.make_node(
            GQA_OP, [qkv, "", "", f"past_key_values.{i}.key", f"past_key_values.{i}.value", SEQLENS, TOTAL, COS, SIN],
            [p["out"].output[0], f"present.{i}.key", f"present.{i}.value"], domain="com.microsoft",
            name=f"gqa/{i}/attention", **attrs))
        replaced[p["out"].output[0]] = nodes
    gone = {id(c) for p in parts.values() for c in p["cats"]} | {id(p["out"]) for p in parts.values()}
    kept: list[Any] = list(front)
    for node in proto.graph.node:
        if node.output and node.output[0] in replaced:
            kept.extend(replaced.pop(node.output[0]))
        elif id(node) not in gone:
            kept.append(node)
    proto.graph.ClearField("node")
    proto.graph.node.extend(live_nodes(kept, outputs))
    proto.graph.initializer.extend(new_inits)
    norms = _fuse_norms(proto)
    drop_unused(proto)
    for o in proto.graph.output:
        if o.name.startswith(PRESENT_PREFIX):
            o.type.tensor_type.shape.dim[2].dim_param = PRESENT_AXIS
    if not any(op.domain == "com.microsoft" for op in proto.opset_import):
        proto.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    save_proto(proto, dst, big)
    return {"layers": len(parts), "nodes": len(proto.graph.node), "norms": norms}


def _fuse_norms(proto: Any) -> int:
    """Each residual ``Add`` feeding an ONNX ``RMSNormalization`` becomes one ``SkipSimplifiedLayerNormalization``
    (its fourth output is the sum the next residual reads), and a lone ``RMSNormalization`` a
    ``SimplifiedLayerNormalization``: ONNX Runtime's own kernels, as the model builder writes them."""
    from onnx import helper

    g = _Graph(proto)
    fused: dict[int, Any] = {}
    dropped: set[int] = set()
    for node in proto.graph.node:
        if node.op_type != "RMSNormalization" or _attr(node, "axis", -1) != -1:
            continue
        eps = float(_attr(node, "epsilon", 1e-5))
        add = g.producer.get(node.input[0])
        if add is not None and add.op_type == "Add" and all(g.const(i) is None for i in add.input) and \
                add.output[0] not in {o.name for o in proto.graph.output}:
            fused[id(node)] = helper.make_node(
                "SkipSimplifiedLayerNormalization", [add.input[0], add.input[1], node.input[1]],
                [node.output[0], "", "", add.output[0]], domain="com.microsoft", epsilon=eps,
                name=f"{node.name or node.output[0]}/skip")
            dropped.add(id(add))
        else:
            fused[id(node)] = helper.make_node(
                "SimplifiedLayerNormalization", [node.input[0], node.input[1]], [node.output[0]], axis=-1,
                epsilon=eps, stash_type=1, name=f"{node.name or node.output[0]}/simplified")
    nodes = [fused.get(id(n), n) for n in proto.graph.node if id(n) not in dropped]
    # a fused norm now computes its Add's sum: it must come before that sum's readers (the Add's old place)
    order: list[Any] = []
    placed: set[str] = {i.name for i in proto.graph.input} | {t.name for t in proto.graph.initializer}
    pending = list(nodes)
    while pending:
        rest = []
        for n in pending:
            if all(not i or i in placed for i in n.input):
                order.append(n)
                placed.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            raise NotRewritable("the fused norms left the graph out of order")
        pending = rest
    proto.graph.ClearField("node")
    proto.graph.node.extend(order)
    return len(fused)
