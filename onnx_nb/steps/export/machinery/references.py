"""What an ONNX file is compared with (:class:`Reference`), built by the adapter of its source: the PyTorch model made
flat and fed the way the export made and fed it, another ONNX file, the model in its own framework (Keras,
TensorFlow, scikit-learn), or, for a file with no source, an implementation that is not ONNX Runtime. The export's own
check and :func:`onnx_nb.check_parity` use the same references."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ....errors import InvalidArgumentError, SampleError, first_line
from ....runtime.feeds import to_numpy
from ....runtime.shapes import contiguous

SAVED_NOTE = ("The reference is the outputs saved beside the sample: they hold for the saved inputs only, so only "
              "the sample's shape is checked and no probe runs.")


@dataclass
class Reference:
    """Runs the reference on named numpy inputs: a PyTorch model made flat (``flat``), an ONNX file in ONNX Runtime
    (``graph``), or ``runner`` (a model run by its own framework; ONNX's reference evaluator or OpenVINO; outputs the
    user saved). ``kind`` says which for people: ``"torch"``, ``"onnx"``, ``"keras"``, ``"tensorflow"``,
    ``"sklearn"``, ``"independent"``, ``"saved"``."""

    kind: str
    label: str
    sample: dict[str, np.ndarray]
    axes: dict[str, dict[int, str]]
    output_names: list[str]
    model: Any = None  # the torch module a PyTorch reference runs
    flat: Any = None  # onnx_nb.steps.export.machinery.wrap.FlatModule
    path: Path | None = None  # the file a reference computes (an ONNX file in ONNX Runtime, or independently)
    graph: Path | None = None  # the ONNX file this reference runs in ONNX Runtime: compared tensor by tensor
    exporter: str | None = None  # how the ONNX model under test was exported, when known
    session: Any = field(default=None, repr=False)
    runner: Any = field(default=None, repr=False)  # named inputs -> named outputs, for the kinds of .foreign
    fixed_feed: bool = False  # the reference holds for its sample only (saved outputs): no other shape, no probe

    def run(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.runner is not None:
            return dict(self.runner(feed))
        if self.graph is not None:
            if self.session is None:
                from ....runtime.sessions import session

                self.session = session(self.graph, "CPUExecutionProvider")
            wanted = {i.name for i in self.session.get_inputs()}
            out = self.session.run(None, {k: v for k, v in feed.items() if k in wanted})
            return dict(zip([o.name for o in self.session.get_outputs()], out))
        import torch

        from .wrap import eval_mode

        tensors = [torch.from_numpy(contiguous(feed[n])) for n in self.flat.input_names]
        with eval_mode(self.model), torch.no_grad():
            out = self.flat.reference(*tensors)
        return {n: t.detach().float().numpy() if t.is_floating_point() else t.numpy()
                for n, t in zip(self.output_names, out)}

    def close(self) -> None:
        """An ONNX file's session closed (opened again if the reference runs again): its weights go."""
        if self.graph is not None:
            self.session = None


def onnx_reference(path: Path, sample: dict[str, np.ndarray], axes: dict[str, dict[int, str]]) -> Reference:
    from ....runtime.sessions import session

    sess = session(path, "CPUExecutionProvider")
    return Reference("onnx", f"ONNX {path.name}", sample, axes, [o.name for o in sess.get_outputs()],
                     path=path, graph=path, session=sess)


def sample_from(candidate: Path, seed: int) -> dict[str, np.ndarray]:
    """Inputs made from the file's graph (a model given without a sample of its own)."""
    from ....runtime.feeds import graph_sample

    return graph_sample(candidate, seed)[0]


def output_names(path: Path) -> list[str]:
    from ....runtime.onnxfile import load_proto

    return [o.name for o in load_proto(path).graph.output]


def torch_reference(source: Any, sample: Any, label: str, exporter: str | None = None, *, adapter: Any) -> Reference:
    """From a resolved :class:`ModelSource` (model loaded) and an optional user sample: the model made flat and fed
    by its ``adapter`` (:class:`~onnx_nb.steps.export.adapters.base.Adapter`), the way the export made and fed it."""
    from .inputs import Sample
    from .wrap import eval_mode

    if sample is None and source.sample:
        tensors = dict(source.sample)
        s = Sample(list(tensors), list(tensors.values()), source.as_kwargs, dict(source.input_axes))
    else:
        s = adapter.sample(source, sample)
    if not s.axes:
        s.axes = adapter.natural_axes(source, s)
    flat = adapter.flat(source, s.names, s.as_kwargs)
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


def independent_reference(path: Path, against: Any, sample: Any, seed: int,
                          recorded: dict[str, np.ndarray] | None = None) -> Reference:
    """A reference for ``path`` that does not use ONNX Runtime: saved outputs (``against`` a ``.npz`` path, or
    ``recorded``), else :func:`~onnx_nb.runtime.independent.independent_runner`'s."""
    from ....runtime.feeds import feed_for
    from ....runtime.independent import independent_runner, read_saved
    from ....runtime.onnxfile import load_proto, signature

    ins, outs = signature(load_proto(path))
    if isinstance(against, (str, os.PathLike)) and str(against).endswith(".npz"):
        feed, recorded = read_saved(against, [i.name for i in ins], [o.name for o in outs])
        if not recorded:
            raise InvalidArgumentError(f"{against} holds inputs only; save the outputs beside them "
                                       "(numpy.savez(path, **inputs, **outputs)) to check against them.")
    elif recorded:
        feed = dict(sample)
    else:
        feed = None
    if recorded and feed is not None:
        saved = dict(recorded)
        return Reference("saved", "the outputs saved beside the sample", feed, {}, list(saved), path=path,
                         runner=lambda f: saved, fixed_feed=True)
    label, runner, why = independent_runner(path, "auto" if against is None else str(against))
    if runner is None:
        raise InvalidArgumentError(f"No reference for {path.name} without its source model: {why}. Pass "
                                   "against='x.npz' (inputs and the outputs you trust), or the model it came from: "
                                   "check_parity(model, file).")
    feed, axes = feed_for(path, None, sample, seed)
    return Reference("independent", f"{label} on {path.name}", feed, axes, [o.name for o in outs], path=path,
                     runner=runner)
