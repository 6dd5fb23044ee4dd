"""Building a :class:`Variant` from a new file: what changed, and its parity against the reference."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError
from ...render import human_bytes
from ...results.variant import FUSED_OPS, Recipe, Variant
from ...runtime.files import check_target, cleans_up_folders, publish, staging_dir
from ...runtime.memory import give_back, gives_memory_back


def parent_of(model: Any) -> tuple[Path, Any, Any]:
    """(path, fp32 reference, export source) of what is being optimized or quantized."""
    from ...results.export import ExportResult

    if isinstance(model, Variant):
        return model.path, model.reference, model.source
    if isinstance(model, ExportResult):
        return model.path, model, model.source
    if isinstance(model, (str, os.PathLike)):
        return Path(model), Path(model), None
    raise InvalidArgumentError(
        f"Expected an .onnx path, an ExportResult or a Variant, not a {type(model).__name__}."
    )


def generated_calibration(model: Any, count: int = 16, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Calibration inputs built from the export's sample (or from the graph), varied by seed."""
    from ...runtime.feeds import feed_for

    path, _ref, _source = parent_of(model)
    rng = np.random.default_rng(seed)
    base, _axes = feed_for(path, model, seed=seed)
    out = []
    for _ in range(count):
        item = {}
        for name, value in base.items():
            if np.issubdtype(value.dtype, np.floating):
                item[name] = (value + rng.normal(0, 0.1, value.shape) * (np.std(value) or 1)).astype(value.dtype)
            elif name == "input_ids":
                item[name] = rng.permutation(value.ravel()).reshape(value.shape).astype(value.dtype)
            else:
                item[name] = value.copy()
        out.append(item)
    return out


def target_for(parent: Path, tag: str, out: Any, overwrite: bool) -> Path:
    default = parent.with_name(f"{parent.stem}.{tag}.onnx")
    return check_target(out if out is not None else default, overwrite)


def too_big_advice(source: Any) -> str:
    """What to do when a step on a big file does not fit: the lean route for a decoder checkpoint."""
    if getattr(source, "generation", None) == "decoder" and source.location:  # the record's answer
        return (f"For this decoder, export(\"{source.location}\", precision=\"int4\") (or int8/fp16/fp32) writes the "
                "file layer by layer from the checkpoint in a fraction of the weights' memory; or run this step "
                "on a machine with more memory.")
    return "Run this step on a machine with more memory, or make a smaller file first (fp16 halves the weights)."


@gives_memory_back
@cleans_up_folders
def make(parent_model: Any, tag: str, name: str | Callable[[], str], recipe: Recipe,
         write: Callable[[Path, Path], list[str]],
         *, out: Any, overwrite: bool, validate: bool, runtime: dict[str, Any] | None = None,
         providers: Any = ("cpu",), sample: Any = None, reference: Any = None,
         needs: float | None = None, localize: bool = True) -> Variant:
    """Run ``write(parent_path, staged_path) -> warnings`` into a staging folder, publish the file
    atomically, and return the Variant with its parity report. ``name`` may be a function, asked after
    ``write`` (which may decide what the variant is). ``needs``: the step's measured peak as a multiple of the
    parent's weights; when the machine has less memory available, the step is refused before it starts."""
    from ...runtime import onnxfile
    from ...runtime.memory import peak_memory, require, resident_bytes

    resident = resident_bytes()
    parent, ref, source = parent_of(parent_model)
    onnxfile.check_model(parent)  # a corrupt or escaping file fails here, clearly, before any tool reads it
    if reference is not None:
        ref = reference
    target = target_for(parent, tag, out, overwrite)
    before = onnxfile.load_proto(parent)
    size_before = onnxfile.total_file_size(parent, before)
    if needs is not None:
        require(int(needs * size_before), f"{tag} on {parent.name} ({human_bytes(size_before)} of weights)",
                too_big_advice(source))
    start = time.perf_counter()
    with staging_dir(target) as tmp, peak_memory() as peak:
        staged = tmp / target.name
        warnings = write(parent, staged)
        if staged.is_file():  # ONNX Runtime's new nodes take the module of what they replaced: the layers stay
            from ...runtime.scopes import carry_scopes

            carry_scopes(before, staged)
        files = publish(staged, target)
    seconds = time.perf_counter() - start
    after = onnxfile.load_proto(target)
    h0, h1 = onnxfile.op_histogram(before), onnxfile.op_histogram(after)
    diff = {k: (h0.get(k, 0), h1.get(k, 0)) for k in sorted(set(h0) | set(h1)) if h0.get(k, 0) != h1.get(k, 0)}
    # what this step made: fused or quantized ops the parent had fewer of (its own BiasGelu is not this step's)
    fused = {k: v for k, v in h1.items() if k.split(".")[-1] in FUSED_OPS and v > h0.get(k, 0)}
    variant = Variant(name if isinstance(name, str) else name(), target, parent, Recipe(**recipe), sum(h0.values()),
                      sum(h1.values()), diff, fused,
                      size_before, sum(f.stat().st_size for f in files), seconds, reference=ref, source=source,
                      runtime=dict(runtime or {}), warnings=warnings, origin=parent_model,
                      memory={"added_bytes": peak.added_bytes, "process_bytes": peak.high_bytes,
                              "weights_bytes": size_before})
    if validate:
        from ..parity.check import check_parity

        give_back(full=True, before=resident)  # what the writer freed goes before the sessions open
        variant.parity = check_parity(ref, variant, sample, providers=providers, progress=False, localize=localize)
    return variant
