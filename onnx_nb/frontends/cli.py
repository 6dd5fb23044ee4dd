"""``onnx-nb``: the command line, with subcommands mirroring the magics."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import OnnxNbError
from . import specs


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="onnx-nb", description="PyTorch / Hugging Face to verified ONNX.")
    p.add_argument("--version", action="version", version=f"onnx-nb {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    export = sub.add_parser("export", help="export a Hugging Face folder or hub id to ONNX")
    specs.add_arguments(export, specs.EXPORT, "cli")
    check = sub.add_parser("check", help="check an ONNX file against its reference (exit 1 on failure)")
    specs.add_arguments(check, specs.PARITY, "cli")
    bench = sub.add_parser("bench", help="latency per model, backend and shape (PyTorch eager as baseline)")
    specs.add_arguments(bench, specs.BENCH, "cli")
    for name, spec, text in (("optimize", specs.OPTIMIZE, "optimize an .onnx file and re-validate it"),
                             ("quantize", specs.QUANTIZE, "quantize an .onnx file and re-validate it"),
                             ("autotune", specs.AUTOTUNE, "fastest variant within an accuracy budget")):
        specs.add_arguments(sub.add_parser(name, help=text), spec, "cli")
    specs.add_arguments(sub.add_parser("evaluate", help="every file's task metric on the same examples, timed"),
                        specs.EVALUATE, "cli")
    specs.add_arguments(sub.add_parser("pipeline", help="every step with a report"), specs.PIPELINE, "cli")
    specs.add_arguments(sub.add_parser("generate", help="generate with a decoder exported with its cache"),
                        specs.GENERATE, "cli")
    demo = sub.add_parser("demo", help="export and check all-MiniLM-L6-v2; write an HTML report")
    specs.add_arguments(demo, specs.DEMO, "cli")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "export":
            from ..steps.export.exporting import export

            result = export(args.model, **specs.export_kwargs(args))
            print(result)
            if result and args.web:
                from ..steps.web.bundle import to_transformers_js

                bundle = to_transformers_js(result, **specs.web_kwargs(args))
                print(bundle)
                return 0 if bundle or not bundle.checks else 1
            return 0 if result else 1
        if args.command == "check":
            from ..steps.parity.check import check_parity

            report = check_parity(args.model, args.onnx, **specs.parity_kwargs(args))
            _emit(report, args.json)
            return 0 if report else 1
        if args.command == "bench":
            from ..steps.benchmark.benchmarking import benchmark

            table = benchmark(args.models, reference=args.reference, **specs.bench_kwargs(args))
            _emit(table, args.json)
            return 0 if table else 1
        if args.command in ("optimize", "quantize", "autotune"):
            from ..steps.variants.autotuning import autotune
            from ..steps.variants.optimizing import optimize
            from ..steps.variants.quantizing import quantize

            made: Any
            if args.command == "optimize":
                made = optimize(args.model, **specs.optimize_kwargs(args))
            elif args.command == "quantize":
                made = quantize(args.model, **specs.quantize_kwargs(args))
            else:
                made = autotune(args.model, **specs.autotune_kwargs(args))
            _emit(made, args.json)
            return 0 if args.command == "autotune" or made else 1
        if args.command == "evaluate":
            from ..steps.evaluate.evaluating import evaluate

            measured = evaluate(args.models, args.data, **specs.evaluate_kwargs(args))
            _emit(measured, args.json)
            return 0
        if args.command == "generate":
            from ..steps.generate.generation import generate

            generated = generate(args.model, specs.generate_prompt(args), **specs.generate_kwargs(args))
            _emit(generated, args.json)
            return 0
        if args.command == "pipeline":
            from ..steps.pipelines import pipeline

            full = pipeline(args.model, **specs.pipeline_kwargs(args))
            if args.html:
                full.save_html(args.html)
            _emit(full, args.json)
            return 0 if full else 1
        from .demo import run

        report = run(args.out)
        print(report, f"report: {Path(args.out) / 'report.html'}", sep="\n\n")
        return 0 if report else 1
    except OnnxNbError as exc:
        print(f"onnx-nb: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("onnx-nb: interrupted; no partial files were left.", file=sys.stderr)
        return 130


def _emit(result: object, as_json: bool) -> None:
    if as_json:
        import json

        print(json.dumps(result.to_dict(), indent=2, default=str))  # type: ignore[attr-defined]
    else:
        print(result)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
