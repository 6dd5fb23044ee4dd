"""Small HTML and text renderers shared by every result. All text is escaped here."""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import Any

CSS = """
<style>
.onnxnb{font-family:system-ui,-apple-system,Segoe UI,sans-serif;font-size:13px;line-height:1.4}
.onnxnb h4{margin:.2em 0 .4em 0;font-size:14px}
.onnxnb table{border-collapse:collapse;margin:.3em 0 .6em 0}
.onnxnb th,.onnxnb td{border-bottom:1px solid #ddd;padding:2px 8px;text-align:left;vertical-align:top}
.onnxnb th{background:#f5f5f5}
.onnxnb .ok{color:#137333;font-weight:600}.onnxnb .bad{color:#b3261e;font-weight:600}
.onnxnb .warn{color:#8a5a00}.onnxnb code{font-size:12px}
</style>
"""


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def html_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], raw_cols: Sequence[int] = ()) -> str:
    """An HTML table; cells are escaped unless their column index is in ``raw_cols``."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{c if i in raw_cols else esc(c)}</td>" for i, c in enumerate(row)) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def text_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A compact fixed-width table for terminals and logs."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def human_bytes(n: int | float) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"  # pragma: no cover


def human_count(n: int) -> str:
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return str(n)


def shape_text(shape: Sequence[Any]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
