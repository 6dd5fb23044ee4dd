"""INT8 for vision files: calibration from a folder of images, and the part of a detector kept in float."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...errors import CalibrationError

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
