"""Every error onnx-nb raises on purpose is an :class:`OnnxNbError`.

Each message says what was wrong and what to do about it.
"""

from __future__ import annotations


class OnnxNbError(Exception):
    """Base class of onnx-nb's own errors."""


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The first non-empty line of an exception's message (its type name when the message is empty),
    cut to ``limit`` characters."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if lines and lines[0].endswith("for the following indices"):  # ONNX Runtime's shape refusal: which axes
        lines[0] += ": " + "; ".join(ln for ln in lines[1:] if ln.startswith("index:"))
    return (lines[0] if lines else type(exc).__name__)[:limit]


_CAUSE_MARKERS = ("no conversion rule", "not supported", "unsupported", "not implemented", "cannot", "could not",
                  "failed to", "invalid", "error:")


def telling_lines(exc: BaseException, limit: int = 300) -> str:
    """The first line of an error, plus the first later line that names a cause (runtimes such as
    OpenVINO put the cause, e.g. ``No conversion rule found for operations: ...``, lines below a generic
    first line)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    cause = next((ln for ln in lines[1:] if any(m in ln.lower() for m in _CAUSE_MARKERS)), None)
    text = lines[0] if cause is None or cause == lines[0] else f"{lines[0]} … {cause}"
    return text[:limit]


class InvalidArgumentError(OnnxNbError, ValueError):
    """An argument has the wrong type or value."""


class ProviderUnavailableError(InvalidArgumentError):
    """None of the execution providers asked for is in this onnxruntime build."""


class ModelNotFoundError(OnnxNbError, FileNotFoundError):
    """A model path or hub id does not point at a model."""


class HubUnavailableError(OnnxNbError, ConnectionError):
    """The Hugging Face Hub could not be reached to download a model."""


class ModelLoadError(OnnxNbError):
    """A model was found but could not be loaded."""


class SampleError(OnnxNbError, ValueError):
    """Sample inputs are missing or do not fit the model."""


class OutputExistsError(OnnxNbError, FileExistsError):
    """The output file exists and ``overwrite=True`` was not given."""


class OutputNotWritableError(OnnxNbError, PermissionError):
    """The output folder cannot be written."""


class DiskFullError(OutputNotWritableError):
    """The disk filled up while writing (nothing partial is left behind)."""


class UnsafeCheckpointError(ModelLoadError):
    """A PyTorch checkpoint needs arbitrary-code unpickling and the user did not opt in."""


class RuntimeCrashError(OnnxNbError, RuntimeError):
    """ONNX Runtime died (e.g. a segmentation fault) in the isolated worker process."""


class ExportError(OnnxNbError):
    """Every exporter that was tried failed.

    ``attempts`` maps each exporter's name to the first line of its error.
    """

    def __init__(self, message: str, attempts: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.attempts = dict(attempts or {})


class UnsupportedOperatorError(ExportError):
    """An operator in the model has no ONNX translation."""

    def __init__(
        self,
        message: str,
        operator: str,
        module_path: str | None = None,
        attempts: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message, attempts)
        self.operator = operator
        self.module_path = module_path


class InvalidModelError(OnnxNbError, ValueError):
    """An ONNX file is missing, empty, corrupt or not an ONNX model."""


class UnsafeModelError(InvalidModelError):
    """An ONNX file points outside its folder (external data by absolute path, ``..`` or a link)."""


class OnnxNbWarning(UserWarning):
    """Warnings onnx-nb itself emits (the test suite turns them into errors)."""


class ToleranceExceeded(OnnxNbError, AssertionError):
    """A parity check found outputs outside their tolerance (``ParityReport.raise_for_failure``)."""


class ShapeMismatch(OnnxNbError, AssertionError):
    """The ONNX model's outputs have other shapes than the reference's, or it rejects a shape."""


class UnverifiedExport(OnnxNbError, AssertionError):
    """The export recorded one path of data-dependent control flow (``ParityReport.raise_for_failure``)."""


class CalibrationError(OnnxNbError, ValueError):
    """Static quantization has no calibration data, or data that does not fit the model."""


class DataError(OnnxNbError, ValueError):
    """:func:`onnx_nb.evaluate` was given data it cannot read, or data that does not fit the metric (no labels,
    unknown columns, an empty split)."""


class QuantizationError(OnnxNbError):
    """ONNX Runtime's quantizer failed on this model."""


class InsufficientMemoryError(OnnxNbError, MemoryError):
    """A step would need more memory than the machine has available; the message says how much and what to do
    instead (another precision, the lean decoder route)."""


class OptimizationError(OnnxNbError):
    """An optimization step failed."""


class NotRewritableError(OptimizationError):
    """A decoder does not match the GroupQueryAttention rewrite (``optimize(attention="gqa")``); the message says
    which part of the graph or the model differs. ``attention="standard"`` keeps ONNX's own attention op."""


class WorkerError(OnnxNbError, RuntimeError):
    """ONNX Runtime raised an error in the isolated worker; the message is ONNX Runtime's."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"[{kind}] {message}")
        self.kind = kind


class ClusterError(OnnxNbError, ConnectionError):
    """The Ray cluster asked for with ``cluster=`` cannot be reached or used."""


class BrowserError(OnnxNbError, RuntimeError):
    """The browser backend's page could not be started or reached, or stopped answering."""


class TransformersJsError(OnnxNbError, RuntimeError):
    """transformers.js could not check a folder: Node.js or the ``@huggingface/transformers`` package is missing, or
    the check's process failed."""


class NoWebGpuError(BrowserError):
    """The browser page offers no WebGPU adapter: its browser-webgpu rows are unavailable."""
