"""Parity for a ``detections`` output (a row per kept box: image index, x1, y1, x2, y2, score, class, extras):
two runs of a detector keep boxes in an order, and a count, that an element-wise rule cannot compare. Boxes are
matched instead, greedily by score: same image, same class, IoU at least ``min_iou``, scores within
``score_atol``. A box left unmatched passes only when it is borderline: its score within ``score_atol`` of the
other run's lowest kept score (the threshold or the ``max_det`` cut moved it across), so a reduced-precision file
that reorders near-equal scores is not called broken, and one that finds other objects is."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DETECTIONS = "detections"


@dataclass
class DetectionMatch:
    ours: int  # rows in the run being checked
    theirs: int  # rows in the reference
    matched: int
    borderline: int  # unmatched rows whose score sits at the other run's cut
    unexplained: int
    worst_iou: float | None
    max_score_diff: float | None
    max_extra_diff: float | None

    def passed(self, allowed: float) -> bool:
        """At most ``allowed`` (a fraction of the larger run) unexplained rows."""
        return self.unexplained <= allowed * max(self.ours, self.theirs)

    def note(self, min_iou: float, score_atol: float) -> str:
        text = (f"{self.matched} of {self.theirs} reference boxes matched by {self.ours} (same image and class, "
                f"IoU >= {min_iou:g}, score within {score_atol:g})")
        if self.worst_iou is not None:
            text += f"; worst IoU {self.worst_iou:.4f}, largest score difference {self.max_score_diff:.3g}"
        if self.borderline:
            text += f"; {self.borderline} unmatched at the score cut"
        if self.unexplained:
            text += f"; {self.unexplained} unmatched"
        return text


def iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box in ``a`` (n, 4 corners) with every box in ``b`` (m, 4): an (n, m) array."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(rb - lt, 0, None).prod(axis=2)
    area = lambda x: np.clip(x[:, 2] - x[:, 0], 0, None) * np.clip(x[:, 3] - x[:, 1], 0, None)  # noqa: E731
    union = area(a)[:, None] + area(b)[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def match(ours: np.ndarray, theirs: np.ndarray, min_iou: float, score_atol: float) -> DetectionMatch:
    """Match the rows of two ``detections`` arrays (see the module's docstring)."""
    ours, theirs = np.atleast_2d(np.asarray(ours, np.float64)), np.atleast_2d(np.asarray(theirs, np.float64))
    used = np.zeros(len(ours), bool)
    matched_ours: list[int] = []
    ious: list[float] = []
    score_diffs: list[float] = []
    extra_diffs: list[float] = []
    overlap = iou(theirs[:, 1:5], ours[:, 1:5]) if len(ours) and len(theirs) else np.zeros((len(theirs), 0))
    unmatched_theirs: list[int] = []
    for i in np.argsort(-theirs[:, 5], kind="stable"):
        ok = (~used) & (ours[:, 0] == theirs[i, 0]) & (ours[:, 6] == theirs[i, 6]) & \
            (overlap[i] >= min_iou) & (np.abs(ours[:, 5] - theirs[i, 5]) <= score_atol)
        if not ok.any():
            unmatched_theirs.append(int(i))
            continue
        j = int(np.argmax(np.where(ok, overlap[i], -1.0)))
        used[j] = True
        matched_ours.append(j)
        ious.append(float(overlap[i, j]))
        score_diffs.append(float(abs(ours[j, 5] - theirs[i, 5])))
        if ours.shape[1] > 7:
            extra_diffs.append(float(np.abs(ours[j, 7:] - theirs[i, 7:]).max()))
    cut_ours = ours[:, 5].min() if len(ours) else -np.inf  # an empty run has no cut: nothing is borderline to it
    cut_theirs = theirs[:, 5].min() if len(theirs) else -np.inf
    border = sum(theirs[i, 5] <= cut_ours + score_atol for i in unmatched_theirs) + \
        sum(ours[j, 5] <= cut_theirs + score_atol for j in np.flatnonzero(~used))
    unmatched = len(unmatched_theirs) + int((~used).sum())
    return DetectionMatch(len(ours), len(theirs), len(matched_ours), int(border), unmatched - int(border),
                          min(ious) if ious else None, max(score_diffs) if score_diffs else None,
                          max(extra_diffs) if extra_diffs else None)


def rule(precision: str, atol: float) -> tuple[float, float, float]:
    """(min IoU, score tolerance, unexplained fraction allowed) for a run at ``precision``."""
    if precision == "fp32":
        return 0.9, max(atol, 1e-3), 0.0
    return 0.5, max(atol, 0.05), 0.1
