"""A model exported as several files, each an :class:`~onnx_nb.ExportResult` (:class:`PartsExport`): the base of
:class:`~onnx_nb.DiffusionExport` and :class:`~onnx_nb.SamExport`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..render import CSS, esc, html_table, human_bytes, human_count, shape_text
from .export import ExportResult


@dataclass
class PartsExport:
    """A model exported as several files (a diffusion pipeline's networks, SAM's encoder and decoder), one
    :class:`~onnx_nb.ExportResult` each, checked at other shapes, published into one folder together.

    Example::

        parts = onnx_nb.export(sam_model)                  # a model written as several files
        parts.folder, list(parts.parts)                    # name -> ExportResult
    """

    TITLE = "Exported"

    folder: Path
    parts: dict[str, ExportResult]
    model: Any = field(repr=False, default=None)  # the PyTorch object the parts came from
    export_seconds: float = 0.0

    def __bool__(self) -> bool:
        return all(bool(p) for p in self.parts.values())

    @property
    def path(self) -> Path:
        return self.folder

    @property
    def status(self) -> str:
        states = {p.status for p in self.parts.values()}
        return "failed" if "failed" in states else "unverified" if "unverified" in states else "verified"

    @property
    def patch_set(self) -> str:
        """Whose rewrites each part's file was traced under (:attr:`ExportResult.patch_set`): one word where every
        part agrees (``""``: none needed), else ``"vision: transformers, decoder: onnx-nb"``."""
        sets = {name: part.patch_set or "none" for name, part in self.parts.items()}
        if len(set(sets.values())) == 1:
            return "" if next(iter(sets.values())) == "none" else next(iter(sets.values()))
        return ", ".join(f"{name}: {which}" for name, which in sets.items())

    def to_dict(self) -> dict[str, Any]:
        return {"folder": str(self.folder), "status": self.status, "export_seconds": round(self.export_seconds, 3),
                "parts": {name: part.to_dict() for name, part in self.parts.items()}, "patch_set": self.patch_set}

    def _rows(self) -> list[tuple[str, ...]]:
        rows: list[tuple[str, ...]] = []
        for name, part in self.parts.items():
            shapes = part.check.get("shapes", {})
            rows.append((name, part.path.name, human_count(part.parameters), human_bytes(part.file_size),
                         part.exporter, f"{part.export_seconds:.1f} s", part.status,
                         ", ".join(f"{k} {shape_text(v)}" for k, v in shapes.items()) or "-",
                         f"{part.check.get('max_abs_diff', float('nan')):.1e}"))
        return rows

    _HEADERS = ("part", "file", "parameters", "size", "exporter", "time", "status", "checked at", "max abs diff")

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}({self.folder}, {self.status}, {self.export_seconds:.1f} s)"]
        lines += ["  " + " | ".join(row) for row in self._rows()]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        return (f"{CSS}<div class='onnxnb'><b>{esc(self.TITLE)}</b>: {esc(self.folder)} "
                f"({esc(self.status)}, {self.export_seconds:.1f} s)" + html_table(self._HEADERS, self._rows())
                + "</div>")
