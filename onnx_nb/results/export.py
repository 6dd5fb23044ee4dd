"""``ExportResult``: what an export produced, in every form a user may want to see it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..render import CSS, esc, folded, html_table, human_bytes, human_count, peak_text, shape_text, text_table
from ..runtime.onnxfile import TensorInfo


@dataclass
class ModelSource:
    """What is needed to re-create the PyTorch reference of an export.

    Example::

        source = onnx_nb.export("path/to/bert-folder").source
        source.kind, source.task, source.sample.keys()
    """

    kind: str  # "module", "hf-object", "hf-dir", "hub-id"; from beyond PyTorch "keras", "tensorflow", "sklearn", "onnx"
    name: str
    location: str | None = None
    task: str | None = None
    model_type: str | None = None
    model: Any = field(default=None, repr=False, compare=False)
    preprocessor: Any = field(default=None, repr=False, compare=False)
    sample: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    input_axes: dict[str, dict[int, str]] = field(default_factory=dict)
    as_kwargs: bool = True
    cache_layout: Any = None  # generation.CacheLayout when the export is a decoder with its key/value cache
    load_warnings: list[str] = field(default_factory=list, repr=False, compare=False)  # the libraries', at load
    # outputs the user saved beside the sample (an adopted file's .npz): the reference for those inputs
    recorded: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # the source layer's answers, recorded once by the adapter that opened the model (steps/export/sources):
    adapter: str = ""  # the registry row ("hf", "torch", "yolo", "keras", "onnx", ...): later steps ask it
    generation: str | None = None  # "decoder" (with its key/value cache), "seq2seq" (encoder + decoder), None
    eager: bool = True  # a PyTorch model exists for the eager baseline row (False beyond PyTorch, adopted files)
    # what another route offers this model should its own fail (the registry's offered_instead: the lean route's)
    instead: str = field(default="", repr=False, compare=False)

    @property
    def has_torch_model(self) -> bool:
        """False for a Keras, TensorFlow or scikit-learn model and a file made elsewhere: no PyTorch eager to run."""
        return bool(self.eager)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "location": self.location,
                "task": self.task, "model_type": self.model_type,
                "sample_shapes": {k: list(v.shape) for k, v in self.sample.items()},
                "input_axes": {k: {str(a): n for a, n in v.items()} for k, v in self.input_axes.items()},
                "cache_layout": self.cache_layout.to_dict() if self.cache_layout else None,
                "adapter": self.adapter, "generation": self.generation, "eager": self.eager}


@dataclass
class ExportCheck(Mapping[str, Any]):
    """The export's own check in ONNX Runtime, one record whatever route wrote the file. ``route`` says what was
    compared: ``"outputs"`` (every output at a shape the sample did not have, against the source framework),
    ``"decode steps"`` (the lean route: a prefill and teacher-forced decode steps against PyTorch's logits), ``"parts"``
    (an encoder-decoder's files, each checked at other shapes: ``figures["parts"]``), ``"none"`` (no check was run:
    ``skipped``, or nothing recorded). ``figures`` holds what a route measured beside the verdict (``per_output``,
    ``cosine``, ``argmax_agreement``, ``reference_dtype``). Read like the dict it was: ``result.check["passed"]``,
    ``result.check.get("max_abs_diff")``, ``dict(result.check)``."""

    passed: bool = True
    summary: str = ""
    shapes: dict[str, Any] = field(default_factory=dict)
    against: str = "PyTorch"
    max_abs_diff: float | None = None
    error: str | None = None
    skipped: bool = False
    route: str = "outputs"
    figures: dict[str, Any] = field(default_factory=dict)

    FIELDS: ClassVar[tuple[str, ...]] = ("passed", "summary", "shapes", "against", "max_abs_diff", "error",
                                         "skipped", "route")

    @classmethod
    def none(cls) -> ExportCheck:
        """No check recorded (reads as an empty mapping, and no result shows a check row for it)."""
        return cls(route="none")

    @classmethod
    def of(cls, value: Any) -> ExportCheck:
        """``value`` as a record: a record itself, or the dict a saved result or an older route holds (empty: no
        check recorded)."""
        if isinstance(value, ExportCheck):
            return value
        given = dict(value or {})
        if not given:
            return cls.none()
        known = {k: given.pop(k) for k in cls.FIELDS if k in given}
        if "route" not in known and "reference_dtype" in given:  # a lean check saved before routes were named
            known["route"] = "decode steps"
        return cls(**known, figures=given)

    def to_dict(self) -> dict[str, Any]:
        if self.route == "none" and not self.skipped:
            return {}
        out: dict[str, Any] = {"passed": self.passed, "summary": self.summary, "shapes": self.shapes,
                               "against": self.against, "route": self.route}
        out.update({k: v for k, v in (("max_abs_diff", self.max_abs_diff), ("error", self.error)) if v is not None})
        if self.skipped:
            out["skipped"] = True
        return {**out, **self.figures}

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())

    def text(self) -> str:
        """The check in one line: passed or failed, and the difference at which shapes."""
        if self.error:
            return f"FAILED: {self.error}"
        if self.skipped:
            return "not run (see unverified)"
        status = "passed" if self.passed else "FAILED"
        if self.route == "decode steps":  # its summary says what was compared, in its own terms
            return f"{status}: {self.summary}"
        shapes = ", ".join(f"{k} {shape_text(v)}" for k, v in self.shapes.items())
        # no file could pass (a random model), or the file passed within PyTorch's own float32 rounding
        why = "".join(f"; {self.figures[k]}" for k in ("unsteady", "rounding") if self.figures.get(k))
        return f"{status}: ORT vs {self.against} max abs diff {self.max_abs_diff or 0:.2e} at {shapes}{why}"


@dataclass
class ExportResult:
    """What :func:`onnx_nb.export` returns: the file (``path``, ``files``), its named inputs and outputs with their
    axes, the exporter used and why the other was not (``exporter``, ``fallback_reason``), the axes that stay fixed
    and why (``fixed_axes``), and the check in ONNX Runtime at a shape the sample did not have (``check``).
    Truthy when that check passed and the export is verified (``status``).

    Example::

        result = onnx_nb.export(model)
        result.path, result.exporter, result.fixed_axes
        result.to_pandas()                                 # its inputs and outputs as a table
    """

    path: Path
    exporter: str
    fallback_reason: dict[str, str]
    opset: int
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    op_histogram: dict[str, int]
    parameters: int
    file_size: int
    files: list[Path]
    export_seconds: float
    warnings: list[str]
    source: ModelSource
    check: ExportCheck = field(default_factory=ExportCheck.none)  # a dict given here is read into the record
    fixed_axes: list[Any] = field(default_factory=list)  # inputs.FixedAxis: axes that stay fixed, and why
    dynamic: bool | str = True  # what was asked: True, False or "custom" (a dict of axes)
    unverified: list[str] = field(default_factory=list)  # why the file is not verified (one traced branch)
    memory: dict[str, Any] = field(default_factory=dict)  # the lean route: weights' bytes, the build's peak
    parts: dict[str, Path] = field(default_factory=dict)  # other files it needs: an encoder-decoder's encoder
    patches: dict[str, list[str]] = field(default_factory=dict)  # per rewrite lent while tracing, what it replaced

    @property
    def patch_set(self) -> str:
        """Whose rewrites the file was traced under: ``"transformers"`` (the patches transformers' own exporter
        registers for this model), ``"onnx-nb"`` (onnx-nb's own), or ``""`` (none was needed)."""
        if "transformers" in self.patches:
            return "transformers"
        return "onnx-nb" if self.patches else ""

    def __post_init__(self) -> None:
        self.check = ExportCheck.of(self.check)

    def __bool__(self) -> bool:
        return self.check.passed and not self.unverified

    @property
    def cache_layout(self) -> Any:
        """The key/value cache layout (layers, kv heads, head size, dtype, bytes per token) of a decoder
        exported with its cache; None otherwise."""
        return self.source.cache_layout

    @property
    def status(self) -> str:
        """``verified``, ``unverified`` (the trace recorded one branch) or ``failed`` (ORT disagrees)."""
        if not self.check.passed:
            return "failed"
        return "unverified" if self.unverified else "verified"

    @property
    def external_data(self) -> bool:
        return len(self.files) > 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path), "exporter": self.exporter,
            "fallback_reason": dict(self.fallback_reason), "opset": self.opset,
            "inputs": [t.to_dict() for t in self.inputs],
            "outputs": [t.to_dict() for t in self.outputs],
            "op_histogram": dict(self.op_histogram), "parameters": self.parameters,
            "file_size": self.file_size, "files": [str(f) for f in self.files],
            "export_seconds": round(self.export_seconds, 3), "warnings": list(self.warnings),
            "source": self.source.to_dict(), "check": self.check.to_dict(), "status": self.status,
            "fixed_axes": [f.to_dict() for f in self.fixed_axes], "dynamic": self.dynamic,
            "unverified": list(self.unverified), "memory": dict(self.memory),
            "parts": {k: str(v) for k, v in self.parts.items()},
            "patches": {k: list(v) for k, v in self.patches.items()}, "patch_set": self.patch_set,
        }

    def to_pandas(self) -> Any:
        """One row per graph input and output: name, dtype, shape, dynamic axes."""
        import pandas as pd

        rows = [{"io": io, "name": t.name, "dtype": t.dtype, "shape": shape_text(t.shape),
                 "dynamic": ", ".join(f"{a}:{n}" for a, n in t.dynamic_dims.items())}
                for io, group in (("input", self.inputs), ("output", self.outputs)) for t in group]
        return pd.DataFrame(rows, columns=["io", "name", "dtype", "shape", "dynamic"])

    def _summary(self) -> list[tuple[str, str]]:
        failed = [k for k, v in self.fallback_reason.items() if not v.startswith("not tried")]
        skipped = [k for k, v in self.fallback_reason.items() if v.startswith("not tried")]
        used = self.exporter + (f" (after {', '.join(failed)} failed)" if failed else "") + \
            (f" ({', '.join(skipped)} not tried: see below)" if skipped else "")
        rows = [("model", f"{self.source.name} [{self.source.kind}]"),
                ("task", self.source.task or "-"), ("file", str(self.path)),
                ("exporter", used), ("opset", str(self.opset)),
                ("parameters", human_count(self.parameters)),
                ("size", human_bytes(self.file_size) + (" (external data)" if self.external_data else "")),
                ("nodes", str(sum(self.op_histogram.values()))),
                ("export time", f"{self.export_seconds:.1f} s")]
        if self.patches:  # whose rewrites the trace ran under
            theirs = [p.rsplit(".", 2)[-2:] for p in self.patches.get("transformers", [])]
            also = "".join(f"; {k}: {', '.join(v)}" for k, v in self.patches.items() if k != "transformers")
            rows.append(("patches", "transformers' own for this model: " + ", ".join(".".join(p) for p in theirs)
                         + also if self.patch_set == "transformers" else
                         "onnx-nb's: " + ", ".join(sorted(self.patches))))
        if self.memory.get("build_peak_bytes") is not None:
            m = self.memory
            rows.append(("peak memory", peak_text(m["build_peak_bytes"], m["weights_bytes"], "the checkpoint's")
                         + f" writing the file; {human_bytes(m['build_process_peak_bytes'] or 0)} resident in all"))
        if self.check:  # a check recorded, or one skipped (and saying why)
            rows.append(("check", self.check_text()))
        rows.append(("status", self.status if not self.unverified else
                     "UNVERIFIED: see below"))
        if self.fixed_axes:
            rows.append(("fixed axes", "; ".join(f.text() for f in self.fixed_axes)))
        if self.source.generation and self.cache_layout:
            rows.append(("key/value cache", self.cache_layout.text()))
        return rows

    def check_text(self) -> str:
        """The check in ONNX Runtime in one line: passed or failed, and the difference at which shapes."""
        return self.check.text()

    def _io_rows(self) -> list[tuple[str, str, str, str]]:
        return [(io, t.name, t.dtype, shape_text(t.shape))
                for io, group in (("input", self.inputs), ("output", self.outputs)) for t in group]

    def __repr__(self) -> str:
        parts = [f"ExportResult: {self.path}",
                 text_table(["", ""], self._summary()).split("\n", 2)[2],
                 "", text_table(["io", "name", "dtype", "shape"], self._io_rows())]
        top = ", ".join(f"{k} {v}" for k, v in list(self.op_histogram.items())[:8])
        parts.append(f"\nops: {top}{' ...' if len(self.op_histogram) > 8 else ''}")
        for exporter, reason in self.fallback_reason.items():
            parts.append(f"not used: {exporter}: {reason}")
        parts += [f"UNVERIFIED: {u}" for u in self.unverified]
        for w in self.warnings[:5]:
            parts.append(f"warning: {w}")
        return "\n".join(parts)

    __str__ = __repr__

    def _repr_html_(self) -> str:
        ok = bool(self)
        badge = (f'<span class="{"ok" if ok else "bad"}">{"✓" if ok else "✗"}</span>')
        unverified = "".join(f'<div class="bad">unverified: {esc(u)}</div>' for u in self.unverified)
        summary = html_table(["", ""], self._summary())
        io = html_table(["io", "name", "dtype", "shape"], self._io_rows())
        ops = html_table(["operator", "count"], list(self.op_histogram.items())[:15])
        extra = "".join(f'<div class="warn">not used: {esc(k)}: {esc(v)}</div>'
                        for k, v in self.fallback_reason.items())
        extra += folded("Warnings from the exporter and the model's libraries", self.warnings)
        title = "Exported" if not self.unverified else "Exported (UNVERIFIED)"
        return (f'{CSS}<div class="onnxnb"><h4>{badge} {title} {esc(self.source.name)} to ONNX</h4>{unverified}'
                f'<div style="display:flex;gap:24px;flex-wrap:wrap"><div>{summary}</div>'
                f"<div>{io}</div><div>{ops}</div></div>{extra}</div>")


def export_of(model: Any) -> Any:
    """The ExportResult behind an export, a variant (through its parents) or None."""
    seen = 0
    while model is not None and seen < 50:
        if isinstance(model, ExportResult):
            return model
        model = getattr(model, "origin", None) if not isinstance(getattr(model, "reference", None), ExportResult) \
            else model.reference
        seen += 1
    return None


def source_of(model: Any) -> Any:
    """The ModelSource of an export or of a variant (its own, else its export's); None for a bare file."""
    return getattr(model, "source", None) or getattr(export_of(model), "source", None)
