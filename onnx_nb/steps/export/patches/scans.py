"""Recurrences over the tokens written as Python loops, as a scan for the export: the file then takes any length.

A model that keeps no cache an export can carry goes out as a whole-sequence file (``generate()`` runs it on the
whole sequence at each step). Where its forward loops over the tokens in Python (``for t in range(length)``), a trace
unrolls the loop at the sample's length and the file takes exactly that many tokens. Two such recurrences are in
transformers' causal LM registry; within :func:`traceable_scans` each runs as ``torch``'s ``scan`` higher-order op on
the same arithmetic, which the dynamo exporter writes as one ONNX ``Scan`` over the sequence axis:

- RecurrentGemma's RG-LRU (``_rnn_scan``): ``h = a_t * h + x_t``. The model's one-token branch is the same
  recurrence from a zero state, so the scan serves every length, one included.
- RWKV's WKV (the module's ``rwkv_linear_attention``): a numerator, a denominator and a running maximum carried
  over the tokens; with a state given (a cache) the model's own function runs.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Iterator
from typing import Any

from .contract import Patch

RNN_ARGS = ["self", "hidden_states", "recurrent_gate", "reset", "recurrent_states", "acc_dtype"]


def rnn_scan(module: Any, hidden_states: Any, recurrent_gate: Any, reset: Any, recurrent_states: Any,
             acc_dtype: Any = None) -> tuple[Any, Any]:
    """RecurrentGemma's ``_rnn_scan`` as a scan: the outputs ``[batch, sequence, width]`` and the last state."""
    import torch
    from torch._higher_order_ops.scan import scan

    acc_dtype = acc_dtype or torch.float32
    gate = (recurrent_gate * ~reset).type(acc_dtype)
    if recurrent_states is None:
        recurrent_states = torch.zeros(hidden_states[:, 0].shape, dtype=acc_dtype, device=hidden_states.device)

    def step(h: Any, xs: tuple[Any, Any]) -> tuple[Any, Any]:
        a, x = xs
        h = a * h + x
        return h, h.clone()

    last, out = scan(step, recurrent_states.type(acc_dtype), (gate, hidden_states.type(acc_dtype)), dim=1)
    return out.type(hidden_states.dtype), last


def wkv_scan(own: Any, time_decay: Any, time_first: Any, key: Any, value: Any, state: Any = None,
             return_state: bool = False) -> tuple[Any, Any]:
    """RWKV's ``rwkv_linear_attention`` without a state, as a scan (``own``, the model's function, with one)."""
    import torch
    from torch._higher_order_ops.scan import scan

    if state is not None:
        return own(time_decay, time_first, key, value, state=state, return_state=return_state)
    first = key.new_zeros(key.shape[0], key.shape[2], dtype=torch.float32)  # contiguous, as the carry comes back
    carry = (first, first.clone(), first - 1e38)
    decay = (-torch.exp(time_decay)).float().expand_as(key).contiguous()
    bonus = time_first.float().expand_as(key).contiguous()

    def step(state: tuple[Any, Any, Any], xs: tuple[Any, Any, Any, Any]) -> tuple[Any, Any]:
        num, den, top = state
        k, v, w, u = xs
        reach = torch.maximum(top, k + u)
        e1, e2 = torch.exp(top - reach), torch.exp(k + u - reach)
        out = (e1 * num + e2 * v) / (e1 * den + e2)
        kept = torch.maximum(top + w, k)
        e1, e2 = torch.exp(top + w - kept), torch.exp(k - kept)
        return (e1 * num + e2 * v, e1 * den + e2, kept), out

    last, out = scan(step, carry, (key.float(), value.float(), decay, bonus), dim=1)
    return out.to(key.dtype), (list(last) if return_state else None)


def _loops_rnn(module: Any) -> bool:
    own = getattr(type(module), "_rnn_scan", None)
    try:
        return own is not None and list(inspect.signature(own).parameters) == RNN_ARGS
    except (TypeError, ValueError):  # pragma: no cover - a method without a signature
        return False


def _wkv_sources(model: Any) -> list[Any]:
    """The source files of ``model``'s modules that define RWKV's WKV and its loop."""
    names = {type(m).__module__ for m in model.modules()} if hasattr(model, "modules") else set()
    files = [sys.modules.get(n) for n in sorted(names)]
    return [f for f in files if f is not None and hasattr(f, "rwkv_linear_attention")
            and hasattr(f, "rwkv_linear_attention_cpu")]


@contextlib.contextmanager
def traceable_scans(model: Any) -> Iterator[list[str]]:
    """Within: the token loops of ``model`` (above) run as scans; yields what was replaced. Restored on leaving."""
    from .lending import lent

    found = [(name, m) for name, m in model.named_modules() if _loops_rnn(m)] \
        if hasattr(model, "named_modules") else []
    sources = _wkv_sources(model)
    loans = [(m, "_rnn_scan", rnn_scan.__get__(m)) for _, m in found] + [
        (f, "rwkv_linear_attention", functools.partial(wkv_scan, f.rwkv_linear_attention_cpu)) for f in sources]
    with lent(loans):
        yield [name for name, _ in found] + [f"{f.__name__}.rwkv_linear_attention" for f in sources]


PATCH = Patch(
    name="token scans",
    applies_to="RG-LRU modules (an _rnn_scan with the recurrence's arguments) and RWKV's WKV (the modeling "
               "module's rwkv_linear_attention)",
    replaces="the recurrence's Python loop over the tokens",
    why="a trace unrolls the loop at the sample's length, so the file took exactly that many tokens; torch's scan "
        "is written as one ONNX Scan",
    during=traceable_scans)
