"""Small HTML and text renderers shared by every result. All text is escaped here."""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import Any

CSS = """
<style>
/* .onnxnb.onnxnb: JupyterLab right-aligns output table cells with a (0,2,1) selector; ours must outrank it */
.onnxnb{font-family:system-ui,-apple-system,Segoe UI,sans-serif;font-size:13px;line-height:1.4}
.onnxnb h4{margin:.2em 0 .4em 0;font-size:14px}
.onnxnb table{border-collapse:collapse;margin:.3em 0 .6em 0}
.onnxnb.onnxnb table th,
.onnxnb.onnxnb table td{border-bottom:1px solid #ddd;padding:2px 8px;text-align:left;vertical-align:top}
.onnxnb.onnxnb table th{background:#f5f5f5;white-space:nowrap;font-weight:600}
/* a key table's names and numbers stay on one line; its words (status, baseline) wrap before it outgrows 1,000 px */
.onnxnb td{font-variant-numeric:tabular-nums}.onnxnb table.key td:first-child{white-space:nowrap}
.onnxnb.onnxnb table td.num{text-align:right;white-space:nowrap}
.onnxnb.onnxnb table td.wrap{white-space:normal;min-width:16em;max-width:32em}
.onnxnb details{margin:.2em 0 .6em 0}.onnxnb summary{cursor:pointer;color:#555}
.onnxnb .fold{color:#666}
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


def sig(value: float | None, digits: int = 3) -> str:
    """A number to ``digits`` significant digits ("-" for none): 0.0223, 1.23e-05, 74.7; from 10 ** digits to a
    million a whole number rounded as much (1468 ms -> 1470, never 1.47e+03)."""
    if value is None:
        return "-"
    text = format(value, f".{digits}g")
    return format(float(text), ".0f") if 10**digits <= abs(float(text)) < 1e6 else text


LIST_SHOWN = 6  # a recipe's list shown by its first items


def setting_text(value: Any) -> str:
    """A recipe's value as a reader reads it, not a Python repr: numbers to three significant digits, a mapping as
    "key value; key value" (its ``rule`` sentence as it is), a list as "a, b"."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return sig(value)
    if isinstance(value, dict):
        rule = value.get("rule")
        items = [(k, v) for k, v in value.items() if k != "rule"]
        rest = "; ".join(f"{k} {setting_text(v)}" for k, v in items[:LIST_SHOWN]) + \
            (f"; … ({len(items)} in all)" if len(items) > LIST_SHOWN else "")  # AWQ's alpha per layer
        return f"{rule} ({rest})" if rule and rest else str(rule) if rule else rest or "-"
    if isinstance(value, (list, tuple)):  # a long list (the layers kept at 8 bits) by its first few and its count
        shown = [setting_text(v) for v in value[:LIST_SHOWN]]
        return ", ".join(shown) + (f", … ({len(value)} in all)" if len(value) > LIST_SHOWN else "") or "none"
    return str(value)


def cut(text: Any, width: int) -> str:
    """``text`` as at most ``width`` characters, ending in "…" when cut (plain text: escape it where shown)."""
    full = str(text)
    return full if len(full) <= width else full[:width - 1] + "…"


def cut_apart(labels: Sequence[Any], width: int, sep: str = " · ") -> list[str]:
    """Each label cut to ``width`` characters so that labels that differ still read differently (rows named
    ``output · shape · provider`` share their first 40 characters): a part every label has (``cpu``) left out when
    the labels are too long, then the first of these that keeps them apart: the end cut, a cut in the middle (the
    start and the end kept), a window around where the label first reads unlike the others; else the row's number
    at the end. Equal labels stay equal."""
    full = [str(t) for t in labels]
    distinct = len(set(full))
    if all(len(t) <= width for t in full):
        return full
    shared_parts = set.intersection(*(set(t.split(sep)) for t in full)) if len(full) > 1 else set()
    short = [sep.join(p for p in t.split(sep) if p not in shared_parts) or t for t in full]
    if len(set(short)) != distinct:
        short = full

    def apart(out: list[str]) -> bool:
        return len(set(out)) == distinct

    out = [cut(t, width) for t in short]
    if apart(out):
        return out
    # the start and the end kept, the middle cut: as even a split as keeps the labels apart
    for head in sorted(range(1, width - 1), key=lambda h: abs(2 * h - width)):
        out = [t if len(t) <= width else t[:head] + "…" + t[len(t) - (width - 1 - head):] for t in short]
        if apart(out):
            return out

    def first_unlike(t: str) -> int:
        return max((next((i for i, (x, y) in enumerate(zip(t, u)) if x != y), min(len(t), len(u)))
                    for u in short if u != t), default=0)

    out = []
    for t in short:
        p = first_unlike(t)
        start = max(1, min(p - (width - 2) // 2, len(t) - (width - 1)))
        out.append(cut(t, width) if len(t) <= width or p < width - 1 else
                   "…" + t[start:start + width - 1] if start + width - 1 >= len(t) else
                   "…" + t[start:start + width - 2] + "…")
    if apart(out):
        return out
    number = {t: i + 1 for i, t in enumerate(dict.fromkeys(short))}
    return [cut(t, width - len(f" #{number[t]}")) + f" #{number[t]}" for t in short]


def abbr(text: Any, width: int = 28) -> str:
    """Escaped ``text``, cut to ``width`` characters with the whole text on hover."""
    full = str(text)
    if len(full) <= width:
        return esc(full)
    return f'<span title="{esc(full)}">{esc(cut(full, width))}</span>'


def compact_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], key: Sequence[str], *,
                  raw_cols: Sequence[int] = (), numeric: Sequence[str] = (), wrap: Sequence[str] = (),
                  abbreviate: Sequence[str] = (), width: int = 28,
                  details: str = "All columns") -> str:
    """The ``key`` columns of a result in a table that fits a notebook column (cells kept on one line,
    long names cut with the full text on hover), and every column in a folded table below it."""

    def cell(col: str, i: int, value: Any, short: bool) -> str:
        cut = short and col in abbreviate
        text = value if i in raw_cols else (abbr(value, width) if cut else esc(value))
        cls = "num" if col in numeric else "wrap" if col in wrap or (col in abbreviate and not short) else ""
        return f'<td class="{cls}">{text}</td>' if cls else f"<td>{text}</td>"

    def table(cols: Sequence[str], short: bool) -> str:
        idx = [list(headers).index(c) for c in cols]
        head = "".join(f"<th>{esc(c)}</th>" for c in cols)
        body = "".join("<tr>" + "".join(cell(headers[i], i, row[i], short) for i in idx) + "</tr>"
                       for row in rows)
        return f'<table class="{"key" if short else "all"}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'

    main = table(key, True)
    if list(key) == list(headers) or not rows:
        return main
    full = table(headers, False)
    return (f'{main}<details><summary>{esc(details)}</summary>'
            f'<div style="overflow-x:auto">{full}</div></details>')


def folded(title: str, lines: Sequence[str], cls: str = "warn") -> str:
    """Lines (escaped here) behind a toggle that says how many there are: warnings and other detail."""
    if not lines:
        return ""
    body = "".join(f'<div class="{cls}">{esc(line)}</div>' for line in lines)
    return f"<details><summary>{esc(title)} ({len(lines)})</summary>{body}</details>"


def text_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A compact fixed-width table for terminals and logs."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def human_bytes(n: int | float) -> str:
    """Bytes in decimal units (1 MB = 10^6 bytes), the one unit of sizes and memory everywhere onnx-nb shows them
    (results, latency tables' ``size_mb`` and ``peak_mb``, charts, the report)."""
    size = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"  # pragma: no cover


def human_count(n: int) -> str:
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return str(n)


def shape_text(shape: Sequence[Any]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def svg_hbars(items: Sequence[dict[str, Any]], *, axis: str, log: bool = False, title: str = "",
              label_chars: int = 40) -> str:
    """A horizontal bar chart as inline SVG (no script, so it shows wherever HTML does: the Studio's tabs,
    a saved notebook, a report file). Each item: ``label``, ``value`` (bar), optional ``hi`` (whisker end),
    ``mark`` (a tick, e.g. a tolerance), ``text`` (after the whisker), ``bad`` (drawn red). Long labels are cut
    with the full text on hover; text is 12 px."""
    import math

    # on a log axis a zero (an exact match) has no bar: its row keeps its label and text only
    items = [i for i in items if i.get("value") is not None and (not log or i["value"] >= 0)]
    if not items or (log and not any(i["value"] > 0 for i in items)):
        return ""
    tops = [max(i["value"], i.get("hi") or 0, i.get("mark") or 0) for i in items]
    pos = (lambda v: math.log10(max(v, 1e-30))) if log else (lambda v: float(v))
    lows = [pos(i["value"]) for i in items if not log or i["value"] > 0] + \
        [pos(i["mark"]) for i in items if i.get("mark")]
    lo = math.floor(min(lows) - 0.3) if log else 0.0
    hi = pos(max(tops)) + (0.3 if log else max(tops) * 0.05)
    span = (hi - lo) or 1.0
    chars = min(label_chars, max(len(str(i["label"])) for i in items))
    left, bar_w, right, row = 8 + int(chars * 6.6), 380, 90, 22
    top = 24 if title else 6
    height = top + row * len(items) + 36

    def x(v: float) -> float:
        return left + bar_w * (pos(v) - lo) / span
    parts = [f'<svg class="onnxnb-chart" xmlns="http://www.w3.org/2000/svg" width="{left + bar_w + right}" '
             f'height="{height}" font-family="system-ui,sans-serif" font-size="12">']
    if title:
        parts.append(f'<text x="4" y="15" font-weight="600" font-size="13">{esc(title)}</text>')
    shown = cut_apart([i["label"] for i in items], chars)
    for n, item in enumerate(items):
        y = top + n * row
        label = str(item["label"])
        colour = "#d93025" if item.get("bad") else "#1a73e8"
        parts.append(f'<g><title>{esc(label)}</title><text x="{left - 6}" y="{y + 15}" text-anchor="end">'
                     f"{esc(shown[n])}</text></g>")
        none = log and item["value"] <= 0
        if not none:
            parts.append(f'<rect x="{left}" y="{y + 4}" width="{max(x(item["value"]) - left, 1):.1f}" height="14" '
                         f'fill="{colour}" fill-opacity="0.75"/>')
        end = left if none else x(item["value"])
        if item.get("hi"):
            end = x(item["hi"])
            parts.append(f'<line x1="{x(item["value"]):.1f}" x2="{end:.1f}" y1="{y + 11}" y2="{y + 11}" '
                         f'stroke="#333"/><line x1="{end:.1f}" x2="{end:.1f}" y1="{y + 7}" y2="{y + 15}" '
                         'stroke="#333"/>')
        if item.get("mark"):
            m = x(item["mark"])
            parts.append(f'<line x1="{m:.1f}" x2="{m:.1f}" y1="{y + 1}" y2="{y + 21}" stroke="#b3261e" '
                         f'stroke-dasharray="3,2" stroke-width="1.5"/>')
        if item.get("text"):
            parts.append(f'<text x="{end + 5:.1f}" y="{y + 15}" fill="#333">{esc(item["text"])}</text>')
    base = top + row * len(items) + 2
    parts.append(f'<line x1="{left}" x2="{left + bar_w}" y1="{base}" y2="{base}" stroke="#999"/>')
    ticks = [lo + span * k / 4 for k in range(5)]
    for t in ticks:
        tx = left + bar_w * (t - lo) / span
        value = 10 ** t if log else t
        parts.append(f'<text x="{tx:.1f}" y="{base + 14}" text-anchor="middle" fill="#555" font-size="11">'
                     f"{esc(sig(value, 2))}</text>")
    parts.append(f'<text x="{left + bar_w}" y="{base + 30}" text-anchor="end" fill="#555" font-size="11">'
                 f"{esc(axis)}</text></svg>")
    return "".join(parts)


def peak_text(added: int, weights: int, whose: str) -> str:
    """A step's peak memory beside the weights it worked on: "1.2 GB added at the peak (0.30x the checkpoint's
    4.1 GB)"."""
    return f"{human_bytes(added)} added at the peak ({added / max(weights, 1):.2f}x {whose} {human_bytes(weights)})"
