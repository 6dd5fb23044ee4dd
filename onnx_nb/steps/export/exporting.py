"""``export()``: any model onnx-nb knows to a checked ONNX file (or, for a pipeline or SAM, a folder of them).

One argument table checks the arguments before anything is loaded (:mod:`.args`); one registry recognises the model
(:mod:`.adapters.registry`); its adapter refuses what it does not take, opens the model once and exports it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from ...results.export import ExportResult
from ...results.parts import PartsExport
from ...runtime.files import cleans_up_folders
from ...runtime.memory import gives_memory_back
from .args import ExportArgs


@gives_memory_back
@cleans_up_folders
def export(
    model: Any,
    sample: Any = None,
    *,
    task: str | None = None,
    out: str | os.PathLike[str] | None = None,
    opset: int | None = None,
    dynamic: bool | Mapping[str, Mapping[int, str]] = True,
    exporter: str = "auto",
    overwrite: bool = False,
    progress: bool = True,
    name: str | None = None,
    allow_pickle: bool = False,
    cache: bool | str = "auto",
    precision: str | None = None,
    algorithm: str | None = None,
    lm_head_bits: int | None = None,
    block_size: int | None = None,
    nms: bool | Mapping[str, Any] = False,
) -> ExportResult | PartsExport:
    """Export ``model`` to ONNX and check the file in ONNX Runtime at a shape other than the sample's.

    ``model``: a ``torch.nn.Module`` (then ``sample`` is needed: a tensor, tuple or dict), a Hugging
    Face model object, a local Hugging Face folder, or a hub id. ``exporter="auto"`` tries the
    dynamo exporter, then TorchScript; the result says which was used and why the other was not.
    ``name`` names the model in results and in the default output folder. A model exported as several files (a
    vision-language model, a diffusion pipeline, SAM) takes a folder as ``out``; a file's path there names the folder
    (``out="sd.onnx"`` writes into ``sd/``). ``cache`` (``"auto"``: for causal
    LMs) exports a decoder with its key/value cache, one graph for prefill and decode (see
    :mod:`onnx_nb.steps.export.caches.decoder`); ``cache=False`` exports logits for a whole sequence. A PyTorch
    checkpoint file (``.pt``, ``.pth``, ``.ckpt``) is loaded with ``weights_only=True``; one that pickles a whole model
    needs ``allow_pickle=True``, for files you trust (unpickling can run arbitrary code).

    ``precision`` (``"int4"``, ``"int8"``, ``"fp16"``, ``"fp32"``) takes the lean route for decoders (Llama, Mistral,
    Qwen2/3, Phi-3, Gemma, Granite) given as a folder or hub id: ONNX Runtime's fused decoder graph written layer
    by layer from the safetensors checkpoint, each weight converted as it is read, so memory stays near one layer
    (:mod:`onnx_nb.kinds.lean.graph`); checked against PyTorch on a prefill and decode steps. Its INT4 blocks are
    written by ``algorithm`` (``"rtn_asym"`` by default, ``"rtn"``, ``"k_quant"``, ``"hqq"``: ONNX Runtime's quantizer,
    one projection at a time) with the LM head at ``lm_head_bits`` (8 by default, or 4) and ``block_size`` weights per
    scale (32 by default).

    An Ultralytics YOLO model (``YOLO("yolov8n.pt")`` or its network) needs no sample: ``images`` at 640x640, any
    batch and image size in the file, outputs as Ultralytics' own export names them, its metadata so
    ``YOLO("model.onnx")`` predicts with it. ``nms=True`` (or a dict of ``conf``, ``iou``, ``max_det``,
    ``agnostic``) puts the non-maximum suppression in the graph: one ``detections`` output, a row per kept box
    (batch index, x1, y1, x2, y2, score, class, then mask coefficients or keypoints). A torchvision detector
    (Faster R-CNN, RetinaNet, ...) needs no sample either: one image ``images`` in, ``detections`` in that layout
    out (``masks``, ``keypoints`` beside it), height and width dynamic, the batch fixed at one.

    Example::

        result = onnx_nb.export("path/to/bert-folder")      # a Hugging Face folder (or hub id, or model object)
        result = onnx_nb.export(net, torch.randn(1, 3, 224, 224), out="net.onnx")   # a plain module and its sample
        assert result, result.check                        # falsy when the file disagrees with PyTorch
    """
    from .adapters.registry import resolve
    from .machinery.torch_state import clear_leftovers

    if "torch" in sys.modules:  # an earlier export, interrupted mid-trace, may have left torch mid-trace
        clear_leftovers()
    args = ExportArgs(sample, task, out, opset, dynamic, exporter, overwrite, progress, name, allow_pickle, cache,
                      precision, algorithm, lm_head_bits, block_size, nms)
    adapter = resolve(model, args)  # the one place that asks what this model is
    adapter.refuse(model, args)
    return adapter.export(model, args)
