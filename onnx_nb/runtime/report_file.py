"""Standalone HTML files, written atomically."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..render import esc


def json_text(data: Any, path: str | os.PathLike[str] | None = None) -> str:
    """A result's ``to_dict()`` as indented JSON, written atomically to ``path`` when one is given."""
    import json

    text = json.dumps(data, indent=2, default=str)
    if path is not None:
        atomic_write_text(Path(path), text)
    return text


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` through a staging folder beside ``path`` and rename it into place, like every
    other file onnx-nb writes (:func:`files.staging_dir`, :func:`files.publish`)."""
    from .files import disk_error, publish, staging_dir

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise (disk_error(exc, path.parent) or exc) from exc
    with staging_dir(path) as tmp:
        staged = tmp / path.name
        staged.write_text(text, encoding="utf-8")
        publish(staged, path)


def write_html(path: Path, title: str, sections: Sequence[str]) -> Path:
    """One self-contained page from already-escaped HTML sections."""
    body = "\n".join(f"<section>{s}</section>" for s in sections)
    page = (f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{esc(title)}</title></head>'
            f'<body style="margin:24px"><h2 style="font-family:system-ui">{esc(title)}</h2>{body}'
            "</body></html>")
    atomic_write_text(path, page)
    return path
