"""ONNX Runtime's per-channel weight quantization (dynamic INT8), computed one array operation per weight instead of
one Python call per output channel: ORT's quantizer loops over the channels (77,586 calls for all-MiniLM-L6-v2's
94 weights, a quarter of a MiniLM ``quantize()``). The numbers are ORT's own, bit for bit: the same float32 ranges,
the same float64 scale arithmetic, the same rounding and clipping (``tests/test_per_channel.py`` compares the files);
a case it does not cover (overrides, 4- or 16-bit types, float16 weights, a minimum range) goes to ORT's loop."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from .swaps import Swap

_CHANNEL_DEFAULT = "axis"


@contextmanager
def vectorized_per_channel() -> Iterator[None]:
    """ORT's per-channel weight quantization vectorized while the block runs (ORT's own method put back when the
    last such block, in any thread, ends)."""
    from onnxruntime.quantization.base_quantizer import BaseQuantizer

    with _SWAP.active(BaseQuantizer, "quantize_weight_per_channel_impl"):
        yield


def _impl(self: Any, weight_name: str, weight_qType: int, channel_axis: int,  # ORT's names
          reduce_range: bool = True, keep_float_weight: bool = False) -> tuple[str, str, str]:
    done = quantized_weight(self, weight_name, weight_qType, channel_axis, reduce_range, keep_float_weight)
    return done if done is not None else _SWAP.original(self, weight_name, weight_qType, channel_axis, reduce_range,
                                                        keep_float_weight)


_SWAP = Swap(_impl)  # ORT's method while it is replaced: _SWAP.original


def quantized_weight(quantizer: Any, weight_name: str, qtype: int, axis: int, reduce_range: bool,
                     keep_float_weight: bool) -> tuple[str, str, str] | None:
    """The quantized weight, its per-channel scales and zero points added to the quantizer's model as ORT's loop
    adds them; None where the weight is a case left to ORT."""
    import onnx
    from onnx import TensorProto, numpy_helper
    from onnxruntime.quantization.quant_utils import (
        TENSOR_NAME_QUANT_SUFFIX,
        find_by_name,
        get_qmin_qmax_for_qType,
        tensor_proto_to_array,
    )

    if qtype not in (TensorProto.INT8, TensorProto.UINT8) or getattr(quantizer, "min_real_range", None) is not None:
        return None
    initializer = find_by_name(weight_name, quantizer.model.initializer())
    if initializer is None or initializer.data_type != TensorProto.FLOAT or not len(initializer.dims):
        return None
    weights = tensor_proto_to_array(initializer)
    if not -weights.ndim <= axis < weights.ndim or not weights.size or not np.isfinite(weights).all():
        return None  # (ORT's loop refuses a NaN or infinite weight: its assertion on the scale)
    axis %= weights.ndim
    overrides = quantizer.tensor_quant_overrides.get_per_channel_overrides(weight_name,
                                                                           default_val=[{_CHANNEL_DEFAULT: axis}])
    if overrides != [{_CHANNEL_DEFAULT: axis}]:  # the user's own scales, ranges or types: ORT's loop reads them
        return None
    symmetric = quantizer.is_weight_symmetric(qtype)
    qmin, qmax = get_qmin_qmax_for_qType(qtype, quantizer.reduce_range and reduce_range, symmetric=symmetric)
    channels = np.moveaxis(weights, axis, 0)
    rows = channels.reshape(channels.shape[0], -1)
    zero_points, scales = _scales(rows.min(axis=1), rows.max(axis=1), qmin, qmax, symmetric)
    low, high = get_qmin_qmax_for_qType(qtype)  # quantize_nparray clips to the type's full range
    quantized = rows / scales[:, None]  # float32, as quantize_nparray divides; then rounded and shifted in place
    np.round(quantized, out=quantized)
    quantized += zero_points[:, None]
    np.clip(quantized, low, high, out=quantized)
    dtype = onnx.helper.tensor_dtype_to_np_dtype(qtype)
    q_name, zp_name, scale_name = weight_name + TENSOR_NAME_QUANT_SUFFIX, weight_name + "_zero_point", \
        weight_name + "_scale"
    count = [initializer.dims[axis]]
    quantizer.model.initializer_extend([
        onnx.helper.make_tensor(scale_name, initializer.data_type, count, scales.tolist()),
        onnx.helper.make_tensor(zp_name, qtype, count, zero_points.tolist())])
    if not keep_float_weight:
        back = np.moveaxis(quantized.astype(dtype).reshape(channels.shape), 0, axis)
        quantizer.model.initializer_extend([numpy_helper.from_array(np.ascontiguousarray(back), q_name)])
    return q_name, zp_name, scale_name


def _scales(rmin: np.ndarray, rmax: np.ndarray, qmin: np.ndarray, qmax: np.ndarray,
            symmetric: bool) -> tuple[np.ndarray, np.ndarray]:
    """Zero points and scales per channel, as ORT's ``compute_scale_zp`` computes each (float32 ranges holding
    zero, the scale divided in float64 and stored in float32, a scale under float32's smallest normal read as 1
    with zero point 0)."""
    rmin = np.minimum(rmin, np.float32(0))
    rmax = np.maximum(rmax, np.float32(0))
    if symmetric:
        absmax = np.maximum(np.abs(rmin), np.abs(rmax))
        rmin, rmax = -absmax, +absmax
    scale = (rmax.astype(np.float64) - rmin.astype(np.float64)) / (np.float64(qmax) - np.float64(qmin))
    tiny = scale < np.finfo(np.float32).tiny
    if symmetric:
        zero = np.full(scale.shape, np.round((qmin + qmax) / np.float64(2.0)), np.float64)
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            zero = np.round(qmin - rmin / np.where(tiny, 1.0, scale))
    zero_points = np.where(tiny, 0, zero).astype(qmin.dtype)
    scales = np.where(tiny, np.float32(1.0), scale.astype(np.float32)).astype(np.float32)
    return zero_points, scales
