"""Resolve what the user passed (module, Hugging Face object, folder, hub id) to a model."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .errors import InvalidArgumentError
from .results.export import ModelSource


def source_name(model: Any) -> str:
    """A short, file-safe-able name for the default output folder."""
    if isinstance(model, (str, os.PathLike)):
        text = str(model).rstrip("/\\")
        return Path(text).name if os.sep in text and Path(text).expanduser().exists() else text
    config = getattr(model, "config", None)
    name = getattr(config, "_name_or_path", "") or ""
    if name:
        return Path(name.rstrip("/")).name if Path(name).exists() else name
    return type(model).__name__


def resolve(model: Any, task: str | None) -> ModelSource:
    """Load or wrap the model; returns a :class:`ModelSource` with ``model`` set."""
    if isinstance(model, (str, os.PathLike)):
        from .hf.loading import load_model

        loaded = load_model(str(model), task)
        return ModelSource(kind=loaded.kind, name=source_name(model), location=loaded.location,
                           task=loaded.task, model_type=getattr(loaded.config, "model_type", None),
                           model=loaded.model, preprocessor=loaded.preprocessor)
    import torch

    if not isinstance(model, torch.nn.Module):
        raise InvalidArgumentError(
            f"model is a {type(model).__name__}. Pass a torch.nn.Module, a Hugging Face model "
            "object, the path of a local Hugging Face folder, or a hub id such as 'bert-base-uncased'."
        )
    from .wrap import is_hf_model

    if is_hf_model(model):
        from .hf.loading import load_preprocessor
        from .hf.tasks import check_task, infer_task

        config = model.config
        where = getattr(config, "_name_or_path", "") or None
        pre = load_preprocessor(where) if where and Path(where).is_dir() else None
        return ModelSource(kind="hf-object", name=source_name(model), location=where,
                           task=check_task(task) if task else infer_task(config, model),
                           model_type=getattr(config, "model_type", None), model=model,
                           preprocessor=pre)
    if task is not None:
        raise InvalidArgumentError(
            "task only applies to Hugging Face models; for a plain torch.nn.Module pass a sample."
        )
    return ModelSource(kind="module", name=source_name(model), model=model)
