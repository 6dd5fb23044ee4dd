"""``check_parity()``: ONNX vs its reference on several shapes and providers."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError
from ..isolation import honours_isolate
from ..progress import Steps
from ..results.parity import DivergingNode, ParityReport, Row
from ..shapes import axis_sizes, cast_feed, label, make_feed, parse_shapes, right_padded, static_conflict
from .references import Reference
from .tolerance import measure, precision_of, resolve

_ORT_NODE = re.compile(r"running (?P<op>\w+) node\. Name:'(?P<name>[^']+)'")


def padding_mask(feed: dict[str, np.ndarray], axes: dict[str, dict[int, str]]) -> np.ndarray | None:
    """Real (unpadded) token positions, when the inputs carry an attention mask over batch × sequence."""
    mask = feed.get("attention_mask")
    if mask is None or mask.ndim != 2 or mask.all():
        return None
    return mask.astype(bool)


@honours_isolate
def check_parity(reference: Any, onnx_model: Any = None, sample: Any = None, *, shapes: Any = "auto",
                 providers: Any = ("cpu",), atol: float | None = None, rtol: float | None = None,
                 tolerances: Mapping[str, Any] | None = None, localize: bool = True, seed: int = 0,
                 progress: bool = True, isolate: bool | None = None) -> ParityReport:
    """Compare ``onnx_model`` with ``reference`` output by output, on several shapes and providers.

    Returns a :class:`ParityReport` (truthy when everything passed); raises only for bad input.
    """
    from .. import sessions
    from .references import resolve as resolve_reference

    for name, value in (("atol", atol), ("rtol", rtol)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
            raise InvalidArgumentError(f"{name} must be a number >= 0 (e.g. {name}=1e-4), got {value!r}; leave it "
                                       "out for the default of the model's precision.")
    wanted = sessions.resolve(providers)
    if not any(p.available for p in wanted):
        from ..errors import ProviderUnavailableError

        raise ProviderUnavailableError(
            f"None of the requested execution providers ({', '.join(p.short for p in wanted)}) is in this "
            f"onnxruntime build; available here: "
            f"{', '.join(p.short for p in sessions.resolve('available'))}. "
            "Install the matching onnxruntime package (e.g. onnxruntime-gpu for cuda), or use providers=('cpu',).")
    ref, path = resolve_reference(reference, onnx_model, sample, seed)
    from ..onnxfile import load_proto

    precision = precision_of(load_proto(path))
    sizes = axis_sizes(ref.sample, ref.axes)
    specs = parse_shapes(shapes, sizes, list(ref.sample))
    candidate_obj = onnx_model if onnx_model is not None else reference
    if (getattr(candidate_obj, "runtime", None) or {}).get("unpad") and "attention_mask" in ref.sample \
            and shapes == "auto":
        longest = {n: max(s, 16) for n, s in sizes.items() if n != "batch"}
        specs.append({"batch": max(sizes.get("batch", 2), 4), **longest, "padded": True})
    rows: list[Row] = []
    notes: list[str] = []
    shape_feeds: dict[str, dict[str, list[int]]] = {}
    first_failure: tuple[dict[str, np.ndarray], str] | None = None
    divergence: DivergingNode | None = None
    live = [p for p in wanted if p.available]
    with Steps(len(specs) * max(len(live), 1) + int(localize), "parity", progress) as steps:
        for p in wanted:
            if not p.available:
                rows.append(Row("*", "*", p.short, "unavailable", note=p.reason))
        from ..runtime import open_session

        sessions_by_provider = {p.short: open_session(candidate_obj if hasattr(candidate_obj, "path") else path,
                                                      p.name) for p in live}
        for spec in specs:
            feed = make_feed(ref.sample, ref.axes, {k: v for k, v in spec.items() if k != "padded"})
            tag = label(feed, ref.axes, spec)
            if spec.get("padded"):
                feed = right_padded(feed)
                tag += ", right-padded"
            shape_feeds[tag] = {k: list(v.shape) for k, v in feed.items()}
            try:
                expected = ref.run(feed)
            except Exception as exc:  # noqa: BLE001 - the reference's own failure is reported, not raised
                rows.append(Row("*", tag, "reference", "skipped",
                                note=f"the reference itself fails here: {type(exc).__name__}: {str(exc)[:150]}"))
                continue
            mask = padding_mask(feed, ref.axes)
            if mask is not None:
                notes.append("Padded token positions (attention_mask == 0) are excluded from the statistics.")
            for p in live:
                steps.step(f"{tag} on {p.short}")
                sess = sessions_by_provider[p.short]
                conflict = static_conflict(sess, feed, ref.axes)
                if conflict:
                    rows.append(Row("*", tag, p.short, "shape-mismatch", note=conflict))
                    continue
                try:
                    got = sess.run(None, cast_feed(sess, feed))
                except Exception as exc:  # noqa: BLE001 - ORT errors become rows
                    text = str(exc).splitlines()[0][:300]
                    rows.append(Row("*", tag, p.short, "shape-mismatch" if spec else "error",
                                    note=_changed(ref, feed) + text))
                    match = _ORT_NODE.search(str(exc))
                    if match and divergence is None:
                        divergence = DivergingNode(match["name"], match["op"], "", None, float("nan"),
                                                   float("nan"), "named in ONNX Runtime's error")
                    continue
                names = [o.name for o in sess.get_outputs()]
                if not set(names) & set(expected):
                    notes.append("Output names differ from the reference's; outputs were matched by position.")
                    expected = dict(zip(names, expected.values()))
                for name, value in zip(names, got):
                    row = _row(name, tag, p.short, value, expected.get(name), mask, precision, atol, rtol,
                               tolerances, seed)
                    rows.append(row)
                    if row.failed and first_failure is None and row.status == "fail":
                        first_failure = (feed, p.name)
        if localize and first_failure is not None and divergence is None:
            steps.step("finding the first diverging node")
            from .localize import first_divergence

            try:
                divergence = first_divergence(path, ref, first_failure[0], precision, atol, rtol)
            except Exception as exc:  # noqa: BLE001 - localisation is a diagnosis; the report stands
                notes.append(f"Could not localise the failure: {type(exc).__name__}: {str(exc)[:200]}")
    return ParityReport(model=path.name, reference=ref.label, precision=precision, rows=rows,
                        shapes=shape_feeds, divergence=divergence, notes=list(dict.fromkeys(notes)))


def _changed(ref: Reference, feed: dict[str, np.ndarray]) -> str:
    sizes, base = axis_sizes(feed, ref.axes), axis_sizes(ref.sample, ref.axes)
    moved = [f"{k} {base[k]}→{v}" for k, v in sizes.items() if base.get(k) != v]
    return f"fails when {', '.join(moved)}: " if moved else ""


def _row(name: str, tag: str, provider: str, value: np.ndarray, expected: np.ndarray | None,
         mask: np.ndarray | None, precision: str, atol: float | None, rtol: float | None,
         tolerances: Mapping[str, Any] | None, seed: int) -> Row:
    if expected is None:
        return Row(name, tag, provider, "skipped", note="the reference has no output of this name")
    if value.shape != expected.shape:
        return Row(name, tag, provider, "shape-mismatch",
                   note=f"ONNX gives shape {list(value.shape)}, the reference {list(expected.shape)}")
    tol = resolve(precision, name, atol, rtol, tolerances)
    stats, errors = measure(value, expected, name, mask, seed)
    verdict = errors.judge(tol)
    return Row(name, tag, provider, "pass" if verdict["passed"] else "fail", tolerance=tol,
               max_abs=stats["max_abs"], max_rel=stats["max_rel"], mean_abs=stats["mean_abs"],
               frac_out=verdict["frac_out"], cosine=stats["cosine"], argmax_agreement=stats["argmax_agreement"],
               needed_atol=verdict["needed_atol"], errors=errors)
