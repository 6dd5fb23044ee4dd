"""``quantize()``: dynamic and static INT8, fp16 and INT4 weight-only variants, each re-validated."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import CalibrationError, InvalidArgumentError, OnnxNbError, QuantizationError, first_line
from ...results.variant import Recipe, Variant
from ...runtime.memory import FACTORS, gives_memory_back
from .exclusion import auto_exclude
from .int8_routes import fused_route, int8_route
from .ort_quantizer import finish_int8, gemm_to_matmul, has_external_data, is_big, run_quantizer
from .variants import make, parent_of

__all__ = ["gemm_to_matmul", "quantize"]

METHODS = ("dynamic", "static", "fp16", "int4", "auto")


@gives_memory_back
def quantize(onnx_model: Any, *, method: str = "dynamic", per_channel: bool | None = None,
             calibration: Iterable[dict[str, Any]] | str | os.PathLike[str] | None = None,
             exclude: Sequence[str] | str | None = "auto",
             reference: Any = None, op_types: Sequence[str] | None = None, block_size: int = 32,
             accuracy_level: int | str | None = "auto", algorithm: str = "auto", lm_head_bits: int | str = "auto",
             mixed_precision: Any = "auto", scheme: str = "auto", target_cpu: Any = None,
             outlier_channels: bool | str = "auto", out: str | os.PathLike[str] | None = None, overwrite: bool = False,
             validate: bool = True,
             providers: Any = ("cpu",), sample: Any = None, data: Any = None, metric: str = "auto") -> Variant:
    """A quantized variant of ``onnx_model`` (a path, an ExportResult or a Variant), re-validated
    against the fp32 reference.

    ``method``: ``"auto"`` picks the INT8 method for the family (static QDQ with generated calibration unless given for
    convolutional networks, dynamic for transformers; the recipe says why), ``"dynamic"`` INT8 (weights INT8,
    activations quantized on the fly; per-channel by default, which keeps transformer embeddings at cosine ≥ 0.99 where
    per-tensor drops), ``"static"`` INT8 in QDQ format (needs ``calibration``: a list of input dicts, a folder of images
    for a file with one image input, or ``"generated"`` for synthetic inputs), ``"fp16"`` (for GPU providers),
    ``"int4"`` weight-only MatMulNBits (``block_size``; ``algorithm``: ``"auto"`` makes each algorithm (the data-aware
    on calibration), checks each against the fp32 parent and keeps the most accurate that passes, or one of ``"rtn"``,
    ``"rtn_asym"``, ``"k_quant"``, ``"hqq"``, ``"gptq"``, ``"awq"``: :mod:`onnx_nb.steps.variants.int4_algorithms`;
    ``mixed_precision``: ``"auto"`` measures each layer's error at 4 and 8 bits alone and keeps at 8 the fewest layers
    that halve the all-INT4 file's largest error within 1.15x its size (the whole file's), a float another size budget,
    ``{"size": .., "error": ..}`` an error budget too, None every layer at 4 bits:
    :mod:`onnx_nb.steps.variants.int4_mixed`; ``lm_head_bits``: a decoder's LM head at 4 or 8 bits, ``"auto"``: a layer
    like the others where mixed precision is measured, else both made and 8 kept where it passes where 4 fails or cuts
    the largest error 1.25x; ``accuracy_level``: ``"auto"`` computes in INT8 (level 4, the fast CPU path) for decoders
    with a cache, whose decoding is bound by reading weights, and in fp32 (None) for the rest, whose accuracy it keeps).
    INT8 follows the CPU the file will run on (``target_cpu``: None is this machine; ``"avx2"``, ``"avx512"``,
    ``"vnni"``, ``"amx"``, ``"arm64"`` or ``"any"`` for another): ``scheme="auto"`` writes full-range u8s8 where the
    INT8 products accumulate in 32 bits (VNNI, AMX, Arm) and, on AVX2 / AVX-512 CPUs without VNNI, where they saturate
    in 16 bits, makes both of ONNX Runtime's remedies (7-bit weights, ``"u8s8-reduced"``, and uint8 weights, ``"u8u8"``)
    and keeps the faster one that passes parity. On this machine the chosen file is timed against its fp32 parent
    (``variant.speed``); when no INT8 file beats it there, the variant says so. The scheme, the CPU and the timings are
    in ``variant.recipe`` and the file's metadata. ``exclude`` names nodes to keep in float; ``"auto"`` (INT8 default)
    quantizes once, measures every layer alone with :func:`quant_debug`, and keeps in float the few layers (at most 1 in
    10) that fall more than 3 dB below the median layer's SQNR; the recipe records which. An Ultralytics detector's box
    decoding stays in float too (``float_rule`` in the recipe).

    Example::

        int8 = onnx_nb.quantize(onnx_nb.optimize(result))                  # dynamic INT8, per channel
        qdq = onnx_nb.quantize(result, method="auto", calibration=batches) # static QDQ for a CNN
        int4 = onnx_nb.quantize(decoder_result, method="int4")
    """
    started = time.perf_counter()  # the call's time: every candidate made and checked, not the last file alone
    plan = _Plan.of(onnx_model, method=method, per_channel=per_channel, calibration=calibration, exclude=exclude,
                    reference=reference, op_types=op_types, block_size=block_size, accuracy_level=accuracy_level,
                    algorithm=algorithm, lm_head_bits=lm_head_bits, mixed_precision=mixed_precision, scheme=scheme,
                    target_cpu=target_cpu, validate=validate, providers=providers, sample=sample, data=data,
                    metric=metric, outlier_channels=outlier_channels)
    variant = plan.chosen(out, overwrite)
    variant.seconds = max(variant.seconds, time.perf_counter() - started)
    variant.remake = functools.partial(quantize, onnx_model, **plan.call(variant), out=variant.path, overwrite=True)
    return variant


@dataclass
class _Plan:
    """One ``quantize()`` call, its settings checked and resolved before any file is written (:meth:`of`): the
    method (``"auto"`` answered), the recipe so far, the INT8 schemes or INT4 algorithms to try, the calibration
    inputs, the layers kept in float; :meth:`build` makes one candidate, :meth:`chosen` makes and measures them and
    keeps the one the rules pick, :meth:`call` is the call that remakes it."""

    model: Any
    method: str
    asked: dict[str, Any]  # the call's own arguments, as given (the remade call starts from them)
    per_channel: bool
    calibration: Any
    recipe: Recipe
    cpu: Any
    schemes: list[str]
    algorithms: list[str]
    mixed: tuple[float, float | None] | None
    runtime: dict[str, Any]
    auto_exclude: bool
    excluded: list[str]
    accuracy_level: Any
    op_types: Sequence[str] | None = None
    calib_items: list[dict[str, Any]] | None = None
    static_source: Path | None = None
    kept_float: list[str] = field(default_factory=list)  # by a rule of the family, beside the exclude list
    decoder: bool = False  # an INT4 file of a decoder with its cache: its own compute level and LM head
    route_int8: Path | None = None  # the INT8 file the route choice made and timed of the file to quantize
    route_ms: dict[str, float] = field(default_factory=dict)  # its ms and its fp32 parent's, in one run, by scheme

    @classmethod
    def of(cls, onnx_model: Any, *, method: str, per_channel: bool | None, calibration: Any, exclude: Any,
           op_types: Sequence[str] | None, block_size: int, accuracy_level: Any, algorithm: str, lm_head_bits: Any,
           mixed_precision: Any, scheme: str, target_cpu: Any, **asked: Any) -> _Plan:
        """The call's settings checked (bad names refused before any work) and resolved."""
        if method not in METHODS:
            raise InvalidArgumentError(f"method={method!r}: choose one of {', '.join(METHODS)}.")
        if asked.get("outlier_channels") not in ("auto", True, False):
            raise InvalidArgumentError(f"outlier_channels={asked.get('outlier_channels')!r}: choose 'auto', True or "
                                       "False.")
        asked.update(exclude=exclude, block_size=block_size, algorithm=algorithm, lm_head_bits=lm_head_bits,
                     mixed_precision=mixed_precision, scheme=scheme, target_cpu=target_cpu,
                     accuracy_level=accuracy_level)
        rule = ""
        if method == "auto":
            from .int8_schemes import int8_method

            method, rule = int8_method(parent_of(onnx_model)[0])
            if method == "static" and calibration is None:
                calibration = "generated"
        if method == "static" and calibration is None:
            raise CalibrationError(
                "Static quantization needs calibration data: pass calibration=[{input: array, ...}, ...] with "
                "a few representative inputs (10-100 is typical), or calibration='generated' to use inputs "
                "generated from the sample (less accurate)."
            )
        per_channel = True if per_channel is None else per_channel
        excluded = [] if isinstance(exclude, str) else list(exclude or [])
        recipe: Recipe = {"method": method, **({"method_rule": rule} if rule else {})}
        if method in ("dynamic", "static"):
            recipe.update({"per_channel": per_channel, "exclude": excluded})
        from . import int4_algorithms, int4_mixed, int8_schemes

        cpu, schemes = int8_schemes.choose(method, scheme, target_cpu, recipe)
        algorithms = int4_algorithms.choose(method, algorithm, recipe)
        if len(algorithms) == 1:
            int4_algorithms.refuse_big_data_aware(parent_of(onnx_model)[0], algorithms[0])
        mixed = int4_mixed.budgets(method, mixed_precision)
        if lm_head_bits not in ("auto", 4, 8):
            raise InvalidArgumentError(f"lm_head_bits={lm_head_bits!r}: choose 'auto', 4 or 8 (an INT4 decoder's "
                                       "LM head).")
        plan = cls(onnx_model, method, asked, per_channel, calibration, recipe, cpu, schemes, algorithms, mixed,
                   dict(getattr(onnx_model, "runtime", None) or {}),
                   exclude == "auto" and method in ("dynamic", "static"), excluded, accuracy_level, op_types)
        plan.inputs_and_floats()
        if method == "int4":
            plan.accuracy_level, plan.decoder = _int4_settings(onnx_model, accuracy_level, block_size, recipe)
        return plan

    def inputs_and_floats(self) -> None:
        """The calibration inputs the method reads, the operators static INT8 takes for a UNet, and the layers a
        family keeps in float (a detector's box decoding)."""
        from . import int4_algorithms

        if self.method == "int4" and set(self.algorithms) & set(int4_algorithms.DATA_AWARE):
            self.calib_items = int4_algorithms.calibration(self.model, self.calibration)
        parent = parent_of(self.model)[0]
        if self.method == "static":
            from .vision import static_inputs

            self.calib_items, self.static_source = static_inputs(self.model, self.calibration, self.recipe)
            if self.op_types is None:
                from .vision import unet_op_types

                found, why = unet_op_types(self.static_source or parent)
                if found:
                    self.op_types = found
                    self.recipe.update({"op_types": found, "op_types_rule": why})
        if self.auto_exclude:
            from .vision import detector_decoding

            self.kept_float, why = detector_decoding(self.static_source or parent)
            if self.kept_float:
                self.recipe["float_rule"] = why

    @property
    def tag_and_name(self) -> tuple[str, str]:
        return _tag_and_name(self.method, self.per_channel, self.asked["block_size"], bool(self.runtime.get("unpad")))

    def build(self, chosen: str, out: Any, overwrite: bool, head_bits: int | None = None, level: Any = "call",
              eight: Any = ()) -> Variant:
        """The variant with INT8 scheme or INT4 algorithm ``chosen`` (re-validated, layers kept float as the exclude
        rule says; ``head_bits``, ``level``: an INT4 decoder's LM head bits and accuracy level, else the call's;
        ``eight``: the INT4 layers at 8 bits, ``"all"`` for every one)."""
        from . import int8_schemes

        method, asked = self.method, self.asked
        int4 = method == "int4"
        head = asked["lm_head_bits"]
        bits = head_bits if head_bits is not None else (head if isinstance(head, int) else 4)
        own = Recipe(**self.recipe)
        if chosen and not int4:
            own.update(int8_schemes.settings(chosen))
        if int4:
            own.update({"int4_algorithm": chosen, "symmetric": chosen in ("rtn", "awq"), "lm_head_bits": bits})
        if level != "call":
            own["accuracy_level"] = level
        if eight:
            own["eight_bit_layers"] = eight
        dropped = list(self.excluded)

        def write(src: Path, staged: Path) -> list[str]:
            from ...runtime.files import scratch_dir, temp_inside
            from ..export.machinery.torch_exporters import quiet
            from .outlier_channels import described

            warnings: list[str] = []
            level_now = own.get("accuracy_level")
            with scratch_dir("onnx-nb-quant-") as scratch, quiet(warnings, []), temp_inside(scratch):
                prepared = Path(scratch) / "prepared.onnx"
                if self.route_made(chosen, dropped):  # the same quantizer call the route choice made a moment ago
                    import shutil

                    assert self.route_int8 is not None
                    shutil.copyfile(self.route_int8, staged)
                    finish_int8(staged, chosen, self.cpu.label)
                    own["int8_file"] = "the one the attention route's choice made and timed (the same quantizer call)"
                    own.update(described(staged))
                    return warnings
                own.pop("int8_file", None)  # quantized here (again: a layer kept in float since)
                try:
                    own.update(run_quantizer(method, self.static_source or src, prepared, staged, self.per_channel,
                                  [*self.kept_float, *dropped], self.op_types, self.calib_items, asked["block_size"],
                                  level_now if isinstance(level_now, int) else None,
                                  bool(own.get("gemm_as_matmul")), chosen if chosen and not int4 else "u8s8",
                                  self.cpu.label if chosen and not int4 else "", algorithm=chosen or "rtn",
                                  lm_head_bits=int(own.get("lm_head_bits", 4)), eight_bit=eight,
                                  outlier_feed=self.outlier_feed(src)))
                except OnnxNbError:
                    raise
                except Exception as exc:
                    raise QuantizationError(f"{method} quantization failed: {type(exc).__name__}: "
                                            f"{first_line(exc)}") from exc
            return warnings  # ORT's ask for its pre-processing is left out by quiet() (sources.LOG_NOISE)

        tag, name = self.tag_and_name
        checks = {"validate": asked["validate"], "runtime": self.runtime, "providers": asked["providers"],
                  "sample": asked["sample"], "reference": asked["reference"]}
        # the exclusion rounds ask quant_debug which layer loses the most: no diverging-node search per round
        made = make(self.model, tag, name, own, write, out=out, overwrite=overwrite, needs=self.needs,
                    localize=not self.auto_exclude, **checks)
        if self.auto_exclude:
            made = auto_exclude(made, dropped, own, asked["validate"], asked["sample"],
                                 lambda: make(self.model, tag, name, own, write, out=made.path, overwrite=True,
                                              localize=False, **checks))
        return made

    @property
    def needs(self) -> float | None:
        """The write's measured peak as a multiple of the parent's weights (a file over 2 GB: read by reference)."""
        path = parent_of(self.model)[0]
        by_reference = self.method != "static" and is_big(path) and has_external_data(path)
        return FACTORS.get(f"{self.method} by reference" if by_reference else self.method)

    def outlier_feed(self, src: Path) -> dict[str, Any] | None:
        """The inputs dynamic INT8 finds outlier channels on (the file's sample), or None where it is not asked."""
        if self.method != "dynamic" or self.asked["outlier_channels"] is False:
            return None
        from ...runtime.feeds import feed_for

        return feed_for(self.static_source or src, self.model, self.asked["sample"])[0]

    def route_made(self, scheme: str, dropped: list[str]) -> bool:
        """Whether the route choice's INT8 file is the one this build would make: dynamic, per channel, nothing kept
        in float, every operator type, outlier channels split on the export's sample, in the scheme the route
        quantized with (of the file this build quantizes: the route choice returns one only for that file)."""
        from .optimizing import route_scheme

        return self.route_int8 is not None and self.route_int8.is_file() and self.method == "dynamic" and \
            self.per_channel and not dropped and not self.kept_float and self.op_types is None and \
            scheme == route_scheme() and self.asked["outlier_channels"] is not False and self.asked["sample"] is None

    def chosen(self, out: Any, overwrite: bool) -> Variant:
        """Every candidate the call asks for, made and measured; the one its rules keep (the INT8 scheme by speed on
        this CPU, the INT4 algorithm, bit mix, LM head bits and compute level by measured error)."""
        from ...runtime.files import scratch_dir
        from ..parity.answers import pytorch_answers_kept
        from . import int4_algorithms, int4_mixed, int8_schemes

        method, validate, head = self.method, self.asked["validate"], self.asked["lm_head_bits"]
        # every candidate is judged against one model on the same inputs: PyTorch answers each question once
        with scratch_dir("onnx-nb-route-") as route_dir, pytorch_answers_kept():
            if method == "dynamic" and fused_route(self.model):
                self.static_source, self.route_int8, self.route_ms = int8_route(self.model, route_dir, self.recipe)
            variant = self.build(self.algorithms[0] if method == "int4" else self.schemes[0], out, overwrite)
            if self.schemes[0] and validate and self.cpu.here:
                # the route choice timed this very file beside its parent: no second run where it is the one left
                known = self.route_ms if "int8_file" in variant.recipe else None
                variant = int8_schemes.fastest_that_passes(variant, self.schemes, self.build, Path(route_dir), self.cpu,
                                                           known)
            if method == "int4" and validate and len(self.algorithms) > 1:
                task = int4_algorithms.on_task(self.asked["data"], self.asked["metric"])
                variant = int4_algorithms.most_accurate(variant, self.algorithms, self.build, Path(route_dir), task)
            if self.mixed and validate:  # the head is one of the layers measured (unless lm_head_bits says its bits)
                best, bits = variant.recipe["int4_algorithm"], 8 if head == 8 else 4
                variant = int4_mixed.cheapest_mix(
                    variant, lambda eight, at, ow: self.build(best, at, ow, head_bits=bits, eight=eight),
                    Path(route_dir), *self.mixed, head_given=head != "auto")
            if method == "int4" and head == "auto" and validate and self.decoder and not variant.layers:
                best = variant.recipe["int4_algorithm"]
                variant = int4_algorithms.lm_head_measured(
                    variant, lambda bits, at, ow: self.build(best, at, ow, head_bits=bits), Path(route_dir))
            if method == "int4" and self.asked["accuracy_level"] == "auto" and self.accuracy_level == 4 and validate:
                best, bits = variant.recipe["int4_algorithm"], variant.recipe["lm_head_bits"]
                eight = variant.recipe.get("eight_bit_layers", ())
                variant = int4_algorithms.level_measured(
                    variant, lambda at, ow: self.build(best, at, ow, head_bits=bits, level=None, eight=eight),
                    Path(route_dir))
        return variant

    def call(self, variant: Variant) -> dict[str, Any]:
        """The call that made ``variant``, for quant_debug's ``requantize()``: every setting and the calibration
        data kept."""
        asked, recipe, int4 = self.asked, variant.recipe, self.method == "int4"
        return {**asked, "method": self.method, "per_channel": self.per_channel,
                "calibration": self.calibration if self.calib_items is None else self.calib_items,
                "op_types": self.op_types,
                "accuracy_level": recipe.get("accuracy_level", self.accuracy_level) if int4 else
                self.accuracy_level, "scheme": recipe.get("int8_scheme", asked["scheme"]),
                "algorithm": recipe.get("int4_algorithm", asked["algorithm"]) if int4 else asked["algorithm"],
                "lm_head_bits": recipe.get("lm_head_bits", asked["lm_head_bits"]) if int4 else asked["lm_head_bits"]}


def _int4_settings(onnx_model: Any, accuracy_level: int | str | None, block_size: int,
                   recipe: Recipe) -> tuple[int | str | None, bool]:
    """INT4 for a decoder with its cache (decoding reads every weight per token): int8 compute (accuracy level 4)
    and its Gemm projections (GPT-2's) in INT4 too; elsewhere accuracy comes first (fp32 compute)."""
    from ...runtime.facts import file_facts

    decoder = bool(file_facts(parent_of(onnx_model)[0]).generative)
    if accuracy_level == "auto":
        accuracy_level = 4 if decoder else None
    recipe.update({"block_size": block_size, "accuracy_level": accuracy_level, "gemm_as_matmul": decoder})
    return accuracy_level, decoder


def _tag_and_name(method: str, per_channel: bool, block_size: int, unpad: bool) -> tuple[str, str]:
    tag = {"dynamic": "int8", "static": "int8-static", "fp16": "fp16", "int4": "int4"}[method]
    name = {"dynamic": f"int8-dynamic({'per-channel' if per_channel else 'per-tensor'})",
            "static": "int8-static(QDQ)", "fp16": "fp16", "int4": f"int4-weight(block {block_size})"}[method]
    return tag, name + ("+unpad" if unpad else "")
