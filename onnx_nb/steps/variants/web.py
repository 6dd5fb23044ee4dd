"""``optimize(target="web")``: a variant for ONNX Runtime Web, standard operators only, an IR version the bundled ORT
Web reads, one file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ...errors import OptimizationError
from ...results.variant import Recipe, Variant
from .levels import ort_level
from .variants import make, parent_of


def for_web(onnx_model: Any, *, reference: Any = None, out: str | os.PathLike[str] | None = None,
            overwrite: bool = False, validate: bool = True, providers: Any = ("cpu",), sample: Any = None) -> Variant:
    """A variant for ONNX Runtime Web (the ``"browser"`` backend): standard ONNX operators only (ONNX Runtime's
    "basic" level: constant folding and fusions into standard ops), an IR version the bundled ORT Web reads
    (<= :data:`WEB_MAX_IR`), the weights inside the one file (a page receives one buffer; under 2 GB). A file with
    ONNX Runtime's contrib operators (a transformer-fused or GPU-fused variant) is made again from its export; a
    dynamic or static INT8 file keeps its standard quantized operators (MatMulInteger, QDQ). Re-validated on the
    browser backend as well as ``providers`` when a browser is at hand."""
    import onnx

    from ...runtime.browser import ORT_WEB_VERSION, WEB_MAX_BYTES, WEB_MAX_IR, unavailable_reason
    from ...runtime.onnxfile import contrib_ops

    parent, ref, _source = parent_of(onnx_model)
    start = onnx_model
    recipe: Recipe = {"target": "web", "level": "basic", "runtime": f"onnxruntime-web {ORT_WEB_VERSION}"}
    contrib = contrib_ops(parent)
    if contrib:
        export_path = getattr(ref, "path", ref)
        if ref is None or ref is onnx_model or contrib_ops(Path(export_path)):
            raise OptimizationError(
                f"{parent.name} uses ONNX Runtime contrib operators ({', '.join(contrib)}) and no export without them "
                "is known: pass the ExportResult (or the plain .onnx export) to optimize(..., target='web').")
        start = ref
        recipe["started_from"] = (f"the export {Path(export_path).name}: {parent.name} has ONNX Runtime contrib "
                                  f"operators ({', '.join(contrib)}); quantize(web_variant, method='dynamic') makes "
                                  "an INT8 file with standard operators")

    def write(src: Path, staged: Path) -> list[str]:
        from ...runtime.files import scratch_dir

        with scratch_dir("onnx-nb-web-") as scratch:
            model = onnx.load(str(src), load_external_data=True)  # the weights into the one file first
            if model.ByteSize() > WEB_MAX_BYTES:
                raise OptimizationError(
                    f"{src.name} is {model.ByteSize() / 1e9:.1f} GB with its weights: a browser page takes the "
                    "model as one buffer of at most 2 GB. Quantize it first (INT8 is a quarter of the size).")
            inline, basic = Path(scratch) / "inline.onnx", Path(scratch) / "basic.onnx"
            onnx.save(model, str(inline))
            ort_level(inline, basic, "basic")
            model = onnx.load(str(basic))
            recipe["ir_version"] = min(int(model.ir_version), WEB_MAX_IR)
            model.ir_version = recipe["ir_version"]
            onnx.save(model, str(staged))
        left = contrib_ops(staged)
        if left:
            raise OptimizationError(f"ONNX Runtime's basic level kept contrib operators ({', '.join(left)}).")
        return []

    checked = providers
    if validate and not unavailable_reason():
        from ...runtime.providers import providers_named

        names = [p.short for p in providers_named(providers)]
        checked = [*names, "browser"] if "browser" not in names else names
    variant = make(start, "web", "web(basic)", recipe, write, out=out, overwrite=overwrite, validate=validate,
                   providers=checked, sample=sample, reference=reference)
    if validate and unavailable_reason():
        variant.warnings.append(f"Checked on {', '.join(map(str, providers))} only: {unavailable_reason()}.")
    return variant
