"""Sample inputs: normalising what users pass, naming dynamic axes, and growing shapes.

Only imported by functions that already need torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ....errors import SampleError
from ....runtime.shapes import other_size, other_sizes
from .wrap import forward_parameters

AxisSpec = dict[str, dict[int, str]]


@dataclass
class Sample:
    names: list[str]
    tensors: list[torch.Tensor]
    as_kwargs: bool
    axes: AxisSpec = field(default_factory=dict)

    def as_dict(self) -> dict[str, torch.Tensor]:
        return dict(zip(self.names, self.tensors))

    def shapes(self) -> dict[str, list[int]]:
        return {n: list(t.shape) for n, t in zip(self.names, self.tensors)}


def to_tensor(value: Any, where: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach()
    if hasattr(value, "__array__") and not isinstance(value, (str, bytes)):
        import numpy as np

        return torch.from_numpy(np.ascontiguousarray(np.asarray(value)))
    raise SampleError(
        f"{where} is a {type(value).__name__}, not a tensor. Sample inputs must be torch tensors "
        "or numpy arrays (a tensor, a tuple of them, or a dict of name -> tensor)."
    )


def normalise(model: torch.nn.Module, sample: Any) -> Sample:
    """Turn a tensor, tuple or dict into named tensors in call order."""
    if sample is None:
        raise SampleError(
            f"{type(model).__name__} is a plain torch.nn.Module, so onnx-nb cannot guess its "
            "inputs: pass a sample, e.g. export(model, torch.randn(1, 3, 224, 224)) or "
            "export(model, {'x': x, 'mask': mask})."
        )
    if isinstance(sample, Mapping):
        if not sample:
            raise SampleError("The sample dict is empty; give at least one input tensor.")
        names = [str(k) for k in sample]
        tensors = [to_tensor(v, f"sample[{k!r}]") for k, v in sample.items()]
        return Sample(names, tensors, as_kwargs=True)
    values = list(sample) if isinstance(sample, (tuple, list)) else [sample]
    if not values:
        raise SampleError("The sample is empty; give at least one input tensor.")
    tensors = [to_tensor(v, f"sample[{i}]" if len(values) > 1 else "sample")
               for i, v in enumerate(values)]
    params = [p for p in forward_parameters(model).values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if params and len(values) > len(params) and not any(
            p.kind == p.VAR_POSITIONAL for p in forward_parameters(model).values()):
        raise SampleError(
            f"The sample has {len(values)} tensors but {type(model).__name__}.forward takes "
            f"{len(params)} ({', '.join(p.name for p in params)}). Pass one tensor per argument."
        )
    names = [params[i].name if i < len(params) else f"input_{i}" for i in range(len(values))]
    return Sample(names, tensors, as_kwargs=False)


def default_axes(sample: Sample) -> AxisSpec:
    """Dynamic batch axis for every input of a plain module."""
    return {n: {0: "batch"} for n, t in zip(sample.names, sample.tensors) if t.dim() >= 1}


def restrict_axes(sample: Sample, dynamic: Any) -> Sample:
    """``sample`` with the axes ``dynamic`` asks for: a dict names them (checked), False fixes every one."""
    if isinstance(dynamic, Mapping):
        sample.axes = check_axes(sample, dynamic)
    elif not dynamic:
        sample.axes = {}
    return sample


def check_axes(sample: Sample, axes: Mapping[str, Mapping[int, str]]) -> AxisSpec:
    checked: AxisSpec = {}
    for name, spec in axes.items():
        if name not in sample.names:
            raise SampleError(
                f"dynamic names input {name!r}, but the inputs are {', '.join(sample.names)}."
            )
        rank = sample.tensors[sample.names.index(name)].dim()
        for axis in spec:
            if not isinstance(axis, int) or not -rank <= axis < rank:
                raise SampleError(
                    f"dynamic[{name!r}] names axis {axis!r}, but {name} has rank {rank}."
                )
        checked[name] = {a % rank: str(n) for a, n in spec.items()}
    return checked


def growth(sample: Sample) -> dict[str, int]:
    """How much each named axis grows in the probe (:func:`onnx_nb.runtime.shapes.other_sizes`, the one rule)."""
    sizes: dict[str, int] = {}
    for name, tensor in zip(sample.names, sample.tensors):
        for axis, axis_name in sample.axes.get(name, {}).items():
            sizes.setdefault(axis_name, int(tensor.shape[axis]))
    return {n: size - sizes[n] for n, size in other_sizes(sizes).items()}


def grow(sample: Sample) -> Sample:
    """The same inputs with every dynamic axis longer (values repeated, so ids stay valid)."""
    extra = growth(sample)
    tensors = []
    for name, tensor in zip(sample.names, sample.tensors):
        for axis, axis_name in sample.axes.get(name, {}).items():
            size = tensor.shape[axis]
            index = torch.arange(size + extra[axis_name]) % max(size, 1)
            tensor = tensor.index_select(axis, index)
        tensors.append(tensor)
    return Sample(list(sample.names), tensors, sample.as_kwargs, dict(sample.axes))


def output_axes(sample: Sample, probe: Sample, before: tuple[torch.Tensor, ...],
                after: tuple[torch.Tensor, ...], names: list[str], keep_derived: bool = True) -> AxisSpec:
    """Name the output axes that changed between the sample and the grown probe.

    An axis that follows an input axis gets its name; one derived from it (a strided length)
    is named ``<output>_dim<k>`` when ``keep_derived``, else left to the exporter's own name.
    """
    sizes: dict[tuple[int, int], dict[int, str]] = {}  # (size before, after) -> the input axes that grew so
    for name, t0, t1 in zip(sample.names, sample.tensors, probe.tensors):
        for axis, axis_name in sample.axes.get(name, {}).items():
            sizes.setdefault((t0.shape[axis], t1.shape[axis]), {}).setdefault(axis, axis_name)
    known = {n for by_axis in sizes.values() for n in by_axis.values()}
    result: AxisSpec = {}
    for name, o0, o1 in zip(names, before, after):
        spec = {}
        for axis, (a, b) in enumerate(zip(o0.shape, o1.shape)):
            if a != b:
                # two input axes that grew alike (a square image's height and width): the one at this axis first
                by_axis = sizes.get((a, b), {})
                spec[axis] = by_axis.get(axis) or next(iter(by_axis.values()), f"{name}_dim{axis}")
                if not keep_derived and spec[axis] not in known:
                    del spec[axis]
        if spec:
            result[name] = spec
    return result


# -- which axes can vary -----------------------------------------------------------------------------

@dataclass
class FixedAxis:
    """An input axis that stays fixed in the export, and why."""

    input: str
    axis: int
    size: int
    reason: str

    def text(self) -> str:
        return f"{self.input} axis {self.axis} stays {self.size}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {"input": self.input, "axis": self.axis, "size": self.size, "reason": self.reason}


def _axis_name(name: str, tensor: torch.Tensor, axis: int) -> str:
    rank = tensor.dim()
    if not tensor.is_floating_point() and rank == 2 and axis == 1:
        return "sequence"
    if tensor.is_floating_point():
        spatial = {4: {2: "height", 3: "width"}, 5: {2: "depth", 3: "height", 4: "width"},
                   3: {1: "sequence", 2: "length"}, 2: {1: "length"}}
        if axis in spatial.get(rank, {}):
            return spatial[rank][axis]
    return f"{name}_dim{axis}"


def _grown(sample: Sample, members: list[tuple[str, int]]) -> list[torch.Tensor]:
    tensors = []
    for name, tensor in zip(sample.names, sample.tensors):
        for n, axis in members:
            if n == name:
                size = tensor.shape[axis]
                tensor = tensor.index_select(axis, torch.arange(other_size(size)) % max(size, 1))
        tensors.append(tensor)
    return tensors


def probe_axes(run: Any, sample: Sample, static: Mapping[str, str]) -> list[FixedAxis]:
    """Make every input axis that can vary a dynamic axis of ``sample`` (in place), by running the model
    (``run(tensors)``) at a second size along it; returns the axes that stay fixed, with the reason.

    Axes of equal size that only run together (a sequence shared by ``input_ids`` and ``attention_mask``)
    get one shared name. ``static`` names inputs whose non-batch axes must stay fixed, with the reason.
    """
    from ....errors import first_line

    fixed: list[FixedAxis] = []
    candidates: dict[int, list[tuple[str, int]]] = {}
    for name, tensor in zip(sample.names, sample.tensors):
        known = sample.axes.get(name, {})
        for axis in range(1, tensor.dim()):
            if axis in known:
                continue
            if name in static:
                fixed.append(FixedAxis(name, axis, int(tensor.shape[axis]), static[name]))
            else:
                candidates.setdefault(int(tensor.shape[axis]), []).append((name, axis))
    used = {n for spec in sample.axes.values() for n in spec.values()}

    def tries(members: list[tuple[str, int]]) -> str | None:
        first, axis = members[0]
        other = other_size(int(sample.tensors[sample.names.index(first)].shape[axis]))
        try:
            with torch.no_grad():
                run(_grown(sample, members))
        except Exception as exc:  # noqa: BLE001 - the model's own error is the reason the axis stays fixed
            return f"the model's code needs it (at size {other}: {type(exc).__name__}: {first_line(exc, 160)})"
        return None

    def name_for(members: list[tuple[str, int]]) -> str:
        first, axis = members[0]
        label = _axis_name(first, sample.tensors[sample.names.index(first)], axis)
        if label in used:
            label = f"{first}_dim{axis}" if f"{first}_dim{axis}" not in used else f"{label}_{len(used)}"
        used.add(label)
        return label

    for size, members in candidates.items():
        alone = {m: tries([m]) for m in members}
        failed = [m for m in members if alone[m] is not None]
        for m in members:
            if alone[m] is None:
                sample.axes.setdefault(m[0], {})[m[1]] = name_for([m])
        if len(failed) > 1 and tries(failed) is None:  # they vary together (ids and their mask)
            label = name_for(failed)
            for n, axis in failed:
                sample.axes.setdefault(n, {})[axis] = label
            continue
        fixed += [FixedAxis(n, axis, size, alone[(n, axis)] or "") for n, axis in failed]
    return fixed
