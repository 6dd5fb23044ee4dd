"""onnx-nb: PyTorch and Hugging Face models to fast, verified ONNX, inline in Jupyter.

``import onnx_nb`` is light: torch, transformers, onnxruntime, IPython and plotly are imported
only by the functions that need them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import (
    BrowserError,
    CalibrationError,
    ClusterError,
    DataError,
    DiskFullError,
    ExportError,
    HubUnavailableError,
    InsufficientMemoryError,
    InvalidArgumentError,
    InvalidModelError,
    ModelLoadError,
    ModelNotFoundError,
    NotRewritableError,
    NoWebGpuError,
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
    TransformersJsError,
    UnsafeCheckpointError,
    UnsafeModelError,
    UnsupportedOperatorError,
    UnverifiedExport,
    WorkerError,
)

__version__ = "0.1.0"

_LAZY = {
    "export": ("onnx_nb.steps.export.exporting", "export"),
    "ExportResult": ("onnx_nb.results.export", "ExportResult"),
    "ModelSource": ("onnx_nb.results.export", "ModelSource"),
    "default_model_path": ("onnx_nb.frontends.demo", "default_model_path"),
    "hub_or_standin": ("onnx_nb.frontends.demo", "hub_or_standin"),
    "check_parity": ("onnx_nb.steps.parity.check", "check_parity"),
    "ParityReport": ("onnx_nb.results.parity", "ParityReport"),
    "Tolerance": ("onnx_nb.results.tolerance", "Tolerance"),
    "benchmark": ("onnx_nb.steps.benchmark.benchmarking", "benchmark"),
    "pipeline": ("onnx_nb.steps.pipelines", "pipeline"),
    "GraphView": ("onnx_nb.frontends.widgets", "GraphView"),
    "Studio": ("onnx_nb.frontends.widgets", "Studio"),
    "Report": ("onnx_nb.results.report", "Report"),
    "optimize": ("onnx_nb.steps.variants.optimizing", "optimize"),
    "quantize": ("onnx_nb.steps.variants.quantizing", "quantize"),
    "quant_debug": ("onnx_nb.steps.variants.debugging", "quant_debug"),
    "autotune": ("onnx_nb.steps.variants.autotuning", "autotune"),
    "Variant": ("onnx_nb.results.variant", "Variant"),
    "UnpaddedSession": ("onnx_nb.runtime.padding", "UnpaddedSession"),
    "LatencyTable": ("onnx_nb.results.latency", "LatencyTable"),
    "parse_profile": ("onnx_nb.runtime.profiling", "parse_profile"),
    "isolated": ("onnx_nb.runtime.isolation", "isolated"),
    "Cluster": ("onnx_nb.runtime.cluster", "Cluster"),
    "IsolatedSession": ("onnx_nb.runtime.isolation", "IsolatedSession"),
    "check_model": ("onnx_nb.runtime.onnxfile", "check_model"),
    "generate": ("onnx_nb.steps.generate.generation", "generate"),
    "to_diffusers": ("onnx_nb.kinds.diffusion.pipeline", "to_diffusers"),
    "check_diffusion": ("onnx_nb.kinds.diffusion.parity", "check_diffusion"),
    "DiffusionExport": ("onnx_nb.kinds.diffusion.result", "DiffusionExport"),
    "DiffusionParity": ("onnx_nb.kinds.diffusion.result", "DiffusionParity"),
    "unet_calibration": ("onnx_nb.kinds.diffusion.parity", "unet_calibration"),
    "check_sam": ("onnx_nb.kinds.sam.parity", "check_sam"),
    "SamExport": ("onnx_nb.kinds.sam.result", "SamExport"),
    "SamParity": ("onnx_nb.kinds.sam.result", "SamParity"),
    "PartsExport": ("onnx_nb.results.parts", "PartsExport"),
    "VlmExport": ("onnx_nb.kinds.vlm.result", "VlmExport"),
    "SpeechLlmExport": ("onnx_nb.kinds.speech_llm.result", "SpeechLlmExport"),
    "to_transformers": ("onnx_nb.steps.generate.transformers_api", "to_transformers"),
    "to_transformers_js": ("onnx_nb.steps.web.bundle", "to_transformers_js"),
    "WebBundle": ("onnx_nb.results.web_bundle", "WebBundle"),
    "summary": ("onnx_nb.steps.inspect.structure", "summary"),
    "compare": ("onnx_nb.steps.inspect.comparing", "compare"),
    "ModelSummary": ("onnx_nb.results.summary", "ModelSummary"),
    "GraphComparison": ("onnx_nb.results.summary", "GraphComparison"),
    "CompareView": ("onnx_nb.frontends.widgets", "CompareView"),
    "GenerationResult": ("onnx_nb.results.generation", "GenerationResult"),
    "evaluate": ("onnx_nb.steps.evaluate.evaluating", "evaluate"),
    "Evaluation": ("onnx_nb.results.evaluation", "Evaluation"),
    "lm_eval_model": ("onnx_nb.steps.evaluate.harness", "lm_eval_model"),
    "mteb_model": ("onnx_nb.steps.evaluate.mteb_models", "mteb_model"),
    "mteb_task": ("onnx_nb.steps.evaluate.mteb_models", "mteb_task"),
}

__all__ = [
    "BrowserError",
    "CalibrationError",
    "Cluster",
    "ClusterError",
    "CompareView",
    "DataError",
    "DiffusionExport",
    "DiffusionParity",
    "DiskFullError",
    "Evaluation",
    "ExportError",
    "ExportResult",
    "GenerationResult",
    "GraphComparison",
    "GraphView",
    "HubUnavailableError",
    "InsufficientMemoryError",
    "InvalidArgumentError",
    "InvalidModelError",
    "IsolatedSession",
    "LatencyTable",
    "ModelLoadError",
    "ModelNotFoundError",
    "ModelSource",
    "ModelSummary",
    "NoWebGpuError",
    "NotRewritableError",
    "OnnxNbError",
    "OptimizationError",
    "OutputExistsError",
    "OutputNotWritableError",
    "ParityReport",
    "PartsExport",
    "ProviderUnavailableError",
    "QuantizationError",
    "Report",
    "RuntimeCrashError",
    "SamExport",
    "SamParity",
    "SampleError",
    "ShapeMismatch",
    "SpeechLlmExport",
    "Studio",
    "Tolerance",
    "ToleranceExceeded",
    "TransformersJsError",
    "UnpaddedSession",
    "UnsafeCheckpointError",
    "UnsafeModelError",
    "UnsupportedOperatorError",
    "UnverifiedExport",
    "Variant",
    "VlmExport",
    "WebBundle",
    "WorkerError",
    "__version__",
    "autotune",
    "benchmark",
    "check_diffusion",
    "check_model",
    "check_parity",
    "check_sam",
    "compare",
    "default_model_path",
    "evaluate",
    "export",
    "generate",
    "hub_or_standin",
    "isolated",
    "lm_eval_model",
    "load_ipython_extension",
    "mteb_model",
    "mteb_task",
    "optimize",
    "parse_profile",
    "pipeline",
    "quant_debug",
    "quantize",
    "summary",
    "to_diffusers",
    "to_transformers",
    "to_transformers_js",
    "unet_calibration",
]

if TYPE_CHECKING:
    from .frontends.demo import default_model_path, hub_or_standin
    from .frontends.widgets import CompareView, GraphView, Studio
    from .kinds.diffusion.parity import check_diffusion, unet_calibration
    from .kinds.diffusion.pipeline import to_diffusers
    from .kinds.diffusion.result import DiffusionExport, DiffusionParity
    from .kinds.sam.parity import check_sam
    from .kinds.sam.result import SamExport, SamParity
    from .kinds.speech_llm.result import SpeechLlmExport
    from .kinds.vlm.result import VlmExport
    from .results.export import ExportResult, ModelSource
    from .results.generation import GenerationResult
    from .results.latency import LatencyTable
    from .results.parity import ParityReport
    from .results.parts import PartsExport
    from .results.report import Report
    from .results.summary import GraphComparison, ModelSummary
    from .results.tolerance import Tolerance
    from .results.variant import Variant
    from .results.web_bundle import WebBundle
    from .runtime.isolation import IsolatedSession, isolated
    from .runtime.onnxfile import check_model
    from .runtime.padding import UnpaddedSession
    from .runtime.profiling import parse_profile
    from .steps.benchmark.benchmarking import benchmark
    from .steps.export.exporting import export
    from .steps.generate.generation import generate
    from .steps.generate.transformers_api import to_transformers
    from .steps.inspect.comparing import compare
    from .steps.inspect.structure import summary
    from .steps.parity.check import check_parity
    from .steps.pipelines import pipeline
    from .steps.variants.autotuning import autotune
    from .steps.variants.debugging import quant_debug
    from .steps.variants.optimizing import optimize
    from .steps.variants.quantizing import quantize
    from .steps.web.bundle import to_transformers_js


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'onnx_nb' has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext onnx_nb``: register the ``%onnx_*`` magics.

    Example::

        %load_ext onnx_nb
    """
    from .frontends.magics import OnnxMagics

    ipython.register_magics(OnnxMagics)


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """Jupyter server: the routes behind the JupyterLab .onnx viewer (enabled by the installed config file)."""
    return [{"module": "onnx_nb.frontends.labserver"}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """JupyterLab: the prebuilt extension (``jupyter labextension develop`` reads this)."""
    return [{"src": "labextension", "dest": "onnx-nb"}]
