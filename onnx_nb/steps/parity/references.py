"""What an ONNX model is compared against: a PyTorch model or another ONNX model."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError, SampleError, first_line
from ...runtime.feeds import export_sample, feed_for, to_numpy
from ...runtime.shapes import contiguous


@dataclass
class Reference:
    """Runs the reference on named numpy inputs; ``kind`` is ``"torch"`` or ``"onnx"``."""

    kind: str
    label: str
    sample: dict[str, np.ndarray]
    axes: dict[str, dict[int, str]]
    output_names: list[str]
    model: Any = None  # torch module, for kind == "torch"
    flat: Any = None  # onnx_nb.steps.export.wrap.FlatModule
    path: Path | None = None  # for kind == "onnx"
    exporter: str | None = None  # how the ONNX model under test was exported, when known
    session: Any = field(default=None, repr=False)

    def run(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.kind == "onnx":
            if self.session is None:
                from ...runtime.sessions import session

                self.session = session(self.path or "", "CPUExecutionProvider")
            wanted = {i.name for i in self.session.get_inputs()}
            out = self.session.run(None, {k: v for k, v in feed.items() if k in wanted})
            return dict(zip([o.name for o in self.session.get_outputs()], out))
        import torch

        from ..export.wrap import eval_mode

        tensors = [torch.from_numpy(contiguous(feed[n])) for n in self.flat.input_names]
        with eval_mode(self.model), torch.no_grad():
            out = self.flat.flat(*tensors)
        return {n: t.detach().float().numpy() if t.is_floating_point() else t.numpy()
                for n, t in zip(self.output_names, out)}


def torch_reference(source: Any, sample: Any, label: str, exporter: str | None = None) -> Reference:
    """From a resolved :class:`ModelSource` (model loaded) and an optional user sample."""
    from ..export.sources import build_sample, flat_module
    from ..export.wrap import eval_mode

    if sample is None and source.sample:
        tensors = dict(source.sample)
        from ..export.inputs import Sample

        s = Sample(list(tensors), list(tensors.values()), source.as_kwargs, dict(source.input_axes))
    else:
        s = build_sample(source, sample)
    if not s.axes:
        from ..export.sources import natural_axes

        s.axes = natural_axes(source, s)
    flat = flat_module(source, s.names, s.as_kwargs)
    with eval_mode(source.model):
        try:
            flat.discover(s.tensors)
        except Exception as exc:
            raise SampleError(
                f"The reference model fails on the sample {s.shapes()}: {type(exc).__name__}: "
                f"{first_line(exc, 200)}"
            ) from exc
    return Reference("torch", label, to_numpy(s.as_dict()), dict(s.axes), list(flat.output_names),
                     model=source.model, flat=flat, exporter=exporter)


def onnx_reference(path: Path, sample: dict[str, np.ndarray], axes: dict[str, dict[int, str]]) -> Reference:
    from ...runtime.sessions import session

    sess = session(path, "CPUExecutionProvider")
    return Reference("onnx", f"ONNX {path.name}", sample, axes, [o.name for o in sess.get_outputs()],
                     path=path, session=sess)


def reference_and_model(reference: Any, onnx_model: Any, sample: Any, seed: int) -> tuple[Reference, Path]:
    """The reference to compare against and the path of the ONNX model under test."""
    from ...results.export import ExportResult

    if onnx_model is None and not hasattr(reference, "path"):
        raise InvalidArgumentError(
            "Which ONNX model should be checked? Pass it as onnx_model (a .onnx path or an ExportResult); "
            "it can only be left out when the reference is an ExportResult or a variant."
        )
    candidate = _path_of(onnx_model if onnx_model is not None else reference, "onnx_model")
    exporter = onnx_model.exporter if isinstance(onnx_model, ExportResult) else None
    if isinstance(reference, ExportResult):
        from ..export.sources import reload_source

        source = reload_source(reference.source, "check_parity")
        return torch_reference(source, sample, f"PyTorch {reference.source.name}",
                               exporter or reference.exporter), candidate
    parent = getattr(reference, "path", None) if not isinstance(reference, (str, os.PathLike)) else None
    if parent is not None or (isinstance(reference, (str, os.PathLike)) and str(reference).endswith(".onnx")):
        path = _path_of(reference, "reference")
        feed, axes = feed_for(path, onnx_model, sample, seed)
        if sample is not None:
            from ...runtime.shapes import check_sample

            check_sample(feed, path)
        return onnx_reference(path, feed, axes), candidate
    from ..export.sources import load_source

    source = load_source(reference, None)
    if sample is None and source.kind == "module":
        sample = export_sample(onnx_model)
    return torch_reference(source, sample, f"PyTorch {source.name}", exporter), candidate


def _path_of(model: Any, what: str) -> Path:
    path = getattr(model, "path", model)
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgumentError(
            f"{what} is a {type(model).__name__}; pass the path of an .onnx file, an ExportResult "
            "or a variant."
        )
    return Path(path)
