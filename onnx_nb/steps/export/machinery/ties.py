"""PyTorch's reference outputs with equal values ordered as ONNX orders them.

``torch.topk``, ``torch.sort`` and ``torch.argsort`` leave the order of equal values unspecified (a CPU kernel's
partial sort decides); ONNX's ``TopK``, which the exporters write for all three, takes the lower index first. Where
a model selects by them among ties (RT-DETR's and D-FINE's queries: every anchor outside the image gets the same
score, and enough of them rank among the 300 kept with random weights), the file and PyTorch picked different but
equally valid anchors, and the check failed by whole boxes (4.9) on a file that was right.

Within :class:`OnnxTies` the reference computes these three with a stable sort (equal values in index order, the
lower first: ONNX's rule), which changes nothing where no values tie. Only reference runs use it (the export's check,
:func:`onnx_nb.check_parity`); traces and PyTorch's timed runs never do.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode


def _stable_topk(x: torch.Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> Any:
    values, indices = torch.sort(x, dim=dim, descending=largest, stable=True)
    # contiguous, as topk's own outputs are (a model may view them: OmDet-Turbo's indices.view(-1))
    return torch.return_types.topk((values.narrow(dim, 0, k).contiguous(), indices.narrow(dim, 0, k).contiguous()))


def _arguments(names: tuple[str, ...], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    return {**dict(zip(names, args)), **kwargs}


class OnnxTies(TorchFunctionMode):
    """Within: ``topk``, ``sort`` and ``argsort`` (the functions and the tensor methods) order equal values by index,
    the lower first, as ONNX's TopK does."""

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        if func in (torch.topk, torch.Tensor.topk) and "out" not in kwargs:
            return _stable_topk(**_arguments(("x", "k", "dim", "largest", "sorted"), args,
                                             {("x" if k == "input" else k): v for k, v in kwargs.items()}))
        if func in (torch.sort, torch.Tensor.sort, torch.argsort, torch.Tensor.argsort) and "out" not in kwargs:
            # the stable overloads take dim and descending by keyword only
            given = _arguments(("dim", "descending", "stable"), args[1:], kwargs)
            return func(args[0], **{**given, "stable": True})
        return func(*args, **kwargs)
