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
    """``aten::searchsorted`` from an exporter's error text, when it names a missing operator."""
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
                  opset: int, external_data: bool, varargs_from: int | None = None, related: bool = False,
                  upstream_patches: list[str] | None = None) -> dict[str, list[str]]:
    """``torch.export`` then ONNX; returns, per patch, what it replaced. ``upstream_patches``: the patches
    transformers writes for this model; given, its whole patch set (:mod:`..patches.upstream`) stands in for onnx-nb's
    rewrites, recorded under its ``SET`` with what onnx-nb adds to it. ``varargs_from``: the module takes
    ``*tensors`` from that input on (a decoder's cache); its axes are then declared ``Dim.AUTO`` (torch.export relates
    them itself, e.g. a mask as long as the cache plus the new tokens, which named dims cannot say) and named after
    ``axes`` in the saved file. ``related``: the same for a module whose axes follow each other otherwise (an image's
    patches, four per merged row, and its windows)."""
    from ..patches import translations, upstream
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
    table = translations.table()
    with contextlib.ExitStack() as stack:
        if upstream_patches is not None:  # transformers' patch set, the exporter's helpers, none of onnx-nb's rewrites
            added = stack.enter_context(upstream.applied())  # onnx-nb's repairs of its patches name themselves here
            replaced = {upstream.SET: upstream_patches, upstream.ADDED: added}
            table = {**table, **upstream.translations()}
            stack.enter_context(applied(module, own=False))
        else:  # an experts loop of its own: transformers' grouped dispatch; windows pooled into entries: without
            replaced = stack.enter_context(applied(module))  # a branch; a recurrence over the tokens: a scan...
        program = torch.onnx.export(
            module, args, dynamo=True, input_names=input_names, output_names=output_names,
            dynamic_shapes=tuple(shapes) if axes else None, opset_version=opset,
            optimize=True, verify=False, report=False, custom_translation_table=table,
        )
    if program is None:  # pragma: no cover - torch always returns a program with dynamo=True
        raise RuntimeError("torch.onnx.export returned no program")
    if upstream_patches is not None:
        upstream.repair(program)
    translations.drop_no_op_reshapes(program.model)
    program.save(str(path), external_data=external_data)
    if varargs_from is not None or related:  # the axis names in place of the exporter's symbols
        import onnx

        from ....runtime.onnxedit import name_dims
        from ....runtime.onnxfile import load_proto

        proto = load_proto(path)
        name_dims(proto, axes)
        onnx.save(proto, str(path))
    return {name: list(found) for name, found in replaced.items() if found}


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


def check_file(path: Path, probe: Any, expected: tuple[Any, ...], names: list[str]) -> ExportCheck:
    """Run the staged file in ONNX Runtime on ``probe`` and compare with PyTorch's outputs."""
    from .checks import check_arrays

    feed = {n: t.numpy() for n, t in zip(probe.names, probe.tensors)}
    return check_arrays(path, feed, arrays_of(names, expected), probe.shapes())


def arrays_of(names: list[str], outputs: tuple[Any, ...]) -> dict[str, Any]:
    """PyTorch's outputs as numpy arrays by output name (floats as float32)."""
    return {n: (r.detach().float().numpy() if r.is_floating_point() else r.numpy()) for n, r in zip(names, outputs)}
