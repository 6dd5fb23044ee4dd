"""IPython magics: thin adapters that parse arguments and call one core function."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from ..errors import OnnxNbError
from . import specs


def _short(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call a core function (argument parsing included, when ``fn`` is a lambda); onnx-nb's own errors
    become one short line, not a traceback."""
    try:
        return fn(*args, **kwargs)
    except OnnxNbError as exc:
        raise UsageError(f"{type(exc).__name__}: {exc}") from None


def _apply(specs_list: list[specs.Spec]) -> Any:
    def decorate(func: Any) -> Any:
        for flags, options, where in reversed(specs_list):
            if where in ("both", "magic"):
                func = argument(*flags, **options)(func)
        return magic_arguments()(func)

    return decorate


@magics_class
class OnnxMagics(Magics):
    """``%onnx_export`` and friends."""

    def _shown(self, magic: str, result: Any) -> Any:
        """Return ``result``; when the cell assigns it (``r = %onnx_export ...``), IPython shows nothing, so
        display it here (a magic in a plain expression is shown by IPython itself, once)."""
        cell = (self.shell.user_ns.get("_ih") or [""])[-1] if self.shell is not None else ""
        pattern = rf"^[^#\n]*[\w\])]\s*=\s*get_ipython\(\)\.run_line_magic\(['\"]{magic}['\"]"
        if result is not None and isinstance(cell, str) and re.search(pattern, cell, re.MULTILINE):
            from IPython.display import display

            display(result)
        return result

    def _lookup(self, name: str, what: str) -> Any:
        ns = self.shell.user_ns if self.shell is not None else {}
        if name not in ns:
            raise UsageError(f"{what} {name!r} is not a variable in this notebook.")
        return ns[name]

    @line_magic
    @_apply(specs.EXPORT)
    def onnx_export(self, line: str) -> Any:
        """Export a model to ONNX: ``%onnx_export model [--sample x] [--out path] ...``.

        ``model`` is a variable holding a torch or Hugging Face model, a local Hugging Face
        folder, or a hub id. The result is displayed and returned.

        Example::

            %onnx_export model --sample x --out model.onnx     # model and x are notebook variables
            %onnx_export path/to/hf-folder --task text-classification
            r = %onnx_export 'gpt2'                           # quote a hub id that looks like a name
            %onnx_export path/to/hf-folder --web web/model     # and the folder transformers.js loads
        """
        args = parse_argstring(self.onnx_export, line)
        model = self._model(args.model, line)
        sample = self._lookup(args.sample, "--sample") if args.sample else None
        from ..steps.export.exporting import export

        result = self._shown("onnx_export", _short(export, model, sample, **specs.export_kwargs(args)))
        if result and args.web:  # the folder transformers.js loads, shown under the export
            from IPython.display import display

            from ..steps.web.bundle import to_transformers_js

            display(_short(to_transformers_js, result, **specs.web_kwargs(args)))
        return result

    @line_magic
    @_apply(specs.PARITY)
    def onnx_parity(self, line: str) -> Any:
        """Check an ONNX model against its reference: ``%onnx_parity model [model.onnx] [--atol 1e-4] ...``.

        ``model`` is a variable (a torch or Hugging Face model, or an ExportResult), a Hugging Face
        folder, or a parent .onnx file. In a notebook the report has tolerance sliders that re-judge
        pass/fail from the stored errors without running the models again.

        Example::

            %onnx_parity result                                # an ExportResult knows its PyTorch source
            %onnx_parity model model.onnx --sample x --providers cpu,cuda --shapes "batch=1;batch=8"
        """
        args = parse_argstring(self.onnx_parity, line)
        ns = self.shell.user_ns if self.shell is not None else {}
        reference = self._model(args.model, line)
        onnx_model = (ns[args.onnx] if args.onnx in ns else args.onnx.strip("'\"")) if args.onnx else None
        sample = self._lookup(args.sample, "--sample") if args.sample else None
        from ..steps.parity.check import check_parity

        return self._shown("onnx_parity",
                           _short(lambda: check_parity(reference, onnx_model, sample, **specs.parity_kwargs(args))))

    @line_magic
    @_apply(specs.BENCH)
    def onnx_bench(self, line: str) -> Any:
        """Latency table: ``%onnx_bench model.onnx [variant.onnx ...] [--providers cpu,cuda] [--shapes ...]``.

        Each model is an .onnx path or a variable (ExportResult, variant); ``--reference`` adds the
        PyTorch eager row. A progress bar runs across the rows.

        Example::

            %onnx_bench result fast int8 --reference result --shapes "batch=8,sequence=128"
            %onnx_bench model.onnx --providers cpu,openvino --profile
        """
        args = parse_argstring(self.onnx_bench, line)
        models = [self._model(m, line) for m in args.models]
        # the reference as every model name: a variable, else a folder or file; an unbound name said at once (it
        # was looked up on the Hugging Face Hub)
        reference = self._model(args.reference, line) if args.reference else None
        from ..steps.benchmark.benchmarking import benchmark

        return self._shown("onnx_bench", _short(lambda: benchmark(models, reference=reference,
                                                                  **specs.bench_kwargs(args))))

    def _model(self, name: str, line: str = "") -> Any:
        """A variable of the notebook, else a folder, file or hub id. An unquoted name that looks like a Python
        identifier, is no variable and no file is a typo, not a hub id to wait ~20 s for: said at once."""
        ns = self.shell.user_ns if self.shell is not None else {}
        if name in ns:
            return ns[name]
        text = name.strip("'\"")
        quoted = f"'{text}'" in line or f'"{text}"' in line
        if text.isidentifier() and not quoted and not Path(text).expanduser().exists():
            close = [n for n in ns if not n.startswith("_") and _similar(n, text)]
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise UsageError(f"No variable or folder named {text!r}.{hint} For a Hugging Face hub id that looks "
                             f"like a name, quote it: '{text}'.")
        return text

    @line_magic
    @_apply(specs.OPTIMIZE)
    def onnx_optimize(self, line: str) -> Any:
        """Optimize and re-validate: ``%onnx_optimize result [--level auto|extended|transformer] [--no-unpad]``.

        Example::

            fast = %onnx_optimize result
            %onnx_optimize model.onnx --level extended --no-unpad
            phone = %onnx_optimize result --target mobile   # .ort + reduced-build operator config beside the .onnx
        """
        args = parse_argstring(self.onnx_optimize, line)
        from ..steps.variants.optimizing import optimize

        return self._shown("onnx_optimize", _short(optimize, self._model(args.model, line),
                                                   **specs.optimize_kwargs(args)))

    @line_magic
    @_apply(specs.QUANTIZE)
    def onnx_quantize(self, line: str) -> Any:
        """Quantize and re-validate: ``%onnx_quantize variant [--method dynamic|static|fp16|int4] ...``.

        Example::

            int8 = %onnx_quantize fast
            %onnx_quantize result --method static --calibration generated
        """
        args = parse_argstring(self.onnx_quantize, line)
        from ..steps.variants.quantizing import quantize

        kwargs = specs.quantize_kwargs(args)
        if args.calibration:
            kwargs["calibration"] = args.calibration if args.calibration == "generated" else \
                self._lookup(args.calibration, "--calibration")
        return self._shown("onnx_quantize", _short(quantize, self._model(args.model, line), **kwargs))

    @line_magic
    @_apply(specs.AUTOTUNE)
    def onnx_autotune(self, line: str) -> Any:
        """Fastest variant within an accuracy budget: ``%onnx_autotune result [--metric cosine] [--budget 0.99]``.

        Example::

            tuned = %onnx_autotune result --budget 0.99
        """
        args = parse_argstring(self.onnx_autotune, line)
        from ..steps.variants.autotuning import autotune

        return self._shown("onnx_autotune", _short(autotune, self._model(args.model, line),
                                                   **specs.autotune_kwargs(args)))

    @line_magic
    @_apply(specs.EVALUATE)
    def onnx_evaluate(self, line: str) -> Any:
        """Every file's task metric on the same examples, beside PyTorch's: ``%onnx_evaluate result int8 --data pairs
        [--metric recall@1] [--budget 1]``.

        Example::

            ev = %onnx_evaluate result int8 --data dev.jsonl
            %onnx_evaluate result int8 --data pairs --no-latency
        """
        args = parse_argstring(self.onnx_evaluate, line)
        from ..steps.evaluate.evaluating import evaluate

        ns = self.shell.user_ns if self.shell is not None else {}
        data = ns[args.data] if args.data in ns else args.data.strip("'\"")
        models = [self._model(m, line) for m in args.models]
        return self._shown("onnx_evaluate", _short(lambda: evaluate(models if len(models) > 1 else models[0], data,
                                                                    **specs.evaluate_kwargs(args))))

    @line_magic
    @_apply(specs.GENERATE)
    def onnx_generate(self, line: str) -> Any:
        """Generate with a decoder exported with its cache: ``%onnx_generate result "Once upon a time"
        [--max-new-tokens 20] [--sample --temperature 0.8 --top-k 50 --top-p 0.9]``. Tokens stream in as
        they come.

        Example::

            %onnx_generate result "Once upon a time" --max-new-tokens 20
            %onnx_generate result --ids 5,6,7 --sample --temperature 0.8 --top-k 50
        """
        args = parse_argstring(self.onnx_generate, line)
        from ..steps.generate.generation import generate

        model = self._model(args.model, line)
        stream = _Stream()
        result = _short(lambda: generate(model, specs.generate_prompt(args), **specs.generate_kwargs(args),
                                         stream=stream))
        stream.close()
        return self._shown("onnx_generate", result)

    @line_magic
    @_apply(specs.PIPELINE)
    def onnx_pipeline(self, line: str) -> Any:
        """The whole pipeline with a report: ``%onnx_pipeline model [--quantize dynamic] [--html report.html]``.

        Example::

            %onnx_pipeline model --quantize dynamic --html report.html
            %onnx_pipeline model --data pairs --task-budget 0.5     # and every file judged on the task
        """
        args = parse_argstring(self.onnx_pipeline, line)
        sample = self._lookup(args.sample, "--sample") if args.sample else None
        from ..steps.pipelines import pipeline

        kwargs = specs.pipeline_kwargs(args)
        if args.data and args.data in (self.shell.user_ns if self.shell is not None else {}):
            kwargs["data"] = self._lookup(args.data, "--data")
        report = _short(lambda: pipeline(self._model(args.model, line), sample, **kwargs))
        if args.html:
            _short(report.save_html, args.html)
        return self._shown("onnx_pipeline", report)


def _similar(a: str, b: str) -> bool:
    """Names one typo apart (a letter changed, added, dropped or two swapped)."""
    import difflib

    return difflib.SequenceMatcher(None, a.lower(), b.lower()).ratio() >= 0.75


class _Stream:
    """Shows the tokens of a generation as they come (a line updated in place in a notebook)."""

    def __init__(self) -> None:
        self.steps: list[list[int]] = []
        self.handle: Any = None

    def __call__(self, tokens: list[int]) -> None:
        from IPython.display import display

        self.steps.append(tokens)
        text = " | ".join(" ".join(str(step[i]) for step in self.steps) for i in range(len(tokens)))
        if self.handle is None:
            self.handle = display({"text/plain": f"generating: {text}"}, raw=True, display_id=True)
        else:
            self.handle.update({"text/plain": f"generating: {text}"}, raw=True)

    def close(self) -> None:
        if self.handle is not None:
            self.handle.update({"text/plain": f"generated {len(self.steps)} step(s)"}, raw=True)
