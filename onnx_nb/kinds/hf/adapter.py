"""A Hugging Face model: an object, a local folder or a hub id, or a SentenceTransformer (its pooling inside the
graph). Generative models plan their parts here: a decoder-only model is one file with its key/value cache, an
encoder-decoder two files (encoder, decoder with its caches); ``cache=False`` keeps one whole-sequence file."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, ClassVar

from ...errors import InvalidArgumentError
from ...steps.export.adapters.base import Adapter
from ...steps.export.args import ExportArgs
from ...steps.export.machinery.writing import source_name
from .loading import folder_config


def location_config(model: Any) -> dict[str, Any]:
    """The config of a folder (its config.json, read once) or of a hub id (fetched as the export would fetch it:
    cached after the first time), as a dict; {} for a checkpoint file, an ONNX file or what cannot be read (the
    export's own loading then says what is wrong)."""
    folder = Path(str(model)).expanduser()
    if folder.is_dir():
        return folder_config(folder)
    from ..torch_module.checkpoints import SUFFIXES as CHECKPOINT_SUFFIXES
    from .loading import HUB_ID

    if folder.suffix.lower() in (*CHECKPOINT_SUFFIXES, ".onnx", ".ort") or not HUB_ID.match(str(model)):
        return {}
    return _hub_config(str(model))


_HUB_CONFIGS: dict[str, dict[str, Any]] = {}


def _hub_config(name: str) -> dict[str, Any]:
    """A hub id's config, fetched once per session (a failure is not kept: the hub may answer the next time)."""
    from ...errors import OnnxNbError
    from .loading import load_config

    if name not in _HUB_CONFIGS:
        try:
            _HUB_CONFIGS[name] = load_config(name)[0].to_dict()
        except OnnxNbError:
            return {}
    return _HUB_CONFIGS[name]


class HfAdapter(Adapter):
    key = "hf"
    what = "a Hugging Face model"
    takes: ClassVar[frozenset[str]] = frozenset({"sample", "task", "dynamic", "exporter", "opset", "cache",
                                                 "allow_pickle"})

    @classmethod
    def pads_left(cls, model: Any) -> bool:
        return is_causal_lm(model)

    @staticmethod
    def is_object(model: Any) -> bool:
        """A Hugging Face model object (``config`` and ``main_input_name``) or a SentenceTransformer."""
        return (hasattr(model, "config") and hasattr(model, "main_input_name")) or any(
            c.__name__ == "SentenceTransformer" and c.__module__.startswith("sentence_transformers")
            for c in type(model).__mro__)

    @staticmethod
    def recognises(model: Any, args: ExportArgs) -> bool:
        if isinstance(model, (str, os.PathLike)):
            from ..torch_module.checkpoints import is_checkpoint

            return not is_checkpoint(Path(str(model)).expanduser())
        return "torch" in sys.modules and HfAdapter.is_object(model)

    @classmethod
    def open(cls, model: Any, args: ExportArgs) -> Any:
        """Load (a folder or hub id) or wrap (an object) into the record; nothing about a cache decided yet."""
        from ...results.export import ModelSource
        from ...steps.export.machinery.logs import quiet_loading
        from . import noise

        task = args.task
        said: list[str] = []
        if isinstance(model, (str, os.PathLike)):
            path = Path(str(model)).expanduser()
            if task == "sentence-embedding":
                from . import sentence

                location = str(path.resolve()) if path.exists() else str(model)
                with quiet_loading(said, local=path.exists()):
                    record = _sentence_record(sentence.load(location), source_name(model), location)
                record.load_warnings = said
                return record
            from .loading import load_model

            with quiet_loading(said, local=path.exists()):
                loaded = load_model(str(model), task)
            return ModelSource(kind=loaded.kind, name=source_name(model), location=loaded.location,
                               task=loaded.task, model_type=getattr(loaded.config, "model_type", None),
                               model=noise.wrap(loaded.model), preprocessor=loaded.preprocessor, load_warnings=said,
                               adapter=cls.key)
        from .sentence import is_sentence_transformer

        if is_sentence_transformer(model):
            if task not in (None, "sentence-embedding"):
                raise InvalidArgumentError(f"A SentenceTransformer exports for task 'sentence-embedding', not "
                                           f"{task!r}; export model[0].auto_model for the bare transformer.")
            return _sentence_record(model, None, None)
        from .loading import load_preprocessor
        from .tasks import check_task, infer_task

        config = model.config
        where = getattr(config, "_name_or_path", "") or None
        task = check_task(task) if task else infer_task(config, model)
        pre = load_preprocessor(where, task) if where and Path(where).is_dir() else None
        return ModelSource(kind="hf-object", name=source_name(model), location=where, task=task,
                           model_type=getattr(config, "model_type", None), model=noise.wrap(model), preprocessor=pre,
                           adapter=cls.key)

    @classmethod
    def export(cls, model: Any, args: ExportArgs) -> Any:
        from ...progress import Steps
        from ...steps.export.machinery.writing import target_for
        from .loading import check_memory

        label, target = target_for(model, args)
        check_memory(model)
        with Steps(5, "export", args.progress) as steps:
            steps.step("loading the model")
            record = cls.open(model, args)
            record.name = label
            return cls.export_record(record, args, target, steps)

    @classmethod
    def export_record(cls, record: Any, args: ExportArgs, target: Path, steps: Any) -> Any:
        """The plan for a loaded model: an encoder-decoder's two files, a decoder with its cache, or one file."""
        from ...steps.export.adapters.registry import offered_instead
        from ...steps.export.machinery.torch_route import export_module

        record.instead = offered_instead(str(getattr(getattr(record.model, "config", None), "model_type", "")))

        if args.cache is not False and record.kind != "sentence-transformers":
            from ...steps.export.caches.decoder import layout_of

            if is_seq2seq(record.model):
                from ...steps.export.adapters.registry import SHAPES

                steps.step("preparing sample inputs")
                record.generation = "seq2seq"
                return SHAPES["seq2seq"].answer("export")(cls, record, args.sample, target, args.opset_or_default,
                                                         steps)
            if is_causal_lm(record.model):
                from ...steps.export.caches.decoder import NoKeyValueCache

                try:
                    record.cache_layout = layout_of(record.model)
                    record.generation = "decoder"
                except NoKeyValueCache as why:
                    if args.cache is True:
                        raise InvalidArgumentError(
                            f"cache=True: {why}, which onnx-nb cannot carry between steps yet. Export with "
                            "cache=False (the default picks it for this model): the file takes the whole sequence "
                            "each step, and onnx_nb.generate() runs it so.") from None
                    record.load_warnings.append(
                        f"exported without a cache: {why}; the file takes the whole sequence at each step, which "
                        "onnx_nb.generate() runs (slower per token than a cache, the same tokens)")
            elif args.cache is True:
                raise InvalidArgumentError(f"cache=True is for generative models (*ForCausalLM, "
                                           f"*ForConditionalGeneration); {type(record.model).__name__} is not one.")
        steps.step("preparing sample inputs")
        layout = record.cache_layout
        if layout is None or not layout.states or args.cache is True:
            return export_module(cls, record, args, target, steps)
        return cls._states_or_whole_sequence(record, args, target, steps)

    @classmethod
    def _states_or_whole_sequence(cls, record: Any, args: ExportArgs, target: Path, steps: Any) -> Any:
        """A cache of states (Mamba, linear attention) first; where that file cannot be made or disagrees with
        PyTorch, the file that takes the whole sequence each step, saying why."""
        import dataclasses

        from ...errors import OnnxNbError, first_line
        from ...steps.export.machinery.torch_route import export_module

        try:
            result = export_module(cls, record, args, target, steps)
            if result:
                return result
            why = result.check.get("summary") or result.check.get("error") or "its check failed"
        except OnnxNbError as exc:
            why = first_line(exc, 300)
        record.cache_layout, record.generation = None, None
        record.load_warnings.append(
            f"exported without a cache: its per-layer states did not export ({why}); the file takes the whole "
            "sequence at each step, which onnx_nb.generate() runs (slower per token than a cache, the same tokens)")
        # the file the first try published is replaced (the user's own file, if any, was refused before it)
        return export_module(cls, record, dataclasses.replace(args, overwrite=True), target, steps)

    # --- what later steps ask -----------------------------------------------------------------------------------
    @classmethod
    def reloadable(cls, record: Any) -> bool:
        return bool(record.location)

    @classmethod
    def reload(cls, record: Any, step: str) -> Any:
        """The record with its PyTorch model, loaded again from its folder or hub id when the result no longer holds
        it (a lean export, a result from an earlier session); refused with InsufficientMemoryError before loading
        when the machine has not the memory for it (the kernel would die halfway)."""
        if record.model is not None:
            return record
        from .loading import checkpoint_bytes

        folder = Path(record.location or "").expanduser()
        weights = checkpoint_bytes(folder) if record.location and folder.is_dir() else 0
        if weights:
            from ...render import human_bytes
            from ...runtime.memory import FACTORS, require

            require(int(FACTORS["reload"] * weights),
                    f"{step} loads {folder.name} in PyTorch as its reference ({human_bytes(weights)} of weights)",
                    "Check the file against another ONNX file of the model instead (check_parity(file, "
                    "reference=\"model.onnx\"): an fp32 or fp16 export), free what this kernel holds (del results "
                    "you no longer need), or run the check on a machine with more memory.")
        loaded = cls.open(record.location or "", ExportArgs(task=record.task))
        if record.cache_layout is not None:  # what the export learnt stays: the reference runs the same graph
            loaded.cache_layout, loaded.generation = record.cache_layout, record.generation
        return loaded

    @classmethod
    def sample(cls, record: Any, sample: Any, dynamic: Any = True) -> Any:
        from ...steps.export.machinery import inputs

        if record.generation == "decoder":
            from ...steps.export.caches import decoder as decoder_cache

            layout = record.cache_layout
            given = dict(sample) if sample is not None else decoder_cache.cache_sample(record.model, layout)
            names = decoder_cache.input_names(layout)
            missing = [n for n in names if n not in given]
            if missing:
                raise inputs.SampleError(f"A decoder with its cache takes {', '.join(names[:4])}, ...; the sample "
                                         f"lacks {', '.join(missing[:3])}. Leave sample=None for one built from the "
                                         "config.")
            axes = decoder_cache.cache_axes(layout)
            s = inputs.Sample(names, [inputs.to_tensor(given[n], n) for n in names], False,
                              {n: axes[n] for n in names})
            if not dynamic:
                s.axes = {}
            return s
        from . import samples

        s = samples.build(record.model, record.preprocessor) if sample is None \
            else samples.from_user(record.model, sample)
        if sample is None and record.task == "text-generation":
            s = _with_positions(record.model, s)
        return inputs.restrict_axes(s, dynamic)

    @classmethod
    def flat(cls, record: Any, names: list[str], as_kwargs: bool) -> Any:
        """A decoder with its cache through :class:`decoder_cache.DecoderWithCache`; every other model gets its
        call keywords (no cache, ModelOutput results)."""
        from ...steps.export.machinery.wrap import FlatModule, forward_parameters

        if record.generation == "decoder":
            from ...steps.export.caches.decoder import DecoderWithCache

            return FlatModule(DecoderWithCache(record.model, record.cache_layout), names, False, {})
        params = forward_parameters(record.model)
        kwargs = {k: v for k, v in (("use_cache", False), ("return_dict", True)) if k in params}
        flat = FlatModule(record.model, names, as_kwargs, kwargs, hf=True)
        token = appended_token(record.model, names) if is_causal_lm(record.model) else None
        if token is not None:  # the whole-sequence runner reads it from the file (generate from a path too)
            from ...runtime.facts import APPENDED

            flat.onnx_metadata[APPENDED] = str(token)
        return flat

    @classmethod
    def natural_axes(cls, record: Any, sample: Any) -> dict[str, dict[int, str]]:
        from .samples import AXES, QUIRKS, Quirk

        quirk = QUIRKS.get(record.model_type or "", Quirk())
        return {n: ({0: "batch"} if n in quirk.static_axes else dict(AXES.get(n, {0: "batch"})))
                for n, t in zip(sample.names, sample.tensors) if t.dim() >= 1}

    @classmethod
    def static_axes(cls, record: Any) -> dict[str, str]:
        from .samples import QUIRKS, Quirk

        quirk = QUIRKS.get(record.model_type or "", Quirk())
        return {n: quirk.static_reason or "fixed for this architecture" for n in quirk.static_axes}

    @classmethod
    def reference_of_model(cls, model: Any, candidate: Any, sample: Any, label: str | None = None,
                           exporter: str | None = None) -> Any:
        from ...steps.export.machinery.references import torch_reference

        record = cls.open(model, ExportArgs())
        return torch_reference(record, sample, label or f"PyTorch {record.name}", exporter, adapter=cls)


def _sentence_record(st: Any, name: str | None, location: str | None) -> Any:
    """A SentenceTransformer as a model with token inputs and ``token_embeddings`` + ``sentence_embedding``
    outputs (its pooling and normalisation inside the graph), its tokenizer as the preprocessor; named after
    its transformer's folder or hub id unless ``name`` says otherwise."""
    from ...results.export import ModelSource
    from .sentence import TASK, wrap

    wrapper = wrap(st)
    return ModelSource(kind="sentence-transformers", name=name or source_name(wrapper), location=location, task=TASK,
                       model_type=getattr(wrapper.config, "model_type", None), model=wrapper,
                       preprocessor=st.tokenizer, adapter=HfAdapter.key)


def _with_positions(model: Any, s: Any) -> Any:
    """A causal LM exported without its cache takes ``position_ids`` when its forward does, as generate() passes
    them (the mask's running count): the file then gives generate()'s tokens for left-padded batches, and for the
    encoders registered as causal LMs (RoBERTa's own default positions start after its padding id)."""

    from ...steps.export.machinery.wrap import forward_parameters

    if "position_ids" in s.names or "position_ids" not in forward_parameters(model) or not is_causal_lm(model) \
            or "attention_mask" not in s.names:
        return s
    mask = s.as_dict()["attention_mask"]
    positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
    axes = dict(s.axes)
    if "attention_mask" in axes:
        axes["position_ids"] = dict(axes["attention_mask"])
    return type(s)([*s.names, "position_ids"], [*s.tensors, positions], s.as_kwargs, axes)


CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")


def is_causal_lm(model: Any) -> bool:
    """A decoder-only LM: a class transformers' auto mappings list for causal LM (or named like one)."""
    from .tasks import generative_task

    name = type(model).__name__
    return (generative_task(name) == "text-generation" or name.endswith(CAUSAL_SUFFIXES)) and not getattr(
        getattr(model, "config", None), "is_encoder_decoder", False)


def appended_token(model: Any, names: list[str]) -> int | None:
    """The token a causal LM's own ``prepare_inputs_for_generation`` appends to the ids at every step, when that is
    all it changes (XLM: its mask token, whose position's logits are the prediction); None for the usual model.
    Read by calling it on a short prompt. Other inputs it adds that the file does not take must change nothing
    (XLM's ``langs`` with one language: run with and without them); a model whose additions matter (XLNet's
    ``perm_mask`` and ``target_mapping``) gets None, and its tokens stay another road's problem."""
    import torch

    ids = torch.tensor([[5, 6, 7]])
    try:
        prepared = model.prepare_inputs_for_generation(ids, attention_mask=torch.ones_like(ids))
        got = prepared.get("input_ids")
        if not isinstance(got, torch.Tensor) or got.shape != (1, 4) or not torch.equal(got[:, :3], ids):
            return None
        others = {k for k, v in prepared.items() if isinstance(v, torch.Tensor) and k != "input_ids"} - set(names)
        if others:
            with torch.no_grad():
                given = model(**{k: v for k, v in prepared.items() if isinstance(v, torch.Tensor)}).logits
                kept = model(input_ids=got).logits
            if not torch.allclose(given, kept, rtol=1e-4, atol=1e-5):
                return None
    except Exception:  # noqa: BLE001 - a model whose preparation needs more than ids: not this kind
        return None
    return int(got[0, 3])


def is_seq2seq(model: Any) -> bool:
    """An encoder-decoder LM (text, speech or an image's text): a class transformers' auto mappings list as
    sequence-to-sequence (``MarianMTModel``, ``*ForConditionalGeneration``, ...) or a ``VisionEncoderDecoderModel``
    (TrOCR, Donut, ViT-GPT2), with an encoder."""
    from .tasks import generative_task

    config = getattr(model, "config", None)
    name = type(model).__name__
    return bool(getattr(config, "is_encoder_decoder", False)) and hasattr(model, "get_encoder") and (
        generative_task(name) in ("text2text-generation", "automatic-speech-recognition")
        or name.endswith("ForConditionalGeneration") or name == "VisionEncoderDecoderModel")
