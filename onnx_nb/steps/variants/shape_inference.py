"""ONNX Runtime's quantizers infer shapes by copying the whole model, writing it to a temporary file and reading it
back (``save_and_reload_model_with_shape_infer``), or by writing an inferred copy of the input file beside it and
reading that (``load_model_with_shape_infer``): for a 2 GB file, 4 GB written and read per call, two or three calls
per quantization, and a second copy of the weights in memory. While :func:`weightless_shape_inference` runs, the
same ONNX shape inference (same options) runs on the graph with its large weights left out (each one's name, type
and dims kept) and its annotations are put on the model itself: the same value infos, without the copies."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from .swaps import Swap

# the modules of onnxruntime.quantization that hold either function under its own name (imported from quant_utils)
_MODULES = ("quant_utils", "quantize", "onnx_quantizer", "base_quantizer", "calibrate")
SMALL_ELEMENTS = 1024  # an initializer up to this size is kept whole: shape inputs (Reshape's, Expand's) are read


def annotated(model: Any) -> Any:
    """``model`` itself, its value infos, outputs and subgraphs annotated by ONNX's shape inference run on a copy of
    its graph without its large weights, and ORT's mark that inference ran (``onnx.infer``)."""
    import onnx
    from onnxruntime.quantization.quant_utils import add_infer_metadata

    inferred = onnx.shape_inference.infer_shapes(weightless(model))
    graph = model.graph
    del graph.value_info[:]
    graph.value_info.extend(inferred.graph.value_info)
    del graph.output[:]
    graph.output.extend(inferred.graph.output)
    with_graphs = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
    for node, done in zip(graph.node, inferred.graph.node):  # an If's or a Loop's body gets its own annotations
        if any(a.type in with_graphs for a in node.attribute):
            node.CopyFrom(done)
    add_infer_metadata(model)
    return model


def weightless(model: Any) -> Any:
    """A copy of ``model`` whose initializers over :data:`SMALL_ELEMENTS` elements hold no data (marked as external
    data at a location that does not exist: the form a model loaded without its external data has). Constant nodes'
    tensors and a subgraph's initializers are copied whole, as ORT's own round trip kept them inside the graph."""
    import math

    import onnx

    light = onnx.ModelProto()
    _copy_fields(model, light, skip="graph")
    _copy_fields(model.graph, light.graph, skip="initializer")
    for tensor in model.graph.initializer:
        if math.prod(tensor.dims) <= SMALL_ELEMENTS:
            light.graph.initializer.append(tensor)
            continue
        left = light.graph.initializer.add(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims,
                                           data_location=onnx.TensorProto.EXTERNAL)
        left.external_data.add(key="location", value="weights-left-out")
    return light


def _copy_fields(source: Any, target: Any, skip: str) -> None:
    for field, value in source.ListFields():
        if field.name == skip:
            continue
        if hasattr(value, "extend"):  # a repeated field (read off the value: protobuf's descriptors differ by version)
            getattr(target, field.name).extend(value)
        elif hasattr(value, "CopyFrom"):
            getattr(target, field.name).CopyFrom(value)
        else:
            setattr(target, field.name, value)


def _save_and_reload(model: Any) -> Any:
    return annotated(model)


def _load(model_path: Path) -> Any:
    from .by_reference import load

    return annotated(load(model_path))  # a big file's weights left in their source file stay there


# quantize.py calls save_and_reload_model_with_shape_infer only on a ModelProto its caller gave: ORT's copies it, and
# its quantizers then change (and, saving with external data, empty) what that call returns, so it stays ORT's. Every
# other caller hands it a model ORT loaded itself.
_CALLERS_OWN_MODEL = {("quantize", "save_and_reload_model_with_shape_infer")}
_SWAPS = {(module, name): Swap(replacement) for module in _MODULES
          for name, replacement in (("save_and_reload_model_with_shape_infer", _save_and_reload),
                                    ("load_model_with_shape_infer", _load))
          if (module, name) not in _CALLERS_OWN_MODEL}


@contextmanager
def weightless_shape_inference() -> Iterator[None]:
    """ORT's two shape-inference loaders replaced, in every module of its quantizer that holds them, while the block
    runs (put back when the last such block, in any thread, ends)."""
    with ExitStack() as stack:
        for (module, name), swap in _SWAPS.items():
            owner = importlib.import_module(f"onnxruntime.quantization.{module}")
            if hasattr(owner, name):
                stack.enter_context(swap.active(owner, name))
        yield
