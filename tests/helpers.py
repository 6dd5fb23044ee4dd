"""Independent checks used by the tests: run an ONNX file in ORT and compare with PyTorch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch


def installed(*names: str) -> None:
    """Skips the calling test file where a package it needs is not installed, as ``pytest.importorskip`` would,
    without importing it: both workers collect every file, one runs it, and only that one should pay for the
    import (TensorFlow's takes seconds)."""
    import importlib.util

    import pytest

    for name in names:
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"could not import {name!r}: not installed", allow_module_level=True)


def lazy(name: str) -> Any:
    """Module ``name``, imported when a test first uses it (:func:`installed` checks it is there)."""
    import importlib
    import types

    class Lazy(types.ModuleType):
        def __getattr__(self, attribute: str) -> Any:
            return getattr(importlib.import_module(name), attribute)

    installed(name)
    return Lazy(name)


def graph_inputs(path: Any) -> list[Any]:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).get_inputs()


def hf_inputs(path: Any, model: Any, batch: int, seq: int, dec: int = 6, audio: int = 6000) -> dict[str, torch.Tensor]:
    """Inputs for every graph input, at a batch and lengths the export never saw."""
    g = torch.Generator().manual_seed(1)
    config = model.config
    vocab = getattr(getattr(config, "text_config", None) or config, "vocab_size", 100)
    feed: dict[str, torch.Tensor] = {}
    for i in graph_inputs(path):
        static = [d if isinstance(d, int) else None for d in i.shape]
        if i.name == "input_ids":
            feed[i.name] = torch.randint(3, vocab, (batch, seq), generator=g)
        elif i.name == "attention_mask":
            feed[i.name] = torch.ones(batch, seq, dtype=torch.long)
        elif i.name == "token_type_ids":
            feed[i.name] = torch.zeros(batch, seq, dtype=torch.long)
        elif i.name == "position_ids":
            feed[i.name] = torch.arange(seq).expand(batch, seq).contiguous()
        elif i.name == "decoder_input_ids":
            feed[i.name] = torch.randint(3, vocab, (batch, dec), generator=g)
        elif i.name == "input_values":
            feed[i.name] = torch.randn(batch, audio, generator=g)
        else:  # pixel_values, input_features: static except batch
            feed[i.name] = torch.randn(batch, *static[1:], generator=g)
    return feed


def compare(path: Any, reference: dict[str, np.ndarray], feed: dict[str, torch.Tensor]) -> dict[str, float]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    got = session.run(None, {k: v.numpy() for k, v in feed.items()})
    diffs = {}
    for name, value in zip(names, got):
        ref = reference[name]
        assert value.shape == ref.shape, (name, value.shape, ref.shape)
        diffs[name] = float(np.abs(value - ref).max())
    return diffs


def torch_outputs(model: Any, feed: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    kwargs = {"use_cache": False} if "use_cache" in model.forward.__code__.co_varnames else {}
    with torch.no_grad():
        out = model(**feed, **kwargs)
    return {k: v.numpy() for k, v in out.items() if isinstance(v, torch.Tensor)}


def perturb(path: Path, out: Path, module: str) -> str:
    """Add noise to the weight consumed by ``module``'s MatMul/Gemm; returns that node's name."""
    from onnx_nb.steps.parity.localize import module_of

    proto = onnx.load(str(path))
    inits = {i.name: i for i in proto.graph.initializer}
    node = next(n for n in proto.graph.node if n.op_type in ("MatMul", "Gemm") and module_of(n) == module
                and any(i in inits for i in n.input))
    name = next(i for i in node.input if i in inits)
    weight = onnx.numpy_helper.to_array(inits[name]).copy()
    weight += np.random.default_rng(0).normal(0, 1.0, weight.shape).astype(weight.dtype)
    inits[name].CopyFrom(onnx.numpy_helper.from_array(weight, name))
    onnx.save(proto, str(out))
    return node.name


def copy_export(result: Any, folder: Path) -> Any:
    """A private copy of a shared, read-only export (conftest's session exports) for a test that writes beside its
    parent (a variant's default name is the parent's, with a suffix): the files copied into ``folder``, the same
    model and check."""
    import dataclasses
    import shutil

    folder.mkdir(parents=True, exist_ok=True)
    for f in result.files:
        shutil.copy2(f, folder / f.name)
    return dataclasses.replace(result, path=folder / result.path.name, files=[folder / f.name for f in result.files],
                               parts={k: folder / p.name for k, p in result.parts.items()})
