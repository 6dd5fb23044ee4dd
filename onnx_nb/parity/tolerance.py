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


@dataclass(frozen=True)
class Tolerance:
    """How one output is judged.

    ``mode="elementwise"``: every element within ``atol + rtol * |reference|`` (numpy's rule).
    ``mode="task"``: cosine similarity at least ``min_cosine`` and, for logits, argmax
    agreement at least ``min_argmax`` (for fp16 and quantized variants).
    """

    atol: float = 1e-4
    rtol: float = 1e-3
    mode: str = "elementwise"
    min_cosine: float = 0.0
    min_argmax: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        if self.mode == "task":
            return f"cosine≥{self.min_cosine:g}, argmax≥{self.min_argmax:g}"
        return f"atol={self.atol:g}, rtol={self.rtol:g}"


# Stated defaults (design.md's parity policy).
POLICY: dict[str, Tolerance] = {
    "fp32": Tolerance(1e-4, 1e-3),
    "fp16": Tolerance(1e-2, 1e-2, "task", min_cosine=0.999, min_argmax=0.99),
    "int8": Tolerance(1e-1, 1e-1, "task", min_cosine=0.98, min_argmax=0.95),
    "int4": Tolerance(1e-1, 1e-1, "task", min_cosine=0.97, min_argmax=0.9),
}


def precision_of(proto: Any) -> str:
    """``fp32``, ``fp16``, ``int8`` or ``int4``, from the graph's operators and weight types."""
    import onnx

    ops = {n.op_type for n in proto.graph.node}
    if "MatMulNBits" in ops:
        return "int4"
    if ops & QUANT_OPS:
        return "int8"
    half = (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
    if any(i.data_type in half for i in proto.graph.initializer) or any(
            v.type.tensor_type.elem_type in half for v in proto.graph.input):
        return "fp16"
    return "fp32"


def resolve(precision: str, output: str, atol: float | None, rtol: float | None,
            tolerances: Mapping[str, Any] | None) -> Tolerance:
    """The tolerance for one output: per-output setting, else atol/rtol, else the policy."""
    tol = POLICY.get(precision, POLICY["fp32"])
    if atol is not None or rtol is not None:
        tol = Tolerance(atol if atol is not None else tol.atol, rtol if rtol is not None else tol.rtol)
    spec = (tolerances or {}).get(output)
    if isinstance(spec, Tolerance):
        return spec
    if isinstance(spec, (int, float)):
        return Tolerance(float(spec), 0.0)
    if isinstance(spec, Mapping):
        unknown = set(spec) - {"atol", "rtol", "mode", "min_cosine", "min_argmax"}
        if unknown:
            raise InvalidArgumentError(
                f"tolerances[{output!r}] has unknown keys {sorted(unknown)}; "
                "use atol, rtol, mode, min_cosine, min_argmax."
            )
        mode = spec.get("mode", "task" if ("min_cosine" in spec or "min_argmax" in spec) else "elementwise")
        return replace(tol, **{**spec, "mode": mode})
    if spec is not None:
        raise InvalidArgumentError(
            f"tolerances[{output!r}] must be a number (atol), a dict or a Tolerance, "
            f"not {type(spec).__name__}."
        )
    return tol


@dataclass
class Errors:
    """Element errors of one output, kept so tolerances can be changed without re-running."""

    diff: np.ndarray  # |candidate - reference|, flattened (maybe subsampled)
    ref: np.ndarray  # |reference|, same elements
    cosine: float
    argmax: float | None  # agreement of argmax over the last axis, for logits
    integer: bool

    def judge(self, tol: Tolerance) -> dict[str, Any]:
        d, r = self.diff, self.ref
        atol, rtol = (0.0, 0.0) if self.integer else (tol.atol, tol.rtol)
        out = d > atol + rtol * r
        frac = float(out.mean()) if d.size else 0.0
        needed = float(np.max(d - rtol * r, initial=0.0)) if d.size else 0.0
        if tol.mode == "task" and not self.integer:
            passed = self.cosine >= tol.min_cosine and (self.argmax is None or self.argmax >= tol.min_argmax)
        else:
            passed = frac == 0.0
        return {"frac_out": frac, "needed_atol": max(needed, 0.0), "passed": bool(passed)}


def measure(candidate: np.ndarray, reference: np.ndarray, name: str, mask: np.ndarray | None = None,
            seed: int = 0) -> tuple[dict[str, float | None], Errors]:
    """Error statistics of ``candidate`` against ``reference`` (same shape)."""
    integer = not np.issubdtype(reference.dtype, np.floating)
    c = candidate.astype(np.float64)
    r = reference.astype(np.float64)
    argmax = None
    if "logit" in name.lower() and r.ndim >= 1 and r.shape[-1] > 1 and not integer:
        agree = np.argmax(c, -1) == np.argmax(r, -1)
        if mask is not None and agree.shape[: mask.ndim] == mask.shape:
            agree = agree[mask]
        argmax = float(agree.mean()) if agree.size else 1.0
    if mask is not None and r.shape[: mask.ndim] == mask.shape:
        c, r = c[mask], r[mask]
    c, r = c.ravel(), r.ravel()
    same = (c == r) | (np.isnan(c) & np.isnan(r))  # equal infinities (attention masks) count as equal
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(same, 0.0, np.abs(c - r))
    diff = np.nan_to_num(diff, nan=np.inf)
    ref_abs = np.abs(np.nan_to_num(r, nan=0.0, posinf=0.0, neginf=0.0))
    finite = np.isfinite(c) & np.isfinite(r)
    cf, rf = c[finite], r[finite]
    norm = float(np.linalg.norm(cf) * np.linalg.norm(rf))
    cosine = float(np.dot(cf, rf) / norm) if norm > 0 else float(np.array_equal(cf, rf))
    big = ref_abs > 1e-6
    stats: dict[str, float | None] = {
        "max_abs": float(diff.max()) if diff.size else 0.0,
        "max_rel": float((diff[big] / ref_abs[big]).max()) if big.any() else 0.0,
        "mean_abs": float(diff.mean()) if diff.size else 0.0,
        "cosine": cosine,
        "argmax_agreement": argmax,
    }
    if diff.size > MAX_STORED:
        keep = np.random.default_rng(seed).choice(diff.size, MAX_STORED, replace=False)
        keep[0] = int(np.argmax(diff))  # the worst element always stays
        diff, ref_abs = diff[keep], ref_abs[keep]
    return stats, Errors(diff.astype(np.float32), ref_abs.astype(np.float32), cosine, argmax, integer)
