"""The span attention of grid vision towers as a trace can follow it (Qwen2-VL's family: ``cu_seqlens`` spans, one
image each or Qwen2.5-VL's windows): transformers' own export patches, and two repairs of them. The vision-language
export lends them around its tower (:mod:`onnx_nb.kinds.vlm.grid`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from .contract import Patch
from .lending import lent


@contextlib.contextmanager
def traceable_spans(tower: Any = None, *, windows: bool) -> Iterator[list[str]]:
    """The tower's attention over its spans (``cu_seqlens``: the image, or Qwen2.5-VL's windows) as a trace can
    follow it: transformers' export patches (``apply_patches("dynamo")``) put one reshape in place of the loop over
    spans, which needs spans of one length; with ``windows`` (spans of several lengths) each attention runs over the
    whole image once more, masked to its spans (the same sums: a token sees its own span only)."""
    from transformers.exporters import exporter_dynamo  # registers the patches
    from transformers.exporters.utils import apply_patches, patch_attribute

    with apply_patches("dynamo"), contextlib.ExitStack() as stack:
        # the function every patched attention class calls
        stack.enter_context(patch_attribute(exporter_dynamo, "_reshaped_vision_attention_forward", _normed_heads))
        if windows:
            stack.enter_context(patch_attribute(exporter_dynamo, "_reshaped_vision_attention_forward", _masked_spans))
        yield ["span attention (masked to the spans)" if windows else "span attention"]


def _normed_heads(patched: Any) -> Any:
    """``patched`` (a reshaped span attention) with the query and key norms of an attention whose projections are
    one fused ``qkv`` (GLM-OCR): the patch applies ``q_norm``/``k_norm`` only for separate projections, and left them
    out here, features a percent off. They go where the model's own forward applies them: on the heads, before the
    rotary (the family's ``apply_rotary_pos_emb_vision``, which the patch looks up in the attention's module)."""
    import sys

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not (hasattr(self, "qkv") and hasattr(self, "q_norm") and hasattr(self, "k_norm")):
            return patched(self, *args, **kwargs)
        namespace: Any = sys.modules[type(self).__module__]
        rotary = namespace.apply_rotary_pos_emb_vision
        # the (q, k, cos, sin) form only; a one-tensor form (x, rotary) is left as it is
        with lent([(namespace, "apply_rotary_pos_emb_vision", lambda *a: rotary(
                self.q_norm(a[0]), self.k_norm(a[1]), *a[2:]) if len(a) == 4 else rotary(*a))]):
            return patched(self, *args, **kwargs)

    return forward


def _masked_spans(patched: Any) -> Any:
    """``patched`` (a reshaped span attention) over one span, its attention masked to the spans of ``cu_seqlens``."""
    def forward(self: Any, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        named = "cu_seqlens" in kwargs
        spans = kwargs.pop("cu_seqlens") if named else args[0]
        place = torch.arange(hidden_states.shape[-2], device=hidden_states.device)
        span = (place[:, None] >= spans[None, 1:]).sum(-1)  # each token's span
        mask = span[:, None] == span[None, :]
        sdpa = torch.nn.functional.scaled_dot_product_attention

        def masked(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *more: Any, **given: Any) -> Any:
            return sdpa(query, key, value, *more, **{**given, "attn_mask": mask})

        with lent([(torch.nn.functional, "scaled_dot_product_attention", masked)]):
            one = spans[[0, -1]]  # the whole image as one span, in the place the spans came
            return patched(self, hidden_states, *args, cu_seqlens=one, **kwargs) if named else \
                patched(self, hidden_states, one, *args[1:], **kwargs)

    return forward


PATCH = Patch(
    name="vision span attention",
    applies_to="the attention classes transformers' dynamo export patches register for vision towers (a loop over "
               "the cu_seqlens spans)",
    replaces="the loop over spans: one reshape for spans of one length (transformers' patch; the query and key "
             "norms of a fused qkv put back), or, for spans of several lengths, one attention over the image masked "
             "to its spans",
    why="a loop over spans whose count and lengths are data cannot be traced for any grid",
    during=traceable_spans)
