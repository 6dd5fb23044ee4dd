"""transformers' own exporter as a peer on the sequence-to-sequence registry (``MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_
NAMES``), at the size and from the prompts of onnx-nb's own sweep (``benchmarks/seq2seq_sweep.py``): its default
``OnnxExporter().export_for_generation`` from the first prompt (``OnnxConfig(dynamic=True)``, ``save_pretrained``).
Its ``generate()`` capture records the decoder's forwards only (``generate`` runs the encoder apart), so the folder's
graphs take the encoder's output (``encoder_outputs.last_hidden_state``), not the text: the row says whether any
graph takes the text, and then how far the decoder graphs go given PyTorch's own encoder output: greedy tokens from
the decoder's start token, the prefill graph then the decode graph, run by transformers' own ``OnnxModelRunner``
over ONNX Runtime with the model's own ``EncoderDecoderCache``, against PyTorch's ``generate()`` for each prompt.

    .venv/bin/python benchmarks/exporter_peer_seq2seq.py [--only bart,t5] [--timeout 180]

Rows go to ``benchmarks/results/exporter_peer_seq2seq.json``; ``registry_sweep.py --page-only`` puts them on
``docs/supported-architectures.md`` beside onnx-nb's own sequence-to-sequence rows.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import exporter_peer_sweep
import registry_sweep as sweep
import seq2seq_sweep

RESULTS = sweep.ROOT / "benchmarks" / "results" / "exporter_peer_seq2seq.json"


class NotDriven(Exception):
    """A folder this script's driver does not run (its gap, not the exporter's)."""


def decoder_greedy(model: Any, folder: Path, prompt: list[int], new_tokens: int) -> list[int]:
    """Greedy tokens from the folder's prefill and decode graphs, given PyTorch's encoder output for ``prompt``."""
    import torch
    from transformers import DynamicCache, EncoderDecoderCache
    from transformers.exporters.metadata import ExportMetadata
    from transformers.exporters.runners.runner_onnx import OnnxModelRunner

    from onnx_nb.runtime.sessions import session

    parts = components(folder)
    if not {"prefill", "decode"} <= set(parts):
        raise NotDriven(f"split into {', '.join(sorted(parts))}: a multimodal decomposition this driver does not run")
    runners = {name: OnnxModelRunner(ExportMetadata.from_dict(parts[name]["metadata"]),
                                     session(folder / parts[name]["file"], "CPUExecutionProvider"))
               for name in ("prefill", "decode")}
    ids = torch.tensor([prompt])
    mask = torch.ones_like(ids)
    with torch.no_grad():  # the encoder's whole output, as generate() hands it on (a pooled output too, for some)
        encoded = model.get_encoder()(input_ids=ids, attention_mask=mask, return_dict=True)
    cache = EncoderDecoderCache(DynamicCache(config=model.config), DynamicCache(config=model.config))
    generation = model.generation_config
    token = next(t for t in (generation.decoder_start_token_id,
                             getattr(model.config, "decoder_start_token_id", None), generation.bos_token_id, 0)
                 if t is not None)
    tokens: list[int] = []
    for step in range(new_tokens):
        given = {"decoder_input_ids": torch.tensor([[token]]), "attention_mask": mask, "encoder_outputs": encoded,
                 "cache": cache}
        name = "prefill" if step == 0 else "decode"
        out = runners[name](**{k: v for k, v in given.items() if k in parts[name]["metadata"]["kwargs"]})
        cache = next((v for v in (getattr(out, n, None) for n in ("cache", "past_key_values")) if v is not None),
                     cache)
        token = int(out.logits[0, -1].argmax())
        tokens.append(token)
        if token in (generation.eos_token_id if isinstance(generation.eos_token_id, list) else
                     [generation.eos_token_id]):
            break
    return tokens


def one(model_type: str, class_name: str, folder: Path) -> dict[str, Any]:
    """One type through transformers' exporter (in a child process)."""
    row: dict[str, Any] = {"type": model_type, "class": class_name}
    made = seq2seq_sweep.built(model_type, class_name, folder, row)
    if made is None:
        return row
    model, prompts, want = made
    out = folder.parent / "peer"
    if not exporter_peer_sweep.exported(model, prompts[0], out, row):
        return row
    takes = graph_inputs(out, row)[1]
    row["peer_text_in"] = any("input_ids" in names for names in takes.values())  # a graph that reads the text
    print("ROW " + json.dumps(row), flush=True)  # what is known so far, should the run below hang
    judged(row, "peer_decoder", "decoder graphs", lambda: [decoder_greedy(model, out, p, sweep.NEW_TOKENS)
                                                           for p in prompts], want)
    return row


def components(folder: Path) -> dict[str, Any]:
    """The graphs transformers' exporter wrote into ``folder``, by name: its ``export.json``'s components."""
    return dict(json.loads((folder / "export.json").read_text())["components"])


def graph_inputs(folder: Path, row: dict[str, Any]) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """``folder``'s components and each graph's input names; the graphs' names go into ``row["peer_graphs"]``."""
    import onnx

    parts = components(folder)
    takes = {name: [i.name for i in onnx.load(str(folder / p["file"]), load_external_data=False).graph.input]
             for name, p in parts.items()}
    row["peer_graphs"] = sorted(takes)
    return parts, takes


def judged(row: dict[str, Any], key: str, what: str, greedy: Any, want: list[list[int]]) -> None:
    """``row[key]``: ``"same"`` when ``greedy()``'s tokens, case by case, begin with PyTorch's ``want``,
    ``"differs"`` (both in ``peer_note``), ``"not driven: ..."`` for a folder the driver does not run, or the
    error that stopped it."""
    from onnx_nb.errors import first_line

    try:
        got = greedy()
        same = all(g[:len(w)] == w for g, w in zip(got, want))
        row[key] = "same" if same else "differs"
        if not same:
            row["peer_note"] = f"{what} {got} against PyTorch's {want}"[:300]
    except NotDriven as exc:
        row[key] = f"not driven: {exc}"[:300]
    except Exception as exc:  # noqa: BLE001 - a row, not a crash
        row[key] = f"{type(exc).__name__}: {first_line(exc)}"[:300]


def main() -> None:
    def summary(base: list[dict[str, Any]]) -> str:
        return (f"transformers' exporter on {len(base)} sequence-to-sequence types PyTorch runs: "
                f"{sum(r.get('peer_export') == 'ok' for r in base)} exported, "
                f"{sum(bool(r.get('peer_text_in')) for r in base)} with a graph that takes the text, "
                f"{sum(r.get('peer_decoder') == 'same' for r in base)} whose decoder graphs give PyTorch's tokens "
                "from PyTorch's encoder output")

    peer_main(__doc__, __file__, seq2seq_sweep.registry(), RESULTS, one, summary, 180)


def peer_main(doc: str, script: str, types: dict[str, str], results: Path, one: Any, summary: Any,
              timeout: int) -> None:
    """A peer sweep from the command line: ``--one TYPE`` runs ``one(type, class, folder)`` and prints its row,
    else every type of ``types`` in a process of its own into ``results``, then ``summary`` of the rows PyTorch
    runs."""
    parser = sweep.parser_for(doc, timeout, variants=False)
    parser.add_argument("--json", default=str(results))
    args = parser.parse_args()
    if args.one:
        print("ROW " + json.dumps(one(args.one, types[args.one], Path(args.folder))))
        return
    rows = sweep.run_rows(script, types, Path(args.json), args.only, args.again, args.timeout, [])
    print(summary([r for r in rows if sweep.counted(r)]))


def section(ours: list[dict[str, Any]], path: Path = RESULTS) -> list[str]:
    """The page's paragraph: transformers' exporter on the sequence-to-sequence types beside onnx-nb's rows."""
    found = sweep.swept(path)
    if found is None:
        return [f"Sequence-to-sequence: not swept yet (`{Path(__file__).relative_to(sweep.ROOT)}`)."]
    rows, meta, _, _ = found
    counted = {r["type"] for r in ours if sweep.counted(r)}  # onnx-nb's encoder-decoders PyTorch runs (speech LLMs
    base = [r for r in rows if sweep.counted(r) and r["type"] in counted]  # are measured apart)
    served = {r["type"] for r in ours if sweep.counted(r) and sweep.served(r)}
    exported = [r for r in base if r.get("peer_export") == "ok"]
    split = [r for r in exported if "prefill" not in r.get("peer_graphs", ["prefill"])]  # split as a multimodal model
    text_in = [r["type"] for r in exported if r.get("peer_text_in") and r not in split]
    decoders = [r["type"] for r in exported if r.get("peer_decoder") == "same"]
    # the decode graph traced after one cached token (the decoder's start token), a size torch.export fixes
    fixed = [r["type"] for r in exported if "Expected: 1" in str(r.get("peer_decoder", ""))]
    undriven = [r["type"] for r in exported if str(r.get("peer_decoder", "")).startswith("not driven")]
    return [
        f"Sequence-to-sequence (`{Path(__file__).relative_to(sweep.ROOT)}`, {meta['date']}, transformers "
        f"{meta['transformers']}): of the {len(base)} types PyTorch runs, transformers' exporter writes a folder for "
        f"{len(exported)}; of the {len(exported) - len(split)} it splits into a prefill and a decode graph, "
        f"{len(text_in)} hold a graph that takes the text"
        f"{': ' + ', '.join(text_in) if text_in else ''} (its generate() capture records the decoder's forwards "
        "only, so the graphs take the encoder's output and nothing runs the encoder). Given PyTorch's own encoder "
        f"output, its decoder graphs give PyTorch's greedy tokens for {len(decoders)}"
        + (f"; for {len(fixed)} ({', '.join(fixed)}) the decode graph takes one cached token only (traced after the "
           "start token alone, a size torch.export fixed), so the second step fails" if fixed else "")
        + (f"; {len(undriven)} ({', '.join(undriven)}) are split as multimodal models, which this script's driver "
           "does not run (its gap)" if undriven else "")
        + ". onnx-nb's default export "
        f"(encoder and decoder files) generates PyTorch's tokens from the text for "
        f"{sum(r['type'] in served for r in base)} of the same types."
        + (f" Swept so far: {len(base)} of onnx-nb's {len(counted)} (the run stopped before the others; `--only` "
           "runs them)." if len(base) < len(counted) else "")]


if __name__ == "__main__":
    main()
