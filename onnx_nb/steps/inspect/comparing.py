"""``onnx_nb.compare(a, b)``: two ONNX files node by node (an export and its optimized or quantized variant, or
two versions of a model). Nodes are matched by module scope and name; what ONNX Runtime's fusions or a quantizer
replaced is traced through the tensors both graphs share."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from ...results.summary import GraphComparison, grouping_depth, overlay_from
from ...runtime.scopes import nearest, weight_key
from ..parity.localize import module_of
from .structure import read

QUANT_OPS = {"MatMulInteger", "DynamicQuantizeMatMul", "MatMulNBits", "QLinearMatMul", "QLinearConv", "ConvInteger",
             "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulIntegerToFloat", "QGemm",
             "QAttention", "QLinearAdd", "QLinearMul", "QMoE", "QEmbedLayerNormalization", "QOrderedMatMul"}


def names(proto: Any) -> list[str]:
    """Node names as the graph view shows them (a node without one is '<op>_<index>')."""
    return [n.name or f"{n.op_type}_{i}" for i, n in enumerate(proto.graph.node)]


def _fused(node: Any) -> bool:
    return node.domain == "com.microsoft" or node.op_type.startswith("Fused")


def compare(a: Any, b: Any, overlay: Any = None) -> GraphComparison:
    """Match the nodes of two ONNX files and mark each: same, changed, fused, quantized, added or removed.

    ``a`` and ``b`` are .onnx paths, ExportResults or variants (``b`` is usually made from ``a``). ``overlay`` is a
    ParityReport or QuantDebugReport of ``b`` (or a dict node -> error); without one, a ``<b>.parity.json`` or
    ``<b>.quant_debug.json`` saved beside ``b`` (the reports' ``to_json``) is used. The JupyterLab viewer's compare
    view shows the same marks. Returns a :class:`~onnx_nb.results.summary.GraphComparison`.

    Example::

        v = onnx_nb.quantize(onnx_nb.export("all-MiniLM-L6-v2"))
        onnx_nb.compare(v.parent, v)        # how many nodes were fused, quantized, added
        onnx_nb.CompareView(v.parent, v)    # the two graphs side by side
    """
    pa, A = read(a)
    pb, B = read(b)
    na, nb = names(A), names(B)
    mod_a = [module_of(n) or "" for n in A.graph.node]
    mod_b = [module_of(n) or "" for n in B.graph.node]
    # by the names the files carry (a made-up "<op>_<index>" shifts when nodes come and go: never matched by it)
    named_b = [n.name for n in B.graph.node]
    by_key = {(m, n): i for i, (m, n) in enumerate(zip(mod_b, named_b)) if n}
    by_name = {n: i for i, n in enumerate(named_b) if n}
    pairs: dict[int, int] = {}
    taken: set[int] = set()
    for i, (m, node) in enumerate(zip(mod_a, A.graph.node)):
        if not node.name:
            continue
        j = by_key.get((m, node.name), by_name.get(node.name))
        if j is not None and j not in taken:
            pairs[i] = j
            taken.add(j)
    # files from two exporters name nodes differently: the k-th node of an op type in a module matches
    rest_b: dict[tuple[str, str], list[int]] = defaultdict(list)
    for j, node in enumerate(B.graph.node):
        if j not in taken and mod_b[j]:
            rest_b[(mod_b[j], node.op_type)].append(j)
    for i, node in enumerate(A.graph.node):
        if i not in pairs and mod_a[i] and rest_b.get((mod_a[i], node.op_type)):
            pairs[i] = rest_b[(mod_a[i], node.op_type)].pop(0)
    dq_outputs = {t for node in B.graph.node if node.op_type == "DequantizeLinear" for t in node.output}
    marks_a: dict[str, str] = {}
    marks_b: dict[str, str] = {}
    for i, j in pairs.items():
        x, y = A.graph.node[i], B.graph.node[j]
        if y.op_type in QUANT_OPS or (x.op_type == y.op_type and any(t in dq_outputs for t in y.input)):
            mark = "quantized"
        elif x.op_type == y.op_type and list(x.attribute) == list(y.attribute):
            mark = "same"
        else:
            mark = "changed"
        marks_a[na[i]] = marks_b[nb[j]] = mark
    into: dict[str, str] = {}
    for a_nodes, b_nodes in regions(A, B, pairs, {"a": mod_a, "b": mod_b}):
        ops = [B.graph.node[j] for j in b_nodes]
        kind = ("quantized" if any(n.op_type in QUANT_OPS for n in ops) else
                "fused" if any(_fused(n) for n in ops) else "changed" if ops else "removed")
        main = max(b_nodes, key=lambda j: (B.graph.node[j].op_type in QUANT_OPS or _fused(B.graph.node[j]),
                                            -j)) if b_nodes else None
        for i in a_nodes:
            marks_a[na[i]] = kind
            if main is not None:
                into[na[i]] = nb[_counterpart(A, B, i, b_nodes, mod_a[i], mod_b, main)]
        for j in b_nodes:
            node = B.graph.node[j]
            marks_b[nb[j]] = ("quantized" if node.op_type in QUANT_OPS else "fused" if _fused(node) else
                              "changed" if a_nodes else "added")
    result = GraphComparison(a=pa, b=pb, marks_a=marks_a, marks_b=marks_b,
                             matched={na[i]: nb[j] for i, j in pairs.items()}, into=into)
    _add_errors(result, overlay, pb)
    return result


def _counterpart(A: Any, B: Any, i: int, b_nodes: list[int], module: str, mod_b: list[str], main: int) -> int:
    """The node of ``b_nodes`` that a's node ``i`` became: the one reading the same weight (``w`` ->
    ``w_quantized``), else one of the same module and op, else of the same module (a quantized or fused one
    first), else the region's ``main`` node."""
    weights = {i.name for i in A.graph.initializer}
    node = A.graph.node[i]
    wanted = {weight_key(t) for t in node.input if t in weights}

    def first(cands: list[int]) -> int | None:
        return max(cands, key=lambda j: (B.graph.node[j].op_type in QUANT_OPS or _fused(B.graph.node[j]), -j)) \
            if cands else None

    for cands in ([j for j in b_nodes if wanted & {weight_key(t) for t in B.graph.node[j].input}],
                  [j for j in b_nodes if module and mod_b[j] == module and B.graph.node[j].op_type == node.op_type],
                  [j for j in b_nodes if module and mod_b[j] == module]):
        found = first(cands)
        if found is not None:
            return found
    # a module fused into its parent's or its child's node (a residual Add into SkipLayerNormalization): the node
    # whose module shares the longest path with this one
    related = [j for j in b_nodes if module and mod_b[j] and
               (mod_b[j].startswith(module + ".") or module.startswith(mod_b[j] + "."))]
    if related:
        return max(related, key=lambda j: (len(_common(mod_b[j], module)), B.graph.node[j].op_type in QUANT_OPS
                                           or _fused(B.graph.node[j]), -j))
    return main


def _common(a: str, b: str) -> list[str]:
    out = []
    for x, y in zip(a.split("."), b.split(".")):
        if x != y:
            break
        out.append(x)
    return out


def regions(A: Any, B: Any, pairs: dict[int, int], mods: dict[str, list[str]]) -> list[tuple[list[int], list[int]]]:
    """The unmatched nodes of both graphs in regions, each (a's nodes, b's nodes): what ``b`` put in place of that
    part of ``a``. Nodes join a region by module (at the depth that splits the model into at most 24 parts, e.g.
    one per layer; a fused node with no module of its own takes that of the nearest node around it that has one),
    and otherwise through the tensors they produce, the weights they read, or a tensor both graphs produce.
    ``mods``: each graph's node module scopes ("" for none), as :func:`compare` read them."""
    parent: dict[Any, Any] = {}

    def find(x: Any) -> Any:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(x: Any, y: Any) -> None:
        parent[find(x)] = find(y)

    depth = grouping_depth(mods["a"] + mods["b"])
    graph_inputs = {v.name for g in (A, B) for v in g.graph.input}
    by_weight: dict[str, str] = {}  # a's weights -> the module reading them: where b's fused nodes belong
    for tag, proto, unmatched in (("a", A, set(range(len(A.graph.node))) - set(pairs)),
                                  ("b", B, set(range(len(B.graph.node))) - set(pairs.values()))):
        keys = _module_keys(proto, mods[tag], depth, by_weight)
        if tag == "a":
            inits = {i.name for i in A.graph.initializer}
            for k, node in enumerate(A.graph.node):
                for t in node.input:
                    if t in inits and keys[k]:
                        by_weight.setdefault(weight_key(t), keys[k])
        weights = {i.name for i in proto.graph.initializer}
        produced = {t: k for k, n in enumerate(proto.graph.node) if k in unmatched for t in n.output}
        for k in sorted(unmatched):
            node = proto.graph.node[k]
            find((tag, k))
            if keys[k]:
                union((tag, k), ("m", keys[k]))
            for t in node.output:
                union((tag, k), ("t", t))
            for t in node.input:
                if t in produced and (not keys[k] or not keys[produced[t]] or keys[k] == keys[produced[t]]):
                    union((tag, k), (tag, produced[t]))
                elif t in weights and not keys[k]:
                    union((tag, k), ("w", weight_key(t)))
                elif t and t not in graph_inputs and t not in weights and not keys[k]:
                    union((tag, k), ("t", t))
    groups: dict[Any, tuple[list[int], list[int]]] = {}
    for x in list(parent):
        if x[0] in ("a", "b"):
            entry = groups.setdefault(find(x), ([], []))
            entry[0 if x[0] == "a" else 1].append(x[1])
    return list(groups.values())


def _module_keys(proto: Any, modules: list[str], depth: int, by_weight: dict[str, str]) -> list[str]:
    """Each node's module cut to ``depth`` parts; a node without one (an ONNX Runtime fusion) takes the module that
    reads its weights in the other file (``by_weight``), else the key of the nearest node that has one, looking at
    what reads its outputs first (a fused attention belongs to the layer whose output projection reads it), then at
    what feeds it."""
    keys = [".".join(m.split(".")[:depth]) if m else "" for m in modules]
    for k, node in enumerate(proto.graph.node):
        if not keys[k]:
            keys[k] = next((by_weight[w] for w in map(weight_key, node.input) if w in by_weight), "")
    near = nearest(proto, [k for k, key in enumerate(keys) if not key], {k: key for k, key in enumerate(keys) if key})
    return [keys[k] or near.get(k, "") for k in range(len(keys))]


def sidecar(path: Path) -> tuple[Path, Any] | None:
    """A ``<model>.parity.json`` or ``<model>.quant_debug.json`` saved beside ``<model>.onnx``, read."""
    for suffix in (".parity.json", ".quant_debug.json"):
        f = path.with_suffix(suffix)
        if f.is_file():
            try:
                return f, json.loads(f.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
    return None


def _add_errors(result: GraphComparison, overlay: Any, pb: Path) -> None:
    if overlay is None:
        found = sidecar(pb)
        if found is None:
            return
        where, overlay = found
        result.notes.append(f"per-node error from {where.name}")
    try:
        values, label, _ = overlay_from(overlay)
    except (TypeError, ValueError, AttributeError) as exc:  # a hand-edited or foreign JSON: the comparison stands
        result.notes.append(f"the per-node error could not be read ({type(exc).__name__}); shown without it")
        return
    result.errors = values
    result.error_label = label
