"""transformers' own export patch set (``transformers.exporters``, from transformers 5.2x): the patches its ONNX
exporter lends a model while tracing it (``apply_patches("dynamo")`` and ``("onnx")``: the model-specific ones are kept
beside each model by its authors), its graph fixes after torch's decompositions (hooked by one of those patches), its
ONNX translations and its repairs of the written graph.

The dynamo route tries this set first for a model transformers writes patches for (:func:`registered_for`: a patch
whose target is code the model runs: a function of its modeling module, a method of one of its classes), with
onnx-nb's exporter helpers (the pattern matcher, torchlib's registry built once), its translations of operators
transformers does not translate and its repairs of the written graph, but none of onnx-nb's module rewrites (the
two repairs onnx-nb makes to transformers' span-attention patch stay, and say so: :func:`within`); where its file
fails onnx-nb's check, onnx-nb's own patch set runs as before (:mod:`.applying`). transformers' own exporter also
fixes the graph right after ``torch.export`` and picks the experts' implementation: those are not copied (the fixes
run once, after the decompositions). An operator both tables translate takes
transformers' translation in either set where the installed transformers has one (the experts' ``grouped_mm``): the
same rows to the same experts, kept by transformers. Nothing here imports ``transformers.exporters`` before it runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

SET = "transformers"  # the name the result records for this set
ADDED = "onnx-nb's repairs of transformers' patches"  # and for what onnx-nb lends inside it


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


def registered_for(model: Any, ran: set[type] | None = None) -> list[str]:
    """The patches transformers registers for ``model``'s own code: a function of a modeling module one of its
    classes comes from (``modeling_rwkv.is_kernels_available``), or a method of one of those classes or a class they
    inherit from (``NllbMoeTop2Router._cast_classifier``); the generic ones (``torch.where``) are not "for" a model.
    ``ran``: the classes whose forward ran on the sample (:func:`watching`): a part that holds the whole model (a
    vision-language model's decoder, which never runs its tower) is judged on the code it runs. Empty for a model
    outside transformers, without importing transformers' exporter."""
    if ran is None:
        ran = {type(m) for m in model.modules()} if hasattr(model, "modules") else set()
    ours = [c for c in ran if c.__module__.startswith("transformers.models.")]
    if not ours:
        return []
    owners = {f"{b.__module__}.{b.__qualname__}" for c in ours for b in c.__mro__}
    owners |= {b.__module__ for c in ours for b in c.__mro__ if b.__module__.startswith("transformers.models.")}
    return sorted({f"{path}.{attribute}" for path, attribute in registry() if path in owners})


@contextlib.contextmanager
def watching() -> Iterator[set[type]]:
    """Within: the classes of every module whose forward runs, collected in the set yielded."""
    import torch

    seen: set[type] = set()
    hook = torch.nn.modules.module.register_module_forward_pre_hook(lambda m, _a: seen.add(type(m)))
    try:
        yield seen
    finally:
        hook.remove()


def registered_for_type(model_type: str) -> list[str]:
    """The patches transformers registers for the code of model type ``model_type`` (its ``transformers.models``
    folder), read from the registry without building a model."""
    from transformers.models.auto.configuration_auto import model_type_to_module_name

    prefix = f"transformers.models.{model_type_to_module_name(model_type)}."
    return sorted({f"{path}.{attribute}" for path, attribute in registry() if (path + ".").startswith(prefix)})


_WITHIN: list[list[str]] = []  # while applied(): what onnx-nb adds to transformers' set, said in the result


@contextlib.contextmanager
def applied() -> Iterator[list[str]]:
    """Within: transformers' patches for the ONNX export (every one it registers, generic and model-specific, as its
    own exporter lends them; its FX graph fixes run after torch's decompositions through one of them). Yields the
    list where onnx-nb's repairs of those patches, lent while tracing, name themselves (:func:`within`)."""
    from transformers.exporters.utils import apply_patches

    added: list[str] = []
    _WITHIN.append(added)
    try:
        with apply_patches("dynamo"), apply_patches("onnx"):
            yield added
    finally:
        _WITHIN.pop()


def within() -> list[str] | None:
    """The list of :func:`applied` when its patches are lent now (a repair then lends itself alone, and names itself
    there), else None."""
    return _WITHIN[-1] if _WITHIN else None


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
