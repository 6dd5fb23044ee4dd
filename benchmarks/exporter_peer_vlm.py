"""transformers' own exporter as a peer on the vision-language registry
(``MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES``),
at the size and from the images and prompts of onnx-nb's own sweep (``benchmarks/vlm_sweep.py``): its default
``OnnxExporter().export_for_generation`` from the first case's whole ``generate()`` inputs (ids, mask, the pixels and
whatever the family's processor adds; ``OnnxConfig(dynamic=True)``, ``save_pretrained``).

``generate()`` encodes the image before the prefill forward it captures (transformers 5.x hands the forward the
image's features), so the folder's graphs may never see the vision tower: the row says which graphs it wrote and
whether any takes the image. Then how far its language graphs go given PyTorch's own merged embeddings: the
``language_model`` graph run on the inputs PyTorch's language model received at the prefill (the image's rows already
in the embeddings, its positions), ``lm_head`` on the last row, then the ``decode`` graph step by step with its own
cache and its own tokens (the other inputs, positions and the like, as PyTorch gave them at that step; a model
transformers does not decompose has a ``prefill`` graph of the whole model, given what PyTorch's forward received at
the prefill), each graph run by transformers' own ``OnnxModelRunner`` over ONNX Runtime, against PyTorch's greedy
``generate()`` for both images.

    .venv/bin/python benchmarks/exporter_peer_vlm.py [--only llava,qwen2_vl] [--timeout 240]

Rows go to ``benchmarks/results/exporter_peer_vlm.json``; ``registry_sweep.py --page-only`` puts them on
``docs/supported-architectures.md`` beside onnx-nb's own vision-language rows.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import exporter_peer_seq2seq
import exporter_peer_sweep
import registry_sweep as sweep
import vlm_sweep

RESULTS = sweep.ROOT / "benchmarks" / "results" / "exporter_peer_vlm.json"
LANGUAGE = ("language_model", "lm_head", "decode")  # a multimodal model's split: its language model, head, steps
WHOLE = ("prefill", "decode")  # the split of a model transformers does not decompose: the whole model twice


def captured(model: Any, inner: Any, ids: Any, pixels: dict[str, Any], token: int) -> tuple[list[Any], list[Any]]:
    """PyTorch's greedy run, with the keyword inputs each forward of ``inner`` (the language model) and of the whole
    model received, tensors copied as they were then."""
    import torch

    calls: dict[str, list[dict[str, Any]]] = {"inner": [], "outer": []}

    def keep(where: str) -> Any:
        return lambda module, args, kwargs: calls[where].append(
            {k: v.clone() if torch.is_tensor(v) else v for k, v in kwargs.items()})

    hooks = [inner.register_forward_pre_hook(keep("inner"), with_kwargs=True),
             model.register_forward_pre_hook(keep("outer"), with_kwargs=True)]
    try:
        vlm_sweep.torch_tokens(model, ids, pixels, token)
    finally:
        for hook in hooks:
            hook.remove()
    return calls["inner"], calls["outer"]


def language_greedy(model: Any, folder: Path, ids: Any, pixels: dict[str, Any], token: int) -> list[int]:
    """Greedy tokens from the folder's language graphs, given what PyTorch's language model received at the prefill
    (its merged embeddings) and the other inputs PyTorch gave each decode step."""
    import torch
    from transformers import DynamicCache
    from transformers.exporters.metadata import ExportMetadata
    from transformers.exporters.runners.runner_onnx import OnnxModelRunner

    from onnx_nb.runtime.sessions import session

    parts = exporter_peer_seq2seq.components(folder)
    graphs = LANGUAGE if set(LANGUAGE) <= set(parts) else WHOLE if set(WHOLE) <= set(parts) else None
    if graphs is None:
        raise exporter_peer_seq2seq.NotDriven(f"split into {', '.join(sorted(parts))}: neither the language_model, "
                                              "lm_head and decode graphs nor the prefill and decode ones")
    runners = {name: OnnxModelRunner(ExportMetadata.from_dict(parts[name]["metadata"]),
                                     session(folder / parts[name]["file"], "CPUExecutionProvider"))
               for name in graphs}
    kinds = {name: parts[name]["metadata"]["kwargs"] for name in graphs}
    architecture = parts[graphs[0]]["metadata"]["architecture"]
    inner = next((m for m in model.modules() if type(m).__name__ == architecture), None)
    if inner is None:
        raise exporter_peer_seq2seq.NotDriven(f"no {architecture} in the model to take the prefill's inputs from")
    prefill, steps = captured(model, inner, ids, pixels, token)

    def given(name: str, seen: dict[str, Any], cache: Any, **mine: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, spec in kinds[name].items():
            if spec.get("container") == "NoneType":
                continue
            if "Cache" in str(spec.get("container", "")):
                out[key] = cache
            elif key in mine:
                out[key] = mine[key]
            elif key in seen:
                out[key] = seen[key]
        return out

    text = model.config.get_text_config()
    first = runners[graphs[0]](**given(graphs[0], prefill[0], DynamicCache(config=text)))
    cache = next(v for v in (getattr(first, n, None) for n in ("cache", "past_key_values")) if v is not None)
    if graphs == WHOLE:  # the whole model at the prefill: its logits
        tokens = [int(first.logits[0, -1].argmax())]
    else:
        head = next(iter(kinds["lm_head"]))
        tokens = [int(torch.as_tensor(runners["lm_head"](**{head: first.last_hidden_state[:, -1:]})).argmax())]
    for seen in steps[1:]:  # PyTorch's decode steps: as many tokens as it made
        out = runners["decode"](**given("decode", seen, cache, input_ids=torch.tensor([[tokens[-1]]])))
        cache = next(v for v in (getattr(out, n, None) for n in ("cache", "past_key_values")) if v is not None)
        tokens.append(int(out.logits[0, -1].argmax()))
    return tokens


def one(model_type: str, class_name: str, folder: Path) -> dict[str, Any]:
    """One type through transformers' exporter (in a child process)."""
    from onnx_nb.kinds.vlm.prompts import prompt_extras

    row: dict[str, Any] = {"type": model_type, "class": class_name}
    made = vlm_sweep.built(model_type, class_name, folder, row)
    if made is None:
        return row
    model, token, cases = made
    ids, pixels, _ = cases[0]
    inputs = {"input_ids": ids, "attention_mask": ids.new_ones(ids.shape), **pixels,
              **prompt_extras(model, ids, token)}
    out = folder.parent / "peer"
    if not exporter_peer_sweep.exported(model, inputs, out, row):
        return row
    parts, takes = exporter_peer_seq2seq.graph_inputs(out, row)
    row["peer_image_in"] = sorted(name for name, p in parts.items() if set(p["metadata"]["kwargs"]) & set(pixels)
                                  or any(n in pixels for n in takes[name]))  # a graph that reads the image
    row["peer_mask"] = any("attention_mask" in names for names in takes.values())
    print("ROW " + json.dumps(row), flush=True)  # what is known so far, should the run below hang
    exporter_peer_seq2seq.judged(row, "peer_language", "language graphs", lambda: [
        language_greedy(model, out, i, p, token) for i, p, _ in cases], [w for _, _, w in cases])
    return row


def main() -> None:
    def summary(base: list[dict[str, Any]]) -> str:
        return (f"transformers' exporter on {len(base)} vision-language types PyTorch runs: "
                f"{sum(r.get('peer_export') == 'ok' for r in base)} exported, "
                f"{sum(bool(r.get('peer_image_in')) for r in base)} with a graph that takes the image, "
                f"{sum(r.get('peer_language') == 'same' for r in base)} whose language graphs give PyTorch's tokens "
                "from PyTorch's merged embeddings")

    exporter_peer_seq2seq.peer_main(__doc__, __file__, vlm_sweep.registry(), RESULTS, one, summary, 240)


def section(ours: list[dict[str, Any]], path: Path = RESULTS) -> list[str]:
    """The page's paragraph and table: transformers' exporter on the vision-language types beside onnx-nb's rows."""
    import html

    found = sweep.swept(path)
    if found is None:
        return [f"Vision-language: not swept yet (`{Path(__file__).relative_to(sweep.ROOT)}`)."]
    rows, meta, _, _ = found
    mine = {r["type"]: r for r in ours if sweep.counted(r)}  # onnx-nb's rows PyTorch runs, from its own sweep
    base = sorted((r for r in rows if sweep.counted(r) and r["type"] in mine), key=lambda r: r["type"])
    exported = [r for r in base if r.get("peer_export") == "ok"]
    image_in = [r["type"] for r in exported if r.get("peer_image_in")]
    language = [r["type"] for r in exported if r.get("peer_language") == "same"]
    undriven = [r["type"] for r in exported if str(r.get("peer_language", "")).startswith("not driven")]
    masked = sum(bool(r.get("peer_mask")) for r in exported)
    skipped = sorted(set(mine) - {r["type"] for r in base})
    lines = [
        f"Vision-language (`{Path(__file__).relative_to(sweep.ROOT)}`, {meta['date']}, transformers "
        f"{meta['transformers']}; each type built as onnx-nb's own sweep builds it, the exporter given the whole "
        f"inputs `generate()` takes for the first image): of the {len(base)} types PyTorch runs, transformers' "
        f"exporter writes a folder for {len(exported)}; **{len(image_in)} hold a graph that takes the image**"
        f"{': ' + ', '.join(image_in) if image_in else ''} (its `generate()` capture starts at the prefill forward, "
        "which transformers hands the image's features computed before it, so the vision tower is never traced: "
        "such a folder cannot generate from a picture); its graphs take an attention mask for "
        f"{masked}. Given PyTorch's own merged embeddings at the prefill (the image's rows in place) and PyTorch's "
        f"positions at each step, its language graphs give PyTorch's greedy tokens for both images for "
        f"{len(language)}"
        + (f"; {len(undriven)} ({', '.join(undriven)}) {'is' if len(undriven) == 1 else 'are'} split otherwise, "
           "which this script's driver does not run (its gap)" if undriven else "")
        + f". onnx-nb's default export (vision, embed and decoder files) generates PyTorch's tokens from the image "
        f"for {sum(sweep.served(mine[r['type']]) for r in base)} of the same types."
        + (f" Not run here: {', '.join(skipped)} (this script builds the types that take a prompt beside the image)."
           if skipped else ""),
        "",
        "| type | onnx-nb from the image | peer graphs | peer takes the image | peer language graphs | export s "
        "(onnx-nb / peer) | peer folder MB | what stopped it |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in base:
        o = mine[r["type"]]
        why = r.get("peer_export") if r.get("peer_export") != "ok" else (
            "" if r.get("peer_language") == "same" else r.get("peer_note") or r.get("peer_language") or "")
        lines.append(
            f"| {r['type']} | {sweep.cell('ok' if sweep.served(o) else 'no')} | "
            f"{', '.join(r.get('peer_graphs', [])) or '-'} | {sweep.cell('ok' if r.get('peer_image_in') else 'no')} "
            f"| {sweep.cell('ok' if r.get('peer_language') == 'same' else 'no')} | {o.get('export_s', '')} / "
            f"{r.get('peer_export_s', '')} | {r.get('peer_mb', '')} | "
            f"{html.escape(str(why or '')).replace('|', '/')[:200]} |")
    return lines


if __name__ == "__main__":
    main()
