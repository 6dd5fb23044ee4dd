"""The lean route's weight-only blocks (``export(folder, precision="int4"|"int8", algorithm=..., lm_head_bits=...)``):
one projection at a time, by ONNX Runtime's own quantizer.

- ``"rtn"``: symmetric round-to-nearest per block (ONNX Runtime's C++ ``quantize_matmul_4bits`` / ``_8bits``, what
  the route wrote before the choice existed);
- ``"rtn_asym"``: the same C++ rounding with each block's minimum and maximum mapped to the ends of the range (a
  uint8 zero point per block): all 16 levels used where symmetric blocks leave one idle and half of the range to a
  block's smaller side, at the same speed;
- ``"k_quant"``: a k-quant-style search of each block's scale and offset (asymmetric, uint8 zero points), the scheme
  of onnxruntime-genai's ``k_quant`` options (its plain ``-p int4`` file is symmetric round-to-nearest);
- ``"hqq"``: half-quadratic quantization (each block's scale and zero point fitted to the weights by a few
  optimisation steps), no calibration data needed.

``k_quant`` and ``hqq`` run ONNX Runtime's ``MatMulNBitsQuantizer`` on a one-node graph holding the projection alone,
so memory stays near one layer (the data-aware GPTQ and AWQ need the whole model running on calibration data:
``quantize(export(folder, precision="fp32"), method="int4", algorithm=...)``). Mixture-of-experts weights are always
round-to-nearest (``QMoE`` reads symmetric blocks only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import InvalidArgumentError
from ...steps.export.precision import BLOCK

if TYPE_CHECKING:  # numpy at call time: export()'s argument check imports this module with onnx_nb
    import numpy as np

def refuse_odd_blocks(algorithm: str, widths: dict[str, int], block: int) -> None:
    """k-quant's zero points are packed across rows: ONNX Runtime cannot write a projection whose input width is an
    odd number of blocks. The route checks every projection's width (``widths``: weight name -> inputs) up front."""
    odd = [(name, k) for name, k in widths.items() if -(-k // block) % 2] if algorithm == "k_quant" else []
    if odd:
        name, k = odd[0]
        raise InvalidArgumentError(
            f"algorithm='k_quant': {name} has {k} inputs, {-(-k // block)} blocks of {block}, an odd number "
            "(ONNX Runtime's k-quant packs the zero points of two rows together and cannot write it). Use "
            "algorithm='rtn_asym' or 'hqq', or a block_size that gives an even number of blocks.")


def rtn(w_nk: np.ndarray, bits: int, block: int = BLOCK, symmetric: bool = True) -> list[np.ndarray]:
    """ONNX Runtime's blockwise round-to-nearest of a ``[N, K]`` (out, in) weight for ``MatMulNBits``:
    ``[packed [N, blocks, block*bits/8] uint8, scales [N, blocks] float32]`` and, asymmetric, the zero points
    ``[N, ceil(blocks*bits/8)]`` uint8."""
    import numpy as np
    from onnxruntime.capi import _pybind_state as ort_c

    n, k = w_nk.shape
    blocks = -(-k // block)
    wt = np.zeros((blocks * block, n), np.float32)
    wt[:k] = w_nk.T
    packed = np.zeros((n, blocks, block * bits // 8), np.uint8)
    scales = np.zeros((n, blocks), np.float32)
    zero_points = np.zeros((n, -(-blocks * bits // 8)), np.uint8)
    quantize = ort_c.quantize_matmul_4bits if bits == 4 else ort_c.quantize_matmul_8bits
    quantize(packed, wt, scales, zero_points, block, n, k, symmetric)
    return [packed, scales] if symmetric else [packed, scales, zero_points]


def by_quantizer(w_nk: np.ndarray, bits: int, algorithm: str, block: int = BLOCK) -> list[np.ndarray]:
    """``[packed, scales, zero points]`` for ``MatMulNBits`` from ONNX Runtime's ``MatMulNBitsQuantizer`` run with
    ``algorithm``'s configuration on a graph of one ``MatMul`` holding the weight."""
    import contextlib
    import io
    import logging
    import warnings

    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import matmul_nbits_quantizer as q

    n, k = w_nk.shape
    refuse_odd_blocks(algorithm, {"the projection": k}, block)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="w")], "one",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
        [numpy_helper.from_array(np.ascontiguousarray(w_nk.T, np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    config = q.HQQWeightOnlyQuantConfig(block_size=block, bits=bits) if algorithm == "hqq" else \
        q.KQuantWeightOnlyQuantConfig()
    loggers = [logging.getLogger(name) for name in ("onnxruntime.quantization.matmul_nbits_quantizer",
                                                    "neural_compressor")]
    levels = [lg.level for lg in loggers]
    try:
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        # Intel Neural Compressor's k-quant prints its progress; HQQ warns of the read-only array it is handed
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            quantizer = q.MatMulNBitsQuantizer(model, block_size=block, is_symmetric=False, bits=bits,
                                               algo_config=config)
            quantizer.process()
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
    out = quantizer.model.model.graph
    node = next(nd for nd in out.node if nd.op_type == "MatMulNBits")
    inits = {i.name: i for i in out.initializer}
    return [numpy_helper.to_array(inits[name]) for name in node.input[1:4] if name]
