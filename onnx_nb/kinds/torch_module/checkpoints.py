"""PyTorch checkpoint files (``.pt``, ``.pth``, ``.ckpt``, ``.bin``) as export sources, loaded safely.

A pickled checkpoint can run any code while it is unpickled. onnx-nb reads checkpoints with
``torch.load(weights_only=True)``, which only rebuilds tensors and plain containers; a file that
pickles a whole ``nn.Module`` (or anything else) is refused with :class:`UnsafeCheckpointError`
unless the caller opts in with ``allow_pickle=True`` (``--allow-pickle``) for a file they trust.
Hugging Face folders go through ``from_pretrained``, which prefers safetensors and loads ``.bin``
weights with ``weights_only=True``; onnx-nb never passes ``trust_remote_code``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ...errors import ModelLoadError, UnsafeCheckpointError, first_line

SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".pkl", ".safetensors")
_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")


def is_checkpoint(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in SUFFIXES


def _weights_only_error(path: Path, exc: Exception) -> UnsafeCheckpointError:
    found = _GLOBAL.search(str(exc))
    what = f" (it needs {found.group(1)})" if found else ""
    return UnsafeCheckpointError(
        f"{path.name} pickles Python objects{what}, and unpickling a file can run arbitrary code. onnx-nb "
        "only loads weights safely by default. If you trust where this file came from, pass "
        "allow_pickle=True (--allow-pickle); otherwise ask for a state_dict or safetensors file, build the "
        "model in code, load the weights into it and pass the model object.")


def _not_a_module(path: Path, obj: Any) -> ModelLoadError:
    if isinstance(obj, dict):
        tensors = [k for k, v in obj.items() if hasattr(v, "shape")]
        example = f", e.g. {tensors[0]!r}" if tensors else ""
        return ModelLoadError(
            f"{path.name} holds only weights (a dict of {len(obj)} entries{example}), not a model. Build the "
            f"model in code, call model.load_state_dict(torch.load({path.name!r}, weights_only=True)) and "
            "pass the model object.")
    return ModelLoadError(f"{path.name} holds a {type(obj).__name__}, not a torch.nn.Module; pass a model object.")


def load(path: Path, allow_pickle: bool = False) -> Any:
    """The ``torch.nn.Module`` in a checkpoint file, loaded without arbitrary unpickling unless
    ``allow_pickle``."""
    import pickle

    import torch

    if path.suffix.lower() == ".safetensors":
        try:
            from safetensors.torch import load_file
        except ImportError as exc:
            raise ModelLoadError("Reading .safetensors needs safetensors: pip install 'onnx-nb[hf]'.") from exc
        raise _not_a_module(path, load_file(str(path)))
    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=not allow_pickle)
    except pickle.UnpicklingError as exc:
        if not allow_pickle:
            raise _weights_only_error(path, exc) from exc
        raise ModelLoadError(f"{path.name} is not a readable PyTorch checkpoint: {str(exc)[:200]}") from exc
    except (RuntimeError, EOFError, OSError, ValueError, AttributeError, ModuleNotFoundError) as exc:
        raise ModelLoadError(
            f"{path.name} is not a readable PyTorch checkpoint ({type(exc).__name__}: "
            f"{first_line(exc, 200)}). It may be truncated; if it pickles a "
            "model class, that class must be importable here.") from exc
    if not isinstance(obj, torch.nn.Module):
        raise _not_a_module(path, obj)
    return obj.eval()
