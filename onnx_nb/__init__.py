"""onnx-nb: PyTorch and Hugging Face models to fast, verified ONNX, inline in Jupyter.

``import onnx_nb`` is light: torch, transformers, onnxruntime, IPython and plotly are imported
only by the functions that need them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import (
    CalibrationError,
    DiskFullError,
    ExportError,
    HubUnavailableError,
    InvalidArgumentError,
    InvalidModelError,
    ModelLoadError,
    ModelNotFoundError,
    OnnxNbError,
    OptimizationError,
    OutputExistsError,
    OutputNotWritableError,
    ProviderUnavailableError,
    QuantizationError,
    RuntimeCrashError,
    SampleError,
    ShapeMismatch,
    ToleranceExceeded,
    UnsafeCheckpointError,
    UnsafeModelError,
    UnsupportedOperatorError,
    UnverifiedExport,
    WorkerError,
)

__version__ = "0.1.0"

_LAZY = {
    "export": ("onnx_nb.exporting", "export"),
    "ExportResult": ("onnx_nb.results.export", "ExportResult"),
    "ModelSource": ("onnx_nb.results.export", "ModelSource"),
    "default_model_path": ("onnx_nb.demo", "default_model_path"),
    "check_parity": ("onnx_nb.parity.check", "check_parity"),
    "ParityReport": ("onnx_nb.results.parity", "ParityReport"),
    "Tolerance": ("onnx_nb.results.tolerance", "Tolerance"),
    "benchmark": ("onnx_nb.benchmarking", "benchmark"),
    "pipeline": ("onnx_nb.pipelines", "pipeline"),
    "GraphView": ("onnx_nb.widgets", "GraphView"),
    "Studio": ("onnx_nb.widgets", "Studio"),
    "Report": ("onnx_nb.results.report", "Report"),
    "optimize": ("onnx_nb.optimizing", "optimize"),
    "quantize": ("onnx_nb.quantizing", "quantize"),
    "quant_debug": ("onnx_nb.debugging", "quant_debug"),
    "autotune": ("onnx_nb.autotuning", "autotune"),
    "Variant": ("onnx_nb.results.variant", "Variant"),
    "UnpaddedSession": ("onnx_nb.padding", "UnpaddedSession"),
    "LatencyTable": ("onnx_nb.results.latency", "LatencyTable"),
    "parse_profile": ("onnx_nb.profiling", "parse_profile"),
    "isolated": ("onnx_nb.isolation", "isolated"),
    "IsolatedSession": ("onnx_nb.isolation", "IsolatedSession"),
    "check_model": ("onnx_nb.onnxfile", "check_model"),
    "generate": ("onnx_nb.generation", "generate"),
    "GenerationResult": ("onnx_nb.generation", "GenerationResult"),
}

__all__ = [
    "CalibrationError",
    "DiskFullError",
    "ExportError",
    "ExportResult",
    "GenerationResult",
    "GraphView",
    "HubUnavailableError",
    "InvalidArgumentError",
    "InvalidModelError",
    "IsolatedSession",
    "LatencyTable",
    "ModelLoadError",
    "ModelNotFoundError",
    "ModelSource",
    "OnnxNbError",
    "OptimizationError",
    "OutputExistsError",
    "OutputNotWritableError",
    "ParityReport",
    "ProviderUnavailableError",
    "QuantizationError",
    "Report",
    "RuntimeCrashError",
    "SampleError",
    "ShapeMismatch",
    "Studio",
    "Tolerance",
    "ToleranceExceeded",
    "UnpaddedSession",
    "UnsafeCheckpointError",
    "UnsafeModelError",
    "UnsupportedOperatorError",
    "UnverifiedExport",
    "Variant",
    "WorkerError",
    "__version__",
    "autotune",
    "benchmark",
    "check_model",
    "check_parity",
    "default_model_path",
    "export",
    "generate",
    "isolated",
    "load_ipython_extension",
    "optimize",
    "parse_profile",
    "pipeline",
    "quant_debug",
    "quantize",
]

if TYPE_CHECKING:
    from .autotuning import autotune
    from .benchmarking import benchmark
    from .debugging import quant_debug
    from .demo import default_model_path
    from .exporting import export
    from .generation import GenerationResult, generate
    from .isolation import IsolatedSession, isolated
    from .onnxfile import check_model
    from .optimizing import optimize
    from .padding import UnpaddedSession
    from .parity.check import check_parity
    from .pipelines import pipeline
    from .profiling import parse_profile
    from .quantizing import quantize
    from .results.export import ExportResult, ModelSource
    from .results.latency import LatencyTable
    from .results.parity import ParityReport
    from .results.report import Report
    from .results.tolerance import Tolerance
    from .results.variant import Variant
    from .widgets import GraphView, Studio


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'onnx_nb' has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext onnx_nb``: register the ``%onnx_*`` magics."""
    from .magics import OnnxMagics

    ipython.register_magics(OnnxMagics)
