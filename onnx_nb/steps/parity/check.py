"""``check_parity()``: ONNX vs its reference on several shapes and providers."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import BrowserError, InvalidArgumentError, InvalidModelError, NoWebGpuError, first_line
from ...progress import Steps
from ...results import detections
from ...results.export import export_of
from ...results.parity import DivergingNode, ParityReport, Row
from ...results.tolerance import measure, precision_of, tolerance_for
from ...runtime.isolation import honours_isolate
from ...runtime.memory import gives_memory_back
from ...runtime.shapes import axis_sizes, cast_feed, label, make_feed, right_padded, shape_specs, static_conflict
from ..export.machinery.references import Reference

_ORT_NODE = re.compile(r"running (?P<op>\w+) node\. Name:'(?P<name>[^']+)'")


def padding_mask(feed: dict[str, np.ndarray], axes: dict[str, dict[int, str]]) -> np.ndarray | None:
    """Real (unpadded) token positions, when the inputs carry an attention mask over batch × sequence."""
    mask = feed.get("attention_mask")
    if mask is None or mask.ndim != 2 or mask.all():
        return None
    return mask.astype(bool)


@gives_memory_back
@honours_isolate
def check_parity(reference: Any, onnx_model: Any = None, sample: Any = None, *, shapes: Any = "auto",
                 providers: Any = ("cpu",), atol: float | None = None, rtol: float | None = None,
                 tolerances: Mapping[str, Any] | None = None, localize: bool = True, seed: int = 0,
                 progress: bool = True, isolate: bool | None = None, probes: Any = "auto",
                 cluster: Any = None, against: Any = None) -> ParityReport:
    """Compare ``onnx_model`` with ``reference`` output by output, on several shapes and providers.

    Besides the shapes, ``probes`` (default ``"auto"``: every one that applies) runs the first shape with
    inputs drawn to move the model off the sample's path (see :mod:`onnx_nb.steps.parity.probes`); ``False``
    turns them off. Returns a :class:`ParityReport` (truthy when everything passed and the export did not
    record a single branch); raises only for bad input. ``cluster=`` (True, a Ray address or
    :class:`onnx_nb.Cluster`) runs the ONNX side on Ray nodes that offer each provider
    (:mod:`onnx_nb.steps.parity.remote`); the reference runs, and the rows are judged, here.

    A Keras, TensorFlow or scikit-learn export is checked against its own framework. A file with no source
    (``check_parity("model.onnx")`` alone, or a file adopted with ``export("model.onnx")``) is checked against a
    reference that is not ONNX Runtime: ``against="auto"`` (ONNX's reference evaluator where it runs the file, else
    OpenVINO), ``"evaluator"``, ``"openvino"``, or a ``.npz`` of inputs and the outputs you trust (that sample only).

    A generation folder another tool wrote (transformers' exporter's ``save_pretrained``: ``export.json`` with a
    prefill and a decode graph) is checked against the PyTorch model it came from (the model, its folder or hub id):
    greedy tokens with the first diverging step and PyTorch's margin there, logits per step, and every layer's keys
    and values, so a bad file names its first bad layer (:mod:`onnx_nb.steps.parity.folders`).

    Example::

        report = onnx_nb.check_parity(result)                          # an ExportResult knows its PyTorch source
        report = onnx_nb.check_parity(model, "model.onnx", sample)     # any torch / Hugging Face model and a file
        report = onnx_nb.check_parity("model.onnx", "model.int8.onnx")  # a variant against its fp32 parent
        report = onnx_nb.check_parity("downloaded.onnx")                # ONNX Runtime vs ONNX's reference evaluator
        report = onnx_nb.check_parity(model, "exported/")               # transformers' exporter's folder
        assert report, report.failures                                # falsy rows say by how much (needed_atol)
    """
    from ...runtime.cluster import as_cluster
    from ...runtime.cpu import file_notes, this_cpu
    from ...runtime.generation_folders import folder_tool
    from ..export.adapters.registry import shape_of, subject_of

    alone = _decoder_file_alone(reference, onnx_model)
    if folder_tool(onnx_model) or (onnx_model is None and folder_tool(reference)) or alone:
        if onnx_model is None:
            raise InvalidArgumentError(f"{reference} is a generation folder another tool wrote: check it against the "
                                       "PyTorch model it came from, check_parity(model, folder).")
        from .folders import folder_parity  # a tool's generation folder holds a decoder; a file alone: its shape's

        check = shape_of(onnx_model).answer("foreign") if alone else folder_parity
        return check(reference, onnx_model, providers=providers, atol=atol, rtol=rtol, tolerances=tolerances,
                     progress=progress)
    on = as_cluster(cluster)
    wanted = _providers_checked(atol, rtol, providers, on is not None)
    # choose: a model written as several files is checked on the part its adapter names (a vision-language model's
    # decoder, judged on the chain of its files); a decoder with its cache gets generation parity
    reference = subject_of(reference)
    onnx_model = subject_of(onnx_model) if onnx_model is not None else None
    generative = _generative(reference, onnx_model)
    if generative is not None and on is not None:
        raise InvalidArgumentError("check_parity(cluster=...) checks single-forward models; generation parity of a "
                                   "decoder with its cache runs on this machine only for now.")
    if generative is not None:
        from .generation import generation_parity

        return generation_parity(generative[0], generative[1], providers=providers, progress=progress)
    plan = _Plan.of(reference, onnx_model, sample, shapes, probes, seed, against)  # make the cases
    judge = {"precision": plan.precision, "atol": atol, "rtol": rtol, "tolerances": tolerances, "seed": seed}
    rows, divergence, unverified = plan.run(on, wanted, judge, localize, progress)  # run, judge, localise
    return ParityReport(model=plan.path.name, reference=plan.ref.label, precision=plan.precision, rows=rows,
                        shapes={tag: {k: list(v.shape) for k, v in feed.items()} for tag, feed, _ in plan.cases},
                        divergence=divergence, notes=list(dict.fromkeys(plan.notes + file_notes(plan.proto))),
                        unverified=unverified, cpu=this_cpu().label if on is None else "")


@dataclass
class _Plan:
    """What one check compares: the reference, the candidate file (its proto, precision and export), the cases
    (a tag, the inputs, whether a probe moved them) and the notes so far."""

    ref: Reference
    path: Path
    proto: Any
    precision: str
    export: Any
    model: Any  # what the sessions open: the candidate result, else its path
    cases: list[tuple[str, dict[str, np.ndarray], bool]]
    notes: list[str]

    @classmethod
    def of(cls, reference: Any, onnx_model: Any, sample: Any, shapes: Any, probes: Any, seed: int,
           against: Any) -> _Plan:
        from ...runtime.onnxfile import load_proto
        from .reference_choice import reference_and_model

        ref, path = reference_and_model(reference, onnx_model, sample, seed, against)
        proto = load_proto(path)
        precision = precision_of(proto)
        probe_names = probes_for(probes, precision, ref.model)
        if ref.fixed_feed:  # saved outputs: the saved inputs only
            shapes, probe_names = "sample", []
        candidate = onnx_model if onnx_model is not None else reference
        cases, notes = make_cases(ref, shapes, candidate, proto, probe_names, seed)
        if ref.fixed_feed:
            from ..export.machinery.references import SAVED_NOTE

            notes.append(SAVED_NOTE)
        return cls(ref, path, proto, precision, export_of(candidate),
                   candidate if hasattr(candidate, "path") else path, cases, notes)

    def run(self, on: Any, wanted: list[Any], judge: dict[str, Any], localize: bool,
            progress: bool) -> tuple[list[Row], DivergingNode | None, list[Any]]:
        """Every case on every provider's session (here, or on a cluster's nodes), each row judged; the first
        failure diagnosed (the diverging node, unless a row named it already). Returns (rows, the diverging node,
        the branches the export left unverified)."""
        ref, export, notes = self.ref, self.export, self.notes
        rows: list[Row] = []
        first_failure: tuple[dict[str, np.ndarray], str] | None = None
        divergence: DivergingNode | None = None
        # the reference's outputs first, its session closed before the candidate's open: never two big files at once
        computed = [_expected(ref, feed) for _, feed, _ in self.cases]
        ref.close()
        if on is not None:
            from .remote import remote_sessions

            slots, rows, cluster_notes = remote_sessions(on, self.model, wanted, [f for _, f, _ in self.cases],
                                                         progress)
            notes += cluster_notes
        else:
            slots, opened_rows = _local_sessions(self.model, wanted, notes)
            rows += opened_rows
        with Steps(len(self.cases) * max(len(slots), 1) + int(localize), "parity", progress) as steps:
            for (tag, feed, moved), expected in zip(self.cases, computed):
                if isinstance(expected, Exception):  # the reference's own failure is reported, not raised
                    exc = expected
                    fixed = [(short, static_conflict(sess, feed, ref.axes, export)) for short, sess, _ in slots]
                    rows += [Row("*", tag, short, "shape-mismatch", note=why) for short, why in fixed if why]
                    rows.append(Row("*", tag, "reference", "skipped", note="the reference itself fails here: "
                                    f"{type(exc).__name__}: {first_line(exc, 150)}"))
                    continue
                if padding_mask(feed, ref.axes) is not None:
                    notes.append("Padded token positions (attention_mask == 0) are excluded from the statistics.")
                for short, sess, provider in slots:
                    steps.step(f"{tag} on {short}")
                    new_rows, named, expected = run_case(sess, short, tag, feed, moved, expected, ref, export, judge,
                                                          notes)
                    rows += new_rows
                    if named is not None and divergence is None:
                        divergence = named
                    if first_failure is None and any(r.status == "fail" for r in new_rows):
                        first_failure = (feed, provider)
            unverified = list(getattr(export, "unverified", None) or [])
            slots.clear()  # the candidate's sessions go before the search for the diverging node opens its own
            sess = None
            if first_failure is not None:  # diagnosed even when a node is named already: the one-branch note holds
                found = _diagnose(self.path, ref, first_failure[0], self.precision, judge["atol"], judge["rtol"],
                                  bool(unverified), localize and divergence is None, steps, notes, self.model)
                divergence = divergence or found
        return rows, divergence, unverified


def _expected(ref: Any, feed: dict[str, np.ndarray]) -> Any:
    try:
        return ref.run(feed)
    except Exception as exc:  # noqa: BLE001 - the reference's own failure is reported in its row
        exc.__context__ = exc.__cause__ = None  # kept without its frames: they hold the reference's session
        return exc.with_traceback(None)


def _local_sessions(model: Any, wanted: list[Any], notes: list[str]) -> tuple[list[tuple[str, Any, str]], list[Row]]:
    """(label, session, provider) for each available provider; rows for the others. ONNX Runtime Web refusing a file
    that ONNX Runtime runs (an operator it lacks, a newer IR) is a finding, a row, not a crash."""
    from ...runtime.padding import open_session

    rows = [Row("*", "*", p.short, "unavailable", note=p.reason) for p in wanted if not p.available]
    slots = []
    for p in wanted:
        if not p.available:
            continue
        try:
            sess = open_session(model, p.name)
        except (InvalidModelError, BrowserError) as exc:
            if not p.name.startswith("browser:"):
                raise
            status = "unavailable" if isinstance(exc, NoWebGpuError) else "error"
            rows.append(Row("*", "*", p.short, status, note=first_line(exc, 600)))
            continue
        slots.append((p.short, sess, p.name))
        opened = getattr(sess, "options", None) or {}
        if opened.get("browser"):  # which browser, which ORT Web, how many threads
            adapter = f", adapter {opened['adapter']}" if opened.get("adapter") else ""
            notes.append(f"{p.short}: {opened['runtime']} in {opened['page']} ({opened['browser']}, "
                         f"{opened['ep'].upper()}{adapter}, {opened['threads']} thread(s); cross-origin isolated: "
                         f"{opened['isolated']}).")
    return slots, rows


def _providers_checked(atol: Any, rtol: Any, providers: Any, remote: bool = False) -> list[Any]:
    """The tolerances given are numbers >= 0 and at least one provider asked for is in this build (on a cluster,
    the nodes say which providers they have)."""
    from ...runtime.providers import providers_named

    for name, value in (("atol", atol), ("rtol", rtol)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
            raise InvalidArgumentError(f"{name} must be a number >= 0 (e.g. {name}=1e-4), got {value!r}; leave it "
                                       "out for the default of the model's precision.")
    wanted = providers_named(("cpu",) if remote and providers == "available" else providers)
    if not remote and not any(p.available for p in wanted):
        from ...errors import ProviderUnavailableError

        raise ProviderUnavailableError(
            f"None of the requested execution providers ({', '.join(p.short for p in wanted)}) is in this "
            f"onnxruntime build; available here: "
            f"{', '.join(p.short for p in providers_named('available'))}. "
            "Install the matching onnxruntime package (e.g. onnxruntime-gpu for cuda), or use providers=('cpu',).")
    return wanted


def _diagnose(path: Path, ref: Reference, feed: dict[str, np.ndarray], precision: str, atol: float | None,
              rtol: float | None, unverified: bool, localize: bool, steps: Any, notes: list[str], tested: Any) -> Any:
    """The first diverging node of a failure, where one can be blamed (not in a one-branch trace); a failed search
    is a note, never an error."""
    if unverified:
        notes.append("The export traced one branch, so every node computes what the sample's path computes and "
                     "no node is to blame: no diverging node is searched for. Fix the branch in the model's code.")
        return None
    if not localize:
        return None
    steps.step("finding the first diverging node")
    from .localize import first_divergence
    parent = tested.parent if hasattr(tested, "recipe") else None  # a variant: against its parent file first
    try:
        return first_divergence(path, ref, feed, precision, atol, rtol, parent)
    except Exception as exc:  # noqa: BLE001 - localisation is a diagnosis; the report stands
        notes.append(f"Could not localise the failure: {type(exc).__name__}: {str(exc)[:200]}")
        return None


def _decoder_file_alone(reference: Any, onnx_model: Any) -> bool:
    """A decoder file with its cache that no onnx-nb export knows (another tool's, a quantized copy of one), given
    with the PyTorch model it came from: checked by generating, as a folder of that tool is."""
    from ...runtime.facts import file_facts

    torch_lm = callable(getattr(reference, "generate", None)) or (  # a transformers model, or its folder
        isinstance(reference, (str, Path)) and (Path(reference) / "config.json").is_file())
    if not torch_lm or export_of(reference) is not None or not isinstance(onnx_model, (str, Path)) or \
            not str(onnx_model).endswith(".onnx") or not Path(onnx_model).is_file():
        return False
    from ..export.adapters.registry import shape_of

    try:  # a file that generates in a shape whose foreign files are checked (one decoder file with its cache)
        return file_facts(onnx_model).generative and shape_of(onnx_model).foreign is not None
    except Exception:  # noqa: BLE001 - not a readable model: the forward check names what is wrong
        return False


def _generative(reference: Any, onnx_model: Any) -> tuple[Any, Any] | None:
    """(export, file) when the file under test belongs to a decoder exported with its cache (the export itself,
    a variant of it, or any file checked against it): such files are checked by generating."""
    from ..export.adapters.registry import adapter_of

    candidate = onnx_model if onnx_model is not None else reference
    for export in (export_of(reference), export_of(candidate)):
        if export is not None and adapter_of(export).checked_by_generating(export):  # a chain's part too
            return export, getattr(candidate, "path", candidate)
    return None


def probes_for(probes: Any, precision: str, model: Any) -> list[str]:
    """The probe inputs ``probes`` asks for at this precision; ``"auto"`` leaves left padding to decoders (how they
    batch prompts; encoders pad right)."""
    from ..export.adapters.registry import resolve
    from .probes import chosen

    names = chosen(probes, precision)
    if probes == "auto" and "left-padded" in names and (model is None or not resolve(model).pads_left(model)):
        names.remove("left-padded")
    return names


def make_cases(ref: Reference, shapes: Any, candidate: Any, proto: Any, probe_names: list[str],
           seed: int) -> tuple[list[tuple[str, dict[str, np.ndarray], bool]], list[str]]:
    """``(label, inputs, shape moved)`` for every check: the shapes, then the probes at the first shape."""
    from ...runtime.feeds import vocab_sizes
    from .probes import PROBES, probe_feeds

    sizes = axis_sizes(ref.sample, ref.axes)
    specs = shape_specs(shapes, sizes, list(ref.sample))
    if (getattr(candidate, "runtime", None) or {}).get("unpad") and "attention_mask" in ref.sample \
            and shapes == "auto":
        longest = {n: max(s, 16) for n, s in sizes.items() if n != "batch"}
        specs.append({"batch": max(sizes.get("batch", 2), 4), **longest, "padded": True})
    cases: list[tuple[str, dict[str, np.ndarray], bool]] = []
    for spec in specs:
        feed = make_feed(ref.sample, ref.axes, {k: v for k, v in spec.items() if k != "padded"})
        tag = label(feed, ref.axes, spec)
        if spec.get("padded"):
            feed, tag = right_padded(feed), tag + ", right-padded"
        cases.append((tag, feed, bool(spec)))
    notes: list[str] = []
    if cases and probe_names:
        tag, feed, moved = cases[0]
        made = probe_feeds(feed, vocab_sizes(proto), probe_names, seed)
        cases += [(f"{tag} · {name}", probe, moved) for name, probe in made]
        if made:
            notes.append("Probe inputs (the first shape, drawn to move the model off the sample's path): "
                         + "; ".join(f"{name}: {PROBES[name]}" for name, _ in made) + ".")
    return cases, notes


def run_case(sess: Any, provider: str, tag: str, feed: dict[str, np.ndarray], moved: bool,
              expected: dict[str, np.ndarray], ref: Reference, export: Any, judge: dict[str, Any],
              notes: list[str]) -> tuple[list[Row], DivergingNode | None, dict[str, np.ndarray]]:
    """The rows of one input case on one provider (and a node ORT's own error names)."""
    conflict = static_conflict(sess, feed, ref.axes, export)
    if conflict:
        return [Row("*", tag, provider, "shape-mismatch", note=conflict)], None, expected
    try:
        got = sess.run(None, cast_feed(sess, feed))
    except Exception as exc:  # noqa: BLE001 - ORT errors become rows
        row = Row("*", tag, provider, "shape-mismatch" if moved else "error",
                  note=_changed(ref, feed) + first_line(exc))
        match = _ORT_NODE.search(str(exc))
        named = DivergingNode(match["name"], match["op"], "", None, float("nan"), float("nan"),
                              "named in ONNX Runtime's error") if match else None
        return [row], named, expected
    names = [o.name for o in sess.get_outputs()]
    if not set(names) & set(expected):
        notes.append("Output names differ from the reference's; outputs were matched by position.")
        expected = dict(zip(names, expected.values()))
    mask = padding_mask(feed, ref.axes)
    ours, theirs = dict(zip(names, got)), expected
    if detections.DETECTIONS in names:  # a detector's per-box outputs follow its matched boxes
        box_tol = tolerance_for(judge["precision"], detections.DETECTIONS, judge["atol"], judge["rtol"],
                                judge["tolerances"])
        ours, theirs = detections.align_per_box(ours, theirs, judge["precision"], box_tol.atol)
    return [_row(name, tag, provider, ours[name], theirs.get(name), mask, judge["precision"], judge["atol"],
                 judge["rtol"], judge["tolerances"], judge["seed"], detections.DETECTIONS in names)
            for name in names], None, expected


def _changed(ref: Reference, feed: dict[str, np.ndarray]) -> str:
    sizes, base = axis_sizes(feed, ref.axes), axis_sizes(ref.sample, ref.axes)
    moved = [f"{k} {base[k]}→{v}" for k, v in sizes.items() if base.get(k) != v]
    return f"fails when {', '.join(moved)}: " if moved else ""


def _row(name: str, tag: str, provider: str, value: np.ndarray, expected: np.ndarray | None,
         mask: np.ndarray | None, precision: str, atol: float | None, rtol: float | None,
         tolerances: Mapping[str, Any] | None, seed: int, detector: bool = False) -> Row:
    if expected is None:
        return Row(name, tag, provider, "skipped", note="the reference has no output of this name")
    if detections.owns(name, detector):  # a detector's boxes (matched, not row by row) and masks (by IoU)
        tol = tolerance_for(precision, name, atol, rtol, tolerances)
        agree, error, note = detections.judge(name, value, expected, precision, tol.atol)
        return Row(name, tag, provider, "pass" if agree else "fail", max_abs=error, note=note,
                   tolerance=None if name == detections.MASKS else tol)
    if value.shape != expected.shape:
        return Row(name, tag, provider, "shape-mismatch",
                   note=f"ONNX gives shape {list(value.shape)}, the reference {list(expected.shape)}")
    tol = tolerance_for(precision, name, atol, rtol, tolerances)
    stats, errors = measure(value, expected, name, mask, seed)
    verdict = errors.judge(tol)
    return Row(name, tag, provider, verdict["status"], tolerance=tol,
               max_abs=stats["max_abs"], max_rel=stats["max_rel"], mean_abs=stats["mean_abs"],
               frac_out=verdict["frac_out"], cosine=stats["cosine"], argmax_agreement=stats["argmax_agreement"],
               needed_atol=verdict["needed_atol"], note=verdict["note"], errors=errors)

