"""The two torch exporters behind one call, and what their failures mean.

Only imported by functions that already need torch.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ....results.export import ExportCheck
from .inputs import AxisSpec

EXPORTERS = ("dynamo", "torchscript")
_OP_PATTERNS = (
    re.compile(r"OpOverload\(op='(?P<op>[\w.]+)'"),
    re.compile(r"operator '(?P<op>[\w:]+)'"),
    re.compile(r"target=torch\.ops\.(?P<op>[\w]+\.[\w]+)"),
)
_NOISE = ("torchvision is not installed", "# The axis name")
_QUIET_CATEGORIES = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)
_PACKAGE = str(Path(__file__).resolve().parents[2]) + os.sep
# Deprecated API onnx-nb calls on purpose: torch's TorchScript exporter, the fallback when torch.export cannot trace a
# model (torch deprecates it but ships it; the result names the route, and this note says what it means).
_DELIBERATE = ("legacy TorchScript-based ONNX export",)
_DELIBERATE_NOTE = ("Exported with torch's TorchScript exporter, which torch has deprecated: the fallback when "
                    "torch.export cannot trace the model")


def unsupported_operator(message: str) -> str | None:
    """``aten::cummax`` from an exporter's error text, when it names a missing operator."""
    if not re.search(r"not supported|No ONNX function|No decompositions|unsupported", message,
                     re.IGNORECASE):
        return None
    for pattern in _OP_PATTERNS:
        match = pattern.search(message)
        if match:
            op = match.group("op")
            if "::" not in op:
                op = op.replace(".", "::", 1).split(".")[0]
            return op
    return None


def first_line(exc: BaseException) -> str:
    """The most telling line of an exporter's error."""
    text = str(exc)
    op = unsupported_operator(text)
    if op:
        return f"{type(exc).__name__}: operator {op} has no ONNX translation"
    for marker in ("## Exception summary",):
        if marker in text:
            text = text.split(marker, 1)[1]
    lines = [ln.strip() for ln in re.sub(r"\x1b\[[0-9;]*m", "", text).splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else type(exc).__name__}"[:300]


@contextlib.contextmanager
def _native_output(captured: list[str]) -> Iterator[None]:
    """Capture what C++ writes to fds 1 and 2 (the TorchScript exporter dumps whole IR graphs
    there on failure). The text is kept: its ``scope:`` lines locate a failing operator."""
    import tempfile

    try:
        saved = [os.dup(1), os.dup(2)]
    except OSError:  # pragma: no cover - no real fds (some embedded interpreters)
        yield
        return
    with tempfile.TemporaryFile(mode="w+b") as sink:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            sink.seek(0)
            captured.append(sink.read(4_000_000).decode("utf-8", "replace"))


@contextlib.contextmanager
def quiet(collected: list[str], native: list[str]) -> Iterator[None]:
    """Silence the exporters' console chatter; keep their warnings (and transformers' log lines, as the model runs
    while it is traced) for the result and their native output in ``native``."""
    from .logs import library_logs, quiet_loading

    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._dynamo",
                                              "torch.fx.experimental.symbolic_shapes",
                                              "onnxscript", "torch._export")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    ours: list[warnings.WarningMessage] = []
    with warnings.catch_warnings(record=True) as caught, \
            contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
            _native_output(native), quiet_loading(collected, local=False), library_logs(collected):
        warnings.simplefilter("always")
        try:
            yield
        finally:
            for lg, level in zip(loggers, levels):
                lg.setLevel(level)
            for w in caught:
                text = str(w.message).strip().splitlines()[0] if str(w.message).strip() else ""
                if issubclass(w.category, _QUIET_CATEGORIES):
                    # a library's own deprecations are its business; one raised at a call of ours is a bug of
                    # ours: it is raised again below, where the tests' deprecation watch sees it
                    if any(d in text for d in _DELIBERATE):
                        if _DELIBERATE_NOTE not in collected:
                            collected.append(_DELIBERATE_NOTE)
                    elif str(w.filename).startswith(_PACKAGE):
                        ours.append(w)
                    continue
                if text and not any(n in text for n in _NOISE) and text not in collected:
                    collected.append(text[:300])
    for w in ours:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def export_dynamo(module: torch.nn.Module, args: tuple[torch.Tensor, ...], path: Path,
                  input_names: list[str], output_names: list[str], axes: AxisSpec,
                  opset: int, external_data: bool, varargs_from: int | None = None, related: bool = False) -> None:
    """``torch.export`` then ONNX. ``varargs_from``: the module takes ``*tensors`` from that input on (a decoder's
    cache); its axes are then declared ``Dim.AUTO`` (torch.export relates them itself, e.g. a mask as long as the
    cache plus the new tokens, which named dims cannot say) and named after ``axes`` in the saved file. ``related``:
    the same for a module whose axes follow each other otherwise (an image's patches, four per merged row, and its
    windows)."""
    from ..patches import translations
    from ..patches.applying import applied

    dims: dict[str, Any] = {}
    shapes: list[Any] = []
    for name in input_names:
        spec = axes.get(name)
        if varargs_from is not None or related:
            shapes.append({a: torch.export.Dim.AUTO for a in spec} if spec else None)
        else:
            shapes.append({a: dims.setdefault(n, torch.export.Dim(n)) for a, n in spec.items()}
                          if spec else None)
    if varargs_from is not None:
        shapes = [*shapes[:varargs_from], tuple(shapes[varargs_from:])]
    translations.exact_no_ops()  # a norm's epsilon of 1e-8 is not "+ 0"
    translations.complex_ops()  # Llama 4's rotary unsqueezes a complex tensor
    # an experts loop of its own: transformers' grouped dispatch; windows pooled into entries: without a branch;
    # a recurrence looping over the tokens: a scan
    with applied(module):
        program = torch.onnx.export(
            module, args, dynamo=True, input_names=input_names, output_names=output_names,
            dynamic_shapes=tuple(shapes) if axes else None, opset_version=opset,
            optimize=True, verify=False, report=False, custom_translation_table=translations.table(),
        )
    if program is None:  # pragma: no cover - torch always returns a program with dynamo=True
        raise RuntimeError("torch.onnx.export returned no program")
    translations.drop_no_op_reshapes(program.model)
    program.save(str(path), external_data=external_data)
    if varargs_from is not None or related:  # the axis names in place of the exporter's symbols
        import onnx

        from ....runtime.onnxedit import name_dims
        from ....runtime.onnxfile import load_proto

        proto = load_proto(path)
        name_dims(proto, axes)
        onnx.save(proto, str(path))


def export_torchscript(module: torch.nn.Module, args: tuple[torch.Tensor, ...], path: Path,
                       input_names: list[str], output_names: list[str], axes: AxisSpec,
                       opset: int) -> None:
    torch.onnx.export(
        module, args, str(path), dynamo=False, input_names=input_names,
        output_names=output_names, dynamic_axes={k: dict(v) for k, v in axes.items()} or None,
        opset_version=opset, do_constant_folding=True,
    )


def _matches(name: str, op: str) -> bool:
    name = name.lstrip("_")
    return name == op or op.endswith("_" + name) or name.startswith(op)


class _Stack:
    def __init__(self, model: torch.nn.Module, op: str) -> None:
        self.op = op.split("::")[-1].lstrip("_")
        self.names = {id(m): n for n, m in model.named_modules()}
        self.stack: list[str] = []
        self.found: str | None = None

    def hit(self, name: str) -> None:
        if self.found is None and _matches(name, self.op):
            self.found = self.stack[-1] if self.stack else ""


class _FunctionLocator(torch.overrides.TorchFunctionMode):
    """Sees Python-level calls such as ``torch.diff`` before they decompose."""

    def __init__(self, stack: _Stack) -> None:
        super().__init__()
        self.s = stack

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.s.hit(getattr(func, "__name__", ""))
        return func(*args, **(kwargs or {}))


class _DispatchLocator(torch.utils._python_dispatch.TorchDispatchMode):
    """Sees the aten operators that actually run."""

    def __init__(self, stack: _Stack) -> None:
        super().__init__()
        self.s = stack

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.s.hit(func._schema.name.split("::")[-1])
        return func(*args, **(kwargs or {}))


_SCOPE = re.compile(r"= (?P<op>[\w:]+)\(.*?scope: (?P<scope>\S+)")


def scope_of(message: str, op: str) -> str | None:
    """The module path of ``op`` in a TorchScript exporter error, from its IR dump's scope.

    The first two scope entries are onnx-nb's own wrappers; the rest are the user's attributes.
    """
    for match in _SCOPE.finditer(message):
        if match.group("op") == op:
            attrs = [seg.split("::", 1)[1] if "::" in seg else "" for seg in match.group("scope").split("/")]
            return ".".join(a for a in attrs[2:] if a)
    return None


def locate_operator(model: torch.nn.Module, call: Any, op: str) -> str | None:
    """The dotted module path (``encoder.layer.0.attn``) whose forward calls ``op``;
    ``""`` for the model's own forward, None when no call was seen."""
    stack = _Stack(model, op)
    pre = torch.nn.modules.module.register_module_forward_pre_hook(
        lambda m, _a: stack.stack.append(stack.names.get(id(m), "?")))
    def pop(_m: Any, _a: Any, _o: Any) -> None:
        if stack.stack:
            stack.stack.pop()

    post = torch.nn.modules.module.register_module_forward_hook(pop)
    try:
        with torch.no_grad(), _FunctionLocator(stack), _DispatchLocator(stack):
            call()
    except Exception:  # noqa: BLE001 - locating is best effort; the export error stands
        pass
    finally:
        pre.remove()
        post.remove()
    found = stack.found
    return None if found == "?" else found


# -- exports that recorded one path ----------------------------------------------------------------

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


def check_file(path: Path, probe: Any, expected: tuple[Any, ...], names: list[str]) -> ExportCheck:
    """Run the staged file in ONNX Runtime on ``probe`` and compare with PyTorch's outputs."""
    from .checks import check_arrays

    feed = {n: t.numpy() for n, t in zip(probe.names, probe.tensors)}
    return check_arrays(path, feed, arrays_of(names, expected), probe.shapes())


def arrays_of(names: list[str], outputs: tuple[Any, ...]) -> dict[str, Any]:
    """PyTorch's outputs as numpy arrays by output name (floats as float32)."""
    return {n: (r.detach().float().numpy() if r.is_floating_point() else r.numpy()) for n, r in zip(names, outputs)}
