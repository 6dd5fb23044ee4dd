"""Changing a model proto before it is saved: axis names, tied weights stored once (and untied for a quantizer), a
wrapper's name prefix stripped, the nodes and weights nothing reads dropped, external data written as one
page-aligned file beside the model."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

from .onnxfile import stored_tensors


def name_dims(proto: Any, axes: dict[str, dict[int, str]]) -> None:
    """Give the graph's inputs and outputs the dynamic-axis names in ``axes``."""
    for value in [*proto.graph.input, *proto.graph.output]:
        spec = axes.get(value.name)
        if not spec:
            continue
        dims = value.type.tensor_type.shape.dim
        for axis, name in spec.items():
            if axis < len(dims) and not dims[axis].HasField("dim_value"):
                dims[axis].dim_param = name


TIE_MIN_ELEMENTS = 4096  # smaller weights are not worth a node


def tie_transposed(proto: Any) -> int:
    """A weight stored twice, once as the other's transpose (a tied embedding and LM head: the exporter folds the
    head's Transpose into a second initializer), becomes a ``Transpose`` node of the one kept, so the file stores
    it once (ONNX Runtime folds the node again when it loads the file). Weights in external data are left as they
    are. Returns how many copies were tied."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    inits = [i for i in proto.graph.initializer if len(i.dims) == 2 and math.prod(i.dims) >= TIE_MIN_ELEMENTS
             and i.data_location != onnx.TensorProto.EXTERNAL]
    by_shape: dict[tuple[int, ...], list[Any]] = {}
    for init in inits:
        by_shape.setdefault(tuple(init.dims), []).append(init)
    inputs = {v.name for v in proto.graph.input}
    gone: set[str] = set()
    tied = []
    for kept in inits:
        if kept.name in gone:
            continue
        for copy in by_shape.get((kept.dims[1], kept.dims[0]), []):
            if copy is kept or copy.name in gone or copy.name in inputs or copy.data_type != kept.data_type:
                continue
            if np.array_equal(numpy_helper.to_array(kept).T, numpy_helper.to_array(copy)):
                gone.add(copy.name)
                tied.append(helper.make_node("Transpose", [kept.name], [copy.name], name=f"tied/{copy.name}",
                                             perm=[1, 0]))
    if tied:
        keep = [i for i in proto.graph.initializer if i.name not in gone]
        del proto.graph.initializer[:]
        proto.graph.initializer.extend(keep)
        nodes = list(proto.graph.node)
        del proto.graph.node[:]
        proto.graph.node.extend([*tied, *nodes])
    return len(tied)


def untie(proto: Any) -> int:
    """The opposite of :func:`tie_transposed`, for the quantizers (ONNX Runtime's only quantize a MatMul whose weight
    is an initializer): each ``tied/`` Transpose node, and each Transpose of a 2-D initializer that only feeds MatMul
    weights (the dynamo exporter keeps a tied LM head's ``F.linear`` transpose so), becomes its transposed initializer
    again. Returns how many."""
    from onnx import numpy_helper

    inits = {i.name: i for i in proto.graph.initializer}
    users: dict[str, list[tuple[Any, int]]] = {}
    for node in proto.graph.node:
        for slot, name in enumerate(node.input):
            users.setdefault(name, []).append((node, slot))

    def weight_only(node: Any) -> bool:
        init = inits.get(node.input[0])
        feeds = users.get(node.output[0], [])
        return init is not None and len(init.dims) == 2 and bool(feeds) and all(
            u.op_type == "MatMul" and slot == 1 for u, slot in feeds)

    tied = [n for n in proto.graph.node if n.op_type == "Transpose" and n.input[0] in inits
            and (n.name.startswith("tied/") or weight_only(n))]
    for node in tied:
        copy = numpy_helper.from_array(numpy_helper.to_array(inits[node.input[0]]).T.copy(), node.output[0])
        proto.graph.initializer.append(copy)
        proto.graph.node.remove(node)
    return len(tied)


def strip_prefix(proto: Any, prefix: str) -> None:
    """Rename initializers ``<prefix>encoder.weight`` -> ``encoder.weight`` (onnx-nb's wrapper
    modules add the prefix; users know their parameters by their own names)."""
    _rename(proto, {i.name: i.name[len(prefix):] for i in proto.graph.initializer if i.name.startswith(prefix)})


FOLDED = re.compile(r"^val_\d+$")  # the dynamo exporter's name for a constant it folded (a Linear's weight.T)
PARAMETER = re.compile(r"%p_(\w+)")  # a parameter the FX node read, its dots made underscores


def name_folded_weights(proto: Any) -> int:
    """Name each weight the dynamo exporter folded (``val_99``: a ``Linear``'s weight, transposed for its MatMul)
    after the parameter it came from: ``encoder.layer.0.attention.self.value.weight.T``. Read from the one node
    that reads it: its module (``pkg.torch.onnx.name_scopes``) and the parameter its FX node took
    (``pkg.torch.onnx.fx_node``). A constant read by several nodes, or by a node that took no single parameter of
    its module, keeps its name. Returns how many were named."""
    try:
        return _rename(proto, _folded_names(proto))
    except Exception:  # noqa: BLE001 - names are a nicety: an unexpected proto keeps the exporter's own
        return 0


def live_nodes(nodes: list[Any], outputs: set[str]) -> list[Any]:
    """The nodes (in a graph's order) some of ``outputs`` depends on; a name a node's subgraphs read from the graph
    around them counts as one of its inputs."""
    needed = set(outputs)
    keep = []
    for node in reversed(nodes):
        if any(o in needed for o in node.output):
            keep.append(node)
            needed.update(i for i in node.input if i)
            needed.update(_read_inside(node))
    return keep[::-1]


def rename_values(graph: Any, renames: dict[str, str]) -> None:
    """Each tensor named in ``renames`` called by its new name in ``graph`` (inputs, outputs, value infos and its own
    nodes' inputs and outputs), in place."""
    for value in [*graph.input, *graph.output, *graph.value_info]:
        value.name = renames.get(value.name, value.name)
    for node in graph.node:
        node.input[:] = [renames.get(n, n) for n in node.input]
        node.output[:] = [renames.get(n, n) for n in node.output]


def drop_unused(proto: Any) -> None:
    """Initializers, inputs and value infos no node (nor a node's subgraph) reads any more, dropped in place."""
    used = {i for n in proto.graph.node for i in n.input} | {o.name for o in proto.graph.output} | \
        _subgraph_names(proto.graph)
    made = {o for n in proto.graph.node for o in n.output}
    inits = [t for t in proto.graph.initializer if t.name in used]
    proto.graph.ClearField("initializer")
    proto.graph.initializer.extend(inits)
    inputs = [i for i in proto.graph.input if i.name in used]
    proto.graph.ClearField("input")
    proto.graph.input.extend(inputs)
    infos = [v for v in proto.graph.value_info if v.name in made]
    proto.graph.ClearField("value_info")
    proto.graph.value_info.extend(infos)


def sort_nodes(graph: Any) -> bool:
    """``graph``'s nodes in an order where each comes after the nodes whose outputs it reads, what its subgraphs
    read from the graph around them counted (ONNX Runtime's quantizers sort by the nodes' own inputs only and put a
    Loop before a Transpose its body reads: the file no longer loads). The order is kept where it already holds, and
    otherwise changed as little as the reads need. Returns whether it changed."""
    import heapq

    made = {o: i for i, node in enumerate(graph.node) for o in node.output if o}
    needs = [{made[n] for n in {*node.input, *_read_inside(node)} if n in made and made[n] != i}
             for i, node in enumerate(graph.node)]
    if all(j < i for i, need in enumerate(needs) for j in need):
        return False
    waiting = [len(need) for need in needs]
    readers: dict[int, list[int]] = {}
    for i, need in enumerate(needs):
        for j in need:
            readers.setdefault(j, []).append(i)
    ready = [i for i, count in enumerate(waiting) if not count]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for k in readers.get(i, []):
            waiting[k] -= 1
            if not waiting[k]:
                heapq.heappush(ready, k)
    if len(order) != len(graph.node):  # a cycle: not a graph any order fixes; left as it is
        return False
    nodes = [graph.node[i] for i in order]
    copies = [type(n)() for n in nodes]
    for copy, node in zip(copies, nodes):
        copy.CopyFrom(node)
    del graph.node[:]
    graph.node.extend(copies)
    return True


def sort_file(path: Path) -> bool:
    """The file at ``path`` saved again with its nodes in :func:`sort_nodes`' order where they were not (its weights
    left where they are: in the file, or in its data file); whether it changed. For files another tool saved: ONNX
    Runtime's quantizers and optimizer sort again as they save."""
    import onnx

    proto = onnx.load(str(path), load_external_data=False)
    if not sort_nodes(proto.graph):
        return False
    onnx.save(proto, str(path))
    return True


def _subgraph_names(graph: Any) -> set[str]:
    """Every name the subgraphs of ``graph``'s nodes (If, Loop, Scan bodies) read or write."""
    return {name for node in graph.node for name in _read_inside(node)}


def _read_inside(node: Any) -> set[str]:
    """Every name ``node``'s own subgraphs (an If's branches, a Loop's body) and theirs read or write."""
    names: set[str] = set()
    for attr in node.attribute:
        for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
            names |= {n for inner in sub.node for n in [*inner.input, *inner.output]} | _subgraph_names(sub)
    return names


def _folded_names(proto: Any) -> dict[str, str]:
    import ast

    readers: dict[str, list[Any]] = {}
    for node in proto.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    # a name a subgraph reads or the graph returns keeps its name (only top-level readers are renamed)
    keep = _subgraph_names(proto.graph) | {o.name for o in proto.graph.output}
    renames: dict[str, str] = {}
    for init in proto.graph.initializer:
        users = readers.get(init.name, [])
        if not FOLDED.match(init.name) or len(users) != 1 or init.name in keep:
            continue
        meta = {p.key: p.value for p in users[0].metadata_props}
        try:
            scopes = ast.literal_eval(meta.get("pkg.torch.onnx.name_scopes", "[]"))
        except (ValueError, SyntaxError):  # metadata written by something else: this one keeps its name
            continue
        if not isinstance(scopes, list) or not all(isinstance(x, str) for x in scopes):
            continue
        module = scopes[-2] if len(scopes) >= 2 else ""  # the last is the call itself ("linear_2")
        mangled = module.replace(".", "_") + "_"
        params = {p for p in PARAMETER.findall(meta.get("pkg.torch.onnx.fx_node", "")) if p.startswith(mangled)}
        leaves = {p[len(mangled):] for p in params if "_" not in p[len(mangled):]}
        linear = "aten.linear" in meta.get("pkg.torch.onnx.class_hierarchy", "")
        if linear and len(init.dims) == 2 and "weight" in leaves:  # F.linear(x, weight, bias): the 2-D one
            renames[init.name] = f"{module}.weight.T"
        elif module and len(leaves) == 1:
            renames[init.name] = f"{module}.{leaves.pop()}.folded"
    return renames


def _rename(proto: Any, renames: dict[str, str]) -> int:
    """Rename initializers (and every reference to them) where the new name is free; returns how many."""
    taken = {v.name for v in [*proto.graph.input, *proto.graph.output]} | {
        o for n in proto.graph.node for o in n.output} | {i.name for i in proto.graph.initializer} | \
        _subgraph_names(proto.graph)  # a new name a subgraph uses itself would rebind its reads
    kept: dict[str, str] = {}
    for old, new in renames.items():
        if new and new not in taken:
            kept[old] = new
            taken.add(new)
    if not kept:
        return 0
    for init in proto.graph.initializer:
        init.name = kept.get(init.name, init.name)
    for value in [*proto.graph.input, *proto.graph.value_info]:
        value.name = kept.get(value.name, value.name)
    _rename_reads(proto.graph, kept)
    return len(kept)


def _rename_reads(graph: Any, renames: dict[str, str]) -> None:
    """Every node of ``graph`` reading a name in ``renames`` reads the new one, in the subgraphs of its nodes too (a
    Loop's body reading the graph's weights), but for a name a subgraph makes itself, which hides the outer one."""
    for node in graph.node:
        node.input[:] = [renames.get(n, n) for n in node.input]
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                own = {v.name for v in sub.input} | {i.name for i in sub.initializer} | {
                    o for inner in sub.node for o in inner.output}
                _rename_reads(sub, {k: v for k, v in renames.items() if k not in own})


def save_proto(proto: Any, path: Path, external: bool) -> None:
    """``onnx.save``; with ``external`` the weights go to one data file beside it (``<name>.data``), as a model over
    2 GB must (one protobuf message holds 2 GB). Its nodes are put in an order that loads first (:func:`sort_nodes`:
    the tools whose output it saves sort without a Loop's reads)."""
    import onnx

    sort_nodes(proto.graph)
    if external:
        data = Path(path).with_name(Path(path).name + ".data")
        still_read = any(t.data_location == onnx.TensorProto.EXTERNAL and any(
            e.key == "location" and e.value == data.name for e in t.external_data) for t in stored_tensors(proto.graph))
        if data.exists() and not still_read:  # onnx appends to an existing data file: a rewrite in place doubled it
            data.unlink()
        onnx.save(proto, str(path), save_as_external_data=True, location=data.name)
    else:
        onnx.save(proto, str(path))


ALIGN = 4096  # external-data offsets aligned to pages: ONNX Runtime maps them instead of copying


def pad_to_page(f: Any, offset: int) -> int:
    """Zeros up to the next page boundary of the data file being written; the new offset."""
    pad = (-offset) % ALIGN
    f.write(b"\0" * pad)
    return offset + pad


def point_external(t: Any, location: str, offset: int, length: int) -> None:
    """Make ``t`` a tensor whose bytes are ``length`` bytes at ``offset`` of the data file ``location``."""
    from onnx import TensorProto

    t.data_location = TensorProto.EXTERNAL
    del t.external_data[:]
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = t.external_data.add()
        entry.key, entry.value = key, value


def external_bytes(t: Any, folder: Path) -> bytes:
    """The bytes of external tensor ``t`` from its data file (its location relative to ``folder``, or absolute)."""
    info = {e.key: e.value for e in t.external_data}
    with open(folder / info["location"], "rb") as f:
        f.seek(int(info.get("offset", 0)))
        return f.read(int(info["length"])) if "length" in info else f.read()


def consolidate_external(proto: Any, folder: Path, name: str) -> int:
    """Move the weights of ``proto``'s external tensors, wherever they live in ``folder`` (an exporter leaves one
    file per tensor), into one page-aligned data file ``name`` there, a tensor at a time (never the whole model in
    memory), and remove the files they came from in ``folder`` (a tensor whose location is absolute is copied from
    its file elsewhere, which is left as it is). Returns how many files were folded in."""
    from onnx import TensorProto

    moved: set[Path] = set()
    out = folder / name
    tmp = folder / (name + ".part")
    offset = 0
    with open(tmp, "wb") as f:
        for t in stored_tensors(proto.graph):
            if t.data_location != TensorProto.EXTERNAL:
                continue
            location = next(e.value for e in t.external_data if e.key == "location")
            data = external_bytes(t, folder)
            if not Path(location).is_absolute():
                moved.add(folder / location)
            if not data:  # an empty tensor (torch writes those out too): kept in the graph
                del t.external_data[:]
                t.data_location = TensorProto.DEFAULT
                t.raw_data = b""
                continue
            offset = pad_to_page(f, offset)
            f.write(data)
            point_external(t, name, offset, len(data))
            offset += len(data)
    if offset:
        os.replace(tmp, out)
    else:
        tmp.unlink()
    for source in moved - {out}:
        source.unlink(missing_ok=True)
    return len(moved)


def move_model(src: Path, dst: Path) -> None:
    """The model at ``src`` moved to ``dst`` with its external data (one data file, as ONNX Runtime and onnx-nb save
    them): the data file becomes ``<dst name>.data`` beside it and the graph's locations say so."""
    import shutil

    import onnx

    proto = onnx.load(str(src), load_external_data=False)
    locations = {e.value for t in stored_tensors(proto.graph) for e in t.external_data if e.key == "location"}
    if len(locations) > 1:
        raise ValueError(f"{src.name} keeps its weights in {len(locations)} files; move_model takes one")
    data = dst.name + ".data"
    for t in stored_tensors(proto.graph):
        for e in t.external_data:
            if e.key == "location":
                e.value = data
    if locations:
        shutil.move(str(src.parent / locations.pop()), str(dst.parent / data))
    onnx.save(proto, str(dst))
    src.unlink()
