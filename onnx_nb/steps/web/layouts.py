"""A file laid out as transformers.js reads it (the generation shapes' ``web`` answer).

transformers.js (4.x) feeds a decoder's cache by the names Optimum gave it (``past_key_values.{i}.key`` in,
``present.{i}.key`` out: onnx-nb's names) and makes the first step's empty cache from the graph's own input shapes:
a named axis ``batch_size`` is the batch, any other named axis is 0, numbers are kept. So the batch axis must be named
``batch_size`` (onnx-nb names it ``batch``) and the heads and head size must be numbers. Only axis names change: the
graph computes what it computed."""

from __future__ import annotations

import re
from typing import Any

from ...errors import InvalidArgumentError
from ...runtime.facts import is_cache

BATCH = "batch_size"  # the name transformers.js reads as the batch when it makes an empty cache
KEYS_VALUES = re.compile(r"past_key_values\.\d+\.(key|value)")


def decoder_layout(proto: Any) -> None:
    """Rename, in place, the batch axis of a decoder's cache (and every input and output naming it the same) to
    ``batch_size``; refuse a cache transformers.js would feed otherwise (states of fixed shape, heads not fixed)."""
    renamed: set[str] = set()
    for value in proto.graph.input:
        if not is_cache(value.name):
            continue
        dims = value.type.tensor_type.shape.dim
        if not KEYS_VALUES.fullmatch(value.name) or len(dims) != 4:
            raise InvalidArgumentError(
                f"The decoder's cache input {value.name} is not keys or values of [batch, heads, sequence, head size]: "
                "transformers.js feeds such states by names and shapes of its own per architecture (past_conv.N, "
                "past_ssm.N), which onnx-nb does not write yet.")
        if not (dims[1].HasField("dim_value") and dims[3].HasField("dim_value")):
            raise InvalidArgumentError(
                f"The decoder's cache input {value.name} has heads or head size not fixed in the graph "
                f"({[d.dim_param or d.dim_value for d in dims]}): transformers.js makes the first step's empty cache "
                "from those numbers.")
        if dims[0].dim_param:
            renamed.add(dims[0].dim_param)
    if not renamed:
        return
    for value in [*proto.graph.input, *proto.graph.output]:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param in renamed:
                dim.dim_param = BATCH
