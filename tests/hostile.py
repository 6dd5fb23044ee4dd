"""Models a stranger could send: text that tries to run script when shown, and external data that
points outside the model's folder. Built in code with onnx.helper; every one of them is a model
ONNX Runtime would run if nothing stopped it."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# Each payload sets window.__pwned when a browser runs it instead of showing it.
PAYLOADS = {
    "input": '<script>window.__pwned="input"</script>',
    "node": '"><img src=x onerror="window.__pwned=\'node\'">',
    "output": "y</script><script>window.__pwned='output'</script>",
    "weight": "<svg onload=\"window.__pwned='weight'\">",
    "doc": "<iframe srcdoc=\"<script>parent.__pwned='doc'</script>\"></iframe>",
}
RAW_MARKERS = ["<script>window.__pwned", "<img src=x", "</script><script>", "<svg onload", "<iframe srcdoc"]


def hostile_text_model(path: Path) -> Path:
    """x[batch, 4] -> MatMul(W) -> Relu -> y, with every name and doc string a script payload."""
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 10 - 0.5, PAYLOADS["weight"])
    mm = helper.make_node("MatMul", [PAYLOADS["input"], PAYLOADS["weight"]], ["h"], name=PAYLOADS["node"],
                          doc_string=PAYLOADS["doc"])
    relu = helper.make_node("Relu", ["h"], [PAYLOADS["output"]], name="relu" + PAYLOADS["node"])
    graph = helper.make_graph(
        [mm, relu], PAYLOADS["doc"],
        [helper.make_tensor_value_info(PAYLOADS["input"], TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info(PAYLOADS["output"], TensorProto.FLOAT, ["batch", 3])],
        [w], doc_string=PAYLOADS["doc"])
    model = helper.make_model(graph, producer_name=PAYLOADS["doc"], doc_string=PAYLOADS["doc"],
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    helper.set_model_props(model, {"author": PAYLOADS["doc"], PAYLOADS["node"]: "x"})
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def external_data_model(path: Path, location: str, length: int = 48) -> Path:
    """x[batch, 4] @ W[4, 3] where W's bytes are read from ``location`` (as written, unchecked)."""
    w = numpy_helper.from_array(np.zeros((4, 3), dtype=np.float32), "W")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(length))):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "ext",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path


def secret(folder: Path) -> Path:
    """A file outside the model's folder that a hostile model would like to read (48 bytes = 12 floats)."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "secret.bin"
    target.write_bytes(np.arange(12, dtype=np.float32).tobytes())
    return target


def linked(model_dir: Path, target: Path, name: str = "weights.bin") -> str:
    os.symlink(target, model_dir / name)
    return name
