"""Shapes to run a model at: named-axis sizes, feeds built from a sample, labels, dtype casts.

Shared by parity and benchmarking.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError, SampleError

ShapeSpec = dict[str, Any]


def resize(array: np.ndarray, axis: int, size: int) -> np.ndarray:
    """Lengthen (repeating values, so ids stay valid) or shorten ``array`` along ``axis``."""
    return np.take(array, np.arange(size) % max(array.shape[axis], 1), axis=axis)


def axis_sizes(sample: dict[str, np.ndarray], axes: dict[str, dict[int, str]]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for name, spec in axes.items():
        for axis, axis_name in spec.items():
            if name in sample:
                sizes.setdefault(axis_name, int(sample[name].shape[axis]))
    return sizes


def contiguous(array: Any) -> np.ndarray:
    """``array`` as a C-contiguous numpy array of the same shape (``np.ascontiguousarray`` makes a 0-d array
    1-d: a scalar input such as a UNet's timestep then has the wrong rank)."""
    return np.require(array, requirements="C")


# The one table of the sizes a sample onnx-nb makes from nothing has (a model's config, where it names one, wins:
# an image model's image_size, an audio model's frames). Every sample maker reads its sizes here.
SAMPLE_SIZES = {
    "batch": 2,              # every sample
    "sequence": 7,           # a text model's tokens
    "decoder_sequence": 5,   # an encoder-decoder's decoder tokens
    "step_sequence": 4,      # a decoder-with-cache sample: its new tokens ...
    "past_sequence": 3,      # ... after these cached ones
    "image_side": 224,       # an image whose config names no size
    "audio_samples": 4000,   # a waveform
    "mel_frames": 200,       # a spectrogram whose config names no length (2 s of 10 ms frames)
    "open_image_side": 32,   # an open image axis of a Keras / TensorFlow input
    "open_sequence": 8,      # an open sequence axis of a Keras / TensorFlow input
}
SPATIAL = ("height", "width", "depth")  # the axis names an image input's dynamic axes get


def image_step(size: int) -> int:
    """The power of two (up to 32) an image axis of this length is a multiple of: other lengths to check it at
    move by multiples of it, so a network that halves the axis k times and joins the halves again still can."""
    return min(32, size & -size) if size > 0 else 1


BATCH_CAP = 8  # the other batch: one more than the sample's, up to this; from this size up, one less than it
GROWTH = (3, 2, 4, 5)  # what the non-batch axes grow by, in turn, so no two grown axes coincide by accident


def other_sizes(sizes: dict[str, int]) -> dict[str, int]:
    """The one rule for the other shape an export is checked at (named axis -> its other length): the batch one
    more (a batch of 8 or more: 7, so a large sample's check stays small), the other axes longer by 3, 2, 4, 5 in
    turn, or by a third of their length when that is more (so a strided convolution sees the change). An image axis
    (height, width, depth) grows by a multiple of the power of two (up to 32) its length is a multiple of, so a
    network that halves it k times and joins the halves again (a UNet, a detector's feature pyramid) still can. The
    PyTorch route, the converters (Keras, TensorFlow, scikit-learn) and an adopted file's check all ask this rule;
    parity's shapes (:func:`auto_shapes`) go farther on purpose."""
    names = sorted(sizes, key=lambda n: n != "batch")
    other = {}
    for i, n in enumerate(names):
        if n == "batch":
            other[n] = sizes[n] + 1 if sizes[n] < BATCH_CAP else BATCH_CAP - 1
            continue
        extra = max(GROWTH[i % len(GROWTH)], sizes[n] // 3)
        if n in SPATIAL:
            step = image_step(sizes[n])
            extra = -(-extra // step) * step
        other[n] = sizes[n] + extra
    return other


def other_size(size: int) -> int:
    """:func:`other_sizes` for one axis whose kind is not known yet: grown as an image axis is (it keeps dividing by
    what its length divides by)."""
    return other_sizes({"height": size})["height"]


def auto_shapes(sizes: dict[str, int]) -> list[ShapeSpec]:
    """The sample's shape, a larger batch, and batch 1 with other lengths."""
    specs: list[ShapeSpec] = [{}]
    if "batch" in sizes:
        specs.append({"batch": sizes["batch"] + 3})
    # an image axis: a multiple of the power of two (up to 32) its length is, so a UNet or a feature pyramid that
    # halves it and joins the halves again still can; any other axis: an odd length
    longer = {n: 2 * s + (image_step(s) if n in SPATIAL else 1) for n, s in sizes.items() if n != "batch"}
    if longer or "batch" in sizes:
        specs.append({**({"batch": 1} if "batch" in sizes else {}), **longer})
    return specs


def shape_specs(shapes: Any, sizes: dict[str, int], inputs: Sequence[str]) -> list[ShapeSpec]:
    if shapes == "auto":
        return auto_shapes(sizes)
    if shapes in (None, "sample"):
        return [{}]
    if isinstance(shapes, Mapping):
        shapes = [shapes]
    specs: list[ShapeSpec] = []
    for spec in shapes:
        if spec == "sample":
            specs.append({})
            continue
        if not isinstance(spec, Mapping):
            raise InvalidArgumentError(
                f"shapes entries are dicts like {{'batch': 4, 'sequence': 32}} or 'sample', not {spec!r}."
            )
        unknown = [k for k in spec if k not in sizes and k not in inputs]
        if unknown:
            raise InvalidArgumentError(
                f"shapes names {unknown}, which are neither dynamic axes ({', '.join(sizes) or 'none'}) "
                f"nor inputs ({', '.join(inputs)})."
            )
        specs.append(dict(spec))
    return specs


def make_feed(sample: dict[str, np.ndarray], axes: dict[str, dict[int, str]], spec: ShapeSpec) -> dict[str, np.ndarray]:
    feed = {}
    for name, array in sample.items():
        value = spec.get(name)
        if isinstance(value, (list, tuple)):
            for axis, size in enumerate(value):
                array = resize(array, axis, int(size))
        else:
            for axis, axis_name in axes.get(name, {}).items():
                if axis_name in spec:
                    array = resize(array, axis, int(spec[axis_name]))
        feed[name] = contiguous(array)
    return feed


def label(feed: dict[str, np.ndarray], axes: dict[str, dict[int, str]], spec: ShapeSpec) -> str:
    sizes = axis_sizes(feed, axes)
    spec = {k: v for k, v in spec.items() if k != "padded"}
    text = ", ".join(f"{k}={v}" for k, v in sizes.items()) or ", ".join(
        f"{k}{list(v.shape)}" for k, v in feed.items())
    return ("sample " if not spec else "") + text


def static_conflict(session: Any, feed: dict[str, np.ndarray], axes: dict[str, dict[int, str]],
                    export: Any = None) -> str | None:
    """Which input axis the ONNX graph fixed to another size than this check uses, and why it is fixed when
    the export (an ExportResult, if known) says."""
    for info in session.get_inputs():
        if info.name not in feed:
            continue
        for axis, dim in enumerate(info.shape):
            size = feed[info.name].shape[axis] if axis < feed[info.name].ndim else None
            if isinstance(dim, int) and size is not None and dim != size:
                axis_name = axes.get(info.name, {}).get(axis, f"axis {axis}")
                return (f"input {info.name} axis {axis} ({axis_name}) is fixed to {dim} in the ONNX graph, "
                        f"but this check uses {size}; {_why_fixed(export, info.name, axis)}")
    return None


def _why_fixed(export: Any, name: str, axis: int) -> str:
    dynamic = getattr(export, "dynamic", None)
    reason = next((f.reason for f in getattr(export, "fixed_axes", None) or []
                   if f.input == name and f.axis == axis), None)
    if reason:
        return f"it stayed fixed at export: {reason}"
    if dynamic is False:
        return "it was exported with dynamic=False: re-export with dynamic=True"
    return (f"the graph fixes it: export with this axis dynamic, e.g. dynamic={{{name!r}: {{0: 'batch', "
            f"{axis}: 'length'}}}}")


def cast_feed(session: Any, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    types = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
             "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": np.bool_}
    out = {}
    for info in session.get_inputs():
        if info.name in feed:
            dtype = types.get(info.type)
            out[info.name] = feed[info.name].astype(dtype) if dtype else feed[info.name]
    return out


def right_padded(feed: dict[str, np.ndarray], mask_input: str = "attention_mask") -> dict[str, np.ndarray]:
    """The same inputs with a right-padded mask of varied lengths (the full length down to a quarter),
    as real batches of sentences have; padded ids become 0."""
    mask = feed.get(mask_input)
    if mask is None or mask.ndim != 2:
        return feed
    rows, seq = mask.shape
    lengths = np.maximum(1, seq - (np.arange(rows) * (3 * seq // 4)) // max(rows - 1, 1))
    new_mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(mask.dtype)
    out = dict(feed)
    out[mask_input] = new_mask
    if "input_ids" in out and out["input_ids"].shape == mask.shape:
        out["input_ids"] = np.where(new_mask.astype(bool), out["input_ids"], 0).astype(out["input_ids"].dtype)
    return out


def check_sample(feed: Mapping[str, Any], path: Any) -> None:
    """A user's sample against an ONNX model's inputs: every input present, nothing extra, the right
    rank and fixed sizes. Raises :class:`SampleError` naming the difference."""
    from .onnxfile import load_proto, signature

    inputs = {i.name: i for i in signature(load_proto(path))[0]}
    missing = [n for n in inputs if n not in feed]
    extra = [n for n in feed if n not in inputs]
    want = ", ".join(f"{n}: {i.dtype}{i.shape}" for n, i in inputs.items())
    if missing or extra:
        raise SampleError(
            f"The sample does not fit the model: {'missing ' + ', '.join(map(repr, missing)) if missing else ''}"
            f"{'; ' if missing and extra else ''}{'extra ' + ', '.join(map(repr, extra)) if extra else ''}. "
            f"The model takes {want}; pass a dict with exactly those names.")
    for name, info in inputs.items():
        shape = np.shape(feed[name])
        if len(shape) != len(info.shape) or any(isinstance(d, int) and d != n for d, n in zip(info.shape, shape)):
            raise SampleError(f"The sample's {name!r} has shape {list(shape)}, but the model takes {info.shape} "
                              "(strings are dynamic axes). Pass an array of that rank.")
