"""Exports that recorded one path: a value computed from the inputs' data became a Python value while tracing
(:class:`BranchWatch` sees where), so the file computes the path the sample took for every input.

Only imported by functions that already need torch.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

_METADATA = {"size", "dim", "numel", "ndimension", "nelement", "stride", "__len__", "is_floating_point",
             "is_complex", "__get__", "element_size", "get_device", "data_ptr", "storage_offset",
             "is_contiguous", "__format__", "__repr__", "__str__"}
_TO_PYTHON = {"__bool__": "a Python bool", "item": "a Python number", "tolist": "a Python list",
              "__int__": "a Python int", "__float__": "a Python float", "__index__": "a Python int",
              "numpy": "a numpy array"}
# frames of torch and of onnx-nb itself (the package root, three levels up) are not the model's code
_INTERNAL = (str(Path(torch.__file__).parent), str(Path(__file__).parents[2]), "<string>")
FIX_HINT = ("Write the branch with tensor operations (torch.where, or torch.cond for whole sub-computations), "
            "or export each branch as its own model.")


@dataclass(frozen=True)
class TracedBranch:
    """A place where a value computed from the inputs' data became a Python value while tracing: the trace
    recorded the path this sample took, and the file computes that path for every input."""

    conversion: str  # "a Python bool", ...
    filename: str
    lineno: int
    code: str
    module_path: str | None  # dotted module path in the user's model; "" for its own forward

    def text(self) -> str:
        where = (f"module '{self.module_path}'" if self.module_path else
                 "the model's own forward" if self.module_path == "" else "the model")
        return (f"traced one branch at {where}, {Path(self.filename).name}:{self.lineno} "
                f"(`{self.code}`): a tensor computed from the input became {self.conversion}, so the file always "
                f"takes the path this sample took. {FIX_HINT}")


class BranchWatch(torch.overrides.TorchFunctionMode):
    """Watches a trace for data-dependent control flow.

    Tensors computed from the inputs' *values* are tracked (shapes are not: a branch on a length is checked
    by running other shapes); when one of them is turned into a Python bool, number or list, the place in
    the source and the module it ran in are recorded. The TorchScript tracer's own warning ("Converting a
    tensor to a Python boolean might cause the trace to be incorrect") fires for shapes too, so it cannot
    tell the two apart.
    """

    def __init__(self, inputs: tuple[torch.Tensor, ...], model: torch.nn.Module) -> None:
        super().__init__()
        import weakref

        self._ref = weakref.ref
        self._tainted: dict[int, Any] = {}
        self.found: list[TracedBranch] = []
        self._names = {id(m): n for n, m in model.named_modules()}
        self._stack: list[str | None] = []
        for t in inputs:
            self._mark(t)

    def _mark(self, t: Any) -> None:
        if isinstance(t, torch.Tensor):
            self._tainted[id(t)] = self._ref(t)

    def _has(self, t: Any) -> bool:
        ref = self._tainted.get(id(t)) if isinstance(t, torch.Tensor) else None
        return ref is not None and ref() is t

    def __enter__(self) -> BranchWatch:
        hooks = torch.nn.modules.module
        self._pre = hooks.register_module_forward_pre_hook(
            lambda m, _a: self._stack.append(self._names.get(id(m))))
        self._post = hooks.register_module_forward_hook(self._leave)
        super().__enter__()
        return self

    def _leave(self, _module: Any, _args: Any, _output: Any) -> None:  # a hook that returns None keeps the output
        if self._stack:
            self._stack.pop()

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        self._pre.remove()
        self._post.remove()

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        from torch.utils._pytree import tree_flatten

        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        flat, _ = tree_flatten((args, kwargs))
        tainted = any(self._has(a) for a in flat)
        if tainted and name in _TO_PYTHON:
            self._record(_TO_PYTHON[name])
        out = func(*args, **kwargs)
        if tainted and name not in _METADATA and name not in _TO_PYTHON:
            for t in tree_flatten(out)[0]:
                self._mark(t)
            if name.endswith("_") and not name.startswith("__"):  # in place: the target now holds input data
                for a in flat:
                    self._mark(a)
        return out

    def _record(self, conversion: str) -> None:
        import linecache

        frame: Any = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename.startswith(_INTERNAL):
            frame = frame.f_back
        if frame is None:
            return
        filename, lineno = frame.f_code.co_filename, frame.f_lineno
        if any(b.filename == filename and b.lineno == lineno for b in self.found):
            return
        module = next((n for n in reversed(self._stack) if n is not None), None)
        code = linecache.getline(filename, lineno).strip()[:120]
        self.found.append(TracedBranch(conversion, filename, lineno, code, module))


def data_dependent_failure(message: str) -> bool:
    """Whether a dynamo export failed on a branch that depends on the inputs' values."""
    return any(m in message for m in ("data-dependent", "GuardOnDataDependent", "DataDependentOutputException"))
