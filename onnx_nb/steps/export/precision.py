"""``export(precision=...)``'s settings for weights written at 4 or 8 bits (``algorithm=``, ``lm_head_bits=``,
``block_size=``): the values it takes and the record the lean route writes its weights by (:class:`Blocks`), checked
with every other ``export()`` argument (``args.py``) before any model is read."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import InvalidArgumentError

BLOCK = 32  # MatMulNBits block size (onnxruntime-genai's default)
BLOCK_SIZES = (16, 32, 64, 128, 256)  # what MatMulNBits takes
ACCURACY_LEVEL = 4  # INT8 compute of MatMulNBits on CPU
ALGORITHMS = ("rtn", "rtn_asym", "k_quant", "hqq")
DEFAULT_ALGORITHM = "rtn_asym"
DEFAULT_HEAD_BITS = 8  # an INT4 head made Phi-4-mini repeat itself (onnxruntime#24384); the builder's presets keep 8


@dataclass(frozen=True)
class Blocks:
    """How the route writes a projection's weight: ``bits`` (4 or 8), ``algorithm``, the LM head's bits, the number
    of weights that share a scale (``block``)."""

    bits: int
    algorithm: str = DEFAULT_ALGORITHM
    head_bits: int = DEFAULT_HEAD_BITS
    block: int = BLOCK

    @staticmethod
    def of(precision: str, algorithm: str | None, lm_head_bits: int | None,
           block_size: int | None = None) -> Blocks | None:
        """The blocks for ``precision`` (None for a float one), the arguments checked."""
        if precision not in ("int4", "int8"):
            if algorithm is not None or lm_head_bits is not None or block_size is not None:
                raise InvalidArgumentError(f"algorithm=, lm_head_bits= and block_size= choose how weights are rounded "
                                           f"to 4 or 8 bits: they do not apply to precision={precision!r}.")
            return None
        if block_size is not None and block_size not in BLOCK_SIZES:
            raise InvalidArgumentError(f"block_size={block_size!r}: MatMulNBits takes one of "
                                       f"{', '.join(map(str, BLOCK_SIZES))} weights per scale (default {BLOCK}).")
        if algorithm is not None and algorithm not in ALGORITHMS:
            raise InvalidArgumentError(
                f"algorithm={algorithm!r}: the lean route rounds one layer at a time with one of "
                f"{', '.join(map(repr, ALGORITHMS))}; GPTQ and AWQ run the model on calibration data: "
                "quantize(export(folder, precision='fp32'), method='int4', algorithm=...).")
        if precision == "int8" and algorithm not in (None, "rtn", "rtn_asym"):
            raise InvalidArgumentError(f"algorithm={algorithm!r} writes 4-bit blocks: precision='int8' rounds to "
                                       "nearest ('rtn' or 'rtn_asym'); use precision='int4' for it.")
        if lm_head_bits is not None and lm_head_bits not in (4, 8):
            raise InvalidArgumentError(f"lm_head_bits={lm_head_bits!r}: give 4 or 8.")
        bits = 4 if precision == "int4" else 8
        return Blocks(bits, algorithm or (DEFAULT_ALGORITHM if bits == 4 else "rtn"), lm_head_bits or DEFAULT_HEAD_BITS,
                      block_size or BLOCK)

    def label(self) -> str:
        """What the exporter's name adds: ``", k_quant, LM head 8-bit"`` (int8: the head's bits where they differ)."""
        if self.bits == 8:
            return ("" if self.algorithm == "rtn" else f", {self.algorithm}") + \
                ("" if self.head_bits == 8 else f", LM head {self.head_bits}-bit")
        return f", {self.algorithm}, LM head {self.head_bits}-bit" + ("" if self.block == BLOCK else
                                                                        f", blocks of {self.block}")
