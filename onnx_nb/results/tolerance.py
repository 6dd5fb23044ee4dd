"""Tolerances by precision, and the error measures of one output against its reference."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError

QUANT_OPS = {"QLinearMatMul", "MatMulInteger", "DynamicQuantizeLinear", "QuantizeLinear",
             "DequantizeLinear", "QLinearConv", "ConvInteger", "QGemm", "DynamicQuantizeMatMul",
             "QAttention", "QLinearAdd", "QLinearMul", "QOrderedMatMul"}
MAX_STORED = 1_000_000  # elements kept per row for re-judging (subsampled beyond)
# A reference whose RMS is below this cannot be told apart from zero in fp32 arithmetic (products of such
# values underflow): parity on it is inconclusive, never a pass.
UNDERFLOW_RMS = 1e-30
# fp32 arithmetic rounds at the scale of the values it sums: an element near zero in an output whose largest values
# are M (a dense head's logits at 1500) carries errors of order M * 2^-23 times the depth of its sums, whatever atol
# says. The element-wise atol is at least this many fp32 ulps of the output's largest value.
FP32_ULPS = 64


@dataclass(frozen=True)
class Tolerance:
    """How one output is judged.

    ``mode="elementwise"``: every element within ``atol + rtol * |reference|`` (numpy's rule) **and**
    close relative to the reference's own scale: the largest error at most ``max_scaled`` times the
    reference's RMS, and cosine similarity at least ``min_cosine``. The scale rule is what stops an
    absolute ``atol`` from passing anything small (two different models whose outputs are ~1e-9).
    ``mode="task"``: cosine similarity at least ``min_cosine`` and, for logits, argmax
    agreement at least ``min_argmax`` (for fp16 and quantized variants), a top-1 swap between two logits the
    reference itself nearly ties counted as agreeing and named in the row's note (:class:`Ranks`).

    Example::

        onnx_nb.check_parity(result, tolerances={"logits": onnx_nb.Tolerance(atol=1e-3, rtol=1e-2)})
    """

    atol: float = 1e-4
    rtol: float = 1e-3
    mode: str = "elementwise"
    min_cosine: float = 0.0
    min_argmax: float = 0.0
    max_scaled: float | None = 1e-3  # elementwise: max |error| / RMS(reference); None turns the scale rule off

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        if self.mode == "task":
            return f"cosine≥{self.min_cosine:g}, argmax≥{self.min_argmax:g}"
        scale = f", err/rms≤{self.max_scaled:g}" if self.max_scaled is not None else ""
        cosine = f", cos≥{self.min_cosine:g}" if self.min_cosine else ""
        return f"atol={self.atol:g}, rtol={self.rtol:g}{scale}{cosine}"


# Stated defaults (docs/guides/parity.md, the tolerances by precision).
# The one table of tolerances: every check reads its numbers here.
POLICY: dict[str, Tolerance] = {  # check_parity, by the precision of the file under test
    "fp32": Tolerance(1e-4, 1e-3, min_cosine=0.999),
    "fp16": Tolerance(1e-2, 1e-2, "task", min_cosine=0.999, min_argmax=0.99),
    "int8": Tolerance(1e-1, 1e-1, "task", min_cosine=0.98, min_argmax=0.95),
    "int4": Tolerance(1e-1, 1e-1, "task", min_cosine=0.97, min_argmax=0.9),
}
# the export's own check, at one other shape (an fp32 file against its source: looser in atol than parity's, which
# names what failed, while the export only says whether the file is the model)
EXPORT_CHECK = Tolerance(1e-3, 1e-3, min_cosine=0.999)
NEAR_TIE = 1e-3  # generation: PyTorch's logit margin between its pick and ONNX's, relative to the logits' scale
SAM_MIN_MASK_IOU, SAM_SCORE_ATOL = 0.9, 1e-3  # check_sam: masks by pixel IoU, IoU scores within


def precision_of(proto: Any) -> str:
    """``fp32``, ``fp16``, ``int8`` or ``int4``, from the graph's operators (its branches' too: an If's, a Loop's)
    and weight types."""
    import onnx

    from ..runtime.onnxfile import every_node

    every = list(every_node(proto))
    ops = {n.op_type for n in every}
    bits = {a.i for n in every if n.op_type == "MatMulNBits" for a in n.attribute if a.name == "bits"}
    if bits and min(bits) <= 4:
        return "int4"
    if ops & QUANT_OPS or bits:
        return "int8"
    half = (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
    if any(i.data_type in half for i in proto.graph.initializer) or any(
            v.type.tensor_type.elem_type in half for v in proto.graph.input):
        return "fp16"
    return "fp32"


def tolerance_for(precision: str, output: str, atol: float | None, rtol: float | None,
            tolerances: Mapping[str, Any] | None) -> Tolerance:
    """The tolerance for one output: per-output setting, else atol/rtol, else the policy."""
    tol = POLICY.get(precision, POLICY["fp32"])
    if atol is not None or rtol is not None:
        tol = Tolerance(atol if atol is not None else tol.atol, rtol if rtol is not None else tol.rtol,
                        min_cosine=POLICY["fp32"].min_cosine)
    spec = (tolerances or {}).get(output)
    if isinstance(spec, Tolerance):
        return spec
    if isinstance(spec, (int, float)):
        return Tolerance(float(spec), 0.0, min_cosine=POLICY["fp32"].min_cosine)
    if isinstance(spec, Mapping):
        unknown = set(spec) - {"atol", "rtol", "mode", "min_cosine", "min_argmax", "max_scaled"}
        if unknown:
            raise InvalidArgumentError(
                f"tolerances[{output!r}] has unknown keys {sorted(unknown)}; "
                "use atol, rtol, mode, min_cosine, min_argmax, max_scaled."
            )
        mode = spec.get("mode", "task" if ("min_cosine" in spec or "min_argmax" in spec) else "elementwise")
        return replace(tol, **{**spec, "mode": mode})
    if spec is not None:
        raise InvalidArgumentError(
            f"tolerances[{output!r}] must be a number (atol), a dict or a Tolerance, "
            f"not {type(spec).__name__}."
        )
    return tol


@dataclass(frozen=True)
class Ranks:
    """Top-1 swaps of a logits output (over its last axis), each told apart as a near-tie or a real swap.

    A swap is a near-tie when the reference's own margin between its top-1 and the candidate's top-1 is at most
    twice the error measured elsewhere (the largest |error| over the rows that kept their top-1, or, when every
    row swapped, over the row's other elements): two logits each moved by an error the output shows anyway
    would flip it. A larger margin is a real swap: the error on those logits is out of line with the rest."""

    rows: int
    swaps: int
    near_ties: int
    tie_margin: float = 0.0  # the largest reference margin among the near-ties
    tie_error: float = 0.0  # the error level that explains them
    swap_margin: float = 0.0  # the largest reference margin among the real swaps
    swap_error: float = 0.0

    @property
    def top1(self) -> float:
        """Top-1 agreement as measured, every swap counted (the report's ``argmax_agreement``)."""
        return 1.0 - self.swaps / self.rows if self.rows else 1.0

    @property
    def agreement(self) -> float:
        """Top-1 agreement with near-ties counted as agreeing (what the argmax rule judges)."""
        return 1.0 - (self.swaps - self.near_ties) / self.rows if self.rows else 1.0

    def text(self) -> str:
        parts = []
        if self.near_ties:
            n = self.near_ties
            parts.append(f"{n} top-1 swap{'s' if n > 1 else ''}, {'near-ties' if n > 1 else 'a near-tie'}: "
                         f"reference margin {self.tie_margin:.2g} < 2 x the error elsewhere {self.tie_error:.2g}")
        real = self.swaps - self.near_ties
        if real:
            parts.append(f"{real} top-1 swap{'s' if real > 1 else ''} beyond what the error explains: reference "
                         f"margin {self.swap_margin:.2g} > 2 x the error elsewhere {self.swap_error:.2g}")
        return "; ".join(parts)


def rank_check(candidate: np.ndarray, reference: np.ndarray, mask: np.ndarray | None = None) -> Ranks:
    """Compare the top-1 of every row (all axes but the last) of two logits arrays, margins told apart. ``mask``
    (over the leading axes, e.g. an attention mask over batch and sequence) leaves rows out; one of another shape
    is not applied."""
    rows = reference.shape[:-1]
    c, r = candidate.reshape(-1, reference.shape[-1]), reference.reshape(-1, reference.shape[-1])
    if mask is not None and mask.ndim <= len(rows) and mask.shape == rows[: mask.ndim]:
        keep = np.broadcast_to(mask.reshape(mask.shape + (1,) * (len(rows) - mask.ndim)), rows).reshape(-1)
        c, r = c[keep.astype(bool)], r[keep.astype(bool)]
    if not r.shape[0]:
        return Ranks(0, 0, 0)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.nan_to_num(np.abs(c - r), nan=np.inf)
    top_r, top_c = np.argmax(r, -1), np.argmax(c, -1)
    swapped = np.flatnonzero(top_r != top_c)
    if not swapped.size:
        return Ranks(int(r.shape[0]), 0, 0)
    kept = np.ones(r.shape[0], bool)
    kept[swapped] = False
    elsewhere = float(err[kept].max()) if kept.any() else None
    ties: list[tuple[float, float]] = []
    real: list[tuple[float, float]] = []
    for i in swapped:
        a, b = int(top_r[i]), int(top_c[i])
        margin = float(r[i, a] - r[i, b])
        if elsewhere is None:
            others = np.delete(err[i], [a, b])
            level = float(others.max()) if others.size else 0.0
        else:
            level = elsewhere
        (ties if margin <= 2 * level else real).append((margin, level))
    tie, swap = max(ties, default=(0.0, 0.0)), max(real, default=(0.0, 0.0))
    return Ranks(int(r.shape[0]), int(swapped.size), len(ties), tie[0], tie[1], swap[0], swap[1])


@dataclass
class Errors:
    """Element errors of one output, kept so tolerances can be changed without re-running."""

    diff: np.ndarray  # |candidate - reference|, flattened (maybe subsampled)
    ref: np.ndarray  # |reference|, same elements
    cosine: float
    argmax: float | None  # agreement of argmax over the last axis, for logits
    integer: bool
    ref_rms: float = 1.0  # RMS of the reference (compared elements), for the scale rule
    ref_max: float = 1.0  # largest |reference|
    ranks: Ranks | None = None  # top-1 swaps of a logits output, near-ties told apart

    @property
    def scaled(self) -> float:
        """The largest error as a fraction of the reference's RMS."""
        top = float(self.diff.max()) if self.diff.size else 0.0
        if top == 0.0:
            return 0.0
        return top / self.ref_rms if self.ref_rms > 0 else float("inf")

    def judge(self, tol: Tolerance) -> dict[str, Any]:
        """``passed``, ``status`` (pass / fail / inconclusive), ``frac_out``, ``needed_atol`` and a ``note``
        when the reference's scale decided (or could not decide) the verdict."""
        d, r = self.diff, self.ref
        atol, rtol = (0.0, 0.0) if self.integer else (tol.atol, tol.rtol)
        floor = 0.0 if self.integer else FP32_ULPS * float(np.finfo(np.float32).eps) * self.ref_max
        out = d > max(atol, floor) + rtol * r
        frac = float(out.mean()) if d.size else 0.0
        needed = float(np.max(d - rtol * r, initial=0.0)) if d.size else 0.0
        note, floored = "", ""
        if floor > atol and d.size and bool((d > atol + rtol * r).any()) and frac == 0.0:
            floored = (f"errors near zero judged at {FP32_ULPS} fp32 ulps of the output's largest value "
                       f"({self.ref_max:.3g}): atol {floor:.2g} in place of {atol:g}")
        status = "pass"
        if tol.mode == "task" and not self.integer:
            agreement = self.ranks.agreement if self.ranks is not None else self.argmax
            passed = self.cosine >= tol.min_cosine and (agreement is None or agreement >= tol.min_argmax)
            note = self.ranks.text() if self.ranks is not None else ""
        elif self.integer:
            passed = frac == 0.0
        else:
            passed, status, note = self._judge_scale(tol, frac == 0.0)
            note = "; ".join(n for n in (note, floored) if n)
        if not passed and status == "pass":
            status = "fail"
        return {"frac_out": frac, "needed_atol": max(needed, 0.0), "passed": bool(passed), "status": status,
                "note": note}

    def _judge_scale(self, tol: Tolerance, elementwise_ok: bool) -> tuple[bool, str, str]:
        """The element-wise verdict, tightened by the reference's own scale."""
        if not self.diff.size:
            return elementwise_ok, "pass", ""
        if self.ref_rms < UNDERFLOW_RMS:
            if self.scaled == 0.0:  # both all zero (or bit-identical): equal, but it proves little
                return True, "pass", (f"reference output is ~{self.ref_rms:.0e} everywhere and the ONNX output "
                                      "matches it exactly; this output cannot tell models apart")
            return False, "inconclusive", (
                f"reference output is ~{self.ref_max:.0e} everywhere: parity cannot tell models apart at this "
                "scale (fp32 arithmetic underflows); check an output or input of a usable size")
        tiny = self.ref_max < tol.atol
        scale_ok = tol.max_scaled is None or self.scaled <= tol.max_scaled
        cosine_ok = self.cosine >= tol.min_cosine
        passed = elementwise_ok and scale_ok and cosine_ok
        note = ""
        if tiny:
            note = (f"reference output is ~{self.ref_rms:.0e} everywhere, below atol={tol.atol:g}: atol alone "
                    f"would pass anything here, so the error is judged against the output's own scale "
                    f"(error/RMS {self.scaled:.2g}, cosine {self.cosine:.4f})")
        elif not passed and elementwise_ok:
            why = [f"error/RMS {self.scaled:.2g} > {tol.max_scaled:g}"] if not scale_ok else []
            why += [f"cosine {self.cosine:.4f} < {tol.min_cosine:g}"] if not cosine_ok else []
            note = "within atol/rtol element by element, but not at the output's own scale: " + ", ".join(why)
        return passed, "pass" if passed else "fail", note


def measure(candidate: np.ndarray, reference: np.ndarray, name: str, mask: np.ndarray | None = None,
            seed: int = 0) -> tuple[dict[str, float | None], Errors]:
    """Error statistics of ``candidate`` against ``reference`` (same shape)."""
    integer = not np.issubdtype(reference.dtype, np.floating)
    if reference.dtype.kind in "OUS" or candidate.dtype.kind in "OUS":  # string labels (a classifier's): equal or not
        candidate = (np.asarray(candidate).astype(str) != np.asarray(reference).astype(str))
        reference = np.zeros(reference.shape, bool)
    c = candidate.astype(np.float64)
    r = reference.astype(np.float64)
    argmax, ranks = None, None
    if "logit" in name.lower() and r.ndim >= 1 and r.shape[-1] > 1 and not integer:
        ranks = rank_check(c, r, mask)
        argmax = ranks.top1
    if mask is not None and r.shape[: mask.ndim] == mask.shape:
        c, r = c[mask], r[mask]
    c, r = c.ravel(), r.ravel()
    same = (c == r) | (np.isnan(c) & np.isnan(r))  # equal infinities (attention masks) count as equal
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(same, 0.0, np.abs(c - r))
    diff = np.nan_to_num(diff, nan=np.inf)
    ref_abs = np.abs(np.nan_to_num(r, nan=0.0, posinf=0.0, neginf=0.0))
    # over the reference's finite values, the candidate's NaN or infinity there read as 0: a file that gives NaN
    # where PyTorch gives numbers is far off, not a reference "~0 everywhere" with a cosine of 1 (they once read so)
    finite = np.isfinite(r)
    rf = r[finite]
    cf = np.where(np.isfinite(c[finite]), c[finite], 0.0)
    norm = float(np.linalg.norm(cf) * np.linalg.norm(rf))
    cosine = float(np.dot(cf, rf) / norm) if norm > 0 else float(np.array_equal(cf, rf))
    rms = float(np.sqrt(np.mean(rf * rf))) if rf.size else 0.0
    top = float(np.abs(rf).max()) if rf.size else 0.0
    big = ref_abs > 1e-6
    stats: dict[str, float | None] = {
        "max_abs": float(diff.max()) if diff.size else 0.0,
        "max_rel": float((diff[big] / ref_abs[big]).max()) if big.any() else 0.0,
        "mean_abs": float(diff.mean()) if diff.size else 0.0,
        "cosine": cosine,
        "argmax_agreement": argmax,
        "top1_swaps": ranks.swaps if ranks is not None else None,
        "near_ties": ranks.near_ties if ranks is not None else None,
    }
    if diff.size > MAX_STORED:
        keep = np.random.default_rng(seed).choice(diff.size, MAX_STORED, replace=False)
        keep[0] = int(np.argmax(diff))  # the worst element always stays
        diff, ref_abs = diff[keep], ref_abs[keep]
    return stats, Errors(diff.astype(np.float32), ref_abs.astype(np.float32), cosine, argmax, integer, rms, top,
                         ranks)
