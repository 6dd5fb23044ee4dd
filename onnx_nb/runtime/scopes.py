"""The PyTorch module each node came from, carried into files ONNX Runtime's optimizer and quantizer rewrote.

The dynamo exporter records each node's module path in its ``pkg.torch.onnx.name_scopes`` metadata; the graph
view groups by it and ``compare()`` pairs by it. ONNX Runtime's fusions and quantizers write new nodes without it
(MiniLM's optimized file: 59 of 106 nodes at the top level, its INT8 file 199 of 451), so a variant lost its layers.
:func:`carry_scopes` gives each such node the scopes of the parent's node it stands for: the node of the same name,
else the node that made the same output tensor (a quantizer keeps the names of what it replaces), else the node that
read the same weight (``w`` -> ``w_quantized``, ``w_Q4``, ``w_scale``) when one module alone reads it in the
parent, else its nearest neighbour that has scopes (what reads its outputs first, then what feeds it; a TorchScript
node's module is in its name). A weight's own node that several nodes read (a shared weight dequantized once) stays
at the top level: inside the first module that reads it, it would draw the later ones beside that one.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

SCOPES = "pkg.torch.onnx.name_scopes"
WEIGHT_SUFFIXES = ("_quantized", "_Q4", "_Q8", "_scale", "_zero_point", "_fp16", "_transposed")


def weight_key(name: str) -> str:
    """A weight's name with what quantizers and optimizers append removed (``w_quantized`` -> ``w``)."""
    for suffix in WEIGHT_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def scopes_of(node: Any) -> str | None:
    return next((p.value for p in node.metadata_props if p.key == SCOPES), None)


def module_key(scopes: str) -> str:
    """A scopes value less its last entry (the node's own name): equal for two nodes of one module."""
    return scopes.rsplit(",", 1)[0]


def carry_scopes(parent: Any, path: Path) -> int:
    """Annotate the nodes of the file at ``path`` that lack scopes from ``parent`` (the proto it was made from);
    rewrites the graph in place (external data untouched). Returns how many nodes got scopes."""
    import onnx

    if not any(scopes_of(n) for n in parent.graph.node[:200]):
        return 0  # the parent has none to give (a TorchScript export names its nodes by module instead)
    proto = onnx.load(str(path), load_external_data=False)
    # a node named by the TorchScript exporter ("/model/encoder/layer.0/.../MatMul_quant") says its module itself
    missing = [k for k, n in enumerate(proto.graph.node) if scopes_of(n) is None and not n.name.startswith("/")]
    if not missing:
        return 0
    by_name = {n.name: s for n in parent.graph.node if n.name and (s := scopes_of(n))}
    by_output = {t: s for n in parent.graph.node if (s := scopes_of(n)) for t in n.output}
    weights = {i.name for i in parent.graph.initializer}
    by_weight: dict[str, str] = {}
    modules: dict[str, set[str]] = defaultdict(set)  # the modules (scopes less the node's own name) reading each
    for node in parent.graph.node:
        s = scopes_of(node)
        for t in node.input:
            if s and t in weights:
                by_weight.setdefault(weight_key(t), s)
                modules[weight_key(t)].add(module_key(s))
    # a weight several modules read (an exporter folds equal initializers into one: a tiny model's LayerNorm
    # weights, all ones; a tied embedding and LM head) says nothing about which of them a node stands for
    for w, where in modules.items():
        if len(where) > 1:
            by_weight.pop(w, None)
    found: dict[int, str] = {}
    for k in missing:
        node = proto.graph.node[k]
        s = by_name.get(node.name) or next((by_output[t] for t in node.output if t in by_output), None) or \
            next((by_weight[w] for w in map(weight_key, node.input) if w in by_weight), None)
        if s:
            found[k] = s
    own = {k: s for k, n in enumerate(proto.graph.node) if (s := scopes_of(n) or named_scopes(n))}
    # a node fed by weights alone whose output several nodes read (a shared weight dequantized once) takes the module
    # of its readers when they share one, else stays at the top level: inside the first module that reads it, it
    # would draw the later ones beside that one
    consts = {i.name for i in proto.graph.initializer}
    readers: dict[str, list[int]] = defaultdict(list)
    for j, node in enumerate(proto.graph.node):
        for t in set(node.input):
            readers[t].append(j)
    shared = {k: {j for t in proto.graph.node[k].output for j in readers[t]} for k in missing if k not in found
              and all(t in consts for t in proto.graph.node[k].input if t)}
    shared = {k: js for k, js in shared.items() if len(js) > 1}
    found.update(nearest(proto, [k for k in missing if k not in found and k not in shared], {**own, **found}))
    for k, js in shared.items():
        theirs = {module_key(found.get(j) or own.get(j) or "") for j in js}
        if len(theirs) == 1 and "" not in theirs:
            found[k] = found.get(min(js)) or own[min(js)]
    for k, s in found.items():
        entry = proto.graph.node[k].metadata_props.add()
        entry.key, entry.value = SCOPES, s
    onnx.save(proto, str(path))
    return len(found)


def named_scopes(node: Any) -> str | None:
    """The scopes of a node the TorchScript exporter named by its module (``/model/encoder/layer.0/attention/MatMul``
    -> ``encoder.layer.0.attention``), written as the dynamo exporter writes them; None for other names."""
    parts = node.name.strip("/").split("/")[1:-1] if node.name.startswith("/") else []
    if not parts:  # not a TorchScript name, or a node of the top level: no module to lend
        return None
    return repr(["", "inner.model", *("inner.model." + ".".join(parts[:i + 1]) for i in range(len(parts))), node.name])


def nearest(proto: Any, nodes: Any, known: dict[int, str], hops: int = 6) -> dict[int, str]:
    """For each of ``nodes``, the value ``known`` holds for its nearest node that has one: what reads its outputs
    first (a quantize node belongs to the layer its product feeds; a fused attention to the layer whose output
    projection reads it), up to ``hops`` steps, then what feeds it. Nodes with no such neighbour are left out."""
    readers: dict[str, list[int]] = defaultdict(list)
    producer: dict[str, int] = {}
    for k, node in enumerate(proto.graph.node):
        for t in node.input:
            readers[t].append(k)
        for t in node.output:
            producer[t] = k
    out: dict[int, str] = {}
    for k in nodes:
        seen, frontier, found = {k}, [k], None
        for _ in range(hops):
            frontier = [r for j in frontier for t in proto.graph.node[j].output for r in readers[t] if r not in seen]
            found = next((known[r] for r in frontier if known.get(r)), None)
            if found or not frontier:
                break
            seen.update(frontier)
        found = found or next((known[producer[t]] for t in proto.graph.node[k].input
                               if known.get(producer.get(t, -1))), None)
        if found:
            out[k] = found
    return out
