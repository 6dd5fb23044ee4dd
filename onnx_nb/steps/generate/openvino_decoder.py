"""A decoder file with its cache run step by step in the OpenVINO runtime instead of ONNX Runtime, with
:class:`~.runners.OnnxDecoder`'s interface (``empty_cache``, ``step``), so the same file's tokens, logits and
key/value cache can be compared between two runtimes (:func:`onnx_nb.check_parity` with ``providers=["cpu",
"openvino-runtime"]``). The file is compiled for OpenVINO's CPU device at f32 (its default on a CPU with bf16
instructions is bf16): a parity check compares the file's arithmetic, not a reduced precision."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...runtime.facts import present_of
from ...runtime.onnxfile import NodeArg, load_proto, signature
from .runners import OnnxDecoder


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
        inputs, outputs = signature(load_proto(path))  # as ONNX Runtime's session would report them
        self.read_signature(path, {t.name: NodeArg(t.name, list(t.shape), t.dtype) for t in inputs},
                            [t.name for t in outputs])
        self.version = f"OpenVINO {ov.__version__.split('-')[0]} on CPU at f32"

    def _run(self, tokens: dict[str, np.ndarray], mask: np.ndarray,
             cache: dict[str, Any]) -> tuple[np.ndarray, dict]:
        out = self.request.infer(self.feed_of(tokens, mask, cache))
        named = {name: np.array(value) for port, value in out.items() for name in port.get_names()}
        return named["logits"], {p: named[present_of(p)] for p in self.past_names}
