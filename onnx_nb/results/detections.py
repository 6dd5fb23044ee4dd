"""Parity for a ``detections`` output (a row per kept box: image index, x1, y1, x2, y2, score, class, extras):
two runs of a detector keep boxes in an order, and a count, that an element-wise rule cannot compare. Boxes are
matched instead, greedily by score: same image, same class, IoU at least ``min_iou``, scores within
``score_atol``. A box left unmatched passes only when it is borderline: its score within ``score_atol`` of the
other run's lowest kept score (the threshold or the ``max_det`` cut moved it across), so a reduced-precision file
that reorders near-equal scores is not called broken, and one that finds other objects is."""

from __future__ import annotations

from dataclasses import dataclass, field

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
    pairs: list[tuple[int, int]] = field(default_factory=list)  # (reference row, matched row of the run)

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


DEGENERATE_PX = 1e-2
MASK_TIE = 1e-4  # a pasted mask's pixel at 0.5, moved across it by rounding (1e-6 seen): never a real change


def iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box in ``a`` (n, 4 corners) with every box in ``b`` (m, 4): an (n, m) array."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(rb - lt, 0, None).prod(axis=2)
    area = lambda x: np.clip(x[:, 2] - x[:, 0], 0, None) * np.clip(x[:, 3] - x[:, 1], 0, None)  # noqa: E731
    union = area(a)[:, None] + area(b)[None, :] - inter
    # two boxes of no area (a point or a line, as an untrained regressor makes) have no overlap to measure: the same
    # corners (within DEGENERATE_PX) are the same box, other corners another one
    same = np.abs(a[:, None, :] - b[None, :, :]).max(axis=2) <= DEGENERATE_PX
    return np.where(union > 0, inter / np.where(union > 0, union, 1), np.where(same, 1.0, 0.0))


def match(ours: np.ndarray, theirs: np.ndarray, min_iou: float, score_atol: float) -> DetectionMatch:
    """Match the rows of two ``detections`` arrays (see the module's docstring)."""
    ours, theirs = np.atleast_2d(np.asarray(ours, np.float64)), np.atleast_2d(np.asarray(theirs, np.float64))
    used = np.zeros(len(ours), bool)
    matched_ours: list[int] = []
    pairs: list[tuple[int, int]] = []
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
        pairs.append((int(i), j))
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
                          max(extra_diffs) if extra_diffs else None, pairs)


def rule(precision: str, atol: float) -> tuple[float, float, float]:
    """(min IoU, score tolerance, unexplained fraction allowed) for a run at ``precision``."""
    if precision == "fp32":
        return 0.9, max(atol, 1e-3), 0.0
    return 0.5, max(atol, 0.05), 0.1


def align_per_box(got: dict[str, np.ndarray], want: dict[str, np.ndarray], precision: str,
                  atol: float) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Outputs with a row per detection (a Mask R-CNN's ``masks``, ``keypoints``) reordered to the matched boxes:
    two runs may keep near-equal boxes in another order, so these compare box by box, not row by row."""
    if DETECTIONS not in got or DETECTIONS not in want:
        return got, want
    ours_rows, their_rows = len(got[DETECTIONS]), len(want[DETECTIONS])
    min_iou, score_atol, _ = rule(precision, atol)
    pairs = match(got[DETECTIONS], want[DETECTIONS], min_iou, score_atol).pairs
    theirs_idx = np.array([i for i, _ in pairs], dtype=np.int64)
    ours_idx = np.array([j for _, j in pairs], dtype=np.int64)
    got, want = dict(got), dict(want)
    for name in set(got) & set(want) - {DETECTIONS}:
        if got[name].ndim and want[name].ndim and len(got[name]) == ours_rows and len(want[name]) == their_rows:
            got[name], want[name] = got[name][ours_idx], want[name][theirs_idx]
    return got, want


MASKS = "masks"


def pixel_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of boolean masks flattened on their last axis (one per row; 1 where both are empty)."""
    union = (a | b).sum(-1)
    return np.where(union > 0, (a & b).sum(-1) / np.maximum(union, 1), 1.0)


def mask_agreement(ours: np.ndarray, theirs: np.ndarray, precision: str,
                   tie: float = 0.0) -> tuple[bool, float | None, str]:
    """Per-box masks (already aligned box by box: :func:`align_per_box`) judged by the IoU of their pixels above
    0.5, as detection benchmarks judge masks: a mask's edge moves by a pixel when its box moves by a fraction of
    one, which an element-wise rule reads as an error of 1.0. Every pair at IoU 0.9 or more for fp32 (0.5 for
    reduced precision); masks empty on both sides agree. A pixel on the two sides of 0.5 with values within
    ``tie`` of each other is a tie, counted as the reference has it: a mask pasted by bilinear interpolation from a
    saturated one puts whole rows of pixels at exactly 0.5, which a rounding of 1e-6 moves to either side."""
    if ours.shape != theirs.shape:
        return False, None, f"ONNX gives masks of shape {list(ours.shape)}, the reference {list(theirs.shape)}"
    if not len(ours):
        return True, None, "no boxes matched, no masks to compare"
    ours, theirs = ours.reshape(len(ours), -1), theirs.reshape(len(theirs), -1)
    a, b = ours > 0.5, theirs > 0.5
    flipped = np.nonzero(a != b)
    tied = np.abs(ours[flipped].astype(np.float64) - theirs[flipped]) <= tie
    a[flipped[0][tied], flipped[1][tied]] = b[flipped[0][tied], flipped[1][tied]]
    ious = pixel_iou(a, b)
    bar = 0.9 if precision == "fp32" else 0.5
    worst = float(ious.min())
    note = (f"{len(ious)} masks of matched boxes: IoU of pixels above 0.5 at least {worst:.4f} "
            f"(mean {ious.mean():.4f}; the bar {bar:g})")
    if tied.any():
        note += f"; {int(tied.sum())} pixels at 0.5 within {tie:g} on both sides counted as ties"
    return worst >= bar, worst, note


def owns(name: str, detector: bool) -> bool:
    """Whether :func:`judge` judges an output (a detector's ``detections`` and ``masks``), not the element rule."""
    return name == DETECTIONS or (detector and name == MASKS)


def judge(name: str, value: np.ndarray, expected: np.ndarray, precision: str,
          atol: float) -> tuple[bool, float | None, str]:
    """A detector's output (:func:`owns`) judged by its own rule: (passed, the error shown as max_abs, a note):
    ``detections`` by matched boxes, ``masks`` by IoU."""
    if name == MASKS:  # pixels at the 0.5 cut within rounding of each other are ties, as scores at a cut are
        agree, worst, note = mask_agreement(value, expected, precision, min(rule(precision, atol)[1], MASK_TIE))
        return agree, None if worst is None else 1.0 - worst, note
    min_iou, score_atol, allowed = rule(precision, atol)
    found = match(value, expected, min_iou, score_atol)
    return found.passed(allowed), found.max_score_diff, found.note(min_iou, score_atol)
