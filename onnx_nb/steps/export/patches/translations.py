"""ONNX translations the dynamo exporter's own table lacks, given to every ``torch.onnx.export(dynamo=True)`` call
(``custom_translation_table``): generic operators, never one family's module.

- ``transformers::grouped_mm_fallback`` and ``aten::_grouped_mm``: the expert dispatch of transformers' mixtures of
  experts (its default ``grouped_mm`` experts implementation on CPU): rows sorted by expert, ``offs`` the running
  count per expert. The number of experts is static, so it unrolls into one MatMul per expert on that expert's
  rows (a Gather of a Range), concatenated: the file does the router's work, never every expert on every token.
  transformers' own exporter (``transformers.exporters.exporter_onnx``) translates it the same way, and its
  translation is the one given where the installed transformers has it (:mod:`.upstream`): these two are the
  fallback for a transformers before its exporter.
- ``aten::histc``: the per-expert token counts of the routers that count with it.
- ``aten::_is_all_true``: what ``torch._check_tensor_all`` leaves in a trace (transformers' ``torch_compilable_check``
  of a tensor condition, in its export patches for the vision towers): whether every element is true, a check the
  exporter then drops.
- ``aten::arange.start_step`` with bounds known at export: torch's values as a constant (ONNX's ``Range`` counts in
  float32 where torch counts in double, one element short for ``arange(1/27, 1.0, 1/27)``).
- ``aten::scatter_reduce.two`` with ``reduce="mean"`` (TAPAS' cell and column averages): torchlib writes it as a
  scatter where the last value wins; here sums and counts. Every other reduction is torchlib's own.
- ``aten::isin.Tensor_Tensor`` (Grounding DINO's delimiter tokens found among the prompt's ids): every element
  against every test element, any equal; the exporter's own decomposition ends in ``searchsorted``, which has no
  translation.
- ``aten::cummax`` and ``aten::cummin`` (Grounding DINO's previous and next delimiter of each token): the best value
  so far and where it was last seen, each place against every place at or before it; ONNX has no running maximum.
- ``aten::rsub.Scalar`` (``1.0 - mask`` of an integer mask, ProphetNet's cross-attention bias): torch's result
  type (an integer tensor less a float is float), where the exporter's own decomposition leaves ``sub(1.0, x)``,
  which its type promotion pass then cannot match to an overload ("Failed to decompose the FX graph").

:func:`complex_ops` adds the complex overloads torchlib lacks (``aten::unsqueeze`` of a complex tensor: Llama 4's
rotary multiplies queries by ``polar(...)[:, :, None, :]``). The exporter drops a custom translation for a complex
value (it registers them as real only), so these go into torchlib's own registry, where a complex value is a real
tensor with a trailing axis of 2 (real, imaginary).

:func:`drop_no_op_reshapes` repairs two of torchlib's translations after the export, by the exporter's own shapes: a
``Squeeze`` whose output keeps its input's rank (``aten::squeeze.dim`` of an axis whose size is symbolic: torch
squeezes only a size of 1, so the trace kept the axis, yet the translation squeezes it and fails at run time; the
merged rows of Mistral 3's image at a size the trace did not fix) and a ``Split`` into one part (the sizes of
``torch.split`` baked from the sample) become ``Identity``.

:func:`exact_no_ops` also makes the exporter's graph clean-up (onnxscript's optimizer) drop ``x + 0``, ``x - 0``,
``x * 1`` and ``x / 1`` only where the constant is exactly 0 or 1: its patterns match within 1e-8, so a norm's
``variance + 1e-8`` (Helium's ``rms_norm_eps``) lost its epsilon and a zero row (the padding token's embedding) came
out NaN where PyTorch gives 0.
"""

from __future__ import annotations

import sys
from typing import Any


def _grouped_mm(mat_a: Any, mat_b: Any, offs: Any, bias: Any = None, out_dtype: Any = None) -> Any:
    """``out[r] = mat_a[r] @ mat_b[group(r)]``: ``mat_a`` (M, K) sorted by group, ``mat_b`` (G, K, N), ``offs``
    (G,) each group's end row."""
    from onnxscript.onnx_opset import opset18

    op: Any = opset18  # onnxscript traces these calls; its stubs type each op narrower than the values met here

    groups = mat_b.shape[0]
    if not isinstance(groups, int):
        raise ValueError("grouped_mm: the number of experts (mat_b.shape[0]) must be static")

    def each(x: Any) -> list[Any]:
        return list(op.Split(x, axis=0, num_outputs=groups)) if groups > 1 else [x]

    zero_axis = op.Constant(value_ints=[0])
    ends, weights = each(op.Cast(offs, to=7)), each(mat_b)
    biases = each(bias) if bias is not None else None
    start = op.Constant(value_ints=[0])
    one = op.Constant(value_int=1)
    parts = []
    for g in range(groups):
        rows = op.Range(op.Squeeze(start, zero_axis), op.Squeeze(ends[g], zero_axis), one)
        out = op.MatMul(op.Gather(mat_a, rows, axis=0), op.Squeeze(weights[g], zero_axis))
        if biases is not None:
            out = op.Add(out, op.Squeeze(biases[g], zero_axis))
        parts.append(out)
        start = ends[g]
    result = op.Concat(*parts, axis=0)
    return result if out_dtype is None else op.CastLike(result, mat_a)


def _grouped_mm_fallback(mat_a: Any, mat_b: Any, offs: Any) -> Any:
    return _grouped_mm(mat_a, mat_b, offs)


def _histc(values: Any, bins: int = 100, min: float = 0.0, max: float = 0.0) -> Any:
    """``torch.histc``: counts of ``values`` in ``bins`` equal bins over [min, max] (the data's own range when both
    are 0), values outside left out, the top edge counted in the last bin; the routers of mixtures of experts count
    their tokens per expert with it."""
    from onnxscript.onnx_opset import opset18

    op: Any = opset18
    flat = op.Reshape(values, op.Constant(value_ints=[-1]))
    if min == max == 0:
        low, high = op.ReduceMin(flat, keepdims=0), op.ReduceMax(flat, keepdims=0)
    else:
        low, high = op.CastLike(op.Constant(value_float=float(min)), flat), \
            op.CastLike(op.Constant(value_float=float(max)), flat)
    width = op.Div(op.Sub(high, low), op.CastLike(op.Constant(value_float=float(bins)), flat))
    index = op.Cast(op.Floor(op.Div(op.Sub(flat, low), width)), to=7)
    index = op.Min(index, op.Constant(value_int=bins - 1))
    inside = op.And(op.GreaterOrEqual(flat, low), op.LessOrEqual(flat, high))
    every = op.Range(op.Constant(value_int=0), op.Constant(value_int=bins), op.Constant(value_int=1))
    rows, columns = op.Constant(value_ints=[0]), op.Constant(value_ints=[1])
    hits = op.And(op.Equal(op.Unsqueeze(index, columns), op.Unsqueeze(every, rows)), op.Unsqueeze(inside, columns))
    return op.ReduceSum(op.CastLike(hits, flat), rows, keepdims=0)


def _is_all_true(self: Any) -> Any:
    """``aten::_is_all_true``: a boolean scalar, no element of ``self`` false."""
    from onnxscript.onnx_opset import opset18

    op: Any = opset18
    false = op.ReduceSum(op.Cast(op.Not(self), to=7), keepdims=0)  # an empty tensor: none false
    return op.Equal(false, op.Constant(value_int=0))


def _arange_start_step(start: Any, end: Any, step: Any = 1, dtype: int = -1, layout: str = "", device: str = "",
                       pin_memory: bool = False) -> Any:
    """``torch.arange`` with bounds known at export (Python numbers): the values torch gives, as a constant. ONNX's
    ``Range`` counts its elements in the tensor's own type, torch in double: ``arange(1/27, 1.0, 1/27)`` has 27
    elements in torch and 26 in float32, which left the SigLIP-style position buckets (Idefics3's) one short and
    indexed past the end. Bounds that vary with the inputs, and whole-number bounds, go to torchlib's translation."""
    known = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (start, end, step))
    if not known or not any(isinstance(v, float) for v in (start, end, step)):  # whole numbers count exactly
        from onnxscript.function_libs.torch_lib.ops.core import aten_arange_start_step

        return aten_arange_start_step(start, end, step, dtype, layout, device, pin_memory)
    import numpy as np
    import onnx
    import torch
    from onnxscript.onnx_opset import opset18

    # ``dtype`` is an ONNX type (the exporter's), -1 for torch's default: torch's own arange in that type (an
    # integer type truncates the bounds first, a double one keeps double steps)
    wanted = None if dtype in (-1, None) else \
        torch.from_numpy(np.empty(0, onnx.helper.tensor_dtype_to_np_dtype(int(dtype)))).dtype
    values = torch.arange(start, end, step, dtype=wanted).numpy()
    return opset18.Constant(value=onnx.numpy_helper.from_array(np.ascontiguousarray(values)))


def _rsub_scalar(self: Any, other: Any, alpha: Any = 1) -> Any:
    """``other - alpha * self`` in torch's result type: an integer tensor with a float number gives float32 (torch's
    default type), else ``self``'s type. A Python number is a constant made in its own precision (an int64's
    ``2**31 - 1``, a double's ``1/3``) then cast; anything else (a symbolic size: ``x.shape[0] - x``) is a value
    cast to ``self``'s type."""
    import numpy as np
    import onnx
    from onnxscript import ir
    from onnxscript.onnx_opset import opset18

    op: Any = opset18
    floating = {ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16, ir.DataType.BFLOAT16}
    if any(isinstance(v, float) for v in (other, alpha)) and getattr(self, "dtype", None) not in floating:
        self = op.Cast(self, to=ir.DataType.FLOAT)

    def like(value: Any) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = op.Constant(value=onnx.numpy_helper.from_array(np.array(value)))
        return op.CastLike(value, self)

    scaled = self if isinstance(alpha, (int, float)) and alpha == 1 else op.Mul(self, like(alpha))
    return op.Sub(like(other), scaled)


def _scatter_reduce(self: Any, dim: int, index: Any, src: Any, reduce: str, include_self: bool = True) -> Any:
    """``aten::scatter_reduce.two``: torchlib's own for every reduction but ``mean``, which it writes as ONNX's
    ``reduction="none"`` (the last value scattered to a place wins); here the mean of what lands on each place (with
    ``self``'s value where ``include_self``), ``self`` where nothing lands: two scattered sums, a count and a sum."""
    from onnxscript.function_libs.torch_lib.ops.core import aten_scatter_reduce
    from onnxscript.onnx_opset import opset18

    if reduce != "mean":
        return aten_scatter_reduce(self, dim, index, src, reduce, include_self=include_self)
    op: Any = opset18
    shape = op.Shape(index)  # torch reads only the part of src the index covers; ONNX wants them alike
    src = op.Slice(src, op.Sub(shape, shape), shape)
    zeros = op.Expand(op.CastLike(op.Constant(value_float=0.0), self), op.Shape(self))
    ones = op.Expand(op.CastLike(op.Constant(value_float=1.0), src), shape)
    total = op.ScatterElements(zeros, index, src, axis=dim, reduction="add")
    count = op.ScatterElements(zeros, index, ones, axis=dim, reduction="add")
    if include_self:
        return op.Div(op.Add(total, self), op.Add(count, op.CastLike(op.Constant(value_float=1.0), self)))
    landed = op.Greater(count, op.CastLike(op.Constant(value_float=0.0), self))
    return op.Where(landed, op.Div(total, op.Max(count, op.CastLike(op.Constant(value_float=1.0), self))), self)


def _unsqueeze_complex(self: Any, dim: int) -> Any:
    """``aten::unsqueeze`` of a complex tensor stored as (..., 2): a negative axis counts past the pair."""
    from onnxscript.onnx_opset import opset18

    op: Any = opset18
    return op.Unsqueeze(self, op.Constant(value_ints=[dim - 1 if dim < 0 else dim]))


def complex_ops() -> list[str]:
    """Registers in torchlib the complex overloads it lacks; idempotent. Returns the operators added now."""
    try:
        from onnxscript.function_libs.torch_lib import registration
    except ImportError:  # another onnxscript layout: nothing added
        return []
    added = []
    for name, function in (("aten::unsqueeze", _unsqueeze_complex),):
        if name in registration.default_registry and registration.default_registry[name].complex:
            continue
        registration.torch_op(name, trace_only=True, complex=True)(function)
        added.append(name)
    return added


def exact_no_ops() -> int:
    """The constants in onnxscript's no-op rewrite patterns (``x + 0``, ``x * 1``, ...) matched exactly instead of
    within ``abs_tol=1e-8`` / ``rel_tol=1e-5``; idempotent. Returns how many patterns were made exact."""
    try:
        from onnxscript.rewriter import _pattern_ir
        from onnxscript.rewriter.rules.common import _no_op
    except ImportError:  # another onnxscript layout: its patterns are left as they are
        return 0
    made = 0
    for rule in getattr(_no_op.rules, "rules", ()):
        for node in getattr(getattr(rule, "_target_pattern", None), "_nodes", ()):
            for value in node.inputs:
                if isinstance(value, _pattern_ir.Constant) and (value._abs_tol or value._rel_tol):
                    value._abs_tol = value._rel_tol = 0.0
                    made += 1
    return made


def _isin(elements: Any, test_elements: Any, assume_unique: bool = False, invert: bool = False) -> Any:
    """``torch.isin`` of a tensor in a tensor (Grounding DINO's delimiter tokens among the prompt's ids): each element
    compared with every test element, any equal; the exporter otherwise decomposes it into ``searchsorted``, which
    has no ONNX translation."""
    from onnxscript import ir
    from onnxscript.onnx_opset import opset18

    op: Any = opset18
    last = op.Constant(value_ints=[-1])
    kinds = {getattr(elements, "dtype", None), getattr(test_elements, "dtype", None)}
    if len(kinds) > 1:  # torch compares in a common type (1 is not in [1.5]): both in double here
        double = ir.DataType.DOUBLE
        elements, test_elements = op.Cast(elements, to=double), op.Cast(test_elements, to=double)
    equal = op.Equal(op.Unsqueeze(elements, last), op.Reshape(test_elements, last))
    found = op.Greater(op.ReduceSum(op.Cast(equal, to=7), last, keepdims=0), op.Constant(value_int=0))
    return op.Not(found) if invert else found


def _running(self: Any, dim: int, largest: bool) -> tuple[Any, Any]:
    """``torch.cummax`` (``largest``) or ``torch.cummin`` along ``dim``: each place's best value so far and the
    last place it was seen, as torch gives ties. Every place against every place at or before it (a lower
    triangle of the axis' length squared: a prompt's tokens, Grounding DINO's delimiters)."""
    import numpy as np
    import onnx
    from onnxscript.onnx_opset import opset18

    op: Any = opset18
    rank = len(self.shape)
    dim = dim % rank
    size = op.Gather(op.Shape(self), op.Constant(value_ints=[dim]), axis=0)  # [1]
    places = op.Range(op.Constant(value_int=0), op.Squeeze(size, op.Constant(value_ints=[0])),
                      op.Constant(value_int=1))
    ones = [1] * rank

    def along(axis: int) -> Any:  # the axis' places as a tensor of rank + 1, varying along ``axis`` alone
        shape = op.Concat(op.Constant(value_ints=ones[:axis]), size, op.Constant(value_ints=ones[axis:]), axis=0)
        return op.Reshape(places, shape)

    here, before = along(dim), along(dim + 1)  # place i (the output's), place j (the one read)
    seen = op.LessOrEqual(before, here)
    values = op.Unsqueeze(self, op.Constant(value_ints=[dim]))  # value j, beside every i
    kind = onnx.helper.tensor_dtype_to_np_dtype(int(self.dtype))
    info = np.finfo(kind) if np.issubdtype(kind, np.floating) else np.iinfo(kind)
    worst = op.Constant(value=onnx.numpy_helper.from_array(np.array(info.min if largest else info.max, kind)))
    masked = op.Where(seen, values, worst)
    axis = op.Constant(value_ints=[dim + 1])
    best = op.ReduceMax(masked, axis, keepdims=0) if largest else op.ReduceMin(masked, axis, keepdims=0)
    hit = op.And(seen, op.Equal(values, op.Unsqueeze(best, axis)))
    where = op.ReduceMax(op.Where(hit, before, op.Constant(value_int=-1)), axis, keepdims=0)
    return best, where


def _cummax(self: Any, dim: int) -> tuple[Any, Any]:
    return _running(self, dim, True)


def _cummin(self: Any, dim: int) -> tuple[Any, Any]:
    return _running(self, dim, False)


def table() -> dict[Any, Any]:
    """The translations for the operators this torch and transformers have (an operator a version lacks is left
    out: the table never asks for one)."""
    import torch

    found: dict[Any, Any] = {torch.ops.aten.histc.default: _histc,
                             torch.ops.aten.arange.start_step: _arange_start_step,
                             torch.ops.aten.rsub.Scalar: _rsub_scalar,
                             torch.ops.aten.scatter_reduce.two: _scatter_reduce,
                             torch.ops.aten.isin.Tensor_Tensor: _isin,
                             torch.ops.aten.cummax.default: _cummax, torch.ops.aten.cummin.default: _cummin}
    is_all_true = getattr(torch.ops.aten, "_is_all_true", None)
    if is_all_true is not None and hasattr(is_all_true, "default"):
        found[is_all_true.default] = _is_all_true
    grouped = getattr(torch.ops.aten, "_grouped_mm", None)
    if grouped is not None and hasattr(grouped, "default"):
        found[grouped.default] = _grouped_mm
    if "transformers.integrations.moe" in sys.modules:  # a model using it has imported it, registering the op
        fallback = getattr(getattr(torch.ops, "transformers", None), "grouped_mm_fallback", None)
        if fallback is not None:
            found[fallback.default] = _grouped_mm_fallback
        from . import upstream  # transformers' own translation of the experts' dispatch, where it has one

        found.update({op: fn for op, fn in upstream.translations().items() if op in found})
    return found


def drop_no_op_reshapes(model: Any) -> int:
    """In ``model`` (the exporter's ONNX IR), every ``Squeeze`` that keeps its input's rank and every ``Split`` into
    one part made an ``Identity``; returns how many."""
    import onnx_ir as ir

    changed = 0
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        if node.domain not in ("", "ai.onnx") or node.op_type not in ("Squeeze", "Split") or not node.inputs:
            continue
        source, out = node.inputs[0], node.outputs[0]
        if node.op_type == "Squeeze":
            ranks = [v.shape.rank() if v is not None and v.shape is not None else None for v in (source, out)]
            if None in ranks or ranks[0] != ranks[1]:
                continue
        elif len(node.outputs) != 1:
            continue
        node.op_type = "Identity"
        node.resize_inputs(1)
        node.attributes.clear()
        changed += 1
    return changed

