"""SAM (segment-anything) as two ONNX files (:class:`SamExport`) and the masks of the two chained in ONNX Runtime
against ``SamModel``'s own (:class:`SamParity`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...render import CSS, html_table
from ...results.parts import PartsExport

PARTS = ("vision_encoder", "prompt_encoder_mask_decoder")


@dataclass(repr=False)
class SamExport(PartsExport):
    """A transformers ``SamModel`` as Optimum splits it: ``vision_encoder.onnx`` (run once per image) and
    ``prompt_encoder_mask_decoder.onnx`` (run per prompt); ``onnx_nb.check_sam`` compares their masks with the
    model's.

    >>> sam = onnx_nb.export(SamModel.from_pretrained("facebook/sam-vit-base"), out="sam-onnx")   # doctest: +SKIP
    >>> onnx_nb.check_sam(sam, points=3).passed                                                    # doctest: +SKIP
    True
    """

    TITLE = "SAM exported"


@dataclass
class SamParity:
    """One image and its prompts through the two files chained in ONNX Runtime and through ``SamModel``: the IoU
    of each mask binarized at logit 0 (passed at ``min_iou``) and the predicted IoU scores (within
    ``score_atol``).

    Example::

        p = onnx_nb.check_sam(sam)
        assert p, (p.mask_iou_min, p.score_max_abs_diff)
    """

    mask_iou_min: float
    mask_iou_mean: float
    min_iou: float
    score_max_abs_diff: float
    score_atol: float
    mask_logit_max_abs_diff: float
    masks: list[int]
    points: list[int]
    error: str = ""

    @property
    def passed(self) -> bool:
        return not self.error and self.mask_iou_min >= self.min_iou and self.score_max_abs_diff <= self.score_atol

    def __bool__(self) -> bool:
        return self.passed

    @property
    def summary(self) -> str:
        if self.error:
            return f"FAILED: {self.error}"
        return (f"{'passed' if self.passed else 'FAILED'}: mask IoU min {self.mask_iou_min:.4f} (at least "
                f"{self.min_iou:g}), IoU scores max abs diff {self.score_max_abs_diff:.2e} (at most "
                f"{self.score_atol:g}) for masks {self.masks}")

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "mask_iou_min": self.mask_iou_min, "mask_iou_mean": self.mask_iou_mean,
                "min_iou": self.min_iou, "score_max_abs_diff": self.score_max_abs_diff,
                "score_atol": self.score_atol, "mask_logit_max_abs_diff": self.mask_logit_max_abs_diff,
                "masks": list(self.masks), "points": list(self.points), "error": self.error}

    def _rows(self) -> list[tuple[str, str]]:
        return [("verdict", self.summary), ("points", str(self.points)), ("masks", str(self.masks)),
                ("mask IoU", f"min {self.mask_iou_min:.4f}, mean {self.mask_iou_mean:.4f}"),
                ("mask logits", f"max abs diff {self.mask_logit_max_abs_diff:.2e}")]

    def __repr__(self) -> str:
        return "SamParity\n" + "\n".join(f"  {k}: {v}" for k, v in self._rows())

    def _repr_html_(self) -> str:
        return f"{CSS}<div class='onnxnb'><b>SAM parity</b>" + html_table(("", ""), self._rows()) + "</div>"
