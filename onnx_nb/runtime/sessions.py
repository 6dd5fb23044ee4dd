"""ONNX Runtime sessions: checked model loading on a provider (names and options: :mod:`onnx_nb.runtime.providers`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import InvalidModelError, first_line
from .memory import FACTORS
from .providers import chain, options

MAP_WEIGHTS_ABOVE = 2**30
# A CPU session holding its weights in memory peaks at memory.FACTORS["session"] times them; below CHECK_ABOVE a
# session is never refused. Mapped weights are file pages the kernel can drop again: not counted.
CHECK_ABOVE = 256 * 2**20
PACKED_ONLY = ("MatMulNBits", "QMoE")  # kernels that are only fast on their prepacked weights


def session(path: str | Path, provider: str = "CPUExecutionProvider", *, isolate: bool | None = None,
            check_graph: bool = True, map_weights: bool | None = None, **settings: Any) -> Any:
    """A session on one provider, opened only after :func:`onnxfile.check_model` passed (clear errors for
    missing, empty, corrupt or escaping files before ONNX Runtime sees them).

    ``check_graph=False`` skips ``onnx.checker`` (for onnx-nb's own derived files, such as the
    every-tensor-an-output copy the divergence search builds); the file and data checks always run.
    ``map_weights`` (default: when the external data exceeds 1 GiB) turns weight prepacking off so
    that ONNX Runtime reads the weights straight from the memory-mapped data file: checking a 2 GB
    model then costs no second 2 GB copy (runs are slower, so :func:`benchmark` keeps prepacking on). Never by
    default for a file with ``MatMulNBits``: unpacked, its blocks are unpacked again at every run (a 7B INT4
    decode step took seconds instead of 0.2 s), and its packed copy is no bigger than the file.
    ``settings`` go to :func:`options`. With isolation on (``isolate=True``, an ``isolated()`` block or
    ``ONNX_NB_ISOLATE=1``) the session lives in a worker process: :class:`isolation.IsolatedSession`.
    """
    from .isolation import IsolatedSession, wanted
    from .onnxfile import check_model, total_file_size

    proto = check_model(path, graph=check_graph)
    weights = total_file_size(Path(path), proto)  # the model's bytes, its external data files included
    packed = any(n.op_type in PACKED_ONLY for n in proto.graph.node)
    del proto  # a file holding its weights inside: its parsed copy goes before ONNX Runtime makes its own
    if map_weights is None:  # bytes of external data: every file of the model but the .onnx itself
        map_weights = weights - Path(path).stat().st_size > MAP_WEIGHTS_ABOVE and not packed
    if map_weights:
        settings["prepack"] = False
    else:
        _check_fits(Path(path), weights)
    if provider.startswith("browser:"):  # ONNX Runtime Web in a browser page
        from .browser import BrowserSession

        return BrowserSession(path, provider, **settings)
    if wanted(isolate):
        return IsolatedSession(path, provider, **settings)
    import onnxruntime as ort

    disabled = settings.pop("disabled_optimizers", None)
    try:
        return ort.InferenceSession(str(path), options(**settings), providers=chain(provider),
                                    **({"disabled_optimizers": list(disabled)} if disabled else {}))
    except Exception as exc:
        if settings.get("save_to") is not None:  # it was writing the optimized graph: a full disk?
            from .files import disk_error

            full = disk_error(exc, Path(settings["save_to"]).parent)
            if full is not None:
                raise full from exc
        raise InvalidModelError(f"ONNX Runtime cannot load {Path(path).name}: {first_line(exc)}") from exc


def graph_session(model: Any, **settings: Any) -> Any:
    """A CPU session of a small graph onnx-nb built in memory (a block of a model measured alone, a micro-benchmark):
    no file to check, :func:`options` as every other session."""
    import onnxruntime as ort

    data = model if isinstance(model, bytes) else model.SerializeToString()
    return ort.InferenceSession(data, options(**settings), providers=["CPUExecutionProvider"])


def ort_format_session(path: str | Path) -> Any:
    """A CPU session of an ONNX Runtime Mobile ``.ort`` file, as ONNX Runtime Mobile opens it."""
    import onnxruntime as ort

    so = options()
    so.add_session_config_entry("session.load_model_format", "ORT")
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _check_fits(path: Path, weights: int) -> None:
    """Refuse a session whose weights cannot be held in memory here (:class:`~onnx_nb.InsufficientMemoryError`,
    how much and what to do) before ONNX Runtime starts on it and the kernel dies halfway."""
    if FACTORS["session"] * weights < CHECK_ABOVE:
        return
    from ..render import human_bytes
    from .memory import require

    require(int(FACTORS["session"] * weights),
            f"Opening {path.name} in ONNX Runtime ({human_bytes(weights)} of weights, held in memory)",
            "Free what this kernel holds (del the results and models you no longer need, or restart it), use a "
            "smaller file of the model (quantize(..., method=\"int4\") or \"fp16\"; a decoder straight from its "
            "checkpoint: export(folder, precision=\"int4\")), or run this step on a machine with more memory.")
