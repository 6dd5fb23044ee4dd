"""``optimize(target="mobile")``: a variant for ONNX Runtime Mobile.

ONNX Runtime's own converter (``onnxruntime.tools.convert_onnx_models_to_ort``, optimization style "Fixed", level
"all", for ARM) writes three files from one model: the ORT-format file (``.ort``, a flatbuffer the mobile packages
and a minimal build load without parsing or optimizing a graph), the reduced-operator config a custom build takes
(``./build.sh --minimal_build --include_ops_by_config <config>``) and the optimized ONNX graph the ``.ort`` holds.
That graph is the variant's ``.onnx`` file, validated against the reference as every variant is; the ``.ort`` and the
config are published beside it, and the ``.ort`` is then opened in an ORT-format session (the way a phone opens it),
timed, and run on the same parity inputs: its rows (``cpu:ort-format``) compare it with the ``.onnx`` variant.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ...errors import InvalidArgumentError, OptimizationError, first_line
from ...results.parity import Row
from ...results.variant import Recipe, Variant
from .variants import make, parent_of, target_for

ORT_FORMAT = "cpu:ort-format"  # the provider label of the rows run from the .ort file
MOBILE_MAX_BYTES = 2**31  # a flatbuffer addresses at most 2 GB: the ORT format cannot hold a bigger model
LOAD_TRIES = 3  # load time: best of this many session starts
STYLE, PLATFORM = "Fixed", "arm"


def companions(model_file: Path) -> tuple[Path, Path]:
    """The ``.ort`` file and the reduced-operator config published beside a mobile variant's ``.onnx``."""
    return model_file.with_suffix(".ort"), model_file.with_suffix(".required_operators.config")


def for_mobile(onnx_model: Any, *, reference: Any = None, out: str | os.PathLike[str] | None = None,
               overwrite: bool = False, validate: bool = True, providers: Any = ("cpu",),
               sample: Any = None) -> Variant:
    """A variant for ONNX Runtime Mobile: ``<stem>.mobile.ort`` (the ORT format) and
    ``<stem>.mobile.required_operators.config`` (the operators a reduced build needs) beside
    ``<stem>.mobile.onnx`` (the optimized graph the ``.ort`` holds, validated like every variant). The ``.ort`` is
    then opened in an ORT-format session on the CPU: its load time (best of 3) and size go to
    ``variant.runtime["mobile"]``, and its outputs on the parity inputs, compared with the ``.onnx`` file's, are the
    parity report's ``cpu:ort-format`` rows. Models over 2 GB are refused (a flatbuffer's limit)."""
    import onnxruntime as ort

    from ...runtime import onnxfile
    from ...runtime.files import check_target
    from ...runtime.providers import providers_named

    parent, _ref, _source = parent_of(onnx_model)
    if out is not None and Path(out).suffix.lower() == ".ort":
        raise InvalidArgumentError(f"out={os.fspath(out)!r}: name the variant's .onnx file (e.g. "
                                   f"{Path(out).with_suffix('.onnx').name}); its .ort file is written beside it.")
    providers_named(providers)  # an unknown provider name fails before any work
    target = target_for(parent, "mobile", out, overwrite)
    for extra in companions(target):
        check_target(extra, overwrite)
    size = onnxfile.total_file_size(parent, onnxfile.load_proto(parent))
    if size > MOBILE_MAX_BYTES:
        from ...render import human_bytes

        raise OptimizationError(
            f"{parent.name} is {human_bytes(size)} with its weights: the ORT format is a flatbuffer, which holds at "
            "most 2 GB. Quantize it first (quantize(..., method='dynamic') is a quarter of the size; 'int4' less), "
            "then optimize(that_variant, target='mobile').")
    level = os.environ.get("ORT_CONVERT_ONNX_MODELS_TO_ORT_OPTIMIZATION_LEVEL", "all")
    recipe: Recipe = {"target": "mobile", "format": "ORT", "optimization_style": STYLE, "level": level,
                              "target_platform": PLATFORM, "runtime": f"onnxruntime {ort.__version__}"}

    def write(src: Path, staged: Path) -> list[str]:
        from ...runtime.files import scratch_dir

        with scratch_dir("onnx-nb-mobile-") as scratch:
            return _convert(src, staged, Path(scratch))

    variant = make(onnx_model, "mobile", f"mobile(ort-format, {level})", recipe, write, out=target,
                   overwrite=overwrite, validate=validate, providers=providers, sample=sample, reference=reference)
    variant.size_after = onnxfile.total_file_size(variant.path, onnxfile.load_proto(variant.path))  # the .onnx
    _check_ort_file(variant, sample, validate)
    return variant


def _convert(src: Path, staged: Path, scratch: Path) -> list[str]:
    """ONNX Runtime's converter on a one-file copy of ``src`` named as the variant (``<stem>.mobile.onnx``), in the
    scratch folder; its three files into the staging folder under the variant's names."""
    import shutil
    from warnings import catch_warnings, simplefilter

    import onnx

    from ...runtime.files import disk_error
    from ..export.machinery.torch_exporters import quiet

    work = scratch / staged.name
    onnx.save(onnx.load(str(src), load_external_data=True), str(work))  # the weights inside the one file
    written = scratch / "ort"
    warnings: list[str] = []
    try:
        # quiet: the converter prints each step, and its module sets up logging on import (basicConfig, a no-op
        # while quiet's handler is on the root logger); its INFO lines go nowhere
        with quiet(warnings, []), catch_warnings():
            simplefilter("ignore", ResourceWarning)  # its config writer leaves the .ort it read open
            from onnxruntime.tools.convert_onnx_models_to_ort import OptimizationStyle, convert_onnx_models_to_ort

            convert_onnx_models_to_ort(work, output_dir=written, optimization_styles=[OptimizationStyle[STYLE]],
                                       target_platform=PLATFORM, save_optimized_onnx_model=True)
    except Exception as exc:
        full = disk_error(exc, staged.parent)
        if full is not None:
            raise full from exc
        raise OptimizationError(f"ONNX Runtime could not convert {src.name} to the ORT format: "
                                f"{type(exc).__name__}: {first_line(exc, 300)}") from exc
    found = {kind: sorted(written.glob(f"*{kind}")) for kind in (".ort", ".config", ".optimized.onnx")}
    missing = [kind for kind, paths in found.items() if len(paths) != 1]
    if missing:
        raise OptimizationError(f"ONNX Runtime's converter wrote no single {', '.join(missing)} file for {src.name} "
                                f"(it wrote: {', '.join(p.name for p in written.iterdir()) or 'nothing'}).")
    ort_file, config_file = companions(staged)
    shutil.move(str(found[".optimized.onnx"][0]), str(staged))
    shutil.move(str(found[".ort"][0]), str(ort_file))
    config_file.write_text(_config_text(found[".config"][0].read_text(), ort_file.name))
    return warnings


def _config_text(text: str, ort_name: str) -> str:
    """The converter's config with its comment naming the scratch file replaced by the published ``.ort``'s name."""
    name = ort_name.replace("\n", " ").replace("\r", " ")
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return "\n".join([f"# Generated from model/s:\n# - {name}", *lines]) + "\n"


def operators(config_file: Path) -> list[str]:
    """``domain;opset;Op,Op`` lines of a reduced-operator config (comments left out)."""
    return [line.strip() for line in config_file.read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def ort_session(path: Path) -> Any:
    """An ORT-format session on the CPU, as ONNX Runtime Mobile opens a ``.ort`` file."""
    from ...runtime.sessions import ort_format_session

    return ort_format_session(path)


def _load_ms(opener: Any, path: Path) -> tuple[float, Any]:
    """The best of :data:`LOAD_TRIES` session starts (ms), and the last session."""
    best, sess = float("inf"), None
    for _ in range(LOAD_TRIES):
        start = time.perf_counter()
        sess = opener(path)
        best = min(best, (time.perf_counter() - start) * 1e3)
    return best, sess


def _onnx_session(path: Path, as_converted: bool = False) -> Any:
    """A plain CPU session of the ``.onnx`` (as a user opens it); ``as_converted``: without the optimizers the
    converter leaves out for ARM (the NCHWc layout, x86 only), so that the graph runs as the ``.ort`` holds it."""
    from ...runtime.sessions import session

    return session(path, check_graph=False, disabled_optimizers=NOT_FOR_ARM if as_converted else None)


NOT_FOR_ARM = ("NchwcTransformer",)  # what convert_onnx_models_to_ort leaves out unless the platform is amd64


def _check_ort_file(variant: Variant, sample: Any, validate: bool) -> None:
    """Load the ``.ort`` file (timed, sized) and, when validating, add its ``cpu:ort-format`` rows to the variant's
    parity report; a file ONNX Runtime cannot load or run is an ``error`` row (a warning when not validating)."""
    ort_file, config_file = companions(variant.path)
    mobile: dict[str, Any] = {"ort_file": str(ort_file), "config_file": str(config_file),
                              "ort_bytes": ort_file.stat().st_size, "load_ms": None,
                              "onnx_load_ms": None, "operators": operators(config_file)}
    variant.runtime["mobile"] = mobile
    try:
        mobile["load_ms"], sess = _load_ms(ort_session, ort_file)
    except Exception as exc:  # noqa: BLE001 - a file that does not load is a finding, a row
        why = f"ONNX Runtime cannot load {ort_file.name} as an ORT-format file: {first_line(exc, 300)}"
        if variant.parity is not None:
            variant.parity.rows.append(Row("*", "*", ORT_FORMAT, "error", note=why))
        else:
            variant.warnings.append(why)
        return
    mobile["onnx_load_ms"] = _load_ms(_onnx_session, variant.path)[0]
    if not validate or variant.parity is None:
        return
    rows, notes = ort_format_rows(variant, sess, sample)
    variant.parity.rows.extend(rows)
    variant.parity.notes.extend(n for n in notes if n not in variant.parity.notes)
    measured = [r.max_abs for r in rows if r.max_abs is not None]
    mobile["max_abs_vs_onnx"] = max(measured) if measured else None
    variant.parity.notes.append(
        f"{ORT_FORMAT}: {ort_file.name} in an ORT-format session (session.load_model_format=ORT) on the CPU, "
        f"compared with the .onnx variant {variant.path.name} on the same inputs (run without the x86-only NCHWc "
        f"layout, as the converter made the .ort for ARM).")


def ort_format_rows(variant: Variant, sess: Any, sample: Any = None) -> tuple[list[Row], list[str]]:
    """The ``.ort`` session's outputs against the ``.onnx`` variant's on the inputs the variant's own parity check
    used (its shapes and probes), judged by the same rule and tolerance (the file's precision). The ``.onnx`` runs
    as the converter optimized it for ARM (no x86 NCHWc layout, whose convolution kernels move results by ~1e-7):
    what differs then is only the format, and equal outputs show it."""
    from ...results.export import export_of
    from ...results.tolerance import precision_of
    from ...runtime.feeds import feed_for
    from ...runtime.onnxfile import load_proto
    from ..export.adapters.registry import adapter_of
    from ..export.machinery.references import Reference
    from ..parity.check import make_cases, probes_for, run_case

    feed, axes = feed_for(variant.path, variant, sample)
    plain = _onnx_session(variant.path, as_converted=True)
    ref = Reference("onnx", f"ONNX {variant.path.name}", feed, axes, [o.name for o in plain.get_outputs()],
                    path=variant.path, graph=variant.path, session=plain)
    proto = load_proto(variant.path)
    precision = precision_of(proto)
    export = export_of(variant)
    generative = export is not None and adapter_of(export).checked_by_generating(export)
    probes = [] if generative else probes_for("auto", precision, getattr(variant.source, "model", None))
    cases, notes = make_cases(ref, "sample" if generative else "auto", variant, proto, probes, 0)
    judge = {"precision": precision, "atol": None, "rtol": None, "tolerances": None, "seed": 0}
    rows: list[Row] = []
    for tag, case, moved in cases:
        try:
            expected = ref.run(case)
        except Exception as exc:  # noqa: BLE001 - as check_parity: the reference's own failure is a row
            rows.append(Row("*", tag, ORT_FORMAT, "skipped",
                            note=f"the .onnx variant itself fails here: {type(exc).__name__}: {first_line(exc, 150)}"))
            continue
        rows += run_case(sess, ORT_FORMAT, tag, case, moved, expected, ref, export, judge, notes)[0]
    return rows, notes
