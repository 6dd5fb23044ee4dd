"""A reference for an ONNX file that has no source model beside it (a file downloaded from a model zoo, a vendor,
another team): another implementation of ONNX that computes the same graph, or the outputs its author saved.

- ``"evaluator"``: ONNX's own reference evaluator (``onnx.reference``, numpy, written from the specification),
  for files in ONNX's standard domains (``ai.onnx``, ``ai.onnx.ml``) up to :data:`EVALUATOR_MAX_PARAMETERS`
  weights: it runs MobileNetV2 at 96x96 in 0.06 s a batch here, and knows none of ONNX Runtime's own
  ``com.microsoft`` operators (a file ONNX Runtime fused or quantized).
- ``"openvino"``: OpenVINO's CPU runtime (``pip install openvino``) at fp32, any size.
- saved outputs (``sample="io.npz"`` with the outputs beside the inputs): what the file's author computed; they
  hold for those inputs only.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError

EVALUATOR_MAX_PARAMETERS = 50_000_000
EVALUATOR_DOMAINS = ("", "ai.onnx", "ai.onnx.ml")
AGAINST = ("auto", "evaluator", "openvino")

Runner = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


def evaluator_refusal(proto: Any) -> str | None:
    """Why ONNX's reference evaluator cannot be this file's reference, or None when it can."""
    from .onnxfile import parameter_count

    foreign = sorted({f"{n.domain}.{n.op_type}" for n in proto.graph.node if n.domain not in EVALUATOR_DOMAINS})
    if foreign:
        return (f"ONNX's reference evaluator does not know {', '.join(foreign[:4])} (operators of ONNX Runtime's "
                "own, not of the ONNX standard)")
    params = parameter_count(proto)
    if params > EVALUATOR_MAX_PARAMETERS:
        return (f"{params / 1e6:.0f}M weights is too many for ONNX's reference evaluator (numpy, one thread; up to "
                f"{EVALUATOR_MAX_PARAMETERS // 1_000_000}M)")
    return None


def _evaluator(path: Path) -> Runner:
    from onnx.reference import ReferenceEvaluator

    evaluator = ReferenceEvaluator(str(path))
    wanted = list(evaluator.input_names)

    def run(feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = evaluator.run(None, {k: feed[k] for k in wanted if k in feed})
        return {n: np.asarray(v) for n, v in zip(evaluator.output_names, out)}

    return run


def _openvino(path: Path) -> Runner:
    import openvino as ov

    # f32 files run in bf16 on CPUs with bf16 instructions unless told otherwise: a reference computes in f32
    compiled = ov.Core().compile_model(str(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    names = [p.get_any_name() for p in compiled.inputs]
    outputs = [p.get_any_name() for p in compiled.outputs]

    def run(feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        result = compiled({n: feed[n] for n in names if n in feed})
        return {n: np.asarray(result[i]) for i, n in enumerate(outputs)}

    return run


def openvino_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("openvino") is not None


def independent_runner(path: Path, against: str = "auto") -> tuple[str | None, Runner | None, str]:
    """``(label, runner, why)``: the reference that computes ``path`` without ONNX Runtime (``against``:
    ``"auto"``, the evaluator where it can run the file, else OpenVINO where installed; ``"evaluator"``;
    ``"openvino"``), or ``(None, None, why none)``."""
    from .onnxfile import load_proto

    if against not in AGAINST:
        raise InvalidArgumentError(f"against={against!r}: one of {', '.join(AGAINST)}, or the path of a .npz file "
                                   "with the inputs and the outputs the model's author saved.")
    refusal = evaluator_refusal(load_proto(path)) if against in ("auto", "evaluator") else None
    if against == "evaluator" and refusal:
        raise InvalidArgumentError(f"against='evaluator': {refusal}. Use against='openvino' (pip install openvino) "
                                   "or a .npz of saved inputs and outputs.")
    if against != "openvino" and refusal is None:
        return "ONNX reference evaluator", _evaluator(path), ""
    if openvino_installed():
        return "OpenVINO (CPU, f32)", _openvino(path), ""
    if against == "openvino":
        raise InvalidArgumentError("against='openvino' needs OpenVINO: pip install openvino (or onnx-nb[openvino]).")
    return None, None, f"{refusal}, and OpenVINO is not installed (pip install openvino)"


def read_saved(sample: Any, inputs: list[str], outputs: list[str]) -> tuple[dict[str, np.ndarray] | None,
                                                                            dict[str, np.ndarray]]:
    """``(inputs, outputs)`` from what the user saved: a dict or the path of a ``.npz`` whose keys name graph inputs
    and, optionally, graph outputs (the outputs the file should give for those inputs)."""
    from ..errors import SampleError

    if sample is None:
        return None, {}
    if isinstance(sample, (str, Path)):
        p = Path(sample).expanduser()
        if p.suffix != ".npz" or not p.is_file():
            raise SampleError(f"sample={str(sample)!r}: give a dict of input name -> array, or the path of an "
                              ".npz file (numpy.savez(path, **inputs, **outputs)).")
        with np.load(p, allow_pickle=False) as data:
            sample = {k: data[k] for k in data.files}
    if not hasattr(sample, "keys"):
        raise SampleError(f"Pass the sample as a dict of input name -> array (it is a {type(sample).__name__}): an "
                          "ONNX file's inputs are named.")
    from .feeds import to_numpy

    given = to_numpy(sample)
    unknown = sorted(set(given) - set(inputs) - set(outputs))
    missing = [n for n in inputs if n not in given]
    if unknown or missing:
        wrong = "; ".join(([f"unknown {', '.join(unknown)}"] if unknown else []) +
                          ([f"missing inputs {', '.join(missing)}"] if missing else []))
        raise SampleError(f"The sample's names do not match the file: {wrong}. The file takes {', '.join(inputs)} "
                          f"and gives {', '.join(outputs)}.")
    return {n: given[n] for n in inputs}, {n: given[n] for n in outputs if n in given}
