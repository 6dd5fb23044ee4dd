"""The supported-architectures page's account of whose export patches served each type: transformers' own (the
patches its exporter registers for a model's code, tried first by onnx-nb's dynamo route) or onnx-nb's. Read from the
sweeps' rows (``patches``: the set the published file was traced under; ``transformers_patches``: why transformers'
set was not kept) and from transformers' registry as installed. No sweep of its own: ``registry_sweep.py
--page-only`` writes it."""

from __future__ import annotations

import html
import json
from typing import Any

import registry_sweep as sweep

RESULTS = sweep.ROOT / "benchmarks" / "results"
SWEEPS = {"causal LM": "causal_lm_sweep.json", "sequence-to-sequence": "seq2seq_sweep.json",
          "speech-to-text": "speech_sweep.json", "vision-language": "vlm_sweep.json",
          "speech LLM": "speech_llm_sweep.json"}


def _rows() -> list[tuple[str, dict[str, Any]]]:
    """(sweep, row) for every row of every sweep of transformers' registries."""
    found = []
    for name, file in SWEEPS.items():
        path = RESULTS / file
        if path.exists():
            found += [(name, r) for r in json.loads(path.read_text()).get("rows", [])]
    for path in sorted((RESULTS / "tasks").glob("*.json")):
        found += [(path.stem, r) for r in json.loads(path.read_text()).get("rows", [])]
    return found


NAMES = {"transformers": "transformers'", "onnx-nb": "onnx-nb's", "none": "none needed",
         "torchscript": "TorchScript's file (no patches)"}


def _served_by(row: dict[str, Any]) -> str:
    if "patches" not in row:
        return "not exported (its row says why)" if row.get("export") not in (None, "ok") else \
            "not re-run since transformers' set was tried first"
    said = ", ".join(" ".join(NAMES.get(w, w) for w in part.split(" ")) for part in row["patches"].split(", "))
    why = row.get("transformers_patches")
    if why:
        return f"{said} (transformers' set: {why})"
    if row["patches"] == "torchscript":  # an encoder-decoder's route: TorchScript's files come before either set
        return f"{said} (an encoder-decoder's route tries TorchScript's files before either dynamo set)"
    if "transformers" not in row["patches"]:  # transformers' set not tried: no patched code ran
        return f"{said} (transformers' set not tried: its patches are for code this model does not run)"
    return said


def section() -> list[str]:
    """The page's lines: which types transformers registers export patches for, and per sweep row whose set served
    the published file."""
    import transformers

    from onnx_nb.steps.export.patches import upstream

    rows = _rows()
    theirs: dict[str, list[str]] = {}
    for t in sorted({r["type"] for _, r in rows}):
        found = upstream.registered_for_type(t)
        if found:
            theirs[t] = found
    listed = [(s, r) for s, r in rows if r["type"] in theirs and r.get("export")]
    counted = [(s, r) for s, r in listed if r.get("export") == "ok" and "patches" in r]  # exported since
    kept = sum("transformers" in r["patches"] for _, r in counted)  # every file, or some of a model's
    lines = [
        f"transformers {transformers.__version__}'s own exporter (`transformers.exporters`) registers export patches "
        f"for the code of {len(theirs)} of the {len({r['type'] for _, r in rows})} model types these sweeps build "
        "(the rest of its patches are generic: `torch.where`, `torch.split`, attention that masks every key...). "
        "For a model with such a patch, onnx-nb's dynamo route first exports with transformers' whole patch set "
        "(its patches, FX graph fixes, ONNX translations and graph repairs, none of onnx-nb's rewrites), and keeps "
        "onnx-nb's own where that file fails the check (a patch counts where the model runs the code it patches: "
        "a vision-language model's decoder file holds its vision tower but never runs it); an encoder-decoder's "
        "route tries TorchScript's files before either set; every other type is "
        "exported with onnx-nb's own rewrites (`result.patch_set` says which). "
        f"Of the {len(counted)} sweep rows of those types exported since this was recorded, **{kept} are served by "
        "transformers' patch set** (for a model of several files, at least one of them). The experts' `grouped_mm`, "
        "which both translate, takes transformers' translation in every export.",
        "",
        "| type | patches transformers registers for it | sweep | whose patches served |",
        "|---|---|---|---|",
    ]
    for s, r in sorted(listed, key=lambda x: (x[1]["type"], x[0])):
        names = ", ".join(p.rsplit(".", 2)[-2] + "." + p.rsplit(".", 1)[-1] for p in theirs[r["type"]])
        lines.append(f"| {r['type']} | {html.escape(names)} | {s} | "
                     f"{html.escape(_served_by(r)).replace('|', '/')} |")
    return lines
