"""transformers' own exporter as a peer, measured on the same registry and configs as onnx-nb's causal-LM sweep
(``benchmarks/registry_sweep.py``): every model type in ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` built at the same tiny
size, exported by ``transformers.exporters`` with its default for generation (``OnnxExporter().export_for_generation``
from a one-prompt sample, ``OnnxConfig(dynamic=True)``, ``save_pretrained``), then driven greedily by onnx-nb's reader
of that folder (``onnx_nb.check_parity(model, folder)``: its prefill and decode graphs run by transformers' own runner)
against PyTorch's plain greedy ``generate()`` (no generation-config rules: the exporter has no loop to run them), each
prompt alone, a first difference judged a near-tie or a divergence. Recorded beside: the export's seconds, the
folder's size on disk (both graphs' weights) and whether its graphs take an attention mask (a padded batch can run).
Each type in a process of its own with a time limit.

    .venv/bin/python benchmarks/exporter_peer_sweep.py [--only llama,gpt2] [--timeout 180]

Rows go to ``benchmarks/results/exporter_peer_sweep.json``; ``registry_sweep.py --page-only`` puts the comparison on
``docs/supported-architectures.md`` (onnx-nb's column from its own sweep's JSON).
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import registry_sweep as sweep

ROOT = sweep.ROOT
RESULTS = ROOT / "benchmarks" / "results" / "exporter_peer_sweep.json"


def one(model_type: str, class_name: str, folder: Path) -> dict[str, Any]:
    """One type through transformers' exporter (in a child process)."""

    from onnx_nb.errors import first_line

    row: dict[str, Any] = {"type": model_type, "class": class_name}
    made = sweep.built(model_type, class_name, folder, row)
    if made is None:
        return row
    model, prompts = made[0], made[1]
    out = folder.parent / "peer"
    if not exported(model, prompts[0], out, row):
        return row
    try:
        from onnx_nb.runtime.generation_folders import open_folder
        from onnx_nb.steps.parity.folders import folder_parity

        row["peer_mask"] = open_folder(out).takes_mask
        # PyTorch's plain greedy tokens (no generation-config rules: the exporter has no loop to run them), judged on
        # the tokens as onnx-nb's own column is; a folder onnx-nb's reader cannot drive is said apart (peer_read)
        report = folder_parity(model, out, prompts=prompts, max_new_tokens=sweep.NEW_TOKENS, progress=False)
        unread = next((r.note for r in report.rows if r.status == "error"), "")
        if unread or not report.generation:
            row["peer_generate"], row["peer_read"] = "not read", (unread or "no tokens")[:300]
            return row
        verdicts = {c.verdict for c in report.generation}
        row["peer_generate"] = "same" if verdicts == {"identical"} else (
            "differs" if "DIVERGED" in verdicts else "near-tie")
        if row["peer_generate"] != "same":
            row["peer_note"] = next((r.note for r in report.rows if r.output == "tokens" and r.note and
                                     "identical" not in r.note), "")[:300]
    except Exception as exc:  # noqa: BLE001
        row["peer_generate"] = f"{type(exc).__name__}: {first_line(exc)}"[:300]
    return row


def exported(model: Any, prompt: list[int] | dict[str, Any], out: Path, row: dict[str, Any]) -> bool:
    """``model`` through transformers' exporter's default for generation (from ``prompt``, or the whole inputs
    ``generate()`` is given, ``OnnxConfig(dynamic=True)``), saved in ``out``; its status, seconds and size on disk in
    ``row`` (printed so far, should what follows hang)."""
    import torch

    from onnx_nb.errors import first_line

    started = time.perf_counter()
    try:
        from transformers.exporters import OnnxConfig, OnnxExporter

        if not isinstance(prompt, dict):
            ids = torch.tensor([prompt])
            prompt = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        made = OnnxExporter().export_for_generation(model, dict(prompt), OnnxConfig(dynamic=True))
        if out.exists():
            shutil.rmtree(out)
        made.save_pretrained(out)
        row["peer_export"] = "ok"
    except Exception as exc:  # noqa: BLE001 - a row, not a crash
        row["peer_export"] = f"{type(exc).__name__}: {first_line(exc)}"[:300]
        return False
    finally:
        row["peer_export_s"] = round(time.perf_counter() - started, 1)
    row["peer_mb"] = round(sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) / 1e6, 3)
    print("ROW " + json.dumps(row), flush=True)
    return True


def main() -> None:
    parser = sweep.parser_for(__doc__, 180, variants=False)
    parser.add_argument("--json", default=str(RESULTS))
    args = parser.parse_args()
    if args.one:
        print("ROW " + json.dumps(one(args.one, sweep.registry()[args.one], Path(args.folder))))
        return
    rows = sweep.run_rows(__file__, sweep.registry(), Path(args.json), args.only, args.again, args.timeout, [])
    base = [r for r in rows if sweep.counted(r)]
    print(f"transformers' exporter: {sum(served(r) for r in base)} of {len(base)} that PyTorch builds and generates")


def served(row: dict[str, Any]) -> bool:
    """Exported by transformers' exporter and generating PyTorch's tokens for each prompt alone."""
    return row.get("peer_export") == "ok" and row.get("peer_generate") in ("same", "near-tie")


def read(row: dict[str, Any]) -> bool:
    """Counted in the comparison: PyTorch runs the type, and the exporter failed or onnx-nb's reader drove its
    folder (a folder the reader cannot drive is the reader's gap, listed apart)."""
    return sweep.counted(row) and row.get("peer_generate") != "not read"


def section(causal: list[dict[str, Any]], path: Path = RESULTS) -> list[str]:
    """The page's comparison: per type PyTorch runs, onnx-nb's default export (its own sweep's row, each prompt
    alone) beside transformers' exporter's, with the export times, the peer's folder size and whether it takes a
    mask."""
    import html
    import statistics

    found = sweep.swept(path)
    if found is None:
        return [f"Not swept yet: `{Path(__file__).relative_to(ROOT)}`."]
    rows, meta, _, _ = found
    peer = {r["type"]: r for r in rows}
    ours = {r["type"]: r for r in causal if sweep.counted(r)}
    both = [t for t in sorted(ours) if t in peer and read(peer[t])]
    unread = [t for t in sorted(ours) if t in peer and sweep.counted(peer[t]) and not read(peer[t])]
    missing = [t for t in sorted(ours) if t not in peer]

    def alone(r: dict[str, Any]) -> bool:  # onnx-nb's export giving PyTorch's tokens, each prompt alone
        return r.get("export") == "ok" and r.get("generate") in ("same", "near-tie")

    mine = [t for t in both if alone(ours[t])]
    theirs = [t for t in both if served(peer[t])]
    common = [t for t in mine if t in theirs and ours[t].get("export_s") and peer[t].get("peer_export_s")]
    ratio = statistics.median(ours[t]["export_s"] / peer[t]["peer_export_s"] for t in common) if common else None
    masked = sum(bool(peer[t].get("peer_mask")) for t in theirs)
    weights = [peer[t]["peer_mb"] / (4 * peer[t]["parameters"] / 1e6) for t in theirs if peer[t].get("parameters")]
    lines = [
        f"`benchmarks/exporter_peer_sweep.py` ({meta['date']}, transformers {meta['transformers']}) runs transformers' "
        "own exporter (`transformers.exporters`, its default `export_for_generation` from a one-prompt sample, "
        "`OnnxConfig(dynamic=True)`) on the same types at the same size, and onnx-nb's reader of its folder "
        "(`onnx_nb.generate(folder)`, `onnx_nb.check_parity(model, folder)`) against PyTorch's greedy tokens, each "
        f"prompt alone. Of the {len(both)} types PyTorch runs: **onnx-nb's default export gives PyTorch's tokens for "
        f"{len(mine)}, transformers' exporter for {len(theirs)}**; served by transformers' exporter alone: "
        f"{', '.join(t for t in theirs if t not in mine) or 'none'}"
        + (f"; onnx-nb's export takes {ratio:.2f}x its time (median over the {len(common)} both serve)"
           if ratio else "")
        + (f"; its folder holds {statistics.median(weights):.2f}x the fp32 weights (median: a prefill and a decode "
           "graph, each with its own copy)" if weights else "")
        + f"; its graphs take an attention mask (a padded batch runs) for {masked} of them."
        + (f" Folders onnx-nb's reader could not drive (its gap, not counted): {', '.join(unread)}." if unread else "")
        + (f" Not swept yet (the run stopped before them; `--only` runs them): {len(missing)} types."
           if missing else ""),
        "",
        "| type | onnx-nb | transformers.exporters | export s (onnx-nb / peer) | peer folder MB | what stopped it |",
        "|---|---|---|---|---|---|",
    ]
    for t in both:
        r, o = peer[t], ours[t]
        why = "" if served(r) else (r.get("peer_export") if r.get("peer_export") != "ok" else
                                     r.get("peer_note") or r.get("peer_generate") or r.get("export", ""))
        lines.append(f"| {t} | {sweep.cell('ok' if alone(o) else 'no')} | {sweep.cell('ok' if served(r) else 'no')}"
                     f" | {o.get('export_s', '')} / {r.get('peer_export_s', '')} | {r.get('peer_mb', '')} | "
                     f"{html.escape(str(why or '')).replace('|', '/')[:200]} |")
    return lines


if __name__ == "__main__":
    main()
