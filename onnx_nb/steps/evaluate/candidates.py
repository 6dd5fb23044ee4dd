"""What :func:`onnx_nb.evaluate` measures: PyTorch (the model an export came from) and every file or variant given,
each as a :class:`Candidate` that runs named numpy inputs (``run``), gives a causal LM's logits (``logits``) or
generates (``generate``) the same way for all, so every candidate sees the same examples in the same batches."""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError

PYTORCH = "PyTorch"
OPENVINO = " · OpenVINO"  # the suffix of a file's row run by the OpenVINO runtime


def openvino_name(name: str) -> str:
    """The row of file ``name`` run by the OpenVINO runtime."""
    return f"{name}{OPENVINO}"


@dataclass
class Candidate:
    """One row of the evaluation: a file (``path``) in ONNX Runtime (or in the OpenVINO runtime, ``runtime``), or
    PyTorch (``path`` None)."""

    name: str
    model: Any  # what was given: an ExportResult, a Variant, a path; for PyTorch the export it came from
    path: Path | None
    export: Any = None  # the ExportResult behind it (its source: tokenizer, processor, PyTorch reference)
    parent: str = ""  # the candidate this file was made from, when it is evaluated too
    provider: str = "cpu"
    runtime: str = "onnxruntime"  # or "openvino": the OpenVINO runtime on its CPU device, its default precision
    note: str = ""  # how the row was run, where that is not the file as given
    # for an OpenVINO row: (object, path, folder) -> (the file to run, why) for a file OpenVINO cannot read, or None
    # (benchmark's openvino_file, handed down by the caller)
    substitute: Callable[[Any, Path, str], tuple[Path, str] | None] | None = None
    _session: Any = field(default=None, repr=False)
    _reference: Any = field(default=None, repr=False)
    _lm: Any = field(default=None, repr=False)

    @property
    def is_torch(self) -> bool:
        return self.path is None

    @property
    def size_bytes(self) -> int | None:
        if self.path is None:
            return None
        from ...runtime.onnxfile import file_bytes

        return file_bytes(self.path)

    @property
    def source(self) -> Any:
        return getattr(self.export, "source", None) or getattr(self.model, "source", None)

    def input_names(self) -> list[str]:
        if self.is_torch:
            return list(self._torch().flat.input_names)
        if self.runtime == "openvino":
            return [p.get_any_name() for p in self._openvino().inputs]
        return [i.name for i in self._ort().get_inputs()]

    def run(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Named outputs for named inputs: the file in ONNX Runtime, or PyTorch fed as the export was."""
        if self.is_torch:
            return self._torch().run(feed)
        if self.runtime == "openvino":
            compiled = self._openvino()
            wanted = {p.get_any_name() for p in compiled.inputs}
            got = compiled({k: v for k, v in feed.items() if k in wanted})
            return {o.get_any_name(): np.asarray(got[o]) for o in compiled.outputs}
        sess = self._ort()
        wanted = {i.name for i in sess.get_inputs()}
        out = sess.run(None, {k: v for k, v in feed.items() if k in wanted})
        return dict(zip([o.name for o in sess.get_outputs()], out))

    def logits(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """A causal LM's logits for every position of ``ids`` (no cache carried in): transformers' own model for
        PyTorch, :func:`onnx_nb.to_transformers` over the file."""
        import torch

        self._not_openvino("a causal LM's perplexity")
        with torch.no_grad():
            out = self._torch_model()(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))
        return out.logits.float().numpy()

    def generate(self, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        """Greedy new tokens for each prompt (token ids): :func:`onnx_nb.generate` over the file, transformers'
        ``generate`` for PyTorch (one prompt at a time: no padding to tell apart)."""
        self._not_openvino("generation")
        if not self.is_torch:
            from ..generate.generation import generate

            return [list(generate(self.model, [p], max_new_tokens=max_new_tokens).tokens[0]) for p in prompts]
        import torch

        model = self._torch_model()
        out = []
        with torch.no_grad():
            for p in prompts:
                ids = torch.tensor([p])
                made = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                      max_new_tokens=max_new_tokens, pad_token_id=model.config.eos_token_id)
                out.append(made[0, len(p):].tolist())
        return out

    def texts(self, inputs: list[Any], tokenizer: Any, max_new_tokens: int) -> list[str]:
        """The text each input generates, greedy, special tokens left out: :func:`onnx_nb.generate` over the file
        (a text prompt through ``tokenizer``, a processor's output as it is), transformers' ``generate`` for
        PyTorch (the prompt's tokens cut off a decoder's output)."""
        self._not_openvino("generation")
        if not self.is_torch:
            from ..generate.generation import generate

            made = [generate(self.model, i, max_new_tokens=max_new_tokens, tokenizer=tokenizer, do_sample=False)
                    for i in inputs]
            return [(m.text or [tokenizer.decode(m.tokens[0], skip_special_tokens=True)])[0].strip() for m in made]
        import torch

        from ..export.machinery.torch_exporters import quiet

        model = self._torch_model()
        seq2seq = bool(getattr(model.config, "is_encoder_decoder", False))
        out: list[str] = []
        with torch.no_grad(), quiet([], []):  # transformers' notes on the config's max_length beside ours
            for i in inputs:
                enc = tokenizer(i, return_tensors="pt") if isinstance(i, str) else \
                    {k: torch.as_tensor(np.asarray(v)) for k, v in dict(i).items()}
                made = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False)
                new = made[0] if seq2seq else made[0, enc["input_ids"].shape[-1]:]
                out.append(tokenizer.decode(new, skip_special_tokens=True).strip())
        return out

    def _not_openvino(self, what: str) -> None:
        if self.runtime == "openvino":
            raise InvalidArgumentError(f"The OpenVINO rows run encoders' tasks only: {what} runs in ONNX Runtime "
                                       "here (leave openvino=False).")

    def _openvino(self) -> Any:
        """The file compiled by the OpenVINO runtime for its CPU (the runtime's own precision: bf16 where the CPU
        has it); a file with ONNX Runtime's own operators runs as ``substitute`` says (the note)."""
        if self._session is None:
            import openvino as ov

            from ..benchmark.backends import type_name

            assert self.path is not None
            made = None
            if self.substitute is not None:  # a folder for a file made in place of this one, gone with the row
                folder = tempfile.mkdtemp(prefix="onnx_nb_openvino_")
                weakref.finalize(self, shutil.rmtree, folder, True)
                made = self.substitute(self.model, self.path, folder)
            path, self.note = made if made is not None else (self.path, "")
            compiled = ov.Core().compile_model(str(path), "CPU", {"PERFORMANCE_HINT": "LATENCY"})
            precision = type_name(compiled.get_property("INFERENCE_PRECISION_HINT"))
            self.note = "; ".join(x for x in (f"OpenVINO {ov.__version__.split('-')[0]} on its CPU device, computing "
                                              f"in {precision}", self.note) if x)
            self._session = compiled
        return self._session

    def _torch_model(self) -> Any:
        if self._lm is None:
            if self.is_torch:
                from ..export.adapters.registry import adapter_of

                self._lm = adapter_of(self.export).reload(self.export.source, "evaluate").model
            else:
                from ..generate.transformers_api import to_transformers

                self._lm = to_transformers(self.model, provider=self.provider)
        return self._lm

    def _ort(self) -> Any:
        if self._session is None:
            from ...runtime.padding import open_session
            from ...runtime.providers import providers_named

            self._session = open_session(self.model, providers_named([self.provider])[0].name)
        return self._session

    def _torch(self) -> Any:
        if self._reference is None:
            from ..export.adapters.registry import adapter_of

            export = self.export
            self._reference = adapter_of(export).reference(export, export.path, None, 0)
        return self._reference


def candidates(models: Any, *, pytorch: bool | str = "auto", provider: str = "cpu", openvino: bool = False,
               substitute: Callable[[Any, Path, str], tuple[Path, str] | None] | None = None) -> list[Candidate]:
    """The rows, PyTorch first when the export it came from can run it (``pytorch="auto"``), then each model given:
    named by a dict's keys, a variant's name, ``"export"`` for an export, else the file's name; with ``openvino``
    each file again in the OpenVINO runtime (:func:`openvino_name`), after the ONNX Runtime rows, a file it cannot
    read run as ``substitute`` makes it (benchmark's ``openvino_file``)."""
    from ...results.export import ExportResult

    items = list(models.items()) if isinstance(models, Mapping) else \
        [(None, m) for m in (models if isinstance(models, (list, tuple)) else [models])]
    if not items:
        raise InvalidArgumentError("evaluate() needs at least one model: an ExportResult, a variant or an .onnx path "
                                   "(or a list or dict of them).")
    rows: list[Candidate] = []
    for name, model in items:
        path = getattr(model, "path", model)
        if not isinstance(path, (str, os.PathLike)):
            raise InvalidArgumentError(f"evaluate() cannot run a {type(model).__name__}: pass ExportResults, variants "
                                       "or .onnx paths (PyTorch is measured from the export they came from).")
        export = model if isinstance(model, ExportResult) else getattr(model, "reference", None)
        label = name or getattr(model, "name", None) or ("export" if isinstance(model, ExportResult)
                                                         else Path(path).stem)
        rows.append(Candidate(_unique(str(label), rows), model, Path(path),
                              export if isinstance(export, ExportResult) else None, provider=provider))
    by_path = {c.path.resolve(): c.name for c in rows if c.path is not None}
    for c in rows:
        parent = getattr(c.model, "parent", None)
        c.parent = by_path.get(Path(parent).resolve(), "") if parent is not None else ""
    export = next((c.export for c in rows if c.export is not None and c.export.source.has_torch_model), None)
    if pytorch is True and export is None:
        raise InvalidArgumentError("pytorch=True needs an export made from a PyTorch model among the models (or a "
                                   "variant of one): files alone carry no PyTorch model to run.")
    if pytorch and export is not None:
        for c in rows:  # a model the user named "PyTorch" keeps its row under another name
            if c.name == PYTORCH:
                c.name = _unique(PYTORCH, rows)
        rows.insert(0, Candidate(PYTORCH, export, None, export, provider=provider))
    if openvino:
        import importlib.util

        if importlib.util.find_spec("openvino") is None:
            raise InvalidArgumentError("openvino=True needs the OpenVINO runtime: pip install 'onnx-nb[openvino]'.")
        runs = [c for c in rows if not c.is_torch and not _runs_export(c, rows)]
        named = {c.name for c in runs}
        rows += [Candidate(openvino_name(c.name), c.model, c.path, c.export,
                           openvino_name(c.parent) if c.parent in named else "", provider, "openvino",
                           substitute=substitute) for c in runs]
    return rows


def _runs_export(c: Candidate, rows: list[Candidate]) -> bool:
    """Whether the OpenVINO runtime would run the export in place of ``c`` (an optimized file with ONNX Runtime's
    own operators: OpenVINO fuses the graph itself), the export being a row already: one row, not two, for it."""
    from ...runtime.onnxfile import contrib_ops

    export = getattr(getattr(c.model, "reference", None), "path", None)
    method = (getattr(c.model, "recipe", None) or {}).get("method")
    return bool(export is not None and method is None and c.path is not None and any(
        r.path is not None and r.path.resolve() == Path(export).resolve() for r in rows if r is not c)
                and contrib_ops(c.path, microsoft_only=True))


def _unique(name: str, rows: list[Candidate]) -> str:
    taken = {c.name for c in rows}
    if name not in taken:
        return name
    return next(f"{name} ({i})" for i in range(2, len(taken) + 3) if f"{name} ({i})" not in taken)
