"""fp16's weights converted in blocks (onnx_nb/steps/variants/float16_weights.py): ORT's own numbers, bit for bit,
edge values included, and the same model from ORT's float16 converter with and without it."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnx_nb.steps.variants.float16_weights import BLOCK, fast_float16_weights, to_float16

EDGES = [0.0, -0.0, 1e-9, -1e-9, 3e-8, -3e-8, 5.96e-08, -5.96e-08, 6e-8, 65504.0, 65505.0, -70000.0, 1e30, -1e30,
         np.inf, -np.inf, np.nan, 1.0, -2.5, 1e-39]


def test_the_numbers_are_onnx_runtimes() -> None:
    from onnxruntime.transformers.float16 import convert_np_to_float16

    rng = np.random.default_rng(0)
    spread = (rng.standard_normal(BLOCK + 12_345) * 10.0 ** rng.integers(-9, 6, BLOCK + 12_345)).astype(np.float32)
    for values in (np.array(EDGES, np.float32), spread, spread[:1000].reshape(10, 100)):
        ours, theirs = to_float16(values), convert_np_to_float16(values)
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype == np.float16
        assert np.array_equal(ours.view(np.uint16), theirs.view(np.uint16))  # NaN and the sign of zero too


def test_the_same_model_from_onnx_runtimes_converter() -> None:
    from onnxruntime.transformers import float16

    rng = np.random.default_rng(1)
    weight = rng.standard_normal((16, 8)).astype(np.float32) * 1e3
    weight[0], weight[1] = EDGES[:8], EDGES[8:16]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
                              [numpy_helper.from_array(weight, "w"),
                               numpy_helper.from_array(np.full(8, 1e-9, np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    original = float16.convert_np_to_float16
    theirs = float16.convert_float_to_float16(onnx.ModelProto.FromString(model.SerializeToString()),
                                              keep_io_types=True)
    with fast_float16_weights():
        assert float16.convert_np_to_float16 is to_float16
        ours = float16.convert_float_to_float16(onnx.ModelProto.FromString(model.SerializeToString()),
                                                keep_io_types=True)
    assert float16.convert_np_to_float16 is original  # ORT's own put back
    assert ours.SerializeToString() == theirs.SerializeToString()
