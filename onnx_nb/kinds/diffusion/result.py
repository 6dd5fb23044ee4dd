"""A diffusion pipeline as ONNX files (:class:`DiffusionExport`: its text encoder, UNet and VAE decoder, each an
:class:`~onnx_nb.ExportResult` checked at other shapes) and the image parity of the ONNX pipeline against PyTorch's
(:class:`DiffusionParity`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ...render import CSS, html_table
from ...results.parts import PartsExport

PARTS = ("text_encoder", "unet", "vae_decoder")


@dataclass(repr=False)
class DiffusionExport(PartsExport):
    """The parts of a Stable Diffusion-like pipeline, one file each, in one folder; ``onnx_nb.to_diffusers`` runs
    them as a diffusers pipeline (same class, same scheduler), ``onnx_nb.check_diffusion`` compares its image with
    PyTorch's.

    >>> sd = onnx_nb.export(pipe, out="sd-onnx")                    # doctest: +SKIP
    >>> sd.parts["unet"].status                                     # doctest: +SKIP
    'verified'
    """

    TITLE = "Diffusion pipeline exported"

    @property
    def pipeline(self) -> Any:
        """The PyTorch pipeline the parts came from."""
        return self.model


@dataclass
class DiffusionParity:
    """One prompt through the ONNX pipeline and PyTorch's with the same seed and scheduler: the images' PSNR
    (dB, pixels in [0, 1]), milliseconds per image on each side, and each ONNX part's time per call.

    Example::

        p = onnx_nb.check_diffusion(sd, "a photo of an astronaut", steps=4)
        assert p, p.psnr_db                                # truthy at or above threshold_db
    """

    psnr_db: float
    threshold_db: float
    max_abs_diff: float
    onnx_ms: float
    torch_ms: float
    part_ms: dict[str, float]
    calls: dict[str, int]
    steps: int
    size: tuple[int, int]
    images: tuple[Any, Any] = field(repr=False, default=(None, None))  # (ONNX's, PyTorch's) as numpy [H, W, 3]

    @property
    def passed(self) -> bool:
        return self.psnr_db >= self.threshold_db

    def __bool__(self) -> bool:
        return self.passed

    def to_dict(self) -> dict[str, Any]:
        return {"psnr_db": round(self.psnr_db, 2) if math.isfinite(self.psnr_db) else None,  # JSON has no inf
                "threshold_db": self.threshold_db, "passed": self.passed,
                "max_abs_diff": self.max_abs_diff, "onnx_ms": round(self.onnx_ms, 1),
                "torch_ms": round(self.torch_ms, 1), "part_ms": {k: round(v, 2) for k, v in self.part_ms.items()},
                "calls": dict(self.calls), "steps": self.steps, "size": list(self.size)}

    def _rows(self) -> list[tuple[str, str]]:
        verdict = "passed" if self.passed else "FAILED"
        rows = [("image PSNR", f"{self.psnr_db:.1f} dB ({verdict}: at least {self.threshold_db:.0f} dB); "
                               f"max pixel diff {self.max_abs_diff:.2e}"),
                ("image", f"{self.size[0]}x{self.size[1]}, {self.steps} steps"),
                ("per image", f"ONNX {self.onnx_ms:.0f} ms, PyTorch {self.torch_ms:.0f} ms "
                              f"({self.torch_ms / max(self.onnx_ms, 1e-9):.2f}x)")]
        rows += [(f"  {name}", f"{ms:.2f} ms per call x {self.calls.get(name, 0)}")
                 for name, ms in self.part_ms.items()]
        return rows

    def __repr__(self) -> str:
        return "DiffusionParity\n" + "\n".join(f"  {k}: {v}" for k, v in self._rows())

    def _repr_html_(self) -> str:
        return f"{CSS}<div class='onnxnb'><b>Diffusion parity</b>" + html_table(("", ""), self._rows()) + "</div>"
