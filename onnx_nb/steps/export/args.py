"""``export()``'s arguments: one table (what each is, its default, its help text, which command-line flag reaches
it), one frozen :class:`ExportArgs` whose values are checked before any model is looked at. ``%onnx_export`` and
``onnx-nb export`` are made from :data:`ARGUMENTS` (:mod:`onnx_nb.frontends.specs`), so every argument of
``export()`` is reachable from both."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ...errors import InvalidArgumentError
from .precision import ALGORITHMS as LEAN_ALGORITHMS
from .precision import Blocks

EXPORTER_CHOICES = ("auto", "dynamo", "torchscript", "keras", "tf2onnx", "skl2onnx")
PRECISIONS = ("int4", "int8", "fp16", "fp32")
CACHE_CHOICES = ("auto", True, False)
DEFAULT_OPSET = 18
NMS_KEYS = ("conf", "iou", "max_det", "agnostic")


@dataclass(frozen=True)
class Argument:
    name: str
    default: Any
    help: str
    flag: str | None = None  # the command line's flag ("--opset"); None: not on the command line
    reads: str = "str"  # how the command line reads it: str, int, flag, choice, dict (key=value,...)
    choices: tuple[Any, ...] = ()


ARGUMENTS: tuple[Argument, ...] = (
    Argument("sample", None, "inputs for a plain module: a variable holding a tensor, tuple or dict", "--sample"),
    Argument("task", None, "Hugging Face task (default: inferred from the config)", "--task"),
    Argument("out", None, "output .onnx path (default ./onnx_nb_out/<model>/model.onnx)", "--out"),
    Argument("opset", None, f"ONNX opset (default {DEFAULT_OPSET})", "--opset", "int"),
    Argument("dynamic", True, "dynamic axes (default: every axis that can vary); --static fixes them", "--static",
             "flag"),
    Argument("exporter", "auto", "which exporter (auto: dynamo, then TorchScript)", "--exporter", "choice",
             EXPORTER_CHOICES),
    Argument("overwrite", False, "replace an existing output", "--overwrite", "flag"),
    Argument("progress", True, "show progress", None, "flag"),
    Argument("name", None, "the model's name in results and the default output folder", "--name"),
    Argument("allow_pickle", False, "load a PyTorch checkpoint that pickles a whole model (files you trust)",
             "--allow-pickle", "flag"),
    Argument("cache", "auto", "a generative model's key/value cache: auto, true (with it), false (whole sequence)",
             "--cache", "choice", ("auto", "true", "false")),
    Argument("precision", None, "the lean route for decoders from their checkpoint: int4, int8, fp16, fp32",
             "--precision", "choice", PRECISIONS),
    Argument("algorithm", None, "the lean route's INT4 blocks: rtn_asym (default), rtn, k_quant, hqq", "--algorithm",
             "choice", LEAN_ALGORITHMS),
    Argument("lm_head_bits", None, "the lean route's LM head: 4 or 8 bits (default 8)", "--lm-head-bits", "int"),
    Argument("block_size", None, "the lean route's INT4/INT8 weights per scale: 16 to 256 (default 32)",
             "--block-size", "int"),
    Argument("nms", False, "Ultralytics YOLO: the suppression in the graph (true, or conf=0.25,iou=0.45,max_det=300)",
             "--nms", "dict"),
)
SPECIFIC = ("sample", "task", "opset", "dynamic", "exporter", "allow_pickle", "cache", "precision", "algorithm",
            "lm_head_bits", "block_size", "nms")


@dataclass(frozen=True)
class ExportArgs:
    """Everything ``export()`` was told besides the model, its values checked when made."""

    sample: Any = None
    task: str | None = None
    out: str | os.PathLike[str] | None = None
    opset: int | None = None
    dynamic: Any = True
    exporter: str = "auto"
    overwrite: bool = False
    progress: bool = True
    name: str | None = None
    allow_pickle: bool = False
    cache: bool | str = "auto"
    precision: str | None = None
    algorithm: str | None = None
    lm_head_bits: int | None = None
    block_size: int | None = None
    nms: Any = False
    given: tuple[str, ...] = field(default=(), compare=False)  # the kind-specific arguments set away from defaults

    def __post_init__(self) -> None:
        if self.exporter not in EXPORTER_CHOICES:
            raise InvalidArgumentError(f"exporter={self.exporter!r} is not one of {', '.join(EXPORTER_CHOICES)}.")
        opset = self.opset
        if opset is not None and (isinstance(opset, bool) or not isinstance(opset, int) or not 9 <= opset <= 23):
            raise InvalidArgumentError(f"opset={opset!r}: give an integer from 9 to 23 (default {DEFAULT_OPSET}).")
        if not isinstance(self.dynamic, (bool, Mapping)):
            raise InvalidArgumentError(
                "dynamic must be True, False, or a dict like {'x': {0: 'batch', 1: 'sequence'}}.")
        if not any(self.cache is c or (self.cache == c and not isinstance(self.cache, bool)) for c in CACHE_CHOICES):
            raise InvalidArgumentError(f"cache={self.cache!r}: use True, False or 'auto' (for generative models).")
        if self.precision is not None and self.precision not in PRECISIONS:
            raise InvalidArgumentError(f"precision={self.precision!r}: use one of {', '.join(PRECISIONS)}.")
        if self.precision is not None:
            Blocks.of(self.precision, self.algorithm, self.lm_head_bits, self.block_size)  # refusals say what to do
        nms = self.nms
        if not (nms is False or nms is True or nms is None or
                (isinstance(nms, Mapping) and not set(nms) - set(NMS_KEYS))):
            raise InvalidArgumentError(f"nms={nms!r}: give True, or a dict with any of conf (score threshold, "
                                       f"default 0.25), iou (default 0.45), max_det (boxes per image, default 300), "
                                       "agnostic (one suppression across classes, default False).")
        defaults = {f.name: f.default for f in fields(self)}
        given = tuple(n for n in SPECIFIC if not _same(getattr(self, n), defaults[n]))
        object.__setattr__(self, "given", given)

    @property
    def opset_or_default(self) -> int:
        return self.opset or DEFAULT_OPSET

    @staticmethod
    def shown(name: str, args: ExportArgs) -> str:
        """How a refusal names an argument: ``dynamic={...}`` for a dict of axes, else its name."""
        return "dynamic={...}" if name == "dynamic" and isinstance(args.dynamic, Mapping) else name


def _same(value: Any, default: Any) -> bool:
    if isinstance(value, bool) or isinstance(default, bool):
        return value is default
    return (value is None and default is None) or (value is not None and default is not None and value == default)
