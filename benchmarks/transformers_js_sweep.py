"""Which causal LMs run in transformers.js from onnx-nb's folder, measured on both registries: every model type that
transformers registers for ``AutoModelForCausalLM`` and transformers.js (the locked npm copy in ``js/node_modules``)
lists in its own ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``, built at the causal-LM sweep's tiny size from its default
config (``registry_sweep.built``: random weights, PyTorch's greedy tokens for two prompts), saved with a word-level
tokenizer whose words are its token ids ("w5 w9 w14": transformers.js's tokenizer gives exactly the sweep's prompts),
exported with one default ``onnx_nb.export(folder)``, written with ``onnx_nb.to_transformers_js`` and run by
transformers.js itself under Node.js: its greedy tokens for each prompt alone against PyTorch's ``generate()``.
Each type in a process of its own with a time limit.

    .venv/bin/python benchmarks/transformers_js_sweep.py [--only llama,gpt2] [--timeout 240]

Rows go to ``benchmarks/results/transformers_js_sweep.json``; ``registry_sweep.py --page-only`` puts the column on
``docs/supported-architectures.md``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import registry_sweep as sweep

ROOT = sweep.ROOT
RESULTS = ROOT / "benchmarks" / "results" / "transformers_js_sweep.json"


def registry() -> dict[str, str]:
    """The types both registries hold (transformers' class names)."""
    from onnx_nb.runtime.transformers_js import registered

    web = registered("text-generation") or {}
    return {t: c for t, c in sweep.registry().items() if t in web}


def word_tokenizer(vocab: int, eos: Any, folder: Path) -> None:
    """A word-level tokenizer whose word ``w{i}`` is token ``i``, saved to ``folder``."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = Tokenizer(models.WordLevel({f"w{i}": i for i in range(vocab)}, unk_token="w0"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    end = eos[0] if isinstance(eos, list) and eos else eos
    special = {"eos_token": f"w{end}"} if isinstance(end, int) and 0 <= end < vocab else {}
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=words, unk_token="w0",
                                                model_input_names=["input_ids", "attention_mask"], **special)
    fast.save_pretrained(folder)


def one(model_type: str, class_name: str, folder: Path) -> dict[str, Any]:
    """One type through onnx-nb's export and transformers.js (in a child process)."""
    import onnx_nb
    from onnx_nb.errors import first_line

    row: dict[str, Any] = {"type": model_type, "class": class_name}
    started = time.perf_counter()
    made = sweep.built(model_type, class_name, folder, row)
    if made is None:
        return row
    model, prompts = made[0], made[1]
    config = sweep.text_of(model.config)
    word_tokenizer(int(getattr(config, "vocab_size", 100) or 100), getattr(config, "eos_token_id", None), folder)
    result = sweep.exported(row, folder, folder.parent / "onnx" / "model.onnx", started)
    if result is None or not result:
        return row
    import transformers

    # the word-level tokenizer itself: transformers' AutoTokenizer reads it as the type's own class (a Qwen2 BPE with
    # no merges turns "w5" into nothing)
    result.source.preprocessor = transformers.PreTrainedTokenizerFast.from_pretrained(folder)
    try:
        t = time.perf_counter()
        bundle = onnx_nb.to_transformers_js(result, folder.parent / "web", texts=[" ".join(f"w{i}" for i in p)
                                                                                 for p in prompts],
                                            max_new_tokens=sweep.NEW_TOKENS, check=True, progress=False)
        row["web_s"] = round(time.perf_counter() - t, 1)
        row["web_mb"] = round(sum(f.stat().st_size for f in bundle.files) / 1e6, 3)
        row["transformers_js"] = bundle.transformers_js
        check = bundle.checks[0]
        row["web"] = "same" if check.passed else "error" if check.status == "error" else "differs"
        if not check.passed:
            row["web_note"] = (check.note or check.measure)[:300]
    except Exception as exc:  # noqa: BLE001 - a row, not a crash
        row["web"] = f"{type(exc).__name__}: {first_line(exc)}"[:300]
    row["seconds"] = round(time.perf_counter() - started, 1)
    return row


def served(row: dict[str, Any]) -> bool:
    return row.get("web") == "same"


def exported(row: dict[str, Any]) -> bool:
    """Counted: PyTorch runs the type and onnx-nb's default export passes its check."""
    return sweep.counted(row) and row.get("export") == "ok"


def main() -> None:
    parser = sweep.parser_for(__doc__, 240, variants=False)
    parser.add_argument("--json", default=str(RESULTS))
    args = parser.parse_args()
    if args.one:
        print("ROW " + json.dumps(one(args.one, registry()[args.one], Path(args.folder))))
        return
    rows = sweep.run_rows(__file__, registry(), Path(args.json), args.only, args.again, args.timeout, [])
    base = [r for r in rows if exported(r)]
    print(f"transformers.js: {sum(served(r) for r in base)} of {len(base)} that onnx-nb exports")


def section(path: Path = RESULTS) -> list[str]:
    """The page's transformers.js column: per type both registries hold, onnx-nb's export and transformers.js's
    run of its folder."""
    import html

    found = sweep.swept(path)
    if found is None:
        return [f"Not swept yet: `{Path(__file__).relative_to(ROOT)}`."]
    rows, meta, _, _ = found
    base = [r for r in rows if exported(r)]
    good = [r for r in base if served(r)]
    version = next((r["transformers_js"] for r in rows if r.get("transformers_js")), "?")
    lines = [
        f"`benchmarks/transformers_js_sweep.py` ({meta['date']}, transformers {meta['transformers']}, transformers.js "
        f"{version} under Node.js) takes every type both transformers and transformers.js register as a causal LM, "
        "exports it with one default call at the sweep's tiny size, writes the folder with "
        "`onnx_nb.to_transformers_js` and has transformers.js generate from it, its greedy tokens for each prompt "
        f"against PyTorch's. **{len(good)} of the {len(base)} types onnx-nb exports "
        f"({100 * len(good) / max(1, len(base)):.1f}%) run in transformers.js and give PyTorch's tokens**; "
        f"{len(rows)} types both registries hold.",
        "",
        "| type | export | runs in transformers.js | folder MB | what stopped it |",
        "|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (not exported(r), not served(r), r["type"])):
        why = "" if served(r) else (r.get("web_note") or r.get("web") or r.get("export") or r.get("pytorch") or "")
        lines.append(f"| {r['type']} | {sweep.cell('ok' if r.get('export') == 'ok' else 'no')} | "
                     f"{sweep.cell('ok' if served(r) else 'no' if exported(r) else '-')} | {r.get('web_mb', '')} | "
                     f"{html.escape(str(why)).replace('|', '/')[:200]} |")
    return lines


if __name__ == "__main__":
    main()
