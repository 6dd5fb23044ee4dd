"""Turn any model call into a flat ``forward(*tensors) -> tuple[tensor, ...]`` for the exporters.

Hugging Face models return ``ModelOutput`` objects, take ``use_cache`` and may return caches;
plain modules return tensors, tuples or dicts. The exporters want named positional tensors in
and a flat tuple of tensors out. :class:`FlatModule` does that, and records the output names.
Only imported by functions that already need torch.
"""

from __future__ import annotations

import contextlib
import inspect
import keyword
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

from ....errors import SampleError

OutputPath = tuple[Any, ...]

# Hugging Face outputs that are never graph outputs of an inference export.
_HF_SKIP = {"cache", "past_key_values", "cache_params", "hidden_states", "attentions", "cross_attentions",
            "encoder_hidden_states", "encoder_attentions", "decoder_hidden_states",
            "decoder_attentions", "loss"}
# fields that hold a tuple of tensors, each an output: a backbone's feature maps (feature_maps_0, feature_maps_1, ...)
_HF_TENSOR_TUPLES = {"feature_maps"}


@contextlib.contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """Run in eval mode and give every submodule its own training flag back afterwards."""
    flags = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for m, flag in flags:
            m.training = flag


def forward_parameters(model: torch.nn.Module) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return {}


def output_paths(output: Any, hf: bool, prefix: str = "output") -> list[tuple[str, OutputPath]]:
    """Names and access paths of the tensors in a model's output."""
    if isinstance(output, torch.Tensor):
        return [(prefix, ())]
    found: list[tuple[str, OutputPath]] = []
    if isinstance(output, Mapping) or (hf and hasattr(output, "keys")):
        for key in output.keys():
            value = output[key]
            if hf and (key in _HF_SKIP or not (isinstance(value, torch.Tensor) or key in _HF_TENSOR_TUPLES)):
                continue
            found += [(str(key) if not sub else f"{key}_{'_'.join(map(str, sub))}", (key, *sub))
                      for _, sub in output_paths(value, hf=False)]
        return found
    if isinstance(output, (tuple, list)):
        for i, value in enumerate(output):
            for _, sub in output_paths(value, hf=False):
                found.append(("_".join([prefix, str(i), *map(str, sub)]), (i, *sub)))
    return found


def pick(output: Any, path: OutputPath) -> torch.Tensor:
    for step in path:
        output = output[step]
    return output


def _identifier(name: str, index: int) -> str:
    return name if name.isidentifier() and not keyword.iskeyword(name) else f"input_{index}"


class FlatModule(torch.nn.Module):
    """``forward(*tensors)`` in the order of ``input_names``; a tuple of tensors out."""

    def __init__(self, model: torch.nn.Module, input_names: Sequence[str], as_kwargs: bool,
                 call_kwargs: Mapping[str, Any], hf: bool = False) -> None:
        super().__init__()
        self.model = model
        self.input_names = list(input_names)
        self.as_kwargs = as_kwargs
        self.call_kwargs = dict(call_kwargs)
        self.paths: list[OutputPath] = []
        self.output_names: list[str] = []
        self.hf = hf  # a Hugging Face model: its ModelOutput's fields are the outputs
        self.onnx_metadata: dict[str, str] = {}  # written into the file beside the model's own (run_exporter)

    def call(self, tensors: Sequence[torch.Tensor]) -> Any:
        if self.as_kwargs:
            return self.model(**dict(zip(self.input_names, tensors)), **self.call_kwargs)
        return self.model(*tensors, **self.call_kwargs)

    def discover(self, tensors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """Run once eagerly to learn the output names; returns the flat outputs (a reference's: equal values ordered
        as ONNX orders them, :mod:`.ties`)."""
        from .ties import OnnxTies

        with torch.no_grad(), OnnxTies():
            raw = self.call(tensors)
        named = output_paths(raw, self.hf)
        if not named:
            raise SampleError(
                f"{type(self.model).__name__} returned {type(raw).__name__}, which holds no "
                "tensors, so there is nothing to export. Return tensors (or a tuple/dict of them)."
            )
        # an output named like an input (a diffusers UNet: sample in, sample out) is out_<name>, as Optimum names
        # it: an ONNX graph's values have one name each
        self.output_names = [distinct(n, set(self.input_names)) for n, _ in named]
        self.paths = [p for _, p in named]
        return tuple(pick(raw, p) for p in self.paths)

    def flat(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        raw = self.call(tensors)
        return tuple(pick(raw, p) for p in self.paths)

    def reference(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """:meth:`flat` for a check: equal values that ``topk``/``sort`` order come in ONNX's order (:mod:`.ties`)."""
        from .ties import OnnxTies

        with OnnxTies():
            return self.flat(*tensors)


def distinct(name: str, taken: set[str]) -> str:
    """``name``, or ``out_<name>`` (``out_out_<name>``, ...) where an input holds it."""
    while name in taken:
        name = f"out_{name}"
    return name


def signature_module(flat: FlatModule) -> torch.nn.Module:
    """A module whose ``forward`` has one named parameter per input (torch.export names them)."""
    params = [_identifier(n, i) for i, n in enumerate(flat.input_names)]
    src = (f"def forward(self, {', '.join(params)}):\n"
           f"    return self.inner.flat({', '.join(params)})\n")
    namespace: dict[str, Any] = {}
    exec(src, namespace)  # noqa: S102 - identifiers are checked above
    cls = type("Exported" + type(flat.model).__name__, (torch.nn.Module,),
               {"forward": namespace["forward"]})
    module = cls()
    module.inner = flat
    module.train(False)
    return module
