"""The one place that recognises a model: an ordered table of adapters, each with a cheap predicate.

``export()`` asks :func:`resolve` once; every later step asks :func:`adapter_of` for what the export recorded
(``ModelSource.adapter``) instead of recognising the model again. The predicates look at ``sys.modules`` (a YOLO
object means ultralytics is imported already), suffixes and one memoised ``config.json`` read, so recognising a
PyTorch model imports no TensorFlow, scikit-learn or diffusers. The order is the precedence: a Keras model on the
torch backend is a ``torch.nn.Module`` too, and is recognised as Keras on torch before the plain-module row; the lean
route sits just before the Hugging Face row, ``precision=`` being what sends a decoder's folder down it, and every
model a row above claims refuses ``precision=`` in its own words.

To add a kind: one adapter file in this folder (a :class:`~.base.Source`) and one row below.
"""

from __future__ import annotations

import os
from typing import Any

from ..args import ExportArgs
from .base import Source
from .diffusers import DiffusersSource
from .hf import HfSource
from .keras import KerasOnTorchSource, KerasSource, TensorflowSource
from .lean import LeanSource
from .onnx_file import OnnxFileSource
from .sam import SamSource
from .sklearn import SklearnSource
from .speech_llm import SpeechLlmSource
from .torch import TorchSource
from .torchvision import TorchvisionSource
from .vlm import VlmSource
from .yolo import YoloSource

SOURCES: tuple[type[Source], ...] = (
    YoloSource,          # an Ultralytics YOLO object or network
    TorchvisionSource,   # a torchvision detector (a list of images in, a list of dicts out)
    DiffusersSource,     # a diffusers pipeline: text encoder, UNet, VAE decoder files
    SamSource,           # SAM (an object, or a folder or hub id whose config says sam): two files
    OnnxFileSource,      # an .onnx file made elsewhere, adopted in place
    KerasOnTorchSource,  # a Keras 3 model on the torch backend: the PyTorch route
    KerasSource,         # a Keras model (TensorFlow or JAX backend), or a .keras file
    TensorflowSource,    # a SavedModel folder or a tf.Module
    SklearnSource,       # a fitted scikit-learn estimator or pipeline
    VlmSource,           # a vision-language model (image-text-to-text): vision, embed and decoder files
    SpeechLlmSource,     # a speech LLM (an audio tower filling a causal LM's audio tokens): refused, saying so
    LeanSource,          # precision= given: a decoder written layer by layer from its checkpoint folder or hub id
    HfSource,            # a Hugging Face model object, folder or hub id; a SentenceTransformer
    TorchSource,         # a torch.nn.Module and its sample; a PyTorch checkpoint file
)
BY_KEY: dict[str, type[Source]] = {s.key: s for s in SOURCES}


def resolve(model: Any, args: ExportArgs | None = None) -> type[Source]:
    """The adapter of ``model`` (the first row whose predicate holds; the plain-module row takes the rest and
    refuses what it cannot export)."""
    args = args or ExportArgs()
    return next(s for s in SOURCES if s.recognises(model, args))


def adapter_of(obj: Any) -> type[Source]:
    """The adapter of an export, a variant, a source record or a model: what the export recorded, else
    :func:`resolve`'s answer."""
    from ....results.export import export_of

    record = getattr(obj, "adapter", None) and obj  # a ModelSource itself
    if record is None:
        record = getattr(obj, "source", None) or getattr(export_of(obj), "source", None)
    key = getattr(record, "adapter", "") if record is not None else ""
    if key in BY_KEY:
        return BY_KEY[key]
    if isinstance(obj, (str, os.PathLike)) or not hasattr(obj, "path"):
        return resolve(obj)
    return TorchSource


def generation_of(obj: Any, path: Any = None) -> str | None:
    """How ``obj`` (an export, a variant, a source record or an ``.onnx`` path; ``path``: another file in the
    result's place) generates, asked once here: ``"chain"`` (several files run together: its adapter's
    ``step_files``), ``"seq2seq"`` (an encoder-decoder's decoder file with cross-attention caches), ``"decoder"``
    (one file with its cache), or None (one forward; a decoder's whole-sequence file generates as a decoder does).
    Parity, generate and the benchmark each pick their way of running such a model from a table keyed by this
    answer, so a new kind that generates in one of these shapes changes none of them."""
    from ....runtime.facts import file_facts

    if getattr(obj, "adapter", None) is not None and not hasattr(obj, "path"):  # a source record, mid-export
        return obj.generation
    if not isinstance(obj, (str, os.PathLike)) and adapter_of(obj).step_files(obj, path=path) is not None:
        return "chain"
    return file_facts(path if path is not None else getattr(obj, "path", obj)).generation


def subject_of(export: Any) -> Any:
    """What parity and the variants work on: the export itself, or of a model written as several files the part its
    adapter names (a vision-language model's decoder part, judged on the chain of its files)."""
    several = hasattr(export, "parts") and hasattr(export, "folder")  # a DiffusionExport, SamExport, PartsExport
    part = adapter_of(export).primary_part if several else None
    return export.parts[part] if part else export
