"""``quantize()``: dynamic and static INT8, fp16 and INT4 weight-only variants, each re-validated."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import CalibrationError, InvalidArgumentError, OnnxNbError, QuantizationError, first_line
from ...results.variant import Variant
from .variants import make, parent_of

METHODS = ("dynamic", "static", "fp16", "int4", "auto")
AUTO_EXCLUDE_GAP_DB = 3.0
AUTO_EXCLUDE_SHARE = 10  # at most 1 in 10 quantized layers stays float


def prepare_for_quantization(src: Path, dst: Path) -> None:
    """Drop stale shape annotations and run ORT's symbolic shape inference: ORT's quantizer fails on
    fused graphs (contrib ops) without it."""
    import onnx
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    model = onnx.load(str(src))
    del model.graph.value_info[:]
    try:
        # when it cannot infer every shape it saves sym_shape_infer_temp.onnx (and its weights) in the current
        # folder before raising: that folder is the scratch one here, never the user's
        with _working_folder(Path(dst).resolve().parent):
            model = SymbolicShapeInference.infer_shapes(model, auto_merge=True)
    except Exception:  # noqa: BLE001 - plain ONNX shape inference is the fallback
        model = onnx.shape_inference.infer_shapes(model)
    onnx.save(model, str(dst))


@contextlib.contextmanager
def _working_folder(folder: Path) -> Iterator[None]:
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


class CalibrationReader:
    """Feeds calibration samples to ORT's static quantizer, checked against the model's inputs."""

    def __init__(self, path: Path, samples: Sequence[dict[str, Any]]) -> None:
        from ...runtime.onnxfile import load_proto, signature

        inputs = {i.name: i for i in signature(load_proto(path))[0]}
        self.samples: list[dict[str, np.ndarray]] = []
        for n, sample in enumerate(samples):
            if not hasattr(sample, "keys"):
                raise CalibrationError(f"calibration[{n}] is a {type(sample).__name__}; each item must be a dict "
                                       "of input name -> array.")
            feed = {}
            for name, info in inputs.items():
                if name not in sample:
                    raise CalibrationError(
                        f"calibration[{n}] has no input {name!r} (it has {', '.join(map(repr, sample)) or 'none'}); "
                        f"each item must map every model input ({', '.join(inputs)}) to an array.")
                value = np.asarray(sample[name].detach().numpy() if hasattr(sample[name], "detach") else sample[name])
                if value.ndim != len(info.shape) or any(isinstance(d, int) and d != s
                                                        for d, s in zip(info.shape, value.shape)):
                    raise CalibrationError(
                        f"calibration[{n}][{name!r}] has shape {list(value.shape)}, but the model expects "
                        f"{info.shape}."
                    )
                feed[name] = value.astype(np.dtype(info.dtype)) if info.dtype in np.sctypeDict else value
            self.samples.append(feed)
        self._iter = iter(self.samples)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._iter, None)

    def rewind(self) -> None:
        self._iter = iter(self.samples)


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


def int8_method(path: Path) -> tuple[str, str]:
    """The INT8 method that serves this graph: static QDQ for convolutional networks (dynamic quantization
    re-measures every activation at run time and leaves convolutions slower than fp32 on CPU), dynamic for
    the rest (transformers keep their accuracy only with per-batch activation scales)."""
    from ...runtime.onnxfile import load_proto, op_histogram

    ops = op_histogram(load_proto(path))
    convs = sum(n for op, n in ops.items() if op.split(".")[-1] in ("Conv", "FusedConv", "NhwcConv"))
    matmuls = ops.get("MatMul", 0) + ops.get("Gemm", 0)
    if convs and convs >= matmuls:
        return "static", f"auto: {convs} Conv against {matmuls} MatMul/Gemm, a convolutional network: static QDQ"
    return "dynamic", f"auto: {matmuls} MatMul/Gemm against {convs} Conv: dynamic (per-batch activation scales)"


def quantize(onnx_model: Any, *, method: str = "dynamic", per_channel: bool | None = None,
             calibration: Iterable[dict[str, Any]] | str | None = None, exclude: Sequence[str] | str | None = "auto",
             reference: Any = None, op_types: Sequence[str] | None = None, block_size: int = 32,
             accuracy_level: int | str | None = "auto",
             out: str | os.PathLike[str] | None = None, overwrite: bool = False, validate: bool = True,
             providers: Any = ("cpu",), sample: Any = None) -> Variant:
    """A quantized variant of ``onnx_model`` (a path, an ExportResult or a Variant), re-validated
    against the fp32 reference.

    ``method``: ``"auto"`` picks the INT8 method for the family (static QDQ with generated calibration unless
    given for convolutional networks, dynamic for transformers; the recipe says why), ``"dynamic"`` INT8
    (weights INT8, activations quantized on the fly; per-channel by default, which keeps transformer
    embeddings at cosine ≥ 0.99 where per-tensor drops), ``"static"``
    INT8 in QDQ format (needs ``calibration``: a list of input dicts, or ``"generated"`` for synthetic
    inputs), ``"fp16"`` (for GPU providers), ``"int4"`` weight-only MatMulNBits (``block_size``;
    ``accuracy_level``: ``"auto"`` computes in INT8 (level 4, the fast CPU path) for decoders with a cache,
    whose decoding is bound by reading weights, and in fp32 (None) for the rest, whose accuracy it keeps).
    ``exclude`` names nodes to keep in float; ``"auto"`` (INT8 default) quantizes once, measures every
    layer alone with :func:`quant_debug`, and keeps in float the few layers (at most 1 in 10) that fall
    more than 3 dB below the median layer's SQNR; the recipe records which.
    """
    if method not in METHODS:
        raise InvalidArgumentError(f"method={method!r}: choose one of {', '.join(METHODS)}.")
    rule = ""
    if method == "auto":
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
    auto_exclude = exclude == "auto" and method in ("dynamic", "static")
    excluded = [] if isinstance(exclude, str) else list(exclude or [])
    recipe: dict[str, Any] = {"method": method, **({"method_rule": rule} if rule else {})}
    if method in ("dynamic", "static"):
        recipe.update(per_channel=per_channel, weight_type="int8", exclude=excluded)
    runtime = dict(getattr(onnx_model, "runtime", None) or {})
    calib_items: list[dict[str, Any]] | None = None
    static_source: Path | None = None
    if method == "static":
        calib_items, static_source = _static_inputs(onnx_model, calibration, recipe)
    if method == "int4":
        accuracy_level = _int4_settings(onnx_model, accuracy_level, block_size, recipe)

    def write(src: Path, staged: Path) -> list[str]:
        from ...runtime.files import scratch_dir, temp_inside
        from ..export.exporters import quiet

        warnings: list[str] = []
        with scratch_dir("onnx-nb-quant-") as scratch, quiet(warnings, []), temp_inside(scratch):
            prepared = Path(scratch) / "prepared.onnx"
            try:
                _quantize(method, static_source or src, prepared, staged, per_channel, excluded, op_types,
                          calib_items, block_size,
                          accuracy_level if isinstance(accuracy_level, int) else None,
                          bool(recipe.get("gemm_as_matmul")))
            except OnnxNbError:
                raise
            except Exception as exc:
                raise QuantizationError(f"{method} quantization failed: {type(exc).__name__}: "
                                        f"{first_line(exc)}") from exc
        return [w for w in warnings if "pre-processing before quantization" not in w]

    tag, name = _tag_and_name(method, per_channel, block_size, bool(runtime.get("unpad")))
    variant = make(onnx_model, tag, name, recipe, write, out=out, overwrite=overwrite, validate=validate,
                   runtime=runtime, providers=providers, sample=sample, reference=reference)
    if auto_exclude:
        variant = _auto_exclude(variant, excluded, recipe, validate, sample,
                                lambda: make(onnx_model, tag, name, recipe, write, out=variant.path, overwrite=True,
                                             validate=validate, runtime=runtime, providers=providers, sample=sample,
                                             reference=reference))
    # the call that made this variant, for quant_debug's requantize(): every setting and the calibration data kept
    call = {"method": method, "per_channel": per_channel, "calibration": calibration if calib_items is None else
            calib_items, "exclude": exclude, "reference": reference, "op_types": op_types, "block_size": block_size,
            "accuracy_level": accuracy_level, "validate": validate, "providers": providers, "sample": sample}
    variant.remake = functools.partial(quantize, onnx_model, **call, out=variant.path, overwrite=True)
    return variant


def _auto_exclude(variant: Variant, excluded: list[str], recipe: dict[str, Any], validate: bool, sample: Any,
                  remake: Any) -> Variant:
    """Keep in float, one at a time, the layer that loses the most accuracy on its own, until the variant
    passes its parity policy (or, without validation, every layer far below the median), at most 1 in 10."""
    from .debugging import quant_debug

    report = quant_debug(None, variant, sample, gap_db=AUTO_EXCLUDE_GAP_DB, max_suggestions=10_000)
    cap = max(1, len(report.layers) // AUTO_EXCLUDE_SHARE)
    recipe["exclude_rule"] = (f"auto: the worst layers alone (quant_debug) until parity passes, at most 1 in "
                              f"{AUTO_EXCLUDE_SHARE}" if validate else
                              f"auto: layers more than {AUTO_EXCLUDE_GAP_DB:g} dB below the median SQNR, "
                              f"at most 1 in {AUTO_EXCLUDE_SHARE}")
    if not validate:
        excluded[:] = report.suggested[:cap]
        recipe["exclude"] = list(excluded)
        return remake() if excluded else variant  # the file is ours: made a moment ago
    while not variant and len(excluded) < cap:
        worst = next((layer.parent_node for layer in report.layers if layer.parent_node not in excluded), None)
        if worst is None:
            break
        excluded.append(worst)
        recipe["exclude"] = list(excluded)
        variant = remake()
        report = quant_debug(None, variant, sample, gap_db=AUTO_EXCLUDE_GAP_DB, max_suggestions=10_000)
    recipe["exclude"] = list(excluded)
    variant.recipe = dict(recipe)
    return variant


CONV_FUSIONS = ("FusedConv", "NhwcConv", "FusedGemm", "QLinearConv")


def conv_fusions(path: Path) -> list[str]:
    """ORT's convolution fusions in a graph (an optimize() at graph level extended or all)."""
    from ...runtime.onnxfile import load_proto

    nodes = load_proto(path).graph.node
    return sorted({n.op_type for n in nodes if n.domain == "com.microsoft" and n.op_type in CONV_FUSIONS})


def standard_attention(path: Path) -> list[str]:
    """ONNX's own ``Attention`` nodes (opset 23): ORT's quantizer takes every ``Attention`` for its contrib op
    and would write a ``QAttention`` the runtime rejects; they stay in float (their projections are MatMuls)."""
    from ...runtime.onnxfile import load_proto

    return [n.name for n in load_proto(path).graph.node if n.op_type == "Attention" and n.domain in ("", "ai.onnx")]


def _quantize(method: str, src: Path, prepared: Path, staged: Path, per_channel: bool, excluded: list[str],
              op_types: Sequence[str] | None, calib: list[dict[str, Any]] | None, block_size: int,
              accuracy_level: int | None = None, gemm_as_matmul: bool = False) -> None:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static

    if method in ("dynamic", "static"):
        excluded = [*excluded, *standard_attention(src)]
    if method == "dynamic":
        prepare_for_quantization(src, prepared)
        quantize_dynamic(str(prepared), str(staged), weight_type=QuantType.QInt8, per_channel=per_channel,
                         nodes_to_exclude=excluded, op_types_to_quantize=list(op_types) if op_types else None,
                         # float for weights whose type shape inference cannot see (behind contrib ops)
                         extra_options={"MatMulConstBOnly": True, "DefaultTensorType": 1})
    elif method == "static":
        prepare_for_quantization(src, prepared)
        assert calib is not None
        quantize_static(str(prepared), str(staged), CalibrationReader(prepared, calib), quant_format=QuantFormat.QDQ,
                        per_channel=per_channel, weight_type=QuantType.QInt8, activation_type=QuantType.QUInt8,
                        nodes_to_exclude=excluded, op_types_to_quantize=list(op_types) if op_types else None,
                        extra_options={"MatMulConstBOnly": True})
    elif method == "fp16":
        import onnx
        from onnxruntime.transformers.float16 import convert_float_to_float16

        model = convert_float_to_float16(onnx.load(str(src)), keep_io_types=True, disable_shape_infer=False)
        onnx.save(model, str(staged))
    else:
        import onnx
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

        model = onnx.load(str(src))
        if gemm_as_matmul:
            gemm_to_matmul(model)
        # accuracy level 4: int8 compute on CPU, the fast path for decoding (as onnxruntime-genai uses)
        quantizer = MatMulNBitsQuantizer(model, block_size=block_size, is_symmetric=True,
                                         accuracy_level=accuracy_level, nodes_to_exclude=excluded)
        quantizer.process()
        quantizer.model.save_model_to_file(str(staged), use_external_data_format=False)


def gemm_to_matmul(model: Any) -> int:
    """Rewrite ``Gemm(A, W, C)`` with a constant 2-D weight (alpha = beta = 1, A not transposed) as ``MatMul``
    + ``Add``, in place: ORT's INT4 quantizer only turns ``MatMul`` into ``MatMulNBits``, and GPT-2-like
    exports carry their projections as ``Gemm``. Returns how many were rewritten."""
    import onnx
    from onnx import helper, numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    nodes = []
    done = 0
    for node in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        weight = inits.get(node.input[1]) if node.op_type == "Gemm" and len(node.input) >= 2 else None
        if weight is None or len(weight.dims) != 2 or attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0 \
                or attrs.get("beta", 1.0) != 1.0:
            nodes.append(node)
            continue
        w_name = node.input[1]
        if attrs.get("transB", 0):
            array = numpy_helper.to_array(weight).T.copy()
            w_name = f"{node.input[1]}_transposed"
            model.graph.initializer.append(numpy_helper.from_array(array, w_name))
        bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
        product = f"{node.output[0]}_matmul" if bias else node.output[0]
        nodes.append(helper.make_node("MatMul", [node.input[0], w_name], [product], name=node.name or None))
        if bias:
            nodes.append(helper.make_node("Add", [product, bias], [node.output[0]], name=f"{node.name}_bias"))
        done += 1
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    used = {i for n in model.graph.node for i in n.input}
    keep = [i for i in model.graph.initializer if i.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)
    del onnx
    return done


def _static_inputs(onnx_model: Any, calibration: Any,
                   recipe: dict[str, Any]) -> tuple[list[dict[str, Any]], Path | None]:
    """Static INT8's calibration items (checked against the model's inputs before any work) and the file to
    quantize when it is not the parent (the export, when the parent's ORT fusions hide its convolutions)."""
    if isinstance(calibration, str):
        if calibration != "generated":
            raise CalibrationError(f"calibration={calibration!r}: pass a list of input dicts or 'generated'.")
        items = generated_calibration(onnx_model)
    else:
        items = list(calibration or [])
    if not items:
        raise CalibrationError("The calibration data is empty; give at least one input dict.")
    recipe.update(calibration="generated" if calibration == "generated" else f"{len(items)} samples",
                  format="QDQ", activation_type="uint8")
    parent_path, parent_ref, _ = parent_of(onnx_model)
    CalibrationReader(parent_path, items)  # checks shapes before any work
    fused = conv_fusions(parent_path)
    if not (fused and getattr(parent_ref, "path", None) is not None):
        return items, None
    # ORT's FusedConv hides each Conv from the QDQ quantizer (left in float, and the calibration chain broken:
    # "Unable to get valid quantization scale"); the runtime fuses the QDQ graph itself at load
    source = Path(parent_ref.path)
    recipe["quantized_from"] = (f"the export {source.name}: the parent's ORT fusions ({', '.join(fused)}) hide its "
                                "convolutions from the QDQ quantizer; ONNX Runtime fuses the QDQ graph itself when "
                                "it loads it")
    return items, source


def _int4_settings(onnx_model: Any, accuracy_level: int | str | None, block_size: int,
                   recipe: dict[str, Any]) -> int | str | None:
    """INT4 for a decoder with its cache (decoding reads every weight per token): int8 compute (accuracy level 4)
    and its Gemm projections (GPT-2's) in INT4 too; elsewhere accuracy comes first (fp32 compute)."""
    from ...runtime.onnxfile import load_proto

    decoder = any(i.name.startswith("past_key_values.") for i in load_proto(parent_of(onnx_model)[0]).graph.input)
    if accuracy_level == "auto":
        accuracy_level = 4 if decoder else None
    recipe.update(block_size=block_size, symmetric=True, accuracy_level=accuracy_level, gemm_as_matmul=decoder)
    return accuracy_level


def _tag_and_name(method: str, per_channel: bool, block_size: int, unpad: bool) -> tuple[str, str]:
    tag = {"dynamic": "int8", "static": "int8-static", "fp16": "fp16", "int4": "int4"}[method]
    name = {"dynamic": f"int8-dynamic({'per-channel' if per_channel else 'per-tensor'})",
            "static": "int8-static(QDQ)", "fp16": "fp16", "int4": f"int4-weight(block {block_size})"}[method]
    return tag, name + ("+unpad" if unpad else "")
