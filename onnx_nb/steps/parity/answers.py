"""PyTorch's answers kept while one step checks many files against the same model: ``quantize()`` validates every
candidate it makes (INT4's algorithms, its LM head and compute level, INT8's schemes) by generation parity against
one model and one set of prompts, and PyTorch's greedy tokens, beams and log-probabilities were computed again for
each (a quarter of a tiny decoder's parity time; a real model's forward passes cost more). Outside a
:func:`pytorch_answers_kept` block nothing is kept: a model changed between two calls is asked again."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")
_BLOCK = threading.local()  # .kept: the answers of this thread's open block (None outside one)


@contextlib.contextmanager
def pytorch_answers_kept() -> Iterator[None]:
    """While open, :func:`answer` in this thread computes each of PyTorch's answers once (a check running in another
    thread, such as the notebook's while the Studio quantizes, is not served them); they go when the block closes.
    A block inside another shares the outer one's."""
    outer = getattr(_BLOCK, "kept", None)
    if outer is None:
        _BLOCK.kept = {}
    try:
        yield
    finally:
        if outer is None:
            _BLOCK.kept = None


def answer(model: Any, key: tuple[Any, ...], compute: Callable[[], T]) -> T:
    """``compute()``, PyTorch's answer for ``model`` to the question ``key`` names; inside a
    :func:`pytorch_answers_kept` block the first one is kept and a copy returned after (the caller may change it)."""
    kept: dict[tuple[Any, ...], tuple[Any, Any]] | None = getattr(_BLOCK, "kept", None)  # (id, *key) -> (ref, answer)
    if kept is None:
        return compute()
    try:
        ref = weakref.ref(model)  # not the model itself: a model loaded again per check must not stay in memory
    except TypeError:
        return compute()
    full = (id(model), *key)
    hit = kept.get(full)
    if hit is not None and hit[0]() is model:  # the same object, not another one given a freed model's id
        return copy.deepcopy(hit[1])
    value = compute()
    kept[full] = (ref, value)
    return copy.deepcopy(value)


def family_key(family: Any) -> tuple[Any, ...]:
    """What a generation-parity family asks PyTorch: its kind and settings, and a digest of its inputs (the prompts,
    and the images, clips or encoder inputs beside them), so that two families that ask differently never share."""
    inputs = hashlib.sha256()
    for part in (getattr(family, name, None) for name in ("prompts", "pixels", "items")):
        _digest(part, inputs)
    return (type(family).__qualname__, getattr(family, "describe", ""), getattr(family, "new", None),
            getattr(family, "pad", None), inputs.hexdigest())


def _digest(value: Any, into: Any) -> None:
    if isinstance(value, dict):
        for k in sorted(value):
            into.update(repr(k).encode())
            _digest(value[k], into)
    elif isinstance(value, (list, tuple)):
        into.update(f"[{len(value)}:".encode())
        for v in value:
            _digest(v, into)
            into.update(b",")  # [[1, 23]] and [[12, 3]] differ
        into.update(b"]")
    elif hasattr(value, "shape") and hasattr(value, "dtype"):  # a tensor or an array: its values
        array = _array(value)
        into.update(f"{array.dtype}{array.shape}".encode())
        into.update(array.tobytes())
    else:
        text = repr(value).encode()
        into.update(b"%d:%s" % (len(text), text))


def _array(value: Any) -> Any:
    if not hasattr(value, "detach"):
        return value
    tensor = value.detach().cpu()
    try:
        return tensor.numpy()
    except TypeError:  # bfloat16 and the like: their values as float32
        return tensor.float().numpy()
