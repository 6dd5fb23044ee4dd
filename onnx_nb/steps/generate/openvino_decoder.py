"""A decoder file with its cache run step by step in the OpenVINO runtime instead of ONNX Runtime, with
:class:`~.runners.OnnxDecoder`'s interface (``empty_cache``, ``step``), so the same file's tokens, logits and
key/value cache can be compared between two runtimes (:func:`onnx_nb.check_parity` with ``providers=["cpu",
"openvino-runtime"]``). The file is compiled for OpenVINO's CPU device at f32 (its default on a CPU with bf16
instructions is bf16): a parity check compares the file's arithmetic, not a reduced precision."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from ...runtime.facts import present_of
from .runners import OnnxDecoder

ELEMENT_TYPES = {1: "tensor(float)", 10: "tensor(float16)", 16: "tensor(bfloat16)", 7: "tensor(int64)",
                 6: "tensor(int32)", 9: "tensor(bool)"}  # ONNX's element types as ONNX Runtime names them


def _signature(path: Path) -> tuple[dict[str, Any], list[str]]:
    """The file's inputs (name, ``.shape`` with names for symbolic sizes, ``.type``) and output names, read from its
    header as ONNX Runtime's session would report them."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    inputs = {}
    for value in graph.input:
        tensor = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor.shape.dim]
        inputs[value.name] = SimpleNamespace(name=value.name, shape=shape,
                                             type=ELEMENT_TYPES.get(tensor.elem_type, "tensor(unknown)"))
    return inputs, [o.name for o in graph.output]


class OpenVinoDecoder(OnnxDecoder):
    """Steps over a decoder file in the OpenVINO runtime (``pip install openvino``), on its CPU device."""

    def __init__(self, path: Any, threads: int | None = None) -> None:
        import openvino as ov

        from ...runtime.providers import threads_for

        core = ov.Core()
        config: dict[str, Any] = {"INFERENCE_PRECISION_HINT": "f32"}
        if threads_for(threads):
            config["INFERENCE_NUM_THREADS"] = threads_for(threads)
        self.compiled = core.compile_model(core.read_model(str(path)), "CPU", config)
        self.request = self.compiled.create_infer_request()
        self.device = None
        self.read_signature(path, *_signature(Path(path)))
        self.version = f"OpenVINO {ov.__version__.split('-')[0]} on CPU at f32"

    def _run(self, tokens: dict[str, np.ndarray], mask: np.ndarray,
             cache: dict[str, Any]) -> tuple[np.ndarray, dict]:
        out = self.request.infer(self.feed_of(tokens, mask, cache))
        named = {name: np.array(value) for port, value in out.items() for name in port.get_names()}
        return named["logits"], {p: named[present_of(p)] for p in self.past_names}
