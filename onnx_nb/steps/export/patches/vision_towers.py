"""The span attention of grid vision towers as a trace can follow it (Qwen2-VL's family: ``cu_seqlens`` spans, one
image each or Qwen2.5-VL's windows): transformers' own export patches, and two repairs of them. The vision-language
export lends them around its tower (:mod:`onnx_nb.kinds.vlm.grid`). A tower whose attention loops over its spans the
same way but that transformers' patches do not list (Cosmos 3 Edge's) gets the same reshaped attention
(:data:`UNLISTED`, in every export with onnx-nb's own patch set), read from its own forward's arguments and attribute
names. Within transformers' whole set (:mod:`.upstream`'s attempt) only the two repairs are lent, and named."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import Any

import torch

from .contract import Patch
from .lending import lent, lent_to_modules


@contextlib.contextmanager
def traceable_spans(tower: Any = None, *, windows: bool) -> Iterator[list[str]]:
    """The tower's attention over its spans (``cu_seqlens``: the image, or Qwen2.5-VL's windows) as a trace can
    follow it: transformers' export patches (``apply_patches("dynamo")``) put one reshape in place of the loop over
    spans, which needs spans of one length; with ``windows`` (spans of several lengths) each attention runs over the
    whole image once more, masked to its spans (the same sums: a token sees its own span only)."""
    from transformers.exporters import exporter_dynamo  # registers the patches
    from transformers.exporters.utils import apply_patches, patch_attribute

    from . import upstream

    theirs = upstream.within()  # transformers' whole set already lent (its attempt): the repairs alone, named there
    said = "span attention repairs" + (" (masked to the spans)" if windows else "")
    if theirs is not None and said not in theirs:
        theirs.append(said)
    with contextlib.ExitStack() as stack:
        if theirs is None:
            stack.enter_context(apply_patches("dynamo"))
        # the function every patched attention class calls
        stack.enter_context(patch_attribute(exporter_dynamo, "_reshaped_vision_attention_forward", _normed_heads))
        if windows:
            stack.enter_context(patch_attribute(exporter_dynamo, "_reshaped_vision_attention_forward", _masked_spans))
        yield ["span attention (masked to the spans)" if windows else "span attention"]


def _loops_over_spans(cls: type) -> bool:
    """An attention class whose forward takes ``(hidden_states, cu_seqlens, ...)`` and splits its heads by the spans'
    lengths as Python numbers (``lengths.tolist()``): the loop transformers' export patch replaces."""
    forward = getattr(cls, "forward", None)
    try:
        if list(inspect.signature(forward).parameters)[1:3] != ["hidden_states", "cu_seqlens"]:  # type: ignore
            return False
        source = inspect.getsource(forward)  # type: ignore[arg-type]
    except (TypeError, ValueError, OSError):
        return False
    return ".tolist()" in source and "split(" in source


def _projections(module: Any) -> bool:
    """The layout the reshaped attention reads: a fused ``qkv`` (without query and key norms, which transformers'
    reshape leaves out for it) or separate query/key/value projections, an output projection, its head count and
    size, its scale."""
    def has(*names: str) -> bool:
        return any(isinstance(getattr(module, n, None), torch.nn.Module) for n in names)

    fused = has("qkv") and not has("q_norm", "k_norm")
    return (fused or (has("q_proj", "q") and has("k_proj", "k") and has("v_proj", "v"))) and \
        has("proj", "out_proj") and all(isinstance(getattr(module, n, None), int) for n in ("num_heads", "head_dim")) \
        and any(isinstance(getattr(module, n, None), float) for n in ("scaling", "scale"))


def _unlisted_classes(model: Any) -> set[type]:
    """The span-looping attention classes of ``model`` (:func:`_loops_over_spans`) that transformers' export patches
    leave as they are (not in its registry of dynamo patches, read without importing any modeling module); none
    where the installed transformers has no exporter (before 5.x's ``transformers.exporters``: no reshape to lend)."""
    one = {type(m): m for m in model.modules()}  # each class read once (a model has few, and many instances)
    looped = {cls for cls, m in one.items() if _loops_over_spans(cls) and _projections(m)}
    if not looped:
        return set()
    try:
        from transformers.exporters import exporter_dynamo, utils  # noqa: F401 - exporter_dynamo registers them
    except ImportError:
        return set()
    registry = getattr(utils, "_PATCHES", None)  # (path, attribute, factory) per backend
    if not isinstance(registry, dict):
        return set()
    listed = {(path, attribute) for path, attribute, _ in registry.get("dynamo", [])}
    return {cls for cls in looped if (f"{cls.__module__}.{cls.__qualname__}", "forward") not in listed}


def _reshaped(cls: type) -> Any:
    """A forward for ``cls`` (an unlisted span attention): its own arguments read by name, then transformers'
    reshaped attention (looked up when called, so :func:`traceable_spans`' repairs apply) masked to the spans (a
    file may see spans of several lengths: several images, windows), with the attribute names it reads lent from the
    module's own (``scale``, ``dropout``)."""
    original = cls.forward  # type: ignore[attr-defined]
    signature = inspect.signature(original)
    returns_tuple = "return attn_output, " in inspect.getsource(original)

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        from transformers.exporters import exporter_dynamo

        given = signature.bind(self, *args, **kwargs).arguments
        given = {**given.pop("kwargs", {}), **given}  # rotary embeddings passed through **kwargs too
        rotary = {k: given[k] for k in ("rotary_pos_emb", "position_embeddings") if given.get(k) is not None}
        aliases = [(self, name, getattr(self, own)) for name, own in (("scaling", "scale"),
                                                                      ("attention_dropout", "dropout"))
                   if not hasattr(self, name) and isinstance(getattr(self, own, None), (int, float))]
        found = exporter_dynamo._reshaped_vision_attention_forward
        attend = found if getattr(found, "masks_spans", False) else _masked_spans(found)
        with lent(aliases):
            return attend(self, given["hidden_states"], cu_seqlens=given["cu_seqlens"], returns_tuple=returns_tuple,
                          **rotary)

    return forward


@contextlib.contextmanager
def unlisted_spans(model: Any) -> Iterator[list[str]]:
    """Within: each span attention of ``model`` that transformers' patches do not list reshaped as they reshape the
    listed ones (:func:`_reshaped`); yields the modules' names."""
    made = {cls: _reshaped(cls) for cls in (_unlisted_classes(model) if hasattr(model, "modules") else ())}

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        return made[type(self)](self, *args, **kwargs)

    # a module another patch lent its own forward (an audio tower's windows) keeps it
    with lent_to_modules(model, lambda m: type(m) in made and "forward" not in vars(m), forward) as names:
        yield names


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

    forward.masks_spans = True  # type: ignore[attr-defined]
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


UNLISTED = Patch(
    name="unlisted span attention",
    applies_to="a vision tower's attention that takes (hidden_states, cu_seqlens) and loops over the spans' lengths "
               "as Python numbers, where transformers' export patches do not list its class",
    replaces="the loop over spans: transformers' reshaped span attention (one reshape, spans of one length), given "
             "the module's own argument and attribute names",
    why="the spans' lengths become data-dependent numbers in the trace (torch.export cannot guard on them), even at "
        "one grid",
    during=unlisted_spans)
