"""``WebBundle``: what :func:`onnx_nb.to_transformers_js` wrote (a folder transformers.js loads) and how each
precision's file did when transformers.js itself ran it, against PyTorch."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..render import CSS, esc, folded, html_table, human_bytes, text_table

HEADERS = ["dtype", "ran in", "file", "size", "status", "against PyTorch", "load ms", "ms per run"]


@dataclass
class WebCheck:
    """One precision's file run by transformers.js: its ``dtype`` (transformers.js's name: fp32, fp16, q8, q4), the
    ``file`` under the folder, ``status`` (pass, fail, error: transformers.js refused or crashed), what was compared
    (``measure``, in words) and the figures (``figures``: cosine, max_abs, tokens equal ...)."""

    dtype: str
    file: str
    size: int
    precision: str  # onnx-nb's name for the file's precision: fp32, fp16, int8, int4
    status: str
    where: str = ""  # what ran it: Node.js and its version, or the browser, its backend (WASM, WebGPU) and its page
    measure: str = ""
    figures: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    load_ms: float | None = None
    run_ms: float | None = None
    untimed: str = ""  # why no run was timed (a software WebGPU adapter)

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def cells(self) -> list[Any]:
        ms = [f"{v:.0f}" if v is not None else "" for v in (self.load_ms, self.run_ms)]
        if self.untimed and self.run_ms is None:
            ms[1] = "not timed"  # the reason is the bundle's note
        return [self.dtype, self.where, self.file, human_bytes(self.size), self.status,
                self.measure + (f" ({self.note})" if self.note else ""), *ms]

    def to_dict(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "file": self.file, "size": self.size, "precision": self.precision,
                "status": self.status, "where": self.where, "measure": self.measure, "figures": dict(self.figures),
                "note": self.note, "load_ms": self.load_ms, "run_ms": self.run_ms, "untimed": self.untimed}


@dataclass
class WebBundle:
    """A transformers.js folder (``folder``: ``config.json``, the tokenizer's files, ``onnx/model*.onnx``) and, per
    precision, transformers.js's own run of it against PyTorch (``checks``). ``transformers_js`` is the version that
    ran (``""`` when none did; ``unchecked`` says why, or where it could not run). ``bool(bundle)``: every file
    checked, in every place asked for, and passed.

    Example::

        bundle = onnx_nb.to_transformers_js([result, int8], "web/minilm")
        bundle.checks[1].figures["pooled_cosine"]      # q8's sentence embeddings against PyTorch's, by cosine
        bundle.to_dict()
    """

    folder: Path
    name: str
    task: str
    model_type: str
    files: list[Path]
    checks: list[WebCheck] = field(default_factory=list)
    transformers_js: str = ""
    unchecked: str = ""
    texts: list[Any] = field(default_factory=list)  # question answering's: [question, context] pairs
    images: list[str] = field(default_factory=list)  # an image task's images, by size
    audio: list[str] = field(default_factory=list)  # speech recognition's clips, by length and rate
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks) and not self.unchecked

    def __bool__(self) -> bool:
        return self.passed

    def _head(self) -> list[list[str]]:
        places = ", ".join(dict.fromkeys(c.where for c in self.checks))
        ran = (f"transformers.js {self.transformers_js} ({places})" if self.transformers_js else "not run")
        if self.unchecked:
            ran += f"; not run {self.unchecked}" if self.transformers_js else f": {self.unchecked}"
        return [["folder", str(self.folder)], ["model", f"{self.name} ({self.model_type}, {self.task})"],
                ["size", human_bytes(sum(f.stat().st_size for f in self.files if f.exists()))], ["checked by", ran],
                ["verdict", "passed" if self.passed else "not verified" if not self.checks else "failed"]]

    def _rows(self) -> list[list[Any]]:
        return [c.cells() for c in self.checks]

    def _repr_html_(self) -> str:
        return (f'{CSS}<div class="onnxnb"><h4>transformers.js folder: {esc(self.name)}</h4>'
                + html_table(["", ""], self._head())
                + (html_table(HEADERS, self._rows()) if self.checks else "")
                + folded("Notes", self.notes) + "</div>")

    def __repr__(self) -> str:
        lines = [f"{k}: {v}" for k, v in self._head()]
        if self.checks:
            lines.append(text_table(HEADERS, self._rows()))
        return "\n".join(lines + self.notes)

    def to_dict(self) -> dict[str, Any]:
        return {"folder": str(self.folder), "name": self.name, "task": self.task, "model_type": self.model_type,
                "files": [str(f) for f in self.files], "checks": [c.to_dict() for c in self.checks],
                "transformers_js": self.transformers_js, "unchecked": self.unchecked,
                "texts": list(self.texts), "images": list(self.images),
                "audio": list(self.audio), "notes": list(self.notes),
                "passed": self.passed, "seconds": round(self.seconds, 3)}
