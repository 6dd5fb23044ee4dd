"""Argument specs shared by the ``%onnx_*`` magics and the ``onnx-nb`` command line.

Plain data, so it can be tested without IPython: each entry is ``(flags, options, where)`` with
``where`` one of ``"both"``, ``"magic"`` or ``"cli"``.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..steps.export.args import ARGUMENTS

Spec = tuple[tuple[str, ...], dict[str, Any], str]

def _export_specs() -> list[Spec]:
    """``%onnx_export`` and ``onnx-nb export`` from export()'s own argument table
    (:data:`onnx_nb.steps.export.args.ARGUMENTS`): every argument with a flag, its help, its default and choices."""
    out: list[Spec] = [(("model",), {"help": "a variable holding a model (magic only), a local Hugging Face folder, "
                                             "a hub id or a file"}, "both")]
    for arg in ARGUMENTS:
        if arg.flag is None:
            continue
        options: dict[str, Any] = {"help": arg.help}
        if arg.reads == "flag":
            options["action"] = "store_true"
        elif arg.reads == "int":
            options["type"] = int
        elif arg.reads == "choice":
            options["choices"] = list(arg.choices)
            options["default"] = None if arg.default is None else str(arg.default).lower()
        out.append(((arg.flag,), options, "magic" if arg.name == "sample" else "both"))
    return out


EXPORT: list[Spec] = [*_export_specs(), (("--web",), {
    "metavar": "FOLDER", "help": "then write the folder transformers.js loads there, checked by transformers.js "
                                 "itself (onnx_nb.to_transformers_js; --overwrite replaces it)"}, "both")]


def web_kwargs(ns: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments for :func:`onnx_nb.to_transformers_js` after an export given ``--web FOLDER``."""
    return {"folder": ns.web, "overwrite": bool(getattr(ns, "overwrite", False))}


PARITY: list[Spec] = [
    (("model",), {"help": "the reference: a variable (magic only: a model, an ExportResult), a Hugging Face "
                          "folder or hub id, or a parent .onnx file"}, "both"),
    (("onnx",), {"nargs": "?", "default": None,
                 "help": "the .onnx file to check (default: the ExportResult's own file)"}, "both"),
    (("--sample",), {"help": "a variable holding the sample inputs"}, "magic"),
    (("--atol",), {"type": float, "help": "absolute tolerance (default by precision: fp32 1e-4)"}, "both"),
    (("--rtol",), {"type": float, "help": "relative tolerance (default by precision: fp32 1e-3)"}, "both"),
    (("--providers",), {"default": "cpu", "help": "comma-separated: cpu,cuda,trt,openvino,... or 'available'"},
     "both"),
    (("--shapes",), {"default": "auto",
                     "help": "'auto', 'sample', or axis sizes like 'batch=4,sequence=32;batch=1'"}, "both"),
    (("--no-localize",), {"action": "store_true", "help": "skip the search for the first diverging node"},
     "both"),
    (("--no-probes",), {"action": "store_true",
                        "help": "skip the probe inputs (other draws, negated and scaled floats, other ids, padding)"},
     "both"),
    (("--isolate",), {"action": "store_true",
                      "help": "run ONNX Runtime in a worker process (for files you did not make)"}, "both"),
    (("--cluster",), {"help": "run on a Ray cluster: 'auto' (the one this machine is part of) or an address such "
                                "as ray://head:10001 (pip install 'onnx-nb[ray]')"}, "both"),
    (("--json",), {"action": "store_true", "help": "print the report as JSON"}, "cli"),
]

BENCH: list[Spec] = [
    (("models",), {"nargs": "+", "help": ".onnx files (or variables holding ExportResults / variants) to time"},
     "both"),
    (("--providers",), {"default": "available",
                        "help": "'available' (every ORT provider here, plus the OpenVINO runtime when installed) "
                                "or a comma-separated list: cpu,cuda,trt,openvino,openvino-runtime,..."}, "both"),
    (("--shapes",), {"default": "sample", "help": "'sample', 'auto', or 'batch=1;batch=8,sequence=128'"}, "both"),
    (("--reference",), {"help": "the PyTorch model for the eager baseline row (a variable, a Hugging Face folder, "
                                "or an ExportResult)"}, "both"),
    (("--runs",), {"type": int, "help": "timed runs per row (default: as many as fit in --min-seconds)"}, "both"),
    (("--min-seconds",), {"type": float, "default": 1.0, "help": "time budget per row when --runs is not given"},
     "both"),
    (("--warmup",), {"type": int, "default": 5, "help": "untimed runs before timing"}, "both"),
    (("--threads",), {"type": int, "help": "intra-op threads for ORT and torch (default: their own)"}, "both"),
    (("--profile",), {"action": "store_true", "help": "add ORT's per-operator profile"}, "both"),
    (("--isolate",), {"action": "store_true",
                      "help": "run ONNX Runtime in a worker process (for files you did not make)"}, "both"),
    (("--cluster",), {"help": "run on a Ray cluster: 'auto' (the one this machine is part of) or an address such "
                                "as ray://head:10001 (pip install 'onnx-nb[ray]')"}, "both"),
    (("--json",), {"action": "store_true", "help": "print the table as JSON"}, "cli"),
]

OPTIMIZE: list[Spec] = [
    (("model",), {"help": "an .onnx file, or a variable holding an ExportResult / variant"}, "both"),
    (("--level",), {"default": "auto", "choices": ["auto", "basic", "extended", "all", "transformer"],
                    "help": "ORT graph level, or transformer fusion; auto picks"}, "both"),
    (("--model-type",), {"help": "ORT transformer model type (bert, gpt2, ...); read from the config if known"},
     "both"),
    (("--num-heads",), {"type": int, "help": "attention heads (from the config if known)"}, "both"),
    (("--hidden-size",), {"type": int, "help": "hidden size (from the config if known)"}, "both"),
    (("--no-unpad",), {"action": "store_true", "help": "do not skip padding at run time"}, "both"),
    (("--simplify",), {"action": "store_true", "help": "run onnxscript's graph optimizer first"}, "both"),
    (("--attention",), {"default": "auto", "choices": ["auto", "gqa", "standard"],
                        "help": "a decoder's attention: ONNX Runtime's GroupQueryAttention with a shared key/value "
                                "buffer, or ONNX's standard Attention (any runtime); auto: gqa where it applies"},
     "both"),
    (("--target",), {"choices": ["web", "mobile"],
                     "help": "a file for another runtime: web (ONNX Runtime Web in a browser) or mobile (ONNX "
                             "Runtime Mobile: a .ort file and a reduced build's operator config beside the .onnx)"},
     "both"),
    (("--out",), {"help": "output .onnx path (default <model>.optimized.onnx)"}, "both"),
    (("--overwrite",), {"action": "store_true", "help": "replace an existing output"}, "both"),
    (("--json",), {"action": "store_true", "help": "print the variant as JSON"}, "cli"),
]

QUANTIZE: list[Spec] = [
    (("model",), {"help": "an .onnx file, or a variable holding an ExportResult / variant"}, "both"),
    (("--method",), {"default": "dynamic", "choices": ["dynamic", "static", "fp16", "int4", "auto"]}, "both"),
    (("--per-tensor",), {"action": "store_true", "help": "one scale per weight tensor (default: per channel)"},
     "both"),
    (("--calibration",), {"help": "static: a variable holding a list of input dicts, or 'generated'"}, "both"),
    (("--exclude",), {"default": "", "help": "comma-separated node names to keep in float"}, "both"),
    (("--block-size",), {"type": int, "default": 32, "help": "int4: weights per scale"}, "both"),
    (("--algorithm",), {"default": "auto", "choices": ["auto", "rtn", "rtn_asym", "k_quant", "hqq", "gptq", "awq"],
                        "help": "int4: how blocks are quantized (auto: each made, the most accurate kept)"}, "both"),
    (("--mixed-precision",), {"default": "auto", "help": "int4: which layers stay at 8 bits: auto (measured, the "
                                                         "file at most 1.15x), a size budget such as 1.3, or off"},
     "both"),
    (("--scheme",), {"default": "auto", "choices": ["auto", "u8s8", "u8s8-reduced", "u8u8"],
                     "help": "INT8 weights for the CPU (auto: by its instruction set, measured here)"}, "both"),
    (("--target-cpu",), {"default": None, "help": "the CPU the file will run on: avx2, avx512, vnni, amx, arm64, "
                                                  "any (default: this machine)"}, "both"),
    (("--out",), {"help": "output .onnx path"}, "both"),
    (("--overwrite",), {"action": "store_true", "help": "replace an existing output"}, "both"),
    (("--json",), {"action": "store_true", "help": "print the variant as JSON"}, "cli"),
]

AUTOTUNE: list[Spec] = [
    (("model",), {"help": "an .onnx file, or a variable holding an ExportResult"}, "both"),
    (("--metric",), {"default": "cosine", "choices": ["cosine", "max_abs"]}, "both"),
    (("--budget",), {"type": float, "help": "lowest cosine (default 0.99) or largest abs error (default 1e-4)"},
     "both"),
    (("--providers",), {"default": "cpu", "help": "comma-separated providers to time on"}, "both"),
    (("--min-seconds",), {"type": float, "default": 0.5, "help": "time budget per timed row"}, "both"),
    (("--out",), {"help": "folder for the candidates (default <model folder>/autotune)"}, "both"),
    (("--overwrite",), {"action": "store_true", "help": "replace earlier autotune results"}, "both"),
    (("--cluster",), {"help": "run on a Ray cluster: 'auto' (the one this machine is part of) or an address such "
                                "as ray://head:10001 (pip install 'onnx-nb[ray]')"}, "both"),
    (("--json",), {"action": "store_true", "help": "print the result as JSON"}, "cli"),
]

EVALUATE: list[Spec] = [
    (("models",), {"nargs": "+", "help": ".onnx files (or variables holding ExportResults / variants) to measure; "
                                         "PyTorch is added from the export they came from"}, "both"),
    (("--data",), {"required": True,
                   "help": "the examples: a file (.txt, .jsonl, .json, .csv, .tsv, .npz), a folder of images by "
                           "class, a Hugging Face dataset as name:split (a network), or (magic) a variable"}, "both"),
    (("--metric",), {"default": "auto", "help": "auto (the task's own), accuracy, f1, top5, recall@1, recall@5, "
                                                "ndcg@10, mrr, perplexity, exact_match, squad_f1"}, "both"),
    (("--budget",), {"help": "the loss a file may have against PyTorch: points of the metric (1) or a share "
                             "('1%%', perplexity's default)"}, "both"),
    (("--limit",), {"type": int, "help": "measure on this many examples (a seeded draw)"}, "both"),
    (("--columns",), {"help": "which columns play which role, e.g. 'input=review,target=stars'"}, "both"),
    (("--tokenizer",), {"help": "a Hugging Face folder or hub id whose tokenizer reads the texts (for files "
                                "without their export)"}, "both"),
    (("--no-latency",), {"action": "store_true", "help": "measure the metric only, no timing"}, "both"),
    (("--openvino",), {"action": "store_true", "help": "each file in the OpenVINO runtime too (pip install "
                                                       "'onnx-nb[openvino]')"}, "both"),
    (("--json",), {"action": "store_true", "help": "print the result as JSON"}, "cli"),
]

PIPELINE: list[Spec] = [
    (("model",), {"help": "a variable holding a model (magic only), a Hugging Face folder, or a hub id"}, "both"),
    (("--sample",), {"help": "a variable holding the sample inputs"}, "magic"),
    (("--task",), {"help": "Hugging Face task (inferred by default)"}, "both"),
    (("--no-optimize",), {"action": "store_true", "help": "skip the optimization step"}, "both"),
    (("--quantize",), {"default": "auto", "choices": ["auto", "dynamic", "static", "fp16", "int4", "none"]}, "both"),
    (("--providers",), {"default": "cpu", "help": "comma-separated providers for parity and latency"}, "both"),
    (("--shapes",), {"default": "sample", "help": "latency shapes, e.g. 'batch=1;batch=8,sequence=128'"}, "both"),
    (("--out",), {"help": "folder for the files (default ./onnx_nb_out/<model>/)"}, "both"),
    (("--overwrite",), {"action": "store_true", "help": "replace earlier files"}, "both"),
    (("--html",), {"help": "also write the self-contained HTML report here"}, "both"),
    (("--isolate",), {"action": "store_true",
                      "help": "run ONNX Runtime in a worker process (for files you did not make)"}, "both"),
    (("--data",), {"help": "examples to judge every file by its task (an Evaluate step): a file, a folder of images "
                           "by class, a Hugging Face dataset as name:split, or (magic) a variable"}, "both"),
    (("--task-metric",), {"default": "auto", "help": "the metric of the Evaluate step (default: the task's own)"},
     "both"),
    (("--task-budget",), {"help": "the loss a file may have against PyTorch on the task: points (1) or a share "
                                  "('1%%')"}, "both"),
    (("--json",), {"action": "store_true", "help": "print the report as JSON"}, "cli"),
]

GENERATE: list[Spec] = [
    (("model",), {"help": "a decoder exported with its cache: an .onnx file, or a variable holding an ExportResult"},
     "both"),
    (("prompt",), {"nargs": "*", "help": "prompt text (needs a tokenizer: the export's, or --tokenizer)"}, "both"),
    (("--ids",), {"help": "the prompt as token ids instead, comma-separated; ';' between prompts"}, "both"),
    (("--tokenizer",), {"help": "a folder with the tokenizer (default: the export's own)"}, "both"),
    (("--max-new-tokens",), {"type": int, "default": 20, "help": "tokens to generate (default 20)"}, "both"),
    (("--sample",), {"action": "store_true", "help": "sample instead of greedy decoding"}, "both"),
    (("--temperature",), {"type": float, "default": 1.0}, "both"),
    (("--top-k",), {"type": int, "default": 0}, "both"),
    (("--top-p",), {"type": float, "default": 1.0}, "both"),
    (("--seed",), {"type": int, "default": 0}, "both"),
    (("--providers",), {"default": "cpu", "help": "the execution provider (cpu, cuda, ...)"}, "both"),
    (("--threads",), {"type": int, "help": "ONNX Runtime's intra-op threads (default: its own)"}, "both"),
    (("--runtime",), {"default": "onnx-nb", "choices": ["onnx-nb", "onnxruntime-genai"],
                      "help": "the generation loop: onnx-nb's (default) or onnxruntime-genai's (C++; CPU; a "
                              "GroupQueryAttention file; pip install 'onnx-nb[genai]')"}, "both"),
    (("--json",), {"action": "store_true", "help": "print the result as JSON"}, "cli"),
]

DEMO: list[Spec] = [
    (("--out",), {"default": "onnx_nb_out/demo",
                  "help": "folder for the demo's files (default ./onnx_nb_out/demo)"}, "cli"),
]


def add_arguments(parser: argparse.ArgumentParser, specs: list[Spec], where: str) -> None:
    for flags, options, scope in specs:
        if scope in ("both", where):
            parser.add_argument(*flags, **options)


def export_kwargs(ns: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments for :func:`onnx_nb.export` from parsed ``EXPORT`` arguments (the sample, a variable, is the
    magic's to look up)."""
    kwargs: dict[str, Any] = {}
    for arg in ARGUMENTS:
        if arg.flag is None or arg.name == "sample":
            continue
        value = getattr(ns, arg.flag.lstrip("-").replace("-", "_"))
        if arg.name == "dynamic":  # --static
            value = not value
        elif arg.name == "cache":
            value = {"auto": "auto", "true": True, "false": False}[value]
        elif arg.name == "nms":
            value = nms_from_text(value)
        kwargs[arg.name] = value
    return kwargs


def nms_from_text(text: str | None) -> Any:
    """``--nms``: absent (False), ``true``, or ``conf=0.3,iou=0.5,max_det=100,agnostic=true``."""
    if text is None or text.lower() in ("false", "no", "0"):
        return False
    if text.lower() in ("true", "yes", "1", ""):
        return True
    out: dict[str, Any] = {}
    for item in filter(None, (i.strip() for i in text.split(","))):
        key, _, value = item.partition("=")
        low = value.strip().lower()
        out[key.strip()] = low == "true" if low in ("true", "false") else \
            int(low) if low.isdigit() else float(low) if low.replace(".", "", 1).isdigit() else value
    return out


def shapes_from_text(text: str) -> Any:
    """``"batch=4,sequence=32;batch=1"`` -> ``[{"batch": 4, "sequence": 32}, {"batch": 1}]``."""
    from ..errors import InvalidArgumentError

    text = text.strip().strip("'\"")
    if text in ("auto", "sample"):
        return text
    specs: list[Any] = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        if part == "sample":
            specs.append("sample")
            continue
        spec = {}
        for item in filter(None, (i.strip() for i in part.split(","))):
            key, sep, value = item.partition("=")
            if not sep or not value.strip().isdigit():
                raise InvalidArgumentError(
                    f"--shapes: {item!r} is not axis=size; write e.g. 'batch=4,sequence=32;batch=1'."
                )
            spec[key.strip()] = int(value)
        specs.append(spec)
    return specs


def parity_kwargs(ns: argparse.Namespace) -> dict[str, Any]:
    return {"atol": ns.atol, "rtol": ns.rtol, "providers": ns.providers, "shapes": shapes_from_text(ns.shapes),
            "localize": not ns.no_localize, "isolate": ns.isolate or None, "probes": False if ns.no_probes else "auto",
            "cluster": ns.cluster}


def bench_kwargs(ns: argparse.Namespace) -> dict[str, Any]:
    providers = ns.providers if ns.providers == "available" else [p for p in ns.providers.split(",") if p]
    return {"providers": providers, "shapes": shapes_from_text(ns.shapes), "runs": ns.runs,
            "min_seconds": ns.min_seconds, "warmup": ns.warmup, "threads": ns.threads, "profile": ns.profile,
            "isolate": ns.isolate or None, "cluster": ns.cluster}


def optimize_kwargs(ns: argparse.Namespace) -> dict[str, Any]:
    return {"level": ns.level, "model_type": ns.model_type, "num_heads": ns.num_heads,
            "hidden_size": ns.hidden_size, "unpad": False if ns.no_unpad else "auto", "simplify": ns.simplify,
            "attention": ns.attention, "target": ns.target, "out": ns.out, "overwrite": ns.overwrite}


def quantize_kwargs(ns: argparse.Namespace) -> dict[str, Any]:
    return {"method": ns.method, "per_channel": not ns.per_tensor, "block_size": ns.block_size,
            "exclude": [e for e in ns.exclude.split(",") if e], "scheme": ns.scheme, "target_cpu": ns.target_cpu,
            "algorithm": ns.algorithm, "mixed_precision": _mixed(ns.mixed_precision), "out": ns.out,
            "overwrite": ns.overwrite}


def _mixed(text: str) -> Any:
    """``--mixed-precision``: "auto", "off" (None) or a size budget."""
    if text in ("auto", "off"):
        return None if text == "off" else text
    try:
        return float(text)
    except ValueError:
        return text  # quantize() refuses it, naming the choices


def autotune_kwargs(ns: argparse.Namespace) -> dict[str, Any]:
    return {"metric": ns.metric, "budget": ns.budget, "providers": [p for p in ns.providers.split(",") if p],
            "min_seconds": ns.min_seconds, "out": ns.out, "overwrite": ns.overwrite, "cluster": ns.cluster}


def evaluate_kwargs(ns: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments for :func:`onnx_nb.evaluate` from parsed ``EVALUATE`` arguments (models and data aside)."""
    from ..errors import InvalidArgumentError

    columns = None
    if ns.columns:
        try:
            columns = dict(part.split("=", 1) for part in ns.columns.split(",") if part.strip())
        except ValueError:
            raise InvalidArgumentError(f"--columns {ns.columns!r}: give role=column pairs, e.g. "
                                       "'input=review,target=stars'.") from None
    tokenizer = None
    if ns.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(ns.tokenizer)
    return {"metric": ns.metric, "budget": ns.budget, "limit": ns.limit, "columns": columns, "tokenizer": tokenizer,
            "latency": not ns.no_latency, "openvino": ns.openvino}


def pipeline_kwargs(ns: argparse.Namespace) -> dict[str, Any]:
    return {"task": ns.task, "optimize": not ns.no_optimize,
            "quantize": None if ns.quantize == "none" else ns.quantize,
            "providers": [p for p in ns.providers.split(",") if p], "shapes": shapes_from_text(ns.shapes),
            "out": ns.out, "overwrite": ns.overwrite, "isolate": ns.isolate or None, "data": ns.data,
            "task_metric": ns.task_metric, "task_budget": ns.task_budget}


def generate_kwargs(ns: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments for :func:`onnx_nb.generate` from parsed ``GENERATE`` arguments (the prompt aside)."""
    tokenizer = None
    if ns.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(ns.tokenizer)
    return {"max_new_tokens": ns.max_new_tokens, "do_sample": ns.sample, "temperature": ns.temperature,
            "top_k": ns.top_k, "top_p": ns.top_p, "seed": ns.seed, "provider": ns.providers.split(",")[0],
            "tokenizer": tokenizer, "threads": ns.threads, "runtime": ns.runtime}


def generate_prompt(ns: argparse.Namespace) -> Any:
    """The prompt(s): token ids from ``--ids`` (``1,2,3;4,5``), else the prompt text."""
    from ..errors import InvalidArgumentError

    if ns.ids:
        text = ns.ids.strip().strip("'\"")
        try:
            return [[int(t) for t in part.split(",") if t.strip()] for part in text.split(";") if part.strip()]
        except ValueError:
            raise InvalidArgumentError(f"--ids {ns.ids!r}: give token ids like 5,6,7 (';' between prompts).") from None
    if not ns.prompt:
        raise InvalidArgumentError("Give a prompt: text (with a tokenizer) or --ids 5,6,7.")
    return " ".join(ns.prompt)
