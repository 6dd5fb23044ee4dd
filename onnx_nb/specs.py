"""Argument specs shared by the ``%onnx_*`` magics and the ``onnx-nb`` command line.

Plain data, so it can be tested without IPython: each entry is ``(flags, options, where)`` with
``where`` one of ``"both"``, ``"magic"`` or ``"cli"``.
"""

from __future__ import annotations

import argparse
from typing import Any

Spec = tuple[tuple[str, ...], dict[str, Any], str]

EXPORT: list[Spec] = [
    (("model",), {"help": "a variable holding a model (magic only), a local Hugging Face folder, "
                          "or a hub id"}, "both"),
    (("--sample",), {"help": "a variable holding the sample inputs (tensor, tuple or dict)"}, "magic"),
    (("--task",), {"help": "Hugging Face task, e.g. text-classification (inferred by default)"}, "both"),
    (("--out",), {"help": "output .onnx path (default ./onnx_nb_out/<model>/model.onnx)"}, "both"),
    (("--opset",), {"type": int, "help": "ONNX opset (default 18)"}, "both"),
    (("--exporter",), {"choices": ["auto", "dynamo", "torchscript"], "default": "auto",
                       "help": "auto tries dynamo, then TorchScript"}, "both"),
    (("--static",), {"action": "store_true", "help": "export fixed shapes (no dynamic axes)"}, "both"),
    (("--overwrite",), {"action": "store_true", "help": "replace an existing output file"}, "both"),
]

DEMO: list[Spec] = [
    (("--out",), {"default": "onnx_nb_out/demo",
                  "help": "folder for the demo's files (default ./onnx_nb_out/demo)"}, "cli"),
]


def add_arguments(parser: argparse.ArgumentParser, specs: list[Spec], where: str) -> None:
    for flags, options, scope in specs:
        if scope in ("both", where):
            parser.add_argument(*flags, **options)


def export_kwargs(ns: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments for :func:`onnx_nb.export` from parsed ``EXPORT`` arguments."""
    return {"task": ns.task, "out": ns.out, "opset": ns.opset, "exporter": ns.exporter,
            "dynamic": not ns.static, "overwrite": ns.overwrite}
