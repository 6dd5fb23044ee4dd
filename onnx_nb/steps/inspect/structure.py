"""What an ONNX file is, read from its structure alone (external weight files are never opened): inputs and
outputs with their axes, opsets, producer, size, parameters per module, the operator histogram, and the cost
(multiply-accumulates and FLOPs per module) at shapes the user gives. The JupyterLab viewer's side panel and
``onnx_nb.summary()`` are both this module."""

from __future__ import annotations

import math
import os
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from ...errors import InvalidArgumentError
from ...results.summary import ModelSummary
from ..parity.localize import module_of

TOP = "(top level)"
# Symbolic axes the cost fills in when the user names none: batch-like ones 1, the rest 128.
BATCH_WORDS = ("batch", "N", "n")
DEFAULT_LENGTH = 128
MATMUL_LIKE = {"MatMul", "FusedMatMul", "MatMulInteger", "QLinearMatMul", "MatMulIntegerToFloat",
               "DynamicQuantizeMatMul"}
CONV_WEIGHT = {"Conv": 1, "ConvInteger": 1, "QLinearConv": 3, "FusedConv": 1, "NhwcConv": 1}
ATTENTION = {"Attention", "MultiHeadAttention", "GroupQueryAttention"}
PRODUCTS = MATMUL_LIKE | ATTENTION | set(CONV_WEIGHT) | {"MatMulNBits", "Gemm", "ConvTranspose"}  # counted as MACs


def path_of(model: Any) -> Path:
    path = getattr(model, "path", model)
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgumentError(f"Got a {type(model).__name__}; pass the path of an .onnx file, an ExportResult "
                                   "or a variant.")
    return Path(path)


def read(model: Any) -> tuple[Path, Any]:
    """The file's proto without its weights' data (embedded or external), after onnx-nb's file checks (damaged or
    hostile files are refused with a clear error)."""
    from ...runtime.onnxfile import read_structure

    p = path_of(model)
    return p, read_structure(p)[0]


def _dims(value_info: Any) -> list[Any]:
    t = value_info.type.tensor_type
    if not t.HasField("shape"):
        return []
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim]


def _dtype(value_info: Any) -> str:
    import onnx

    elem = value_info.type.tensor_type.elem_type
    return onnx.helper.tensor_dtype_to_np_dtype(elem).name if elem else "?"


def node_modules(proto: Any) -> list[str]:
    """Each node's module scope ('(top level)' for none), in graph order."""
    return [module_of(n) or TOP for n in proto.graph.node]


def logical_params(node: Any, init: Any) -> int:
    """Elements of one weight as the model sees them: a 4-bit MatMulNBits weight counts K x N, not its bytes."""
    if node.op_type == "MatMulNBits" and len(node.input) > 1 and node.input[1] == init.name:
        attrs = {a.name: a.i for a in node.attribute}
        if "K" in attrs and "N" in attrs:
            return int(attrs["K"] * attrs["N"])
    return int(math.prod(init.dims)) if init.dims else 1


def params_by_module(proto: Any, modules: list[str]) -> dict[str, int]:
    """Parameters per module scope: each initializer counted once, for the first node that reads it."""
    inits = {i.name: i for i in proto.graph.initializer}
    counted: set[str] = set()
    out: dict[str, int] = defaultdict(int)
    for node, module in zip(proto.graph.node, modules):
        for name in node.input:
            if name in inits and name not in counted:
                counted.add(name)
                out[module] += logical_params(node, inits[name])
    for name, init in inits.items():  # weights no node reads (kept by the exporter)
        if name not in counted:
            out[TOP] += int(math.prod(init.dims)) if init.dims else 1
    return dict(out)


def file_bytes(path: Path, proto: Any) -> tuple[int, int]:
    """(the .onnx file's size, the external data files' sizes): the data files are measured, not read."""
    from onnx.external_data_helper import uses_external_data

    locations = set()
    for init in proto.graph.initializer:
        if uses_external_data(init):
            for entry in init.external_data:
                if entry.key == "location":
                    locations.add(entry.value)
    external = 0
    for loc in locations:
        f = path.parent / loc
        if f.is_file():
            external += f.stat().st_size
    return path.stat().st_size, external


def summary(model: Any, shapes: dict[str, Any] | None = None, *, proto: Any = None) -> ModelSummary:
    """The structure of an ONNX file, and its cost at the given shapes, without loading its weights.

    ``model`` is an .onnx path, an ExportResult or a variant. ``shapes`` sets the symbolic axes for the cost
    (``{"batch": 1, "sequence": 128}``, by axis name) or whole inputs (``{"input_ids": [1, 128]}``); axes not named
    take 1 (batch) or 128. ``proto``: the file already read (by :func:`read`). Returns a
    :class:`~onnx_nb.results.summary.ModelSummary` (a table in a notebook, text in a terminal, ``to_dict()``).

    Example::

        s = onnx_nb.summary("model.onnx", shapes={"batch": 8, "sequence": 128})
        s.macs, s.by_module()
    """
    path, proto = (path_of(model), proto) if proto is not None else read(model)
    modules = node_modules(proto)
    g = proto.graph
    inits = {i.name for i in g.initializer}
    inputs = [{"name": v.name, "dtype": _dtype(v), "shape": _dims(v)} for v in g.input if v.name not in inits]
    outputs = [{"name": v.name, "dtype": _dtype(v), "shape": _dims(v)} for v in g.output]
    size, external = file_bytes(path, proto)
    by_params = params_by_module(proto, modules)
    result = ModelSummary(
        path=path, ir_version=int(proto.ir_version),
        opsets={(o.domain or "ai.onnx"): int(o.version) for o in proto.opset_import},
        producer=" ".join(x for x in (proto.producer_name, proto.producer_version) if x),
        inputs=inputs, outputs=outputs, file_bytes=size, external_bytes=external,
        nodes=len(g.node), params=sum(by_params.values()),
        ops=dict(Counter(n.op_type for n in g.node).most_common()),
        modules={m: {"params": p} for m, p in by_params.items()},
    )
    if shapes is not None:
        add_cost(result, proto, modules, shapes)
    return result


def axes_of(inputs: list[dict[str, Any]]) -> dict[str, int]:
    """The symbolic axes of the inputs with the values the cost takes when the user names none."""
    out: dict[str, int] = {}
    for i in inputs:
        for d in i["shape"]:
            if isinstance(d, str) and d not in out:
                out[d] = 1 if d in BATCH_WORDS or "batch" in d.lower() else DEFAULT_LENGTH
    return out


def concrete_inputs(inputs: list[dict[str, Any]], shapes: dict[str, Any]) -> dict[str, list[int]]:
    """Each input's shape with every axis a number, from ``shapes`` (by axis name or by input name)."""
    axes = axes_of(inputs)
    known = {i["name"] for i in inputs}
    for key, value in shapes.items():
        if key in known:
            continue
        if key not in axes:
            raise InvalidArgumentError(f"shapes names {key!r}, which is neither an input nor a symbolic axis of "
                                       f"this model (inputs {sorted(known)}, axes {sorted(axes)}).")
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidArgumentError(f"The axis {key!r} needs a whole number ≥ 0, not {value!r}.")
        axes[key] = value
    out = {}
    for i in inputs:
        given = shapes.get(i["name"])
        if given is not None:
            if len(given) != len(i["shape"]) or not all(isinstance(d, int) and d >= 0 for d in given):
                raise InvalidArgumentError(f"The input {i['name']!r} has shape {i['shape']}; {given!r} does not fit.")
            out[i["name"]] = list(given)
        else:
            out[i["name"]] = [d if isinstance(d, int) else axes.get(d, 1) for d in i["shape"]]
    return out


def _inferred_shapes(proto: Any, fixed: dict[str, list[int]], quick: bool = False) -> dict[str, list[Any]]:
    """Every tensor's shape at these input shapes: ONNX Runtime's symbolic shape inference (it knows the contrib
    operators), with external weights stood in for by inputs of their shape (they are never read). ``quick``: ONNX's
    own inference (C++, many times faster) alone, for a graph of standard operators."""
    import onnx
    from onnx.external_data_helper import uses_external_data

    m = onnx.ModelProto()
    m.CopyFrom(proto)
    g = m.graph
    for v in g.input:
        if v.name in fixed:
            dims = v.type.tensor_type.shape.dim
            for d, n in zip(dims, fixed[v.name]):
                d.Clear()
                d.dim_value = n
    kept = []
    for init in g.initializer:
        if uses_external_data(init) or _skimmed(init):
            g.input.append(onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
        else:
            kept.append(init)
    del g.initializer[:]
    g.initializer.extend(kept)
    del g.value_info[:]
    shapes: dict[str, list[Any]] = {i.name: list(i.dims) for i in proto.graph.initializer}
    try:
        if quick:
            raise ValueError("ONNX's own inference asked for")
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

        inferred = SymbolicShapeInference.infer_shapes(m, auto_merge=True, guess_output_rank=True)
    except Exception:  # noqa: BLE001 - a graph it cannot follow: ONNX's own inference, which skips what it cannot
        inferred = onnx.shape_inference.infer_shapes(m, strict_mode=False, data_prop=True)
    for v in [*inferred.graph.input, *inferred.graph.output, *inferred.graph.value_info]:
        shapes[v.name] = _dims(v)
    return shapes


def _skimmed(init: Any) -> bool:
    """A weight whose data :func:`~onnx_nb.runtime.skim.skim` left in the file (it has elements but no data)."""
    return bool(init.dims) and math.prod(init.dims) > 0 and not (
        init.raw_data or init.float_data or init.int32_data or init.int64_data or init.double_data
        or init.uint64_data or init.string_data)


def _numel(shape: list[Any] | None) -> int | None:
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return int(math.prod(shape))


def node_macs(node: Any, shapes: dict[str, list[Any]]) -> int | None:
    """Multiply-accumulates of one node at these shapes (None: not a matrix product, or shapes unknown)."""
    op = node.op_type
    out = shapes.get(node.output[0]) if node.output else None
    n_out = _numel(out)
    if out is None or n_out is None:
        return None
    ins = [shapes.get(i) if i else None for i in node.input]
    if op in MATMUL_LIKE:
        a = ins[0] if ins else None
        trans = op == "FusedMatMul" and any(x.name == "transA" and x.i for x in node.attribute)
        k = (a[-2] if trans else a[-1]) if a and len(a) >= (2 if trans else 1) else None
        return n_out * k if isinstance(k, int) else None
    if op == "MatMulNBits":
        k = next((a.i for a in node.attribute if a.name == "K"), None)
        return n_out * k if k else None
    if op in ("Gemm", "QGemm", "FusedGemm"):
        a = ins[0]
        trans = next((a_.i for a_ in node.attribute if a_.name == "transA"), 0)
        return n_out * a[0 if trans else 1] if a and len(a) == 2 and isinstance(a[0 if trans else 1], int) else None
    if op in CONV_WEIGHT:
        w = ins[CONV_WEIGHT[op]] if len(ins) > CONV_WEIGHT[op] else None
        return n_out * int(math.prod(w[1:])) if w and all(isinstance(d, int) for d in w) else None
    if op == "ConvTranspose":
        x, w = ins[0], ins[1]
        nx = _numel(x)
        return nx * int(math.prod(w[1:])) if nx and w and all(isinstance(d, int) for d in w) else None
    if op in ATTENTION and node.domain == "com.microsoft":  # ONNX's own Attention (opset 23) takes Q, K, V
        return _attention_macs(node, out, ins, shapes)
    if op == "Attention":
        q, k = (ins[0], ins[1]) if len(ins) > 1 else (None, None)
        if q and k and len(q) == 4 and len(k) == 4 and all(isinstance(d, int) for d in (*q, *k)):
            keys = k[2]
            present = shapes.get(node.output[1]) if len(node.output) > 1 and node.output[1] else None
            if present and len(present) == 4 and isinstance(present[2], int):
                keys = present[2]  # past + new keys
            return 2 * q[0] * q[1] * q[2] * keys * q[3]
        return None
    return None


def _attention_macs(node: Any, out: list[Any], ins: list[Any], shapes: dict[str, list[Any]]) -> int | None:
    """QK^T and AV (2 x batch x queries x keys x hidden), plus the Attention operator's own QKV projection."""
    if len(out) != 3 or not all(isinstance(d, int) for d in out):
        return None
    b, s, h = out
    keys = s
    if node.op_type == "MultiHeadAttention" and len(ins) > 1 and ins[1]:
        k = ins[1]
        keys = k[1] if len(k) == 3 else (k[2] if len(k) == 4 else s)
    # with a cache, the keys attended to are the present ones (past + new): [b, heads, T, d], Attention's
    # [2, b, heads, T, d]
    present = shapes.get(node.output[1]) if len(node.output) > 1 and node.output[1] else None
    if present and len(present) in (4, 5) and isinstance(present[-2], int):
        keys = present[-2]
    macs = 2 * b * s * keys * h if isinstance(keys, int) else 0
    if node.op_type == "Attention" and len(ins) > 1 and ins[1] and all(isinstance(d, int) for d in ins[1]):
        macs += b * s * int(math.prod(ins[1]))
    return macs


def macs_at(proto: Any, fixed: dict[str, list[int]]) -> tuple[int, Counter[str]]:
    """Multiply-accumulates of the graph's matrix products, convolutions and attention with its inputs at ``fixed``
    shapes (name -> dims), and the product-like operators it could not count there (op type -> how many). ONNX's own
    shape inference first (fast); ONNX Runtime's symbolic one where that leaves a product uncounted."""
    for quick in (True, False):
        inferred = _inferred_shapes(proto, fixed, quick)
        unknown: Counter[str] = Counter()
        total = 0
        for node in proto.graph.node:
            macs = node_macs(node, inferred)
            if macs is None and node.op_type in PRODUCTS:
                unknown[node.op_type] += 1
            total += macs or 0
        if not unknown:
            break
    return total, unknown


def add_cost(result: ModelSummary, proto: Any, modules: list[str], shapes: dict[str, Any]) -> None:
    fixed = concrete_inputs(result.inputs, shapes)
    inferred = _inferred_shapes(proto, fixed)
    unknown: Counter[str] = Counter()
    total_macs = total_flops = 0
    for node, module in zip(proto.graph.node, modules):
        macs = node_macs(node, inferred)
        entry = result.modules.setdefault(module, {"params": 0})
        if macs is not None:
            entry["macs"] = entry.get("macs", 0) + macs
            flops = 2 * macs
        else:
            if node.op_type in PRODUCTS:
                unknown[node.op_type] += 1
            elems = _numel(inferred.get(node.output[0])) if node.output else None
            flops = elems or 0  # one operation per output element for the rest (activations, norms, adds)
        entry["flops"] = entry.get("flops", 0) + flops
        total_macs += macs or 0
        total_flops += flops
    result.shapes = fixed
    result.macs = total_macs
    result.flops = total_flops
    if unknown:
        result.notes.append("not counted (shapes unknown at these inputs): "
                            + ", ".join(f"{n} {op}" for op, n in unknown.most_common()))
