"""Which models run in transformers.js from onnx-nb's folder, measured on both registries: every model type that
transformers registers for ``AutoModelForCausalLM`` and transformers.js (the locked npm copy in ``js/node_modules``)
lists in its own ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``, built at the causal-LM sweep's tiny size from its default
config (``registry_sweep.built``: random weights, PyTorch's greedy tokens for two prompts), saved with a word-level
tokenizer whose words are its token ids ("w5 w9 w14": transformers.js's tokenizer gives exactly the sweep's prompts),
exported with one default ``onnx_nb.export(folder)``, written with ``onnx_nb.to_transformers_js`` and run by
transformers.js itself under Node.js: its greedy tokens for each prompt alone against PyTorch's ``generate()``.
``--task text2text-generation`` does the same for the encoder-decoders (``seq2seq_sweep``'s build; an encoder file and
a merged decoder); ``--task fill-mask`` (or ``text-classification``, ``token-classification``, ``question-answering``)
for that pipeline: the types both registries hold for it, built as ``task_sweep`` builds them, the pipeline's every
output judged against PyTorch on the same ids (a masked word among the fill-mask texts; [question, context] pairs of
the same words); ``--task feature-extraction`` takes the text encoders among transformers.js's encoder-only models, as
base models. ``--task image-classification``: the type's own image processor from transformers' registry at the
config's size saved beside it, run on the bundle's default images. ``--task automatic-speech-recognition``: the speech
encoder-decoders (``seq2seq_sweep --speech``'s build) with the type's own feature extractor, on the bundle's default
clips. ``--task image-to-text``: a vision encoder-decoder under each text decoder its checkpoints use, and the
vision-language models transformers.js lists there. Each type in a process of its own with a time limit.

    .venv/bin/python benchmarks/transformers_js_sweep.py [--task fill-mask] [--only llama,gpt2] [--timeout 240]

Rows go to ``benchmarks/results/transformers_js_sweep.json`` (a task's to ``transformers_js_<task>.json``);
``registry_sweep.py --page-only`` puts the columns on ``docs/supported-architectures.md``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import registry_sweep as sweep
import seq2seq_sweep
import task_sweep
import vlm_sweep

ROOT = sweep.ROOT
RESULTS = ROOT / "benchmarks" / "results" / "transformers_js_sweep.json"
GENERATION = "text-generation"
TEXT_TO_TEXT = "text2text-generation"  # the encoder-decoders seq2seq_sweep builds
FEATURES = "feature-extraction"  # the text encoders (base models), built as task_sweep builds a type
# built by task_sweep
ENCODER_TASKS = (FEATURES, "fill-mask", "text-classification", "token-classification", "question-answering",
                 "image-classification")
IMAGES = ("image-classification",)  # run on the bundle's default images, by a processor saved with the model
SPEECH = "automatic-speech-recognition"  # the speech encoder-decoders seq2seq_sweep --speech builds
CAPTIONS = "image-to-text"  # transformers.js's vision-to-text registry (a vision encoder-decoder; two VLMs)
TASKS = (GENERATION, TEXT_TO_TEXT, SPEECH, CAPTIONS, *ENCODER_TASKS)


def results(task: str) -> Path:
    return RESULTS if task == GENERATION else RESULTS.with_name(f"transformers_js_{task}.json")


def registry(task: str = GENERATION) -> dict[str, str]:
    """The types both registries hold for ``task`` (transformers' class names)."""
    from onnx_nb.runtime.transformers_js import registered

    web = registered(task) or {}
    if task == FEATURES:
        return text_encoders()
    if task == CAPTIONS:  # transformers registers a vision encoder-decoder and the VLMs as image-text-to-text
        from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES as ours
    else:
        ours = sweep.registry() if task == GENERATION else seq2seq_sweep.registry() if task == TEXT_TO_TEXT else \
            seq2seq_sweep.registry(speech=True) if task == SPEECH else task_sweep.registry(task)
    return {t: c for t, c in ours.items() if t in web}


def text_encoders() -> dict[str, str]:
    """feature-extraction's types: transformers.js's encoder-only models (``MODEL_MAPPING_NAMES_ENCODER_ONLY``) that
    transformers registers as a base model (``MODEL_MAPPING_NAMES``) and as a tokenizer's (a text model: the
    speech, vision and multimodal encoders that mapping also lists run other pipelines)."""
    from transformers.models.auto import modeling_auto
    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES

    from onnx_nb.runtime import transformers_js

    own = transformers_js.mappings().get("MODEL_MAPPING_NAMES_ENCODER_ONLY", {})
    return {t: c for t, c in modeling_auto.MODEL_MAPPING_NAMES.items()
            if t in own and t in TOKENIZER_MAPPING_NAMES and isinstance(c, str) and text_alone(t)}


def text_alone(model_type: str) -> bool:
    """A text model's config: no tower configs (CLIP's, CLAP's), no image size, no audio front end (wav2vec2's
    convolutions, VITS's sampling rate)."""
    import transformers

    config = transformers.AutoConfig.for_model(model_type)
    return not any(hasattr(config, a) for a in ("text_config", "vision_config", "audio_config", "image_size",
                                                "conv_dim", "sampling_rate", "feature_projection_input_dim"))


def word_tokenizer(vocab: int, eos: Any, folder: Path, mask: int | None = None) -> None:
    """A word-level tokenizer whose word ``w{i}`` is token ``i`` (``w{mask}`` its mask token), saved to ``folder``."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = Tokenizer(models.WordLevel({f"w{i}": i for i in range(vocab)}, unk_token="w0"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    end = eos[0] if isinstance(eos, list) and eos else eos
    special = {"eos_token": f"w{end}"} if isinstance(end, int) and 0 <= end < vocab else {}
    if mask is not None:
        special["mask_token"] = f"w{mask}"
    # a length the texts stay within (transformers' default, 1e30, is no number transformers.js can truncate at)
    # and a pad token: a batch of texts of two lengths is padded
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=words, unk_token="w0", pad_token="w0",
                                                model_max_length=64,
                                                model_input_names=["input_ids", "attention_mask"], **special)
    fast.save_pretrained(folder)


def one(model_type: str, class_name: str, folder: Path) -> dict[str, Any]:
    """One type through onnx-nb's export and transformers.js (in a child process)."""

    row: dict[str, Any] = {"type": model_type, "class": class_name}
    started = time.perf_counter()
    made = sweep.built(model_type, class_name, folder, row)
    if made is None:
        return row
    model, prompts = made[0], made[1]
    config = sweep.text_of(model.config)
    return generated(row, folder, started, int(getattr(config, "vocab_size", 100) or 100),
                     getattr(config, "eos_token_id", None), prompts)


def generated(row: dict[str, Any], folder: Path, started: float, vocab: int, eos: Any,
              prompts: list[list[int]]) -> dict[str, Any]:
    """The saved model's word-level tokenizer, its default export, and transformers.js's generation from its folder
    for each prompt (token ids), judged against PyTorch's: into ``row``."""
    import transformers

    word_tokenizer(vocab, eos, folder)
    result = sweep.exported(row, folder, folder.parent / "onnx" / "model.onnx", started)
    if result is None or not result:
        return row
    # the word-level tokenizer itself: transformers' AutoTokenizer reads it as the type's own class (a Qwen2 BPE with
    # no merges turns "w5" into nothing)
    result.source.preprocessor = transformers.PreTrainedTokenizerFast.from_pretrained(folder)
    checked(row, result, folder.parent / "web", [" ".join(f"w{i}" for i in p) for p in prompts])
    row["seconds"] = round(time.perf_counter() - started, 1)
    return row


def one_encoder(task: str, model_type: str, class_name: str, folder: Path) -> dict[str, Any]:
    """One type for an encoder task through onnx-nb's export and transformers.js's pipeline (in a child process)."""
    import transformers

    row: dict[str, Any] = {"type": model_type, "class": class_name, "task": task}
    started = time.perf_counter()
    if not task_sweep.built(task, model_type, class_name, folder, row):
        return row
    if task in IMAGES:
        image_processor(model_type, transformers.AutoConfig.from_pretrained(folder), folder, row)
        result = sweep.exported(row, folder, folder.parent / "onnx" / "model.onnx", started)
        if result is not None and result:
            checked(row, result, folder.parent / "web", None)
        row["seconds"] = round(time.perf_counter() - started, 1)
        return row
    config = sweep.text_of(transformers.AutoConfig.from_pretrained(folder))
    vocab = int(getattr(config, "vocab_size", 0) or 0)
    if vocab < 16:
        row["export"] = f"a vocabulary of {vocab} tokens: no text to feed"
        return row
    mask = vocab - 1 if task == "fill-mask" else None
    word_tokenizer(vocab, None, folder, mask)
    result = sweep.exported(row, folder, folder.parent / "onnx" / "model.onnx", started)
    if result is None or not result:
        return row
    result.source.preprocessor = transformers.PreTrainedTokenizerFast.from_pretrained(folder)
    texts = ["w5 w9 w14 w6 w11", "w7 w12 w8"]  # no id under 5: special tokens sit there (BART's end is 2)
    if mask is not None:
        texts = [f"w5 w{mask} w14 w6", f"w7 w12 w{mask}"]
    end = getattr(config, "eos_token_id", None)
    if isinstance(end, int) and 0 <= end < vocab:  # each text ends as its tokenizer ends it (BART's classifier pools
        texts = [f"{t} w{end}" for t in texts]      # at the end-of-sequence token, one per row)
    pairs: list[Any] = [[t, u] for t, u in zip(texts, texts[::-1])]  # question answering's [question, context]
    checked(row, result, folder.parent / "web", pairs if task == "question-answering" else texts)
    row["seconds"] = round(time.perf_counter() - started, 1)
    return row


def one_seq2seq(model_type: str, class_name: str, folder: Path) -> dict[str, Any]:
    """One encoder-decoder through onnx-nb's export and transformers.js's text2text-generation (in a child process):
    its greedy tokens for each prompt against PyTorch's."""
    row: dict[str, Any] = {"type": model_type, "class": class_name, "task": TEXT_TO_TEXT}
    started = time.perf_counter()
    made = seq2seq_sweep.built(model_type, class_name, folder, row)
    if made is None:
        return row
    model, prompts = made[0], made[1]
    return generated(row, folder, started, int(model.get_input_embeddings().num_embeddings),
                     getattr(model.config, "eos_token_id", None), prompts)


def image_processor(model_type: str, config: Any, folder: Path, row: dict[str, Any]) -> None:
    """The type's own image processor (transformers' registry; its PIL build where it has one) at the config's
    image size, saved to ``folder``; a type with none registered gets ViT's, said in ``row``."""
    import transformers
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES

    names = IMAGE_PROCESSOR_MAPPING_NAMES.get(model_type)
    if names is None:
        row["processor"] = "none registered: ViT's"
        names = IMAGE_PROCESSOR_MAPPING_NAMES["vit"]
    cls = getattr(transformers, names.get("pil") or names["torchvision"])
    side, made = getattr(config, "image_size", None), cls()
    settings: dict[str, Any] = {}
    if isinstance(side, int):  # the processor makes the model's own size (position embeddings are sized for it)
        if getattr(made.size, "height", None):
            settings["size"] = {"height": side, "width": side}
        elif getattr(made.size, "shortest_edge", None):
            settings["size"] = {"shortest_edge": side}
        if getattr(made, "crop_size", None):
            settings["crop_size"] = {"height": side, "width": side}
    cls(**settings).save_pretrained(folder)


def one_speech(model_type: str, class_name: str, folder: Path) -> dict[str, Any]:
    """One speech encoder-decoder through onnx-nb's export and transformers.js's automatic-speech-recognition (in a
    child process): the type's own feature extractor (transformers' registry, sized to the model's mel bins) and the
    word-level tokenizer saved beside it, the bundle's two default clips, greedy tokens against PyTorch's."""
    import transformers
    from transformers.models.auto.feature_extraction_auto import FEATURE_EXTRACTOR_MAPPING_NAMES

    row: dict[str, Any] = {"type": model_type, "class": class_name, "task": SPEECH}
    started = time.perf_counter()
    made = seq2seq_sweep.built(model_type, class_name, folder, row, speech=True)
    if made is None:
        return row
    model = made[0]
    extractor = getattr(transformers, FEATURE_EXTRACTOR_MAPPING_NAMES.get(model_type, "WhisperFeatureExtractor"))
    bins = getattr(model.config, "num_mel_bins", None) or getattr(getattr(model.config, "encoder_config", None),
                                                                   "num_mel_bins", None)
    (extractor(feature_size=bins) if isinstance(bins, int) else extractor()).save_pretrained(folder)
    word_tokenizer(int(model.get_output_embeddings().out_features), getattr(model.config, "eos_token_id", None),
                   folder)
    result = sweep.exported(row, folder, folder.parent / "onnx" / "model.onnx", started)
    if result is None or not result:
        return row
    result.source.preprocessor = Parts(transformers.AutoFeatureExtractor.from_pretrained(folder),
                                       transformers.PreTrainedTokenizerFast.from_pretrained(folder))
    checked(row, result, folder.parent / "web", None)
    row["seconds"] = round(time.perf_counter() - started, 1)
    return row


class Parts:
    """A feature extractor and a tokenizer saved side by side (the type's own processor class may want its own
    tokenizer class, which the word-level tokenizer is not)."""

    def __init__(self, feature_extractor: Any, tokenizer: Any) -> None:
        self.feature_extractor, self.tokenizer = feature_extractor, tokenizer

    def save_pretrained(self, folder: str) -> None:
        self.feature_extractor.save_pretrained(folder)
        self.tokenizer.save_pretrained(folder)


def one_captions(model_type: str, class_name: str, folder: Path) -> dict[str, Any]:
    """One image-to-text type through onnx-nb's export and transformers.js's image-to-text (in a child process): a
    vision encoder-decoder with each decoder of ``vlm_sweep.DECODERS`` (random weights, ViT's image processor at the
    encoder's size, the word-level tokenizer; transformers.js's greedy tokens for the bundle's two default images
    against PyTorch's on the pixel values it made), a vision-language model as the VLM sweep builds it."""
    import torch
    import transformers

    row: dict[str, Any] = {"type": model_type, "class": class_name, "task": CAPTIONS}
    started = time.perf_counter()
    if model_type != vlm_sweep.IMAGE_TO_TEXT:
        try:
            config = vlm_sweep.tiny_config(model_type, sweep.TINY, vlm_sweep.VISION)
            torch.manual_seed(0)
            getattr(transformers, class_name)(config).save_pretrained(folder)
            word_tokenizer(int(config.get_text_config().vocab_size), None, folder)
            row["pytorch"] = "ok"
        except Exception as exc:  # noqa: BLE001 - a row, not a crash
            sweep.refused(row, "build", "tiny", exc)
            return row
        result = sweep.exported(row, folder, folder.parent / "onnx" / "model.onnx", started)
        if result is not None and result:
            checked(row, result, folder.parent / "web", None)
        row["seconds"] = round(time.perf_counter() - started, 1)
        return row
    row["pytorch"], row["decoders"] = "ok", {}
    for name in vlm_sweep.DECODERS:
        part: dict[str, Any] = {}
        here = folder / name
        try:
            model = vlm_sweep.vision_encoder_decoder(name, here)
            with torch.no_grad():  # PyTorch generates from an image
                model.generate(pixel_values=torch.randn(1, 3, 32, 32), max_new_tokens=2, do_sample=False, num_beams=1)
        except Exception as exc:  # noqa: BLE001 - a row, not a crash
            sweep.refused(part, "build or generate", "tiny", exc)
            row["decoders"][name] = part
            continue
        word_tokenizer(int(model.config.decoder.vocab_size), 1, here)  # beside the image processor: export()
        result = sweep.exported(part, here, folder.parent / name / "model.onnx", started)  # loads both as one
        if result is not None and result:
            checked(part, result, folder.parent / f"web-{name}", None)
        row["decoders"][name] = part
    parts = row["decoders"].values()
    row["export"] = "ok" if all(p.get("export") == "ok" for p in parts) else next(
        f"{n}: {p.get('export')}" for n, p in row["decoders"].items() if p.get("export") != "ok")
    row["web"] = "same" if all(p.get("web") == "same" for p in parts) else "differs"
    if row["web"] != "same":
        row["web_note"] = "; ".join(f"{n}: {p.get('web_note') or p.get('web')}" for n, p in row["decoders"].items()
                                    if p.get("web") != "same")[:300]
    row["web_mb"] = round(sum(p.get("web_mb", 0) for p in parts), 3)
    row["transformers_js"] = next((p["transformers_js"] for p in parts if p.get("transformers_js")), "")
    row["seconds"] = round(time.perf_counter() - started, 1)
    return row


def checked(row: dict[str, Any], result: Any, folder: Path, texts: list[Any] | None) -> None:
    """The folder written and run by transformers.js (Node.js): its verdict into ``row``."""
    import onnx_nb
    from onnx_nb.errors import first_line

    try:
        t = time.perf_counter()
        bundle = onnx_nb.to_transformers_js(result, folder, texts=texts, max_new_tokens=sweep.NEW_TOKENS,
                                            check=True, runtime="node", progress=False)
        row["web_s"] = round(time.perf_counter() - t, 1)
        row["web_mb"] = round(sum(f.stat().st_size for f in bundle.files) / 1e6, 3)
        row["transformers_js"] = bundle.transformers_js
        check = bundle.checks[0]
        row["web"] = "same" if check.passed else "error" if check.status == "error" else "differs"
        if not check.passed:
            row["web_note"] = (check.note or check.measure)[:300]
    except Exception as exc:  # noqa: BLE001 - a row, not a crash
        row["web"] = f"{type(exc).__name__}: {first_line(exc)}"[:300]


def served(row: dict[str, Any]) -> bool:
    return row.get("web") == "same"


def exported(row: dict[str, Any]) -> bool:
    """Counted: PyTorch runs the type and onnx-nb's default export passes its check."""
    return sweep.counted(row) and row.get("export") == "ok"


def main() -> None:
    parser = sweep.parser_for(__doc__, 240, variants=False)
    parser.add_argument("--task", default=GENERATION, choices=TASKS)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    if args.one:
        types = registry(args.task)
        row = one(args.one, types[args.one], Path(args.folder)) if args.task == GENERATION else \
            one_seq2seq(args.one, types[args.one], Path(args.folder)) if args.task == TEXT_TO_TEXT else \
            one_speech(args.one, types[args.one], Path(args.folder)) if args.task == SPEECH else \
            one_captions(args.one, types[args.one], Path(args.folder)) if args.task == CAPTIONS else \
            one_encoder(args.task, args.one, types[args.one], Path(args.folder))
        print("ROW " + json.dumps(row))
        return
    rows = sweep.run_rows(__file__, registry(args.task), Path(args.json or results(args.task)), args.only,
                          args.again, args.timeout, ["--task", args.task])
    base = [r for r in rows if exported(r)]
    print(f"transformers.js, {args.task}: {sum(served(r) for r in base)} of {len(base)} that onnx-nb exports")


def section(path: Path = RESULTS) -> list[str]:
    """The page's transformers.js column: per type both registries hold, onnx-nb's export and transformers.js's
    run of its folder."""

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
    lines += _rows(rows)
    totals = [len(good), len(base)]
    for task in (TEXT_TO_TEXT, SPEECH, CAPTIONS, *ENCODER_TASKS):
        found = sweep.swept(results(task))
        if found is None:
            lines += ["", f"{task}: not swept yet (`--task {task}`)."]
            continue
        rows = found[0]
        base = [r for r in rows if exported(r)]
        good = [r for r in base if served(r)]
        totals = [totals[0] + len(good), totals[1] + len(base)]
        how = ("built as the sequence-to-sequence sweep builds them, an encoder file and a merged decoder, greedy "
               "tokens for each prompt against PyTorch's" if task == TEXT_TO_TEXT else "built as the speech sweep "
               "builds them with the type's own feature extractor, transformers.js's greedy tokens for two clips "
               "against PyTorch's on the features transformers.js made" if task == SPEECH else "a vision "
               "encoder-decoder under a tiny ViT with each of the text decoders its published checkpoints use "
               "(TrOCR's, GPT-2's, mBART's: served when all three are), the vision-language models as the VLM "
               "sweep builds them; transformers.js's greedy tokens for two images against PyTorch's on the pixel "
               "values transformers.js made" if task == CAPTIONS else "built as the task "
               "sweep builds "
               "them with the type's own image processor, every output of transformers.js's model judged against "
               "PyTorch on the pixel values transformers.js's processor made" if task in IMAGES else "built as the "
               "task sweep builds them, every output of transformers.js's `pipeline` judged against PyTorch on the "
               "same ids")
        lines += ["", f"**{task}** (`--task {task}`, {found[1]['date']}; the types both registries hold for the "
                  f"pipeline, {how}): **{len(good)} of the {len(base)} types onnx-nb exports "
                  f"({100 * len(good) / max(1, len(base)):.1f}%)**; {len(rows)} types both registries hold.", "",
                  "| type | export | runs in transformers.js | folder MB | what stopped it |", "|---|---|---|---|---|",
                  *_rows(rows)]
    lines += ["", f"All the pipelines swept: **{totals[0]} of {totals[1]} ({100 * totals[0] / max(1, totals[1]):.1f}%)"
              "** of the types onnx-nb exports run in transformers.js and agree with PyTorch."]
    return lines


def _rows(rows: list[dict[str, Any]]) -> list[str]:
    import html

    lines = []
    for r in sorted(rows, key=lambda r: (not exported(r), not served(r), r["type"])):
        why = "" if served(r) else (r.get("web_note") or r.get("web") or r.get("export") or r.get("pytorch") or "")
        lines.append(f"| {r['type']} | {sweep.cell('ok' if r.get('export') == 'ok' else 'no')} | "
                     f"{sweep.cell('ok' if served(r) else 'no' if exported(r) else '-')} | {r.get('web_mb', '')} | "
                     f"{html.escape(str(why)).replace('|', '/')[:200]} |")
    return lines


if __name__ == "__main__":
    main()
