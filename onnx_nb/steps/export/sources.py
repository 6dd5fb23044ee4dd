"""Resolve what the user passed (module, Hugging Face object, folder, hub id) to a model."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ...errors import InvalidArgumentError
from ...results.export import ModelSource

# Library log lines that say nothing to an onnx-nb user: ORT's quantizer asks for its pre-processing, which
# onnx-nb's prepare_for_quantization already did.
LOG_NOISE = ("pre-processing before quantization",)


class LogCollector(logging.Handler):
    """Library log lines of WARNING and above into ``collected`` (once each, 300 characters at most)."""

    def __init__(self, collected: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.collected = collected

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage().strip()
        if text and text not in self.collected and not any(n in text for n in LOG_NOISE):
            self.collected.append(text[:300])


@contextlib.contextmanager
def library_logs(collected: list[str]) -> Iterator[None]:
    """Log lines of the libraries onnx-nb calls (ONNX Runtime's quantizer and optimizer write to the root logger)
    go to ``collected``, the result's warnings, instead of the terminal or the cell: a handler on the root logger
    also stops ``logging.warning()`` from installing its own stderr handler."""
    root = logging.getLogger()
    handler = LogCollector(collected)
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)


@contextlib.contextmanager
def quiet_loading(collected: list[str], local: bool) -> Iterator[None]:
    """Loading a Hugging Face model without red lines under the cell: transformers' warnings go to
    ``collected`` (the export result's ``warnings``, shown folded), and a local folder loads without its
    per-weight progress bar (a hub download keeps its bars: they say how much is left)."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # a plain PyTorch module: nothing of transformers' to quieten
        yield
        return
    logger = hf_logging.get_logger()
    saved = logger.handlers[:], logger.propagate
    bars = hf_logging.is_progress_bar_enabled()
    logger.handlers, logger.propagate = [LogCollector(collected)], False
    if local:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        logger.handlers, logger.propagate = saved
        if local and bars:
            hf_logging.enable_progress_bar()


def source_name(model: Any) -> str:
    """A short, file-safe-able name for the default output folder."""
    if isinstance(model, (str, os.PathLike)):
        text = str(model).rstrip("/\\")
        return Path(text).name if os.sep in text and Path(text).expanduser().exists() else text
    config = getattr(model, "config", None)
    name = getattr(config, "_name_or_path", "") or ""
    if name:
        return Path(name.rstrip("/")).name if Path(name).exists() else name
    return type(model).__name__


RELOAD_PEAK = 1.1  # a checkpoint loaded again in its own dtype: 12.76 GiB for a 12.55 GiB bf16 7B


def checkpoint_bytes(folder: Path) -> int:
    """Bytes of a Hugging Face folder's weights (safetensors, else .bin); 0 when it has none."""
    return sum(p.stat().st_size for p in folder.glob("*.safetensors")) or \
        sum(p.stat().st_size for p in folder.glob("*.bin"))


def reload_source(source: ModelSource, step: str) -> ModelSource:
    """``source`` with its PyTorch model, loaded again from where it came from when the export no longer holds it
    (a lean export, a result from an earlier session). Refused with :class:`~onnx_nb.InsufficientMemoryError` before
    loading when the machine has not the memory for it (the kernel would die halfway); ``step`` names who asks."""
    if source.model is not None:
        return source
    folder = Path(source.location or "").expanduser()
    weights = checkpoint_bytes(folder) if source.location and folder.is_dir() else 0
    if weights:
        from ...render import human_bytes
        from ...runtime.memory import require

        require(int(RELOAD_PEAK * weights),
                f"{step} loads {folder.name} in PyTorch as its reference ({human_bytes(weights)} of weights)",
                "Check the file against another ONNX file of the model instead (check_parity(file, "
                "reference=\"model.onnx\"): an fp32 or fp16 export), free what this kernel holds (del results you "
                "no longer need), or run the check on a machine with more memory.")
    return load_source(source.location or "", source.task)


def load_source(model: Any, task: str | None, allow_pickle: bool = False) -> ModelSource:
    """Load or wrap the model; returns a :class:`ModelSource` with ``model`` set.

    A checkpoint file (``.pt``, ``.pth``, ...) is loaded with :func:`checkpoints.load`: weights only,
    unless ``allow_pickle``.
    """
    if isinstance(model, (str, os.PathLike)):
        from . import checkpoints

        path = Path(str(model)).expanduser()
        if checkpoints.is_checkpoint(path):
            source = load_source(checkpoints.load(path, allow_pickle), task)
            source.location = str(path)
            return source
        said: list[str] = []
        if task == "sentence-embedding":
            from .hf import sentence

            location = str(path.resolve()) if path.exists() else str(model)
            with quiet_loading(said, local=path.exists()):
                source = _sentence_source(sentence.load(location), source_name(model), location)
            source.load_warnings = said
            return source
        from .hf.loading import load_model

        with quiet_loading(said, local=path.exists()):
            loaded = load_model(str(model), task)
        return ModelSource(kind=loaded.kind, name=source_name(model), location=loaded.location,
                           task=loaded.task, model_type=getattr(loaded.config, "model_type", None),
                           model=loaded.model, preprocessor=loaded.preprocessor, load_warnings=said)
    import torch

    if not isinstance(model, torch.nn.Module):
        raise InvalidArgumentError(
            f"model is a {type(model).__name__}. Pass a torch.nn.Module, a Hugging Face model "
            "object, the path of a local Hugging Face folder, a hub id such as 'bert-base-uncased', a Keras model, "
            "a TensorFlow SavedModel folder or tf.Module, a fitted scikit-learn estimator, or an .onnx file."
        )
    from .hf.sentence import is_sentence_transformer
    from .wrap import is_hf_model

    if is_sentence_transformer(model):
        if task not in (None, "sentence-embedding"):
            raise InvalidArgumentError(f"A SentenceTransformer exports for task 'sentence-embedding', not {task!r}; "
                                       "export model[0].auto_model for the bare transformer.")
        return _sentence_source(model, None, None)
    if is_hf_model(model):
        from .hf.loading import load_preprocessor
        from .hf.tasks import check_task, infer_task

        config = model.config
        where = getattr(config, "_name_or_path", "") or None
        pre = load_preprocessor(where) if where and Path(where).is_dir() else None
        return ModelSource(kind="hf-object", name=source_name(model), location=where,
                           task=check_task(task) if task else infer_task(config, model),
                           model_type=getattr(config, "model_type", None), model=model,
                           preprocessor=pre)
    if task is not None:
        raise InvalidArgumentError(
            "task only applies to Hugging Face models; for a plain torch.nn.Module pass a sample."
        )
    return ModelSource(kind="module", name=source_name(model), model=model)


def _sentence_source(st: Any, name: str | None, location: str | None) -> ModelSource:
    """A SentenceTransformer as a model with token inputs and ``token_embeddings`` + ``sentence_embedding``
    outputs (its pooling and normalisation inside the graph), its tokenizer as the preprocessor; named after
    its transformer's folder or hub id unless ``name`` says otherwise."""
    from .hf.sentence import TASK, wrap

    wrapper = wrap(st)
    return ModelSource(kind="sentence-transformers", name=name or source_name(wrapper), location=location, task=TASK,
                       model_type=getattr(wrapper.config, "model_type", None), model=wrapper,
                       preprocessor=st.tokenizer)


def build_sample(source: ModelSource, sample: Any, dynamic: Any = True) -> Any:
    """Named sample tensors with dynamic axes for a resolved model (an ``inputs.Sample``)."""
    from . import inputs

    if source.cache_layout is not None:
        from . import decoder_cache

        layout = source.cache_layout
        given = dict(sample) if sample is not None else decoder_cache.cache_sample(source.model, layout)
        names = decoder_cache.input_names(layout)
        missing = [n for n in names if n not in given]
        if missing:
            raise inputs.SampleError(f"A decoder with its cache takes {', '.join(names[:4])}, ...; the sample lacks "
                                     f"{', '.join(missing[:3])}. Leave sample=None for one built from the config.")
        axes = decoder_cache.cache_axes(layout)
        s = inputs.Sample(names, [inputs.to_tensor(given[n], n) for n in names], False,
                          {n: axes[n] for n in names})
        if not dynamic:
            s.axes = {}
        return s
    if source.kind == "module":
        s = inputs.normalise(source.model, sample)
        s.axes = inputs.default_axes(s)
    else:
        from .hf import samples

        s = samples.build(source.model, source.preprocessor) if sample is None \
            else samples.from_user(source.model, sample)
    if isinstance(dynamic, Mapping):
        s.axes = inputs.check_axes(s, dynamic)
    elif not dynamic:
        s.axes = {}
    return s


def flat_module(source: ModelSource, names: list[str], as_kwargs: bool) -> Any:
    """The model as one flat ``forward(*tensors)`` (a :class:`wrap.FlatModule`): a decoder exported with its
    cache goes through :class:`decoder_cache.DecoderWithCache`, every other Hugging Face model gets its call
    keywords (no cache, ModelOutput results)."""
    from .wrap import FlatModule

    if source.cache_layout is not None:
        from .decoder_cache import DecoderWithCache

        return FlatModule(DecoderWithCache(source.model, source.cache_layout), names, False, {})
    return FlatModule(source.model, names, as_kwargs, hf_call_kwargs(source))


def hf_call_kwargs(source: ModelSource) -> dict[str, Any]:
    """Keyword arguments every Hugging Face call gets: no cache, ModelOutput results."""
    if source.kind == "module":
        return {}
    from .wrap import forward_parameters

    params = forward_parameters(source.model)
    return {k: v for k, v in (("use_cache", False), ("return_dict", True)) if k in params}


def natural_axes(source: ModelSource, sample: Any) -> dict[str, dict[int, str]]:
    """The axes a model's inputs naturally vary along, even when an export fixed them
    (so parity can show that a static export fails at other shapes)."""
    from . import inputs

    if source.kind == "module":
        return inputs.default_axes(sample)
    from .hf.samples import AXES, QUIRKS, Quirk

    quirk = QUIRKS.get(source.model_type or "", Quirk())
    return {n: ({0: "batch"} if n in quirk.static_axes else dict(AXES.get(n, {0: "batch"})))
            for n, t in zip(sample.names, sample.tensors) if t.dim() >= 1}
