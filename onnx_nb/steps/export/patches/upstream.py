"""transformers' own export patch set (``transformers.exporters``, from transformers 5.2x): the patches its ONNX
exporter lends a model while tracing it (``apply_patches("dynamo")`` and ``("onnx")``: the model-specific ones are kept
beside each model by its authors), its graph fixes after torch's decompositions (hooked by one of those patches), its
ONNX translations and its repairs of the written graph.

The dynamo route tries this set first for a model transformers writes patches for (:func:`registered_for`: a patch
whose target lives in one of the model's own modeling modules), with onnx-nb's exporter helpers (the pattern matcher,
torchlib's registry built once) but none of onnx-nb's own rewrites of the model; where its file fails onnx-nb's
check, onnx-nb's own patch set runs as before (:mod:`.applying`). An operator both tables translate takes
transformers' translation in either set where the installed transformers has one (the experts' ``grouped_mm``): the
same rows to the same experts, kept by transformers. Nothing here imports ``transformers.exporters`` before it runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

SET = "transformers"  # the names the result records for each set
OWN = "onnx-nb"


def _exporter() -> Any:
    """transformers' ONNX exporter module (importing it registers its patches), or None where the installed
    transformers has none or its exporter's own imports fail (onnxscript missing)."""
    try:
        from transformers.exporters import exporter_onnx
    except Exception:  # noqa: BLE001 - an older transformers, or its exporter's imports fail: no upstream set
        return None
    return exporter_onnx


def registry() -> list[tuple[str, str]]:
    """(owner path, attribute) of every patch transformers' ONNX export lends ("dynamo" and "onnx" backends)."""
    if _exporter() is None:
        return []
    from transformers.exporters import utils

    found = getattr(utils, "_PATCHES", None)  # (path, attribute, factory) per backend
    if not isinstance(found, dict):
        return []
    return [(path, attribute) for backend in ("dynamo", "onnx") for path, attribute, _ in found.get(backend, [])]


def registered_for(model: Any) -> list[str]:
    """The patches transformers registers for ``model``'s own code: a function of a modeling module one of its
    submodules' classes comes from (``modeling_rwkv.is_kernels_available``), or a method of one of those classes
    (``NllbMoeTop2Router._cast_classifier``; Qwen3.5's text model has not its module's vision attention); the generic
    ones (``torch.where``) are not "for" a model. Empty for a model outside transformers."""
    if not hasattr(model, "modules"):
        return []
    classes = {type(m) for m in model.modules() if type(m).__module__.startswith("transformers.models.")}
    modules = {c.__module__ for c in classes}
    owners = modules | {f"{c.__module__}.{c.__qualname__}" for c in classes}
    return sorted({f"{path}.{attribute}" for path, attribute in registry() if path in owners})


def registered_for_type(model_type: str) -> list[str]:
    """The patches transformers registers for the code of model type ``model_type`` (its ``transformers.models``
    folder), read from the registry without building a model."""
    from transformers.models.auto.configuration_auto import model_type_to_module_name

    prefix = f"transformers.models.{model_type_to_module_name(model_type)}."
    return sorted({f"{path}.{attribute}" for path, attribute in registry() if (path + ".").startswith(prefix)})


@contextlib.contextmanager
def applied() -> Iterator[None]:
    """Within: transformers' patches for the ONNX export (every one it registers, generic and model-specific, as its
    own exporter lends them; its FX graph fixes run after torch's decompositions through one of them)."""
    from transformers.exporters.utils import apply_patches

    with apply_patches("dynamo"), apply_patches("onnx"):
        yield


def translations() -> dict[Any, Any]:
    """transformers' ONNX translations (operator -> onnxscript function), empty where it has none."""
    exporter = _exporter()
    table = getattr(exporter, "_ONNX_TRANSLATION_TABLE", None) if exporter is not None else None
    return dict(table) if isinstance(table, dict) else {}


def repair(program: Any) -> None:
    """transformers' repairs of the written graph (a ``TopK`` sorted, a constant ``GatherND``), in place."""
    exporter = _exporter()
    fix = getattr(exporter, "apply_onnx_ir_fixes", None)
    if callable(fix):
        fix(program)
