"""Dynamic INT8's per-channel weights, vectorized (onnx_nb/steps/variants/per_channel.py): ORT's quantizer writes
the same file with and without it, bit for bit, for every INT8 scheme, with the channels that take ORT's special
cases (all zero: a scale of 1; all positive or all negative: the range widened to hold zero)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_nb.runtime.cpu import SCHEMES
from onnx_nb.steps.variants import per_channel


def _graph(path: Path, nan: bool = False) -> None:
    """A Conv, a MatMul and a Gemm with transB, the MatMul's and the Gemm's weights with the channels that take
    ORT's special cases."""
    rng = np.random.default_rng(0)
    first = rng.normal(0, 0.05, (72, 16)).astype(np.float32)
    first[:, 0] = 0.0  # a scale under float32's smallest normal: 1, zero point 0
    first[:, 1] = np.abs(first[:, 1]) + 0.01  # all positive: rmin widened to 0
    first[:, 2] = -np.abs(first[:, 2]) - 0.01  # all negative: rmax widened to 0
    first[:, 3] = np.float32(1e-39)  # subnormal: under the smallest normal too
    first[:, 4] *= 300  # a wide channel beside narrow ones
    first[0, 5] = np.nan if nan else first[0, 5]
    second = rng.normal(0, 1, (8, 16)).astype(np.float32)  # Gemm(transB=1): [out, in]
    second[5] = 0.0
    conv = rng.normal(0, 0.2, (3, 1, 1, 2)).astype(np.float32)
    conv[1] = 0.0
    nodes = [helper.make_node("Reshape", ["x", "as_image"], ["image"], name="to_image"),
             helper.make_node("Conv", ["image", "conv_w"], ["conved"], name="conv"),
             helper.make_node("Reshape", ["conved", "as_rows"], ["rows"], name="to_rows"),
             helper.make_node("MatMul", ["rows", "w1"], ["h"], name="mm"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["y"], name="gemm", transB=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 25])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
                              [numpy_helper.from_array(conv, "conv_w"),
                               numpy_helper.from_array(np.array([4, 1, 1, 25], np.int64), "as_image"),
                               numpy_helper.from_array(np.array([4, 72], np.int64), "as_rows"),
                               numpy_helper.from_array(first, "w1"), numpy_helper.from_array(second, "w2"),
                               numpy_helper.from_array(np.zeros(8, np.float32), "b2")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_the_same_file_as_onnx_runtimes_loop(tmp_path: Path, scheme: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src = tmp_path / "model.onnx"
    _graph(src)
    weights, reduce_range, _ = SCHEMES[scheme]
    kind = QuantType.QInt8 if weights == "int8" else QuantType.QUInt8
    taken: list[str] = []
    vectorized = per_channel.quantized_weight

    def counted(quantizer, name, *args):  # which weights the vectorized path wrote (not ORT's loop)
        done = vectorized(quantizer, name, *args)
        taken.extend([name] if done is not None else [])
        return done

    monkeypatch.setattr(per_channel, "quantized_weight", counted)
    files = {}
    for way in ("ort", "vectorized"):
        files[way] = tmp_path / f"{way}.onnx"
        if way == "vectorized":
            with per_channel.vectorized_per_channel():
                quantize_dynamic(str(src), str(files[way]), weight_type=kind, per_channel=True,
                                 reduce_range=reduce_range)
        else:
            quantize_dynamic(str(src), str(files[way]), weight_type=kind, per_channel=True, reduce_range=reduce_range)
    # ORT writes the Gemm as a MatMul; the Conv's weight takes ORT's per-tensor path (ConvInteger), untouched
    assert sorted(taken) == ["w1", "w2_Transposed"], taken
    ort, ours = (onnx.load(str(files[w])) for w in ("ort", "vectorized"))
    assert [n.op_type for n in ours.graph.node] == [n.op_type for n in ort.graph.node]
    ort_weights = {t.name: numpy_helper.to_array(t) for t in ort.graph.initializer}
    our_weights = {t.name: numpy_helper.to_array(t) for t in ours.graph.initializer}
    assert ort_weights.keys() == our_weights.keys()
    for name, array in ort_weights.items():
        assert our_weights[name].dtype == array.dtype and our_weights[name].shape == array.shape, name
        assert our_weights[name].tobytes() == array.tobytes(), name
    assert any(name.endswith("_quantized") for name in our_weights)
    # and ORT's own method is back after the block
    from onnxruntime.quantization.base_quantizer import BaseQuantizer

    assert BaseQuantizer.quantize_weight_per_channel_impl.__module__ == "onnxruntime.quantization.base_quantizer"


def test_a_weight_ort_refuses_is_refused_as_before(tmp_path: Path) -> None:
    """A NaN weight: ORT's loop stops on it (its assertion on the scale); the vectorized path leaves it to the loop
    rather than writing a file."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src = tmp_path / "nan.onnx"
    _graph(src, nan=True)
    raised = []
    for vectorized in (False, True):
        with per_channel.vectorized_per_channel() if vectorized else contextlib.nullcontext(), \
                pytest.raises(Exception) as caught:
            quantize_dynamic(str(src), str(tmp_path / f"{vectorized}.onnx"), weight_type=QuantType.QInt8,
                             per_channel=True)
        raised.append((type(caught.value), str(caught.value)))
    assert raised[0] == raised[1], raised
