"""The one place that recognises a model: an ordered table of adapters, each with a cheap predicate.

``export()`` asks :func:`resolve` once; every later step asks :func:`adapter_of` for what the export recorded
(``ModelSource.adapter``) instead of recognising the model again. The predicates look at ``sys.modules`` (a YOLO
object means ultralytics is imported already), suffixes and one memoised ``config.json`` read, so recognising a
PyTorch model imports no TensorFlow, scikit-learn or diffusers. The order is the precedence: a Keras model on the
torch backend is a ``torch.nn.Module`` too, and is recognised as Keras on torch before the plain-module row; the lean
route sits just before the Hugging Face row, ``precision=`` being what sends a decoder's folder down it, and every
model a row above claims refuses ``precision=`` in its own words.

How each generation shape is run (:data:`SHAPES`) is named here too: what parity, ``generate()``,
``to_transformers()`` and the benchmark run for it, so those steps name no kind. To add a kind: a package in
``onnx_nb/kinds/`` with its adapter (a :class:`~.base.Adapter`), one row below and, if it generates in a shape of
its own, one entry in :data:`SHAPES`.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from functools import cache
from typing import Any

from ..args import ExportArgs
from .base import Adapter

# the rows name their adapters by dotted path ("module:class"), imported when a model is first recognised, so a
# generic step that reads this table imports no kind's package (onnx_nb/kinds/) at module level
ROWS: tuple[str, ...] = (
    # an Ultralytics YOLO object or network
    "onnx_nb.kinds.detection.yolo_adapter:YoloAdapter",
    # a torchvision detector (a list of images in, a list of dicts out)
    "onnx_nb.kinds.detection.torchvision_adapter:TorchvisionAdapter",
    # a diffusers pipeline: text encoder, UNet, VAE decoder files
    "onnx_nb.kinds.diffusion.adapter:DiffusersAdapter",
    # SAM (an object, or a folder or hub id whose config says sam): two files
    "onnx_nb.kinds.sam.adapter:SamAdapter",
    # an .onnx file made elsewhere, adopted in place
    "onnx_nb.kinds.foreign.onnx_adapter:OnnxFileAdapter",
    # a Keras 3 model on the torch backend: the PyTorch route
    "onnx_nb.kinds.foreign.keras_adapter:KerasOnTorchAdapter",
    # a Keras model (TensorFlow or JAX backend), or a .keras file
    "onnx_nb.kinds.foreign.keras_adapter:KerasAdapter",
    # a SavedModel folder or a tf.Module
    "onnx_nb.kinds.foreign.keras_adapter:TensorflowAdapter",
    # a fitted scikit-learn estimator or pipeline
    "onnx_nb.kinds.foreign.sklearn_adapter:SklearnAdapter",
    # a vision-language model (image-text-to-text): vision, embed and decoder files
    "onnx_nb.kinds.vlm.adapter:VlmAdapter",
    # a speech LLM (an audio tower filling a causal LM's audio tokens): refused, saying so
    "onnx_nb.kinds.speech_llm.adapter:SpeechLlmAdapter",
    # precision= given: a decoder written layer by layer from its checkpoint folder or hub id
    "onnx_nb.kinds.lean.adapter:LeanAdapter",
    # a Hugging Face model object, folder or hub id; a SentenceTransformer
    "onnx_nb.kinds.hf.adapter:HfAdapter",
    # a torch.nn.Module and its sample; a PyTorch checkpoint file
    "onnx_nb.kinds.torch_module.adapter:TorchAdapter",
)


def named(dotted: str) -> Any:
    """What a ``"module:name"`` row names, imported now."""
    module, _, name = dotted.partition(":")
    found: Any = importlib.import_module(module)
    for attribute in name.split("."):  # a class's method: "module:Class.method"
        found = getattr(found, attribute)
    return found


@cache
def adapters() -> tuple[type[Adapter], ...]:
    """The rows of :data:`ROWS`, imported, in their order."""
    return tuple(named(row) for row in ROWS)


@cache
def by_key() -> dict[str, type[Adapter]]:
    return {s.key: s for s in adapters()}


def resolve(model: Any, args: ExportArgs | None = None) -> type[Adapter]:
    """The adapter of ``model`` (the first row whose predicate holds; the plain-module row takes the rest and
    refuses what it cannot export)."""
    args = args or ExportArgs()
    return next(s for s in adapters() if s.recognises(model, args))


def adapter_of(obj: Any) -> type[Adapter]:
    """The adapter of an export, a variant, a source record or a model: what the export recorded, else
    :func:`resolve`'s answer."""
    from ....results.export import export_of

    record = getattr(obj, "adapter", None) and obj  # a ModelSource itself
    if record is None:
        record = getattr(obj, "source", None) or getattr(export_of(obj), "source", None)
    key = getattr(record, "adapter", "") if record is not None else ""
    if key in by_key():
        return by_key()[key]
    if isinstance(obj, (str, os.PathLike)) or not hasattr(obj, "path"):
        return resolve(obj)
    return adapters()[-1]


def generation_of(obj: Any, path: Any = None) -> str | None:
    """How ``obj`` (an export, a variant, a source record or an ``.onnx`` path; ``path``: another file in the
    result's place) generates, asked once here: ``"chain"`` or ``"audio chain"`` (several files run together: its
    adapter's ``step_files``, which names the shape), ``"seq2seq"`` (an encoder-decoder's decoder file with
    cross-attention caches), ``"decoder"`` (one file with its cache), or None (one forward; a decoder's whole-sequence
    file generates as a decoder does). Parity, generate and the benchmark run such a model as :data:`SHAPES` says for
    this answer (:func:`shape_of`), so a new kind that generates in one of these shapes changes none of them."""
    from ....runtime.facts import file_facts

    if getattr(obj, "adapter", None) is not None and not hasattr(obj, "path"):  # a source record, mid-export
        return str(obj.generation) if obj.generation else None
    files = adapter_of(obj).step_files(obj, path=path) if not isinstance(obj, (str, os.PathLike)) else None
    if files is not None:  # the shape its files run in (a chain of files, its tower's rows at image or audio tokens)
        return str(files.get("shape", "chain"))
    return file_facts(path if path is not None else getattr(obj, "path", obj)).generation


def offered_instead(model_type: str) -> str:
    """What other routes offer a model of ``model_type`` that the one at hand cannot export (each adapter's
    ``offers``): the sentence a refusal adds."""
    return " ".join(o for o in (a.offers(model_type) for a in adapters()) if o)


@dataclass(frozen=True)
class GenerationShape:
    """How the steps run a model that generates in one shape, each an answer named ``"module:name"`` and imported
    when a step asks: ``parity(export, model, path, prompts, max_new_tokens)`` makes generation parity's runs;
    ``wrapper(model, config, path, provider, threads, io_binding)`` makes ``to_transformers()``'s model;
    ``timing`` is the benchmark's :class:`~onnx_nb.steps.benchmark.generation_latency.DecoderTiming` for it;
    ``loop`` (optional) is a ``generate()`` loop of its own; ``runner`` (optional) makes ``generate()``'s step runner
    and the inputs it reads, ``runner(model, inputs, images, provider, threads)``, in place of the file's decoder;
    ``export`` (optional) writes a loaded model's files in this shape, ``export(adapter, record, sample, target, opset,
    steps)``, where the adapter that opened it does not (an encoder-decoder's two files); ``foreign`` (optional)
    checks a file in this shape that no onnx-nb export knows (another tool's) against its PyTorch model,
    ``foreign(model, file, providers=..., atol=..., rtol=..., tolerances=..., progress=...)``; ``web`` (optional) lays
    out a file of this shape for transformers.js, ``web(proto, config, export)`` (the names and axes it reads; in
    place, or returning the files transformers.js loads instead, by name: an encoder-decoder's two), where
    :func:`onnx_nb.to_transformers_js` writes this shape at all."""

    parity: str
    wrapper: str
    timing: str
    loop: str | None = None
    runner: str | None = None
    export: str | None = None
    foreign: str | None = None
    web: str | None = None

    def answer(self, part: str) -> Any:
        """The answer ``part`` names, imported (None where this shape has none)."""
        dotted = getattr(self, part)
        return named(dotted) if dotted else None


STEPS = "onnx_nb.steps"
SHAPES: dict[str, GenerationShape] = {
    # one file with its cache (a causal LM's, a decoder's whole-sequence file, a lean route's file)
    "decoder": GenerationShape(parity=f"{STEPS}.parity.generation:DecoderOnly.of_export",
                               wrapper=f"{STEPS}.generate.transformers_api:causal_lm",
                               timing=f"{STEPS}.benchmark.generation_latency:DecoderTiming",
                               foreign=f"{STEPS}.parity.folders:folder_parity",
                               web=f"{STEPS}.web.layouts:decoder_layout"),
    # an encoder-decoder's decoder file with cross-attention caches, its encoder a file beside it
    "seq2seq": GenerationShape(parity="onnx_nb.kinds.seq2seq.parity:Seq2SeqParity.of_export",
                               wrapper="onnx_nb.kinds.seq2seq.transformers_model:seq2seq_model",
                               timing="onnx_nb.kinds.seq2seq.timing:Seq2SeqTiming",
                               loop="onnx_nb.kinds.seq2seq.runner:loop",
                               export="onnx_nb.kinds.seq2seq.export:export_seq2seq",
                               web="onnx_nb.kinds.seq2seq.web:seq2seq_layout"),
    # several files run together, as the adapter's step_files names them (a vision-language model's)
    "chain": GenerationShape(parity="onnx_nb.kinds.vlm.parity:VlmChain.of_export",
                             wrapper="onnx_nb.kinds.vlm.transformers_model:transformers_model",
                             timing="onnx_nb.kinds.vlm.timing:ChainTiming",
                             runner="onnx_nb.kinds.vlm.runner:step_runner"),
    # a speech LLM's audio, embed and decoder files, run together as the vision-language chain with audio
    "audio chain": GenerationShape(parity="onnx_nb.kinds.speech_llm.parity:AudioChain.of_export",
                                   wrapper="onnx_nb.kinds.speech_llm.transformers_model:transformers_model",
                                   timing="onnx_nb.kinds.speech_llm.timing:AudioChainTiming",
                                   runner="onnx_nb.kinds.speech_llm.runner:step_runner"),
}


def shape_of(obj: Any, path: Any = None) -> GenerationShape:
    """How the steps run ``obj`` to generate: :data:`SHAPES`'s entry for :func:`generation_of`'s answer (a model
    that answers None generates, if at all, as a decoder does)."""
    return SHAPES[generation_of(obj, path) or "decoder"]


def subject_of(export: Any) -> Any:
    """What parity and the variants work on: the export itself, or of a model written as several files the part its
    adapter names (a vision-language model's decoder part, judged on the chain of its files)."""
    several = hasattr(export, "parts") and hasattr(export, "folder")  # a DiffusionExport, SamExport, PartsExport
    part = adapter_of(export).primary_part if several else None
    return export.parts[part] if part else export
