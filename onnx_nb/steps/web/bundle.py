"""``onnx_nb.to_transformers_js``: an export and its variants written as the folder transformers.js loads
(``config.json``, the tokenizer's files, ``generation_config.json`` for a decoder, ``onnx/model.onnx``,
``onnx/model_fp16.onnx``, ``onnx/model_quantized.onnx``, ``onnx/model_q4.onnx``), then checked by transformers.js
itself against PyTorch (:mod:`onnx_nb.steps.web.verdicts`)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from ...errors import InvalidArgumentError, NoWebGpuError, OutputExistsError, TransformersJsError
from ...progress import Steps
from ...results.web_bundle import WebBundle
from ...runtime.files import check_target, default_output, deferred_interrupt, staging_dir
from ...runtime.transformers_js import registered, unavailable_reason, version
from .inputs import CAPTIONS, IMAGE_TASKS, SPEECH, clips_of, default_texts, images_of, inputs_fit

# onnx-nb's precision of a file -> (transformers.js's dtype, the file name's suffix it loads for that dtype)
DTYPES = {"fp32": ("fp32", ""), "fp16": ("fp16", "_fp16"), "int8": ("q8", "_quantized"), "int4": ("q4", "_q4")}
# the tasks whose pipeline transformers.js runs on text alone, as onnx-nb checks them
TASKS = ("feature-extraction", "text-classification", "token-classification", "fill-mask", "text-generation",
         "text2text-generation", "question-answering", "image-classification", "automatic-speech-recognition",
         "image-to-text")
# what transformers.js calls an encoder-decoder's text task (transformers names it by what it was trained for)
TEXT_TO_TEXT = ("text2text-generation", "translation", "summarization")
RUNTIMES = ("auto", "browser", "browser-webgpu", "node")


def to_transformers_js(model: Any, folder: str | os.PathLike[str] | None = None, *, overwrite: bool = False,
                       check: bool | str = "auto", runtime: str | list[str] = "auto", texts: list[Any] | None = None,
                       images: list[Any] | None = None, audio: list[Any] | None = None, max_new_tokens: int = 8,
                       progress: bool = True) -> WebBundle:
    """Write the folder transformers.js (npm ``@huggingface/transformers``) loads, from an export and the variants
    made from it, and check it with transformers.js itself.

    ``model``: an :class:`~onnx_nb.ExportResult`, a :class:`~onnx_nb.Variant`, or a list of them, one per precision
    (fp32 -> ``onnx/model.onnx``, fp16 -> ``model_fp16.onnx``, INT8 -> ``model_quantized.onnx``, transformers.js's
    ``q8``; INT4 -> ``model_q4.onnx``). Each file is one onnx-nb already checked against PyTorch. Text models
    (feature-extraction, text-classification, token-classification, fill-mask), decoders with their cache
    (text-generation), text-to-text encoder-decoders (text2text-generation: ``encoder_model`` and
    ``decoder_model_merged`` per precision), speech-to-text encoder-decoders (automatic-speech-recognition: Whisper),
    image-to-text encoder-decoders (a ``VisionEncoderDecoderModel``: TrOCR, Donut, ViT-GPT2) and image classifiers
    (image-classification; these three with the model's ``preprocessor_config.json``) are written; other kinds are
    refused, naming what they are.

    ``check``: ``"auto"`` runs transformers.js's pipeline on each precision where it can run here and says why not
    otherwise; ``True`` requires it; ``False`` skips it. ``runtime``: where transformers.js runs
    (:mod:`onnx_nb.runtime.transformers_js`), or a list of places, each checked and timed in turn: ``"browser"`` its
    browser build in the browser backend's page (the notebook's own, else a headless Chromium; WASM, one thread),
    ``"browser-webgpu"`` the same on the page's WebGPU adapter, ``"node"`` its Node.js build, ``"auto"`` the
    notebook's page in a notebook, else Node.js, else a headless Chromium. Each row's ``run_ms`` is the median of
    three timed runs of the model on the check's inputs after the check's own run; on a software WebGPU adapter
    (SwiftShader, which Chromium offers where there is no GPU) the check runs and nothing is timed: the row reads
    "not timed" and the notes say why.
    transformers.js tokenizes ``texts`` (two sentences by default; for question-answering, ``[question, context]``
    pairs) and runs the model; its outputs are compared with
    PyTorch's on the same tokens at the file's tolerance (and, for feature-extraction, the pipeline's mean-pooled
    embeddings by cosine); a decoder generates ``max_new_tokens`` greedy tokens per text, compared with PyTorch's.
    An image classifier runs on ``images`` (PIL images, ``[height, width, 3]`` uint8 arrays or image files; two
    made-up images at its processor's size by default): transformers.js's processor prepares them, PyTorch's model
    takes the same ``pixel_values``, and how far transformers.js's processor is from transformers' own on the same
    images is reported beside. A speech encoder-decoder (automatic-speech-recognition: Whisper) runs on ``audio``
    (1-D float clips at the feature extractor's sampling rate; a one-second chirp and half a second of noise by
    default): transformers.js's feature extractor makes each clip's features and its model generates greedy tokens
    from them, compared with PyTorch's ``generate`` on the same features. An image-to-text model runs on ``images``
    the same way: transformers.js's processor makes each image's ``pixel_values``, its model generates greedy tokens
    from them, and PyTorch's ``generate`` on those pixel values gives the tokens they are compared with.

    Example::

        result = onnx_nb.export("sentence-transformers/all-MiniLM-L6-v2")
        int8 = onnx_nb.quantize(result)
        bundle = onnx_nb.to_transformers_js([result, int8], "web/minilm")
        # in JavaScript: pipeline("feature-extraction", "minilm", {dtype: "q8"}) with env.localModelPath = "web/"
    """
    started = time.perf_counter()
    items = list(model) if isinstance(model, (list, tuple)) else [model]
    if not items or any(not hasattr(i, "path") or not hasattr(i, "source") for i in items):
        raise InvalidArgumentError("to_transformers_js takes an export (onnx_nb.export's result), a variant "
                                   "(optimize or quantize), or a list of them, one per precision.")
    from ..export.adapters.registry import adapter_of

    several = next((a for a in map(adapter_of, items) if a.several_files), None)
    if several is not None:
        raise InvalidArgumentError(
            f"{items[0].source.name} is {several.what}, written as several files: to_transformers_js writes text "
            "models and decoders of one file so far (transformers.js loads such a model's own set of files).")
    if check not in (True, False, "auto"):
        raise InvalidArgumentError(f"check={check!r}: use 'auto' (check where transformers.js is here), True or False.")
    runtimes = [runtime] if isinstance(runtime, str) else list(runtime)
    if not runtimes or any(r not in RUNTIMES for r in runtimes):
        raise InvalidArgumentError(f"runtime={runtime!r}: use one of {', '.join(RUNTIMES)}, or a list of them.")
    export = _export_of(items)
    source = export.source
    task, layout = _task_and_layout(export)
    files = _files(items)
    found = [_runner(r) for r in runtimes] if check is not False else [(None, "check=False")]
    runners = [run for run, _ in found if run is not None]
    reason = "; ".join(why for run, why in found if run is None)
    if reason and check is True:
        raise TransformersJsError(f"check=True, but transformers.js cannot run here: {reason}.")
    model_type = str(getattr(source.model.config, "model_type", ""))
    known = None if check is False else registered(task)  # transformers.js's own classes for the task, by type
    if known is not None and known.get(model_type) is None:
        raise InvalidArgumentError(
            f"transformers.js {version()} has no {task} model for {model_type or 'this model'} (its registry: "
            f"{len(known)} types for {task}); a newer transformers.js may: pass check=False to write the folder "
            "unchecked.")
    inputs_fit(task, texts, images, audio)
    pictures = images_of(images, source.preprocessor) if task in IMAGE_TASKS else []
    clips = clips_of(audio, source.preprocessor) if task == SPEECH else []
    target = _target(folder, source.name, overwrite)
    with Steps(2 + len(runners), "to_transformers_js", progress) as steps:
        steps.step("writing the folder")
        written = _write(target, export, files, layout, task)
        bundle = WebBundle(target, source.name, task, model_type, written,
                           texts=[] if pictures or clips else list(texts or default_texts(source, task)),
                           images=[f"{a.shape[1]}x{a.shape[0]} RGB" for a in pictures],
                           audio=[f"{len(c) / rate:.2f} s at {rate} Hz" for c, rate in clips])
        bundle.unchecked = reason
        from .verdicts import Judge

        judge = Judge(bundle, export, {DTYPES[p][0]: (target / file_name(p, _checked_file(written)), p)
                                       for p in files}, max_new_tokens, pictures, [c for c, _ in clips])
        for run in runners:
            steps.step("checking it in transformers.js")
            try:
                judge.checked(run)
            except NoWebGpuError as exc:  # known only once the page is asked
                if check is True:
                    raise
                bundle.unchecked = "; ".join(filter(None, [bundle.unchecked, str(exc)]))
        steps.step("done")
    bundle.seconds = time.perf_counter() - started
    return bundle


def _runner(runtime: str) -> tuple[Any, str]:
    """The function that runs transformers.js on a folder for ``runtime``, or None and why it cannot run here."""
    import functools

    from ...progress import in_notebook
    from ...runtime.transformers_js import page_unavailable_reason, run_check, run_in_page

    if runtime == "browser-webgpu":
        why = page_unavailable_reason("webgpu")
        return (None, f"in a browser page on WebGPU: {why}") if why else (functools.partial(run_in_page,
                                                                                            build="webgpu"), "")
    node, page = unavailable_reason(), page_unavailable_reason()
    if runtime == "auto":  # the notebook's page in a notebook, else Node.js, else a headless Chromium
        if node and page:
            return None, f"under Node.js: {node}; in a browser page: {page}"
        runtime = "browser" if node or (in_notebook() and not page) else "node"
    if runtime == "node":
        return (None, f"under Node.js: {node}") if node else (run_check, "")
    return (None, f"in a browser page: {page}") if page else (run_in_page, "")


def file_name(precision: str, stem: str = "model") -> str:
    """Where transformers.js looks for a file of ``precision`` in the folder (``onnx/model_quantized.onnx``;
    ``stem``: an encoder-decoder's ``encoder_model`` or ``decoder_model_merged``)."""
    return f"onnx/{stem}{DTYPES[precision][1]}.onnx"


def _checked_file(written: list[Path]) -> str:
    """The file a check's row names: the model's, or an encoder-decoder's merged decoder."""
    return "decoder_model_merged" if any(p.name.startswith("decoder_model_merged") for p in written) else "model"


def _processor_as_read(path: Path) -> None:
    """A processor transformers.js knows by its older name only (BEiT's ``BeitFeatureExtractor``) named so in
    ``preprocessor_config.json`` (transformers.js refuses an ``image_processor_type`` it does not know)."""
    from ...runtime.transformers_js import image_processors

    settings, known = json.loads(path.read_text()), image_processors()
    named = str(settings.get("image_processor_type") or "").removesuffix("Fast")
    older = named.replace("ImageProcessor", "FeatureExtractor")
    if known and named and named not in known and older in known:
        settings.pop("image_processor_type")
        settings["feature_extractor_type"] = older
        path.write_text(json.dumps(settings, indent=2))


def _export_of(items: list[Any]) -> Any:
    """The export the files come from (its source names the model, its tokenizer and config)."""
    from ...results.export import ExportResult

    for item in items:
        if isinstance(item, ExportResult):
            return item
    for item in items:
        if isinstance(getattr(item, "reference", None), ExportResult):
            return item.reference
    raise InvalidArgumentError("to_transformers_js needs the export the variants were made from: pass the variants' "
                               "export too, or variants made from an export (not from a file path).")


def _task_and_layout(export: Any) -> tuple[str, Any]:
    """The task transformers.js runs and the layout the files take (None: as they are)."""
    from ..export.adapters.registry import generation_of, shape_of

    source = export.source
    if source.model is None or not hasattr(getattr(source.model, "config", None), "to_json_file"):
        raise InvalidArgumentError(f"{source.name} is not a Hugging Face transformers model: transformers.js loads "
                                   "transformers' configs and tokenizers.")
    layout = None
    generation = generation_of(export)
    if generation is not None:
        layout = shape_of(export).answer("web")
        text_or_speech = str(source.task or "").startswith((*TEXT_TO_TEXT, SPEECH, CAPTIONS))
        if layout is None or (generation == "seq2seq" and not text_or_speech):
            raise InvalidArgumentError(
                f"{source.name} generates as a {generation} model{'' if layout else ' (several files)'} for "
                f"{source.task or 'a task of its own'}: to_transformers_js writes text models, decoders with their "
                "cache, text-to-text, speech-to-text and image-to-text encoder-decoders so far.")
    task = str(source.task or "") if layout is None else "text-generation" if generation != "seq2seq" else \
        next((t for t in (SPEECH, CAPTIONS) if str(source.task or "").startswith(t)), "text2text-generation")
    if task not in TASKS:
        raise InvalidArgumentError(f"{source.name} is a {task or 'model of no known'} task; to_transformers_js "
                                   f"writes and checks {', '.join(TASKS)} so far.")
    return task, layout


def _files(items: list[Any]) -> dict[str, Path]:
    """Each item's file by its precision (one per precision: transformers.js loads one file per dtype)."""
    from ...results.tolerance import precision_of
    from ...runtime.onnxfile import read_structure

    files: dict[str, Path] = {}
    for item in items:
        path = Path(item.path)
        precision = precision_of(read_structure(path)[0])  # the graph and weights' types: no weight read here
        if precision in files:
            raise InvalidArgumentError(f"{files[precision].name} and {path.name} are both {precision}: transformers.js "
                                       f"loads one file per precision ({DTYPES[precision][0]}); pass one of them.")
        files[precision] = path
    return files


def _target(folder: Any, name: str, overwrite: bool) -> Path:
    target = Path(folder).expanduser() if folder is not None else default_output(
        f"{name}-transformers-js", "x", taken_ok=overwrite).parent
    if target.exists() and not target.is_dir():
        raise OutputExistsError(f"{target} is a file; give to_transformers_js a folder.")
    if target.is_dir() and any(target.iterdir()) and not overwrite:
        raise OutputExistsError(f"{target} already holds files. Pass overwrite=True to replace the folder, or "
                                "choose another one.")
    check_target(target / "config.json", True)  # the parent folders exist and are writable
    return target.resolve()


def _write(target: Path, export: Any, files: dict[str, Path], layout: Any, task: str) -> list[Path]:
    """Every file, written into a folder beside ``target`` and moved into place whole (an old folder there, which
    ``overwrite=True`` allowed, goes once the new one is in place)."""
    with staging_dir(target) as staged:
        _config_and_tokenizer(staged, export, task)
        (staged / "onnx").mkdir()
        for precision, path in files.items():
            _model_files(path, staged, precision, layout, export)
        with deferred_interrupt():
            old = None
            if target.exists():
                old = target.with_name(f".{target.name}.old-{os.getpid()}")
                os.replace(target, old)
            os.replace(staged, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return sorted(p for p in target.rglob("*") if p.is_file())


def _config_and_tokenizer(staged: Path, export: Any, task: str) -> None:
    source = export.source
    source.model.config.to_json_file(str(staged / "config.json"))
    if task == "text-generation":
        from .layouts import config_as_read

        read = config_as_read(json.loads((staged / "config.json").read_text()))
        (staged / "config.json").write_text(json.dumps(read, indent=2))
    saved = source.preprocessor
    if saved is None or not hasattr(saved, "save_pretrained"):
        what = "processor" if task in (SPEECH, CAPTIONS) else "image processor" if task in IMAGE_TASKS else "tokenizer"
        raise InvalidArgumentError(f"{source.name} came with no {what}: transformers.js reads the model's own "
                                   f"{what} files. Export the model from its folder or hub id.")
    saved.save_pretrained(str(staged))  # a speech model's processor: its feature extractor and tokenizer
    if task in (*IMAGE_TASKS, SPEECH):
        for part in ("feature_extractor", "image_processor"):  # transformers 5 writes a processor's parts into
            if not (staged / "preprocessor_config.json").is_file() and hasattr(saved, part):  # processor_config
                getattr(saved, part).save_pretrained(str(staged))  # .json; transformers.js reads this file
        if not (staged / "preprocessor_config.json").is_file():
            raise InvalidArgumentError(f"{source.name}'s processor wrote no preprocessor_config.json, which "
                                       "transformers.js reads.")
        _processor_as_read(staged / "preprocessor_config.json")
    if (task not in IMAGE_TASKS or task == CAPTIONS) and not (staged / "tokenizer.json").is_file():
        raise InvalidArgumentError(f"{source.name}'s tokenizer wrote no tokenizer.json (a slow tokenizer, or a "
                                   "processor without one): transformers.js reads tokenizer.json only.")
    from .verdicts import GENERATING

    generation = getattr(source.model, "generation_config", None)
    if task in (*GENERATING, SPEECH, CAPTIONS) and generation is not None:
        generation.to_json_file(str(staged / "generation_config.json"))
    if task == "text-generation":
        settings = staged / "tokenizer_config.json"
        kept = json.loads(settings.read_text()) if settings.is_file() else {}
        settings.write_text(json.dumps({**kept, "padding_side": "left"}, indent=2))  # a batch of prompts, padded


def _model_files(path: Path, staged: Path, precision: str, layout: Any, export: Any) -> None:
    """``path``'s graph with its weights inside (transformers.js reads one file per precision), laid out (as the
    files the layout makes of it, where it makes several)."""
    import onnx

    from ...runtime.browser import WEB_MAX_BYTES

    proto = onnx.load(str(path), load_external_data=True)
    made = layout(proto, export.source.model.config, export) if layout is not None else None
    for stem, graph in (made or {"model": proto}).items():
        if graph.ByteSize() > WEB_MAX_BYTES:
            raise InvalidArgumentError(f"{path.name} holds {graph.ByteSize() / 1e9:.1f} GB of weights: more than one "
                                       "file transformers.js loads can hold (2 GB). Quantize it (INT8 or INT4) first.")
        onnx.save(graph, str(staged / file_name(precision, stem)))
