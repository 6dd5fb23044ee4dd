"""Standalone HTML files, written atomically."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .render import esc


def atomic_write_text(path: Path, text: str) -> None:
    from .files import deferred_interrupt, disk_error

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with deferred_interrupt():
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise (disk_error(exc, path.parent) or exc) from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException as exc:
        with deferred_interrupt():
            Path(tmp).unlink(missing_ok=True)
        mapped = disk_error(exc, path.parent) if isinstance(exc, Exception) else None
        if mapped is not None:
            raise mapped from exc
        raise


def write_html(path: Path, title: str, sections: Sequence[str]) -> Path:
    """One self-contained page from already-escaped HTML sections."""
    body = "\n".join(f"<section>{s}</section>" for s in sections)
    page = (f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{esc(title)}</title></head>'
            f'<body style="margin:24px"><h2 style="font-family:system-ui">{esc(title)}</h2>{body}'
            "</body></html>")
    atomic_write_text(path, page)
    return path
