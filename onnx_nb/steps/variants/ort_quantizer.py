"""ONNX Runtime's quantizers run on one file: shape inference first, dynamic and static INT8, fp16 and INT4
(MatMulNBits) written into a staging path. ``quantize()`` (quantizing.py) decides what to ask for and re-validates;
``optimize(then="int8")`` (optimizing.py) times the INT8 files of its attention routes with the same call."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import CalibrationError
from ...results.variant import Recipe
from ...runtime.memory import gives_memory_back
from ...runtime.onnxedit import save_proto, sort_file, untie
from ...runtime.onnxfile import load_proto, signature, total_file_size


def is_big(path: Path) -> bool:
    """The file and its external data hold more than one protobuf message can (2 GB, less room for the graph):
    every step that writes it writes its weights as external data."""
    from ...runtime import onnxfile

    return total_file_size(Path(path), load_proto(path)) > onnxfile.EXTERNAL_DATA_BYTES


def has_external_data(path: Path) -> bool:
    """Whether the file keeps weights in a data file beside it (what :mod:`.by_reference` leaves on disk)."""
    from ...runtime.onnxfile import files_of

    return len(files_of(Path(path), load_proto(path))) > 1


def prepare_for_quantization(src: Path, dst: Path, big: bool | None = None, by_reference: bool = True) -> None:
    """Drop stale shape annotations and run ORT's symbolic shape inference: ORT's quantizer fails on
    fused graphs (contrib ops) without it. A file over 2 GB is written with external data and inferred from the
    file (ONNX's path-based inference; the symbolic one needs the whole model in one protobuf message)."""
    import onnx
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    big = is_big(src) if big is None else big
    model = _loaded(src, big and by_reference)
    untie(model)  # a tied LM head's weight an initializer again: ORT's quantizer only quantizes those
    del model.graph.value_info[:]
    if big:
        save_proto(model, dst, True)
        del model
        onnx.shape_inference.infer_shapes_path(str(dst), str(dst))
        return
    try:
        # when it cannot infer every shape it saves sym_shape_infer_temp.onnx (and its weights) in the current
        # folder before raising: that folder is the scratch one here, never the user's
        with _working_folder(Path(dst).resolve().parent):
            model = SymbolicShapeInference.infer_shapes(model, auto_merge=True)
    except Exception:  # noqa: BLE001 - plain ONNX shape inference is the fallback
        model = onnx.shape_inference.infer_shapes(model)
    onnx.save(model, str(dst))


def _loaded(src: Path, big: bool) -> Any:
    """The model at ``src``; a big one with its weights left in its data file (:mod:`.by_reference`: read as the
    quantizer asks for them, inside :func:`~.by_reference.reading`)."""
    import onnx

    from .by_reference import referenced

    return referenced(src) if big else onnx.load(str(src))


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


def kept_in_float(path: Path, dynamic: bool) -> list[str]:
    """Nodes ORT's INT8 quantizers must leave alone: ONNX's own ``Attention`` nodes (opset 23; ORT's quantizer takes
    every ``Attention`` for its contrib op and would write a ``QAttention`` the runtime rejects; their projections
    are MatMuls) and the Add + LayerNormalization pairs ``norms`` wrote (float, as the fused op they replace). With
    ``dynamic``, also the MatMuls whose constant weight has a batch axis (Llama 4's experts: ``bmm`` of every
    expert's [experts, hidden, 2 x intermediate] at once): dynamic INT8 would write a DynamicQuantizeMatMul, whose
    kernel takes a 2-D weight only and fails when run; and the Convs whose weight is computed in the graph (a
    weight-normed convolution, SEW-D's positional one: ``g * v / ||v||``), which ORT's ConvInteger path needs as a
    constant and refuses."""
    from .norms import written

    proto = load_proto(path)
    ranks = {i.name: len(i.dims) for i in proto.graph.initializer} if dynamic else {}
    return [n.name for n in proto.graph.node if (n.op_type == "Attention" and n.domain in ("", "ai.onnx"))
            or (n.op_type == "MatMul" and ranks.get(n.input[1], 2) > 2)
            or (dynamic and n.op_type == "Conv" and n.input[1] not in ranks)] + written(proto)


@gives_memory_back  # each route's copies of the graph go before the next is made
def run_quantizer(method: str, src: Path, prepared: Path, staged: Path, per_channel: bool, excluded: list[str],
                  op_types: Sequence[str] | None, calib: list[dict[str, Any]] | None, block_size: int,
                  accuracy_level: int | None = None, gemm_as_matmul: bool = False, scheme: str = "u8s8",
                  made_for: str = "", algorithm: str = "rtn", lm_head_bits: int = 4,
                  eight_bit: Sequence[str] | str = (), outlier_feed: dict[str, Any] | None = None) -> Recipe:
    """Quantize ``src`` into ``staged``. Dynamic INT8 given ``outlier_feed`` (the file's sample) splits the MatMuls
    whose input has outlier channels on it (:mod:`.outlier_channels`; not over 2 GB). INT8 takes ``scheme``
    (:data:`onnx_nb.runtime.cpu.SCHEMES`: the weights' type and range, chosen for the CPU the file is made for,
    ``made_for``), written into the file's metadata.
    INT4 writes the MatMuls named in ``eight_bit`` (``"all"``: every one) at 8 bits, symmetric round-to-nearest.
    Returns what the algorithm chose that the recipe should keep (AWQ: ``awq_alpha``, the alpha per MatMul).
    A file over 2 GB is quantized with its weights left in its data file (:mod:`.by_reference`)."""
    from .by_reference import materialize, reading

    big = is_big(src)  # the weights as external data, in and out (one protobuf message holds 2 GB)
    with reading() if big else contextlib.nullcontext():
        chose = _quantized(method, src, prepared, staged, per_channel, excluded, op_types, calib, block_size,
                           accuracy_level, gemm_as_matmul, scheme, made_for, algorithm, lm_head_bits, eight_bit,
                           outlier_feed, big)
    if big and method != "static":  # static INT8 calibrates in sessions, which take no weight left elsewhere
        materialize(staged)
    return chose


def _quantized(method: str, src: Path, prepared: Path, staged: Path, per_channel: bool, excluded: list[str],
               op_types: Sequence[str] | None, calib: list[dict[str, Any]] | None, block_size: int,
               accuracy_level: int | None, gemm_as_matmul: bool, scheme: str, made_for: str, algorithm: str,
               lm_head_bits: int, eight_bit: Sequence[str] | str, outlier_feed: dict[str, Any] | None,
               big: bool) -> Recipe:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static

    from ...runtime.cpu import SCHEMES
    from .per_channel import vectorized_per_channel
    from .shape_inference import weightless_shape_inference

    chose: Recipe = {}
    if method in ("dynamic", "static"):
        excluded = [*excluded, *kept_in_float(src, dynamic=method == "dynamic")]
    weights, reduce_range, _ = SCHEMES[scheme]
    weight_type = QuantType.QInt8 if weights == "int8" else QuantType.QUInt8
    if method == "dynamic":
        prepare_for_quantization(src, prepared, big)
        if outlier_feed is not None and not big:
            from .outlier_channels import split

            floats, line = split(prepared, outlier_feed)
            excluded = [*excluded, *floats]
            chose.update(line)
        # ORT's numbers, without its Python call per output channel nor its copies of the model to infer shapes
        with vectorized_per_channel(), weightless_shape_inference():
            quantize_dynamic(str(prepared), str(staged), weight_type=weight_type, per_channel=per_channel,
                             reduce_range=reduce_range,
                             nodes_to_exclude=excluded, op_types_to_quantize=list(op_types) if op_types else None,
                             # float for weights whose type shape inference cannot see (behind contrib ops)
                             extra_options={"MatMulConstBOnly": True, "DefaultTensorType": 1},
                             use_external_data_format=big)
        finish_int8(staged, scheme, made_for)
    elif method == "static":
        prepare_for_quantization(src, prepared, big, by_reference=False)
        # GroupNorm exported as Reshape -> InstanceNormalization -> Reshape (diffusers' UNet and VAE): ORT's QDQ
        # quantizer gives the normalization's output its input's parameters and fails on the shared weight ("shared
        # mode is not supported for weight"); ORT's CPU kernels have no INT8 normalization, so it stays float
        excluded = [*excluded, *(n.name for n in load_proto(prepared).graph.node
                                 if n.op_type == "InstanceNormalization" and n.name)]
        assert calib is not None
        with weightless_shape_inference():
            quantize_static(str(prepared), str(staged), CalibrationReader(prepared, calib),
                            quant_format=QuantFormat.QDQ, per_channel=per_channel, weight_type=weight_type,
                            activation_type=QuantType.QUInt8, reduce_range=reduce_range,
                            nodes_to_exclude=excluded, op_types_to_quantize=list(op_types) if op_types else None,
                            extra_options={"MatMulConstBOnly": True}, use_external_data_format=big)
        finish_int8(staged, scheme, made_for)
    elif method == "fp16":
        from onnxruntime.transformers.float16 import convert_float_to_float16
        from onnxruntime.transformers.onnx_model import OnnxModel

        from .float16_weights import fast_float16_weights

        with fast_float16_weights():  # ORT's conversion, its weights' arithmetic in blocks (the same numbers)
            model = convert_float_to_float16(_loaded(src, big), keep_io_types=True, disable_shape_infer=big)
        OnnxModel(model).topological_sort()  # the Casts for kept fp32 inputs are appended after their consumers
        save_proto(model, staged, big)
    else:
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

        model = _loaded(src, big)
        untie(model)
        if gemm_as_matmul:
            gemm_to_matmul(model)
        from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig

        def eights(model: Any, **which: Any) -> Any:
            return MatMulNBitsQuantizer(model, bits=8, block_size=block_size, is_symmetric=True,
                                        accuracy_level=accuracy_level, **which,
                                        algo_config=DefaultWeightOnlyQuantConfig(
                                            block_size=block_size, is_symmetric=True, accuracy_level=accuracy_level,
                                            bits=8))

        head = lm_head(model) if lm_head_bits == 8 else None
        eight = [] if eight_bit == "all" else [*eight_bit, *([head] if head else [])]
        if eight_bit == "all":
            quantizer = eights(model, nodes_to_exclude=list(excluded))
        else:
            if algorithm == "awq":  # channel scales folded in, then round-to-nearest blocks
                from .int4_awq import rescale

                chose["awq_alpha"] = rescale(model, list(calib or []), block_size, {*excluded, *eight},
                                             prepared.parent)
            algo_config, symmetric = int4_config(algorithm, block_size, calib)
            # accuracy level 4: int8 compute on CPU, the fast path for decoding (as onnxruntime-genai uses)
            quantizer = MatMulNBitsQuantizer(model, block_size=block_size, is_symmetric=symmetric,
                                             accuracy_level=accuracy_level, nodes_to_exclude=[*excluded, *eight],
                                             algo_config=algo_config)
            if algorithm == "gptq":  # the quantizer tells RTN's node table of its exclusions, not GPTQ's
                skip, table = set(quantizer.nodes_to_exclude), quantizer._generate_q4_node_config
                quantizer._generate_q4_node_config = lambda: {k: "fp32" if k in skip else v
                                                              for k, v in table().items()}
        from .int4_gptq import corrected, grouped_runs

        # GPTQ's column updates as the method defines them (ONNX Runtime's read zeros: int4_gptq), its calibration
        # runs grouped (ONNX Runtime's runs the whole model once per MatMul input and item)
        with corrected() if algorithm == "gptq" and eight_bit != "all" else contextlib.nullcontext(), \
                grouped_runs(len(calib or [])) if algorithm == "gptq" else contextlib.nullcontext():
            quantizer.process()
        if eight:  # the LM head and the layers measured most sensitive at 8 bits (mixed precision)
            # (nodes_to_include adds to the MatMuls a pass takes, it does not limit them: the float ones stay out)
            quantizer = eights(quantizer.model.model, nodes_to_include=eight, nodes_to_exclude=list(excluded))
            quantizer.process()
        proto = quantizer.model.model  # k-quant's path writes com.microsoft ops without declaring their domain
        if not any(o.domain == "com.microsoft" for o in proto.opset_import):
            proto.opset_import.add(domain="com.microsoft", version=1)
        quantizer.model.save_model_to_file(str(staged), use_external_data_format=big)
        sort_file(staged)  # its sort, as it saves, leaves a Loop before what its body reads
    return chose


def finish_int8(path: Path, scheme: str, made_for: str) -> None:
    """The INT8 scheme and the CPU it was chosen for, in the file's metadata (its weights left where they are):
    a file opened on another kind of CPU says so (:func:`onnx_nb.runtime.cpu.mismatch`). The shapes the quantizer
    was given (:func:`prepare_for_quantization`) are dropped: symbolic inference guesses the parts of a data-sized
    Split as equal (JetMoE's attention experts: ``batch*sequence/2`` each), which ONNX Runtime then enforces and
    fails on; it infers the file's shapes itself when it loads it."""
    import onnx

    from ...runtime.cpu import SCHEME_KEY, TARGET_KEY

    model = onnx.load(str(path), load_external_data=False)
    del model.graph.value_info[:]
    keep = [p for p in model.metadata_props if p.key not in (SCHEME_KEY, TARGET_KEY)]
    del model.metadata_props[:]
    model.metadata_props.extend(keep)
    for key, value in ((SCHEME_KEY, scheme), (TARGET_KEY, made_for)):
        if value:
            model.metadata_props.add(key=key, value=value)
    save_proto(model, path, False)


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


def int4_config(algorithm: str, block_size: int, calib: list[dict[str, Any]] | None) -> tuple[Any, bool]:
    """ONNX Runtime's algorithm configuration for ``algorithm`` and whether its blocks are symmetric (GPTQ reads
    its calibration inputs, ``calib``, through the quantizer's own copy of Intel Neural Compressor)."""
    from onnxruntime.quantization import matmul_nbits_quantizer as q

    if algorithm == "gptq":
        return q.GPTQWeightOnlyQuantConfig(calibration_data_reader=list(calib or [])), False

    if algorithm == "hqq":
        return q.HQQWeightOnlyQuantConfig(block_size=block_size, bits=4), False
    if algorithm == "k_quant":
        return q.KQuantWeightOnlyQuantConfig(), False
    if algorithm == "rtn_asym":  # the quantizer's default with a zero point per block
        return None, False
    return None, True  # rtn, and awq after its channel scales: the quantizer's default (symmetric blocks)

def lm_head(model: Any) -> str | None:
    """The name of the MatMul with a constant weight that makes the ``logits`` output (through an Add, Reshape or
    Cast at most), or None."""
    producer = {o: n for n in model.graph.node for o in n.output}
    weights = {i.name for i in model.graph.initializer}
    name = next((o.name for o in model.graph.output if o.name == "logits"), None)
    for _ in range(4):
        node = producer.get(name) if name else None
        if node is None:
            return None
        if node.op_type == "MatMul" and len(node.input) > 1 and node.input[1] in weights:
            return str(node.name) or None
        name = node.input[0] if node.op_type in ("Add", "Reshape", "Cast", "Identity") else None
    return None
