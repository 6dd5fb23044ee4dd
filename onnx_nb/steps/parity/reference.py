"""A reference the ONNX model under test is compared with (:class:`Reference`): PyTorch, another ONNX file, or, for
models from beyond PyTorch and files made elsewhere (:mod:`.foreign`), their own framework or an implementation that
is not ONNX Runtime. :mod:`.references` decides which one a check uses."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...runtime.shapes import contiguous


@dataclass
class Reference:
    """Runs the reference on named numpy inputs; ``kind`` is ``"torch"``, ``"onnx"``, or for models from beyond
    PyTorch and files made elsewhere (:mod:`.foreign`) ``"keras"``, ``"tensorflow"``, ``"sklearn"``,
    ``"independent"`` (ONNX's reference evaluator, OpenVINO) or ``"saved"`` (outputs the user saved)."""

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
    runner: Any = field(default=None, repr=False)  # named inputs -> named outputs, for the kinds of .foreign
    fixed_feed: bool = False  # the reference holds for its sample only (saved outputs): no other shape, no probe

    def run(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.runner is not None:
            return dict(self.runner(feed))
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


def onnx_reference(path: Path, sample: dict[str, np.ndarray], axes: dict[str, dict[int, str]]) -> Reference:
    from ...runtime.sessions import session

    sess = session(path, "CPUExecutionProvider")
    return Reference("onnx", f"ONNX {path.name}", sample, axes, [o.name for o in sess.get_outputs()],
                     path=path, session=sess)
