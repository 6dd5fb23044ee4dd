"""INT8 for vision files: static INT8's calibration inputs (a folder of images among them), the convolution fusions
that hide a file's convolutions from the QDQ quantizer, and the part of a detector kept in float."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import CalibrationError
from ...results.variant import Recipe

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")
DETECTOR_TASKS = ("detect", "segment", "pose", "obb")


def image_calibration(folder: Path, path: Path, limit: int = 100) -> list[dict[str, Any]]:
    """One input dict per image in ``folder`` (at most ``limit``, sorted by name) for a file whose one input is an
    image batch (batch, 3, height, width): RGB scaled to [0, 1], resized to the file's size, or to 640 along a
    dynamic axis (Ultralytics' and most detectors' preprocessing without the letterbox padding)."""
    from ...runtime.sessions import session as open_session

    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)[:limit]
    if not files:
        raise CalibrationError(f"{folder} holds no images ({', '.join(IMAGE_SUFFIXES)}); pass a folder of "
                               "representative images, or a list of input dicts.")
    inputs = open_session(path).get_inputs()
    if len(inputs) != 1 or len(inputs[0].shape) != 4 or inputs[0].shape[1] not in (1, 3):
        raise CalibrationError(f"A folder of images calibrates a file with one image input (batch, 3, height, "
                               f"width); this one takes {', '.join(f'{i.name} {i.shape}' for i in inputs)}. "
                               "Pass a list of input dicts.")
    name, shape = inputs[0].name, inputs[0].shape
    height, width = (d if isinstance(d, int) and d > 0 else 640 for d in shape[2:])
    from PIL import Image

    items = []
    for file in files:
        with Image.open(file) as image:
            pixels = np.asarray(image.convert("RGB" if shape[1] == 3 else "L").resize((width, height)), np.float32)
        pixels = pixels.reshape(height, width, -1).transpose(2, 0, 1) / 255.0
        items.append({name: pixels[None]})
    return items


def detector_decoding(path: Path) -> tuple[list[str], str]:
    """The nodes of an Ultralytics detection head's box arithmetic (anchor points, strides, corners), its class
    sigmoid and final concatenation, and of the suppression after them, kept in float by INT8: quantizing pixel
    coordinates and class scores together to one 8-bit scale flattens every score (ONNX Runtime's
    ``quantize_static`` on Ultralytics' file: class-score cosine 0.0 against PyTorch). The convolutions, where the
    time goes, and the distribution's softmax stay quantized (the softmax in float cost 10% of the run on 2 cores).
    Empty for any other file."""
    from ...runtime.onnxfile import load_proto
    from ..parity.localize import module_of

    proto = load_proto(path)
    meta = {p.key: p.value for p in proto.metadata_props}
    if meta.get("task") not in DETECTOR_TASKS or "stride" not in meta:
        return [], ""
    modules = {n.name: module_of(n) or "" for n in proto.graph.node}
    if not any(n.name for n in proto.graph.node):
        return [], ""
    dfl = next((m for m in modules.values() if m.split(".")[-1] == "dfl" or ".dfl." in m), None)
    if dfl is None:  # TorchScript names: /model.22/dfl/conv/Conv
        dfl_node = next((n.name for n in proto.graph.node if "/dfl/" in n.name), None)
        if dfl_node is None:
            return [], ""
        head = dfl_node.split("/dfl/")[0] + "/"
        keep = [n.name for n in proto.graph.node if n.name.startswith(head) and n.name.count("/") == head.count("/")]
    else:
        head = dfl[: dfl.index("dfl")].rstrip(".")
        keep = [name for name, m in modules.items() if m == head]  # the head's own code, not its submodules
    # after the head: the suppression and the code around it, outside any module (graph order is run order)
    head_nodes = set(keep)
    first = min((i for i, n in enumerate(proto.graph.node) if n.name in head_nodes), default=len(proto.graph.node))
    nms = any(n.op_type == "NonMaxSuppression" for n in proto.graph.node)
    after = [n.name for n in proto.graph.node[first:] if nms and not modules[n.name]]
    names = sorted(set(keep) | set(after))
    return names, (f"{len(names)} nodes of the detection head's box arithmetic, class sigmoid"
                   f"{', suppression' if after else ''} and concatenation kept in float (8 bits for pixels and "
                   "scores together flattens the scores); its convolutions and softmax quantized")


UNET_OP_TYPES = ("Conv", "MatMul", "Gemm")


def unet_op_types(path: Path) -> tuple[list[str], str]:
    """Static INT8 for a diffusion UNet (``export(pipeline)``'s ``unet.onnx``): its convolutions and weight
    MatMuls in QDQ, the rest float (ORT's default list also quantizes the normalizations, reshapes and resizes
    between them: on the benchmark's UNet that failed parity, cosine below 0.98, where these three pass at 0.988
    and run faster). Nothing for other graphs."""
    from ...runtime.facts import file_facts

    if not file_facts(path).unet:
        return [], ""
    return list(UNET_OP_TYPES), ("a diffusion UNet: convolutions and weight MatMuls in INT8; normalizations, "
                                 "attention scores and the rest float (quantizing them fails parity)")


CONV_FUSIONS = ("FusedConv", "NhwcConv", "FusedGemm", "QLinearConv")


def conv_fusions(path: Path) -> list[str]:
    """ORT's convolution fusions in a graph (an optimize() at graph level extended or all)."""
    from ...runtime.onnxfile import load_proto

    nodes = load_proto(path).graph.node
    return sorted({n.op_type for n in nodes if n.domain == "com.microsoft" and n.op_type in CONV_FUSIONS})


def static_inputs(onnx_model: Any, calibration: Any,
                   recipe: Recipe) -> tuple[list[dict[str, Any]], Path | None]:
    """Static INT8's calibration items (checked against the model's inputs before any work) and the file to
    quantize when it is not the parent (the export, when the parent's ORT fusions hide its convolutions)."""
    from .ort_quantizer import CalibrationReader
    from .variants import generated_calibration, parent_of

    if isinstance(calibration, (str, os.PathLike)) and Path(calibration).is_dir():
        items = image_calibration(Path(calibration), parent_of(onnx_model)[0])
        recipe["calibration_images"] = str(calibration)
    elif isinstance(calibration, str):
        if calibration != "generated":
            raise CalibrationError(f"calibration={calibration!r}: pass a list of input dicts, a folder of images "
                                   "or 'generated'.")
        items = generated_calibration(onnx_model)
    else:
        items = list(calibration or [])
    if not items:
        raise CalibrationError("The calibration data is empty; give at least one input dict.")
    recipe.update({"calibration": "generated" if calibration == "generated" else f"{len(items)} samples",
                   "format": "QDQ", "activation_type": "uint8"})
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
