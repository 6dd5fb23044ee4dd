"""Dynamic INT8 computes a MatMul input's outlier channels in float (onnx_nb/steps/variants/outlier_channels.py): the
split is exact before quantization, the INT8 file's error falls where one channel would set the scale, and a tensor
without such channels is left as it was."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import onnx_nb
from onnx_nb.steps.variants import outlier_channels


def _layer(path: Path) -> None:
    """A transformer's feed-forward block in small: LayerNormalization, MatMul + Add, GELU, MatMul + Add; the norm's
    scale makes channel 5 about 30x the others, as BERT's norms do."""
    rng = np.random.default_rng(0)
    gamma = np.ones(64, np.float32)
    gamma[5] = 30.0
    w1, w2 = rng.normal(0, 0.1, (64, 128)).astype(np.float32), rng.normal(0, 0.1, (128, 64)).astype(np.float32)
    nodes = [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["normed"], axis=-1, name="norm"),
             helper.make_node("MatMul", ["normed", "w1"], ["h"], name="up"),
             helper.make_node("Add", ["h", "b1"], ["hb"], name="up_bias"),
             helper.make_node("Relu", ["hb"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="down")]
    graph = helper.make_graph(nodes, "ffn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "s", 64])],
                              [numpy_helper.from_array(gamma, "gamma"),
                               numpy_helper.from_array(np.zeros(64, np.float32), "beta"),
                               numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
                               numpy_helper.from_array(rng.normal(0, 0.1, 128).astype(np.float32), "b1")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def _run(path: Path, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_outlier_channels_are_computed_in_float_and_the_int8_error_falls(tmp_path: Path) -> None:
    src = tmp_path / "ffn.onnx"
    _layer(src)
    rng = np.random.default_rng(1)
    sample, other = (rng.normal(0, 1, (2, 12, 64)).astype(np.float32) for _ in range(2))

    split = tmp_path / "split.onnx"
    split.write_bytes(src.read_bytes())
    floats, line = outlier_channels.split(split, {"x": sample})
    assert floats == ["up" + outlier_channels.SUFFIX], floats  # the ReLU's output has no channel standing out
    assert line["outlier_channels"]["channels"] == 1 and line["outlier_channels"]["largest_ratio"] > 8, line
    np.testing.assert_allclose(_run(split, other), _run(src, other), rtol=1e-5, atol=1e-5)  # exact before INT8

    errors = {}
    for asked in ("auto", False):
        int8 = onnx_nb.quantize(src, outlier_channels=asked, sample={"x": sample}, out=tmp_path / f"{asked}.onnx")
        errors[asked] = float(np.abs(_run(int8.path, other) - _run(src, other)).max())
        assert ("outlier_channels" in int8.recipe) == (asked == "auto"), int8.recipe
    assert errors["auto"] * 2 < errors[False], errors  # 0.084 against 0.265 here


def test_a_tensor_without_outliers_is_left_alone(tmp_path: Path) -> None:
    src = tmp_path / "ffn.onnx"
    _layer(src)
    model = onnx.load(str(src))
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.ones(64, np.float32), "gamma"))
    onnx.save(model, str(src))
    before = src.read_bytes()
    sample = np.random.default_rng(2).normal(0, 1, (1, 8, 64)).astype(np.float32)
    assert outlier_channels.split(src, {"x": sample}) == ([], {})
    assert src.read_bytes() == before


def test_a_run_that_fails_leaves_every_channel_in_int8_and_says_why(tmp_path: Path) -> None:
    src = tmp_path / "ffn.onnx"
    _layer(src)
    before = src.read_bytes()
    floats, line = outlier_channels.split(src, {"not_an_input": np.zeros((1, 4, 64), np.float32)})
    assert floats == [] and "not_measured" in line["outlier_channels"], line
    assert src.read_bytes() == before
