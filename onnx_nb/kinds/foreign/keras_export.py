"""Keras 3 models and TensorFlow SavedModels / ``tf.Module`` objects to ONNX (see :mod:`.foreign`).

Keras on the TensorFlow backend: ``exporter="auto"`` converts with tf2onnx's ``from_keras`` (the outputs keep the
model's output names), then Keras's own ``model.export(format="onnx")`` (tf2onnx under Keras's patches; the JAX
backend goes through jax2tf there, so it is the one route for JAX). A SavedModel folder: its serving signature
(``signatures["serving_default"]``, else its only one) through tf2onnx's ``from_function``, outputs named after
the signature's keys. tf2onnx keeps a TensorFlow operator it cannot translate in the graph and only logs it; the
log is read here and the export stops with :class:`~onnx_nb.UnsupportedOperatorError` naming the layer and the
operator. Every axis the model leaves open (``None`` in its input shapes) stays dynamic: the batch, an image's
height and width, a sequence; the check runs at a second size along each.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import InvalidModelError, SampleError, UnsupportedOperatorError, first_line
from ...results.export import ModelSource
from ...runtime.shapes import SAMPLE_SIZES
from .converting import TF2ONNX_MAX_OPSET, convert_checked

_UNSUPPORTED = re.compile(r"Tensorflow op \[(?P<node>[^:\]]+): (?P<op>[^\]]+)\] is not supported")
IMAGE_SIDE, SEQUENCE = SAMPLE_SIZES["open_image_side"], SAMPLE_SIZES["open_sequence"]  # open axes in a sample


def import_tensorflow() -> Any:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ start-up lines stay off the cell
    import tensorflow as tf

    return tf


def load_keras(model: Any) -> Any:
    if isinstance(model, (str, os.PathLike)):
        import keras

        try:
            return keras.saving.load_model(str(Path(str(model)).expanduser()))
        except Exception as exc:
            from ...errors import ModelLoadError

            raise ModelLoadError(f"Keras cannot load {model}: {type(exc).__name__}: {first_line(exc, 200)}") from exc
    return model


def _axis_names(name: str, shape: list[int | None], dtype: str) -> dict[int, str]:
    """Names for the open (None) axes of one input: batch, an image's height and width (NHWC or NCHW), else a
    sequence."""
    names: dict[int, str] = {}
    for axis, size in enumerate(shape):
        if size is not None:
            continue
        if axis == 0:
            names[axis] = "batch"
        elif len(shape) == 4 and ((axis in (1, 2) and shape[3] is not None) or
                                  (axis in (2, 3) and shape[1] is not None)):  # NHWC or NCHW
            names[axis] = "height" if axis == (1 if shape[3] is not None else 2) else "width"
        elif axis == 1 and (len(shape) == 2 or (len(shape) == 3 and "int" not in dtype)):
            names[axis] = "sequence"
        else:
            names[axis] = f"{name}_{axis}"
    return names


def _vocab(model: Any) -> int:
    """The smallest embedding's input size among the model's layers: integer inputs stay below it."""
    sizes = [int(layer.input_dim) for layer in getattr(model, "_flatten_layers", lambda: [])()
             if hasattr(layer, "input_dim")]
    return min(sizes) if sizes else 10


def _made(shape: list[int | None], dtype: str, vocab: int, rng: Any) -> np.ndarray:
    concrete = [s if s is not None else SAMPLE_SIZES["batch"] if i == 0 else IMAGE_SIDE if len(shape) == 4 else SEQUENCE
                for i, s in enumerate(shape)]
    made: np.ndarray
    if "int" in dtype:
        made = rng.integers(0, vocab, concrete).astype(dtype)
    elif dtype == "bool":
        made = np.ones(concrete, bool)
    else:
        made = rng.standard_normal(concrete).astype(dtype)
    return made


def _inputs_of(model: Any) -> list[tuple[str, list[int | None], str]]:
    """(name, shape, dtype) of a Keras model's declared inputs; empty for a subclassed model never built."""
    try:
        declared = list(model.inputs or [])
    except (AttributeError, ValueError):
        declared = []
    return [(str(getattr(t, "name", f"input_{i}")).split(":")[0], list(t.shape), str(t.dtype).replace("tf.", ""))
            for i, t in enumerate(declared)]


def keras_sample(model: Any, sample: Any, tensors: bool = False) -> Any:
    """The sample as named numpy arrays in the model's input order (``tensors``: as torch tensors, a tuple, for
    the PyTorch route of a Keras model on the torch backend); made from the model's declared inputs when None."""
    declared = _inputs_of(model)
    if sample is None:
        if not declared:
            raise SampleError(f"{type(model).__name__} declares no inputs (a subclassed Keras model never called): "
                              "pass sample=... (an array, a list of arrays or a dict by input name).")
        rng = np.random.default_rng(0)
        feed = {n: _made(s, d, _vocab(model), rng) for n, s, d in declared}
    else:
        feed = _named(sample, [n for n, _, _ in declared])
    if tensors:
        import torch

        values = tuple(torch.from_numpy(np.ascontiguousarray(v)) for v in feed.values())
        return values[0] if len(values) == 1 else values
    return feed


def _named(sample: Any, names: list[str]) -> dict[str, np.ndarray]:
    def arr(v: Any) -> np.ndarray:
        return np.asarray(v.numpy() if hasattr(v, "numpy") else v)

    if hasattr(sample, "keys"):
        return {str(k): arr(v) for k, v in sample.items()}
    values = list(sample) if isinstance(sample, (list, tuple)) else [sample]
    names = names if len(names) == len(values) else [f"input_{i}" for i in range(len(values))]
    return {n: arr(v) for n, v in zip(names, values)}


def _flat_outputs(out: Any) -> list[Any]:
    if isinstance(out, dict):
        return list(out.values())
    if isinstance(out, (list, tuple)):
        return [o for item in out for o in _flat_outputs(item)]
    return [out]


@contextlib.contextmanager
def _tf2onnx_watch(collected: list[str], unsupported: list[tuple[str, str]]) -> Iterator[None]:
    """tf2onnx's log lines and the warnings of TensorFlow and Keras go to ``collected`` (the result's warnings);
    the operators tf2onnx could not translate (it logs them and goes on) to ``unsupported``."""

    from ...steps.export.machinery.logs import LogCollector

    class Watch(LogCollector):
        def emit(self, record: logging.LogRecord) -> None:
            found = _UNSUPPORTED.search(record.getMessage())
            if found:
                unsupported.append((found["node"], found["op"]))
            else:
                super().emit(record)

    logger = logging.getLogger("tf2onnx")
    saved = logger.handlers[:], logger.propagate, logger.level
    logger.handlers, logger.propagate = [Watch(collected)], False
    logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("always")
            yield
    finally:
        logger.handlers, logger.propagate = saved[0], saved[1]
        logger.setLevel(saved[2])
    for w in caught:
        text = str(w.message).strip().splitlines()[0] if str(w.message).strip() else ""
        if text and not issubclass(w.category, (DeprecationWarning, FutureWarning)) and text not in collected:
            collected.append(text[:300])


def _refuse_unsupported(unsupported: list[tuple[str, str]], what: str, layers: set[str]) -> None:
    if not unsupported:
        return
    node, op = unsupported[0]
    parts = [p for p in node.split("/") if p]
    layer = next((p for p in reversed(parts) if p in layers), None) or next(
        (re.sub(r"_\d+$", "", p) for p in reversed(parts) if re.sub(r"_\d+$", "", p) in layers),  # scopes made unique
        parts[1] if len(parts) > 2 else parts[0] if parts else node)
    others = sorted({o for _, o in unsupported} - {op})
    raise UnsupportedOperatorError(
        f"The TensorFlow operator {op} in layer '{layer}' of {what} has no ONNX translation in tf2onnx"
        + (f" (nor {', '.join(others)})" if others else "") + ". Replace that layer with standard Keras layers "
        "(or TensorFlow operations tf2onnx translates), or register a custom op handler with tf2onnx.",
        operator=op, module_path=layer)


def export_tensorflow(model: Any, kind: str, sample: Any, out: Any, overwrite: bool, progress: bool,
                      opset: int | None, name: str | None, exporter: str, dynamic: bool) -> Any:
    """A Keras model (object or ``.keras`` file) or a TensorFlow SavedModel folder / ``tf.Module``, exported."""
    from ...progress import Steps
    from ...runtime.files import check_target, default_output
    from ...steps.export.machinery.writing import source_name

    label = name or (Path(str(model)).name if isinstance(model, (str, os.PathLike)) else
                     getattr(model, "name", None) or type(model).__name__)
    default = default_output(label or source_name(model), taken_ok=overwrite)
    target = check_target(out if out is not None else default, overwrite)
    target.parent.mkdir(parents=True, exist_ok=True)
    o = min(opset or TF2ONNX_MAX_OPSET, TF2ONNX_MAX_OPSET)
    warnings_seen: list[str] = []
    with Steps(4, "export", progress) as steps:
        steps.step("loading the model")
        tf = import_tensorflow()
        route: Any
        if kind == "keras":
            route = KerasRoute(load_keras(model), sample, dynamic, tf)
        else:
            route = SignatureRoute(model, sample, dynamic, tf)
        order = list(route.order) if exporter == "auto" else [exporter]
        source = ModelSource(kind, label, location=str(model) if isinstance(model, (str, os.PathLike)) else None,
                             model_type=route.model_type, model=route.model, sample=route.feed,
                             input_axes=route.axes, as_kwargs=False, adapter=kind, eager=False)
        unsupported: list[tuple[str, str]] = []

        def convert(which: str, staged: Path) -> None:
            with _tf2onnx_watch(warnings_seen, unsupported):
                route.convert(which, staged, o)
            _refuse_unsupported(unsupported, label, route.layers())

        from .converting import grown

        probe = grown(route.feed, route.axes, vocab=route.vocab)
        return convert_checked(kind, target, order, convert, route.axes, probe, route.expected, source,
                               route.against, steps, warnings_seen, route.fixed(), dynamic)


class KerasRoute:
    def __init__(self, model: Any, sample: Any, dynamic: bool, tf: Any) -> None:
        import keras

        self.model, self.tf, self.keras = model, tf, keras
        self.backend = keras.backend.backend()
        self.model_type = f"keras/{self.backend}"
        self.against = f"Keras ({self.backend})"
        self.order = ["keras"] if self.backend == "jax" else ["tf2onnx", "keras"]
        self.vocab = _vocab(model)
        self.feed = keras_sample(model, sample)
        declared = {n: (s, d) for n, s, d in _inputs_of(model)}
        self.shapes = {n: (declared[n][0] if n in declared else [None, *v.shape[1:]]) for n, v in self.feed.items()}
        if not dynamic:
            self.shapes = {n: list(v.shape) for n, v in self.feed.items()}
        self.axes = {n: _axis_names(n, s, str(self.feed[n].dtype)) for n, s in self.shapes.items()}
        self.axes = {n: a for n, a in self.axes.items() if a}
        try:  # Keras exports only a model that has run once; its outputs are wanted anyway
            self._call(self.feed)
        except Exception as exc:
            raise SampleError(f"{type(model).__name__} fails on the sample inputs "
                              f"{ {k: list(v.shape) for k, v in self.feed.items()} } ({type(exc).__name__}: "
                              f"{first_line(exc, 200)}). Pass inputs the model accepts as sample=...") from exc

    def _call(self, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        values = list(feed.values())
        out = self.model(values[0] if len(values) == 1 else values, training=False)
        return [np.asarray(self.keras.ops.convert_to_numpy(o)) for o in _flat_outputs(out)]

    def specs(self) -> list[Any]:
        return [self.tf.TensorSpec(s, self.feed[n].dtype, name=n) for n, s in self.shapes.items()]

    def convert(self, which: str, staged: Path, opset: int) -> None:
        if which == "tf2onnx":
            import tf2onnx

            tf2onnx.convert.from_keras(self.model, input_signature=self.specs(), opset=opset,
                                       output_path=str(staged))
        else:
            self.model.export(str(staged), format="onnx", verbose=False, input_signature=self.specs(),
                              opset_version=opset)

    def expected(self, feed: dict[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
        return dict(zip(names, self._call(feed)))

    def layers(self) -> set[str]:
        return {str(layer.name) for layer in self.model._flatten_layers(include_self=False)}

    def fixed(self) -> list[Any]:
        static = [(n, a, int(size)) for n, s in self.shapes.items() for a, size in enumerate(s)
                  if size is not None and 0 < a < len(s) - 1 and len(s) == 4]
        if not static:
            return []
        from ...steps.export.machinery.inputs import FixedAxis

        return [FixedAxis(n, a, size, "fixed in the Keras model's input shape") for n, a, size in static]


class SignatureRoute:
    """A SavedModel folder (its serving signature) or a ``tf.Module`` whose ``__call__`` is a ``tf.function``."""

    order = ("tf2onnx",)
    vocab = None

    def __init__(self, model: Any, sample: Any, dynamic: bool, tf: Any) -> None:
        self.tf = tf
        if isinstance(model, (str, os.PathLike)):
            folder = Path(str(model)).expanduser()
            loaded = tf.saved_model.load(str(folder))
            signatures = dict(getattr(loaded, "signatures", {}) or {})
            if not signatures:
                raise InvalidModelError(
                    f"The SavedModel in {folder} has no signatures, so nothing says which inputs it takes. Save it "
                    "with one: tf.saved_model.save(module, folder, signatures=module.__call__.get_concrete_function("
                    "tf.TensorSpec([None, ...], tf.float32))), or pass the tf.Module object itself.")
            key = "serving_default" if "serving_default" in signatures else sorted(signatures)[0]
            self.function = signatures[key]
            self.keys = sorted(self.function.structured_input_signature[1])
            specs = [self.function.structured_input_signature[1][k] for k in self.keys]
            self.model, self.model_type = loaded, f"SavedModel signature {key}"
        else:
            call = model.__call__ if callable(model) else None
            declared = list(getattr(call, "input_signature", None) or [])
            self.function, self.keys, self.model, self.model_type = call, [], model, type(model).__name__
            if not declared and sample is None:
                raise SampleError(f"{type(model).__name__}.__call__ declares no input_signature: pass sample=... "
                                  "(an array or a list of arrays), or decorate it with "
                                  "@tf.function(input_signature=[tf.TensorSpec([None, ...], tf.float32)]).")
            specs = declared
        names = self.keys or [(getattr(s, "name", None) or f"input_{i}") for i, s in enumerate(specs)]
        if specs:
            shapes = {n: list(s.shape.as_list()) for n, s in zip(names, specs)}
            dtypes = {n: s.dtype.as_numpy_dtype for n, s in zip(names, specs)}
        if sample is None:
            rng = np.random.default_rng(0)
            self.feed = {n: _made(shapes[n], np.dtype(dtypes[n]).name, 10, rng) for n in names}
        else:
            self.feed = _named(sample, names)
            if not specs:
                shapes = {n: [None, *v.shape[1:]] for n, v in self.feed.items()}
                dtypes = {n: v.dtype for n, v in self.feed.items()}
        if not dynamic:
            shapes = {n: list(v.shape) for n, v in self.feed.items()}
        self.shapes, self.dtypes = shapes, dtypes
        self.axes = {n: a for n, a in ((n, _axis_names(n, s, np.dtype(dtypes[n]).name)) for n, s in shapes.items())
                     if a}
        self.against = "TensorFlow"

    def _run(self, feed: dict[str, np.ndarray]) -> Any:
        if self.keys:
            return self.function(**{k: self.tf.constant(feed[k]) for k in self.keys})
        return self.function(*[self.tf.constant(v) for v in feed.values()])

    def convert(self, which: str, staged: Path, opset: int) -> None:
        import tf2onnx

        tf = self.tf
        specs = [tf.TensorSpec(s, self.dtypes[n], name=n) for n, s in self.shapes.items()]
        keys, function = self.keys, self.function
        if keys:
            wrapped = tf.function(lambda *a: function(**dict(zip(keys, a))))
        else:
            wrapped = tf.function(lambda *a: function(*a))
        tf2onnx.convert.from_function(wrapped, input_signature=specs, opset=opset, output_path=str(staged))

    def expected(self, feed: dict[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
        out = self._run(feed)
        if isinstance(out, dict) and set(names) <= set(out):
            return {n: np.asarray(out[n]) for n in names}
        return dict(zip(names, (np.asarray(o) for o in _flat_outputs(out))))

    def fixed(self) -> list[Any]:
        return []

    def layers(self) -> set[str]:
        return set()
