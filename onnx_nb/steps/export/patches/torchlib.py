"""The dynamo exporter's registry of ONNX functions (torchlib's), built once per process and opset.

Every ``torch.onnx.export(dynamo=True)`` builds its registry anew (``ONNXRegistry.from_torchlib``): it reads the
source of each of torchlib's ONNX Script functions again (``function_ir``: the file tokenized and parsed for every
function) to learn their domains. In the test suite's workers that was 4% of all their time, 0.3 to 0.4 s of each
tiny model's export here. Within :func:`registry_once`, the first build for an opset is kept and each export gets
its own copy of its table (the same functions, in the same order: the custom translations an export registers go
into its copy only).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from .contract import Patch
from .lending import lent

_BUILT: dict[Any, Any] = {}  # (class, opset, options) -> the registry torch built first


def _kept(original: Callable[..., Any]) -> Callable[..., Any]:
    def from_torchlib(cls: Any, opset_version: Any = None, **options: Any) -> Any:
        key = (cls, opset_version, tuple(sorted(options.items())))
        built = _BUILT.get(key)
        if built is None:
            args = () if opset_version is None else (opset_version,)
            built = _BUILT[key] = original(cls, *args, **options)
        registry = cls()
        vars(registry).update(vars(built))
        registry.functions = {target: list(metas) for target, metas in built.functions.items()}
        return registry

    from_torchlib.kept = True  # type: ignore[attr-defined]
    return from_torchlib


@contextlib.contextmanager
def registry_once(model: Any = None) -> Iterator[list[str]]:
    """Within: ``ONNXRegistry.from_torchlib`` gives a copy of the registry it built first for that opset; yields
    ``["ONNXRegistry.from_torchlib"]`` (empty where this torch builds its registry otherwise: nothing applied).
    ``model`` is unused: it applies to every export."""
    try:
        from torch.onnx._internal.exporter._registration import ONNXRegistry
    except ImportError:  # pragma: no cover - a torch without the dynamo exporter's registry
        yield []
        return
    current = vars(ONNXRegistry).get("from_torchlib")
    if (not isinstance(current, classmethod) or getattr(current.__func__, "kept", False)
            or not isinstance(vars(ONNXRegistry()).get("functions"), dict)):
        yield []  # already within (a nested export), or a registry of another layout: torch's own build
        return
    with lent([(ONNXRegistry, "from_torchlib", classmethod(_kept(current.__func__)))]):
        yield ["ONNXRegistry.from_torchlib"]


PATCH = Patch(
    name="torchlib registry once",
    applies_to="every dynamo export",
    replaces="torch's ONNXRegistry.from_torchlib after its first build for an opset (a copy of that build)",
    why="each export built the registry anew, parsing the source of every torchlib function again: 0.3 to 0.4 s of "
        "each tiny model's export",
    during=registry_once)
