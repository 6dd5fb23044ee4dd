"""Load Hugging Face models and their preprocessors from a local folder or a hub id."""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import HubUnavailableError, ModelLoadError, ModelNotFoundError, first_line
from .tasks import TASK_AUTO_CLASS, check_task, infer_task

HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
_OFFLINE_HINTS = ("offline", "couldn't connect", "could not connect", "connection", "max retries",
                  "name resolution", "network", "timed out",
                  "cannot find the requested files in the local cache")


@dataclass
class LoadedModel:
    model: Any
    config: Any
    preprocessor: Any
    task: str
    location: str
    kind: str  # "hf-dir" or "hub-id"


def looks_like_path(text: str) -> bool:
    return (
        (os.sep in text and not HUB_ID.match(text))
        or text.startswith((".", "~", "/"))
        or Path(text).expanduser().exists()
    )


def _transformers() -> Any:
    try:
        import transformers
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ModelLoadError(
            "Loading Hugging Face models needs transformers: pip install 'onnx-nb[hf]'."
        ) from exc
    return transformers


def hub_error(name: str, exc: Exception) -> Exception:
    text = str(exc).lower()
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
    if any(h in text for h in _OFFLINE_HINTS) or offline:
        why = ("HF_HUB_OFFLINE is set; unset it if you do have network" if offline
               else "the Hub could not be reached from this machine")
        return HubUnavailableError(
            f"Could not download {name!r} from the Hugging Face Hub ({why}). "
            "Pass a local folder instead: on a machine with network run "
            f"AutoModel.from_pretrained({name!r}).save_pretrained('some/folder') and copy it here."
        )
    if "not a valid model identifier" in text or "404" in text or "repository not found" in text:
        return ModelNotFoundError(
            f"{name!r} is neither a local folder nor a model on the Hugging Face Hub. "
            "Check the spelling, or pass the path of a folder holding config.json."
        )
    return ModelLoadError(f"Could not load {name!r}: {first_line(exc)}")


def load_config(name: str) -> tuple[Any, str]:
    """Load a config from a folder or hub id; returns it with the source kind."""
    transformers = _transformers()
    if looks_like_path(name):
        folder = Path(name).expanduser()
        if not folder.exists():
            raise ModelNotFoundError(
                f"No such folder: {folder}. Pass a folder holding a Hugging Face model "
                "(config.json and weights), a hub id such as 'bert-base-uncased', or a model object."
            )
        if not (folder / "config.json").is_file():
            raise ModelNotFoundError(
                f"{folder} has no config.json, so it is not a Hugging Face model folder. "
                "Save one with model.save_pretrained(folder), or pass the model object."
            )
        kind = "hf-dir"
    elif HUB_ID.match(name):
        kind = "hub-id"
    else:
        raise ModelNotFoundError(
            f"{name!r} is neither an existing folder nor a valid Hugging Face hub id."
        )
    try:
        config = transformers.AutoConfig.from_pretrained(str(Path(name).expanduser()) if kind == "hf-dir" else name,
                                                         trust_remote_code=False)
    except (OSError, ValueError) as exc:
        if kind == "hub-id":
            raise hub_error(name, exc) from exc
        raise ModelLoadError(f"Could not read the config in {name}: {first_line(exc)}") from exc
    return config, kind


def load_preprocessor(location: str, task: str | None = None) -> Any:
    """The tokenizer, processor or feature extractor stored with a model, or None. For image-to-text, an image
    processor and a tokenizer saved side by side without a processor class naming both (ViT-GPT2's folder) come
    as one (:class:`~onnx_nb.runtime.pictures.ImageTextProcessor`)."""
    from ...runtime.pictures import ImageTextProcessor, image_processor_of

    transformers = _transformers()
    found: list[Any] = []
    for cls_name in ("AutoProcessor", "AutoTokenizer", "AutoImageProcessor", "AutoFeatureExtractor"):
        try:
            pre = getattr(transformers, cls_name).from_pretrained(location)
        except Exception:  # noqa: BLE001 - any failure just means "none of this kind"
            continue
        if pre is not None and not isinstance(pre, bool):
            if task != "image-to-text" or image_processor_of(pre) is not None:
                return pre if not found else ImageTextProcessor(pre, found[0])
            found.append(pre)  # a tokenizer alone: its image processor is looked for next
    return found[0] if found else None


def load_model(name: str, task: str | None = None) -> LoadedModel:
    """Load a model for ``task`` (inferred from the config when None)."""
    transformers = _transformers()
    config, kind = load_config(name)
    location = str(Path(name).expanduser().resolve()) if kind == "hf-dir" else name
    arch = (getattr(config, "architectures", None) or [None])[0]
    if task is None:
        task = infer_task(config)
        cls = getattr(transformers, arch, None) if arch else None
    else:
        task = check_task(task)
        cls = None
    if cls is None:
        cls = getattr(transformers, TASK_AUTO_CLASS[task])
    try:
        if kind == "hf-dir" and getattr(config, "model_type", None) == "timm_backbone":
            model = _timm_backbone(cls, config, Path(location))
        else:
            model = cls.from_pretrained(location, trust_remote_code=False)  # never run code shipped with a model
    except (OSError, ValueError, RuntimeError) as exc:  # (a state dict that does not fit: RuntimeError)
        if kind == "hub-id":
            raise hub_error(name, exc) from exc
        raise ModelLoadError(
            f"Could not load the weights in {location} as {cls.__name__} for task {task!r}: "
            f"{first_line(exc)}"
        ) from exc
    model.eval()
    preprocessor = load_preprocessor(location, task)
    return LoadedModel(model, config, preprocessor, task, location, kind)


def _timm_backbone(cls: Any, config: Any, folder: Path) -> Any:
    """A saved ``TimmBackbone`` folder: its ``from_pretrained`` takes its argument for a timm model name (and fails on
    a folder), so the model is built from the folder's config and given its weights."""
    from safetensors.torch import load_file

    index = folder / "model.safetensors.index.json"
    if index.exists():
        files = sorted({folder / f for f in json.loads(index.read_text())["weight_map"].values()})
    else:
        files = [f for f in (folder / "model.safetensors",) if f.exists()]
    if not files:
        raise OSError(f"no model.safetensors (or its index) in {folder}")
    model = (getattr(cls, "_from_config", None) or cls.from_config)(config)
    state: dict[str, Any] = {}
    for file in files:
        state.update(load_file(str(file)))
    model.load_state_dict(state)
    return model


def checkpoint_bytes(folder: Path) -> int:
    """Bytes of a Hugging Face folder's weights (safetensors, else .bin); 0 when it has none."""
    return sum(p.stat().st_size for p in folder.glob("*.safetensors")) or \
        sum(p.stat().st_size for p in folder.glob("*.bin"))


def folder_config(model: Any) -> dict[str, Any]:
    """A local folder's ``config.json`` (read once per folder and modification time); {} for anything else."""
    if not isinstance(model, (str, os.PathLike)):
        return {}
    path = Path(str(model)).expanduser() / "config.json"
    try:
        return _config(str(path.resolve()), path.stat().st_mtime_ns)
    except OSError:
        return {}


@functools.lru_cache(maxsize=64)
def _config(path: str, _mtime: int) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def check_memory(model: Any) -> None:
    """Before loading a checkpoint folder: refuse an export that would not fit in memory (the kernel would die
    halfway), with what to do instead (another route's offer: the lean route's, for a decoder it writes)."""
    if not isinstance(model, (str, os.PathLike)) or not Path(model).expanduser().is_dir():
        return
    folder = Path(model).expanduser()
    weights = checkpoint_bytes(folder)
    if not weights:
        return
    from ...runtime.memory import FACTORS, require
    from ...steps.export.adapters.registry import offered_instead

    kind = str(folder_config(folder).get("model_type", ""))  # the folder's config.json, read once for every step
    require(int(FACTORS["export"] * weights), f"export() of {folder.name} ({weights / 1e9:.2f} GB of weights)",
            offered_instead(kind) or "Export it on a machine with more memory.")
