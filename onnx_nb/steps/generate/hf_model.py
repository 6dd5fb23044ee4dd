"""The exported files as a transformers model: :func:`to_transformers` wraps a decoder (with its cache), an
encoder-decoder (T5, BART, Marian, mBART, M2M100, Pegasus) or Whisper in a ``PreTrainedModel`` with
``GenerationMixin`` whose forward runs ONNX Runtime, so transformers' own ``generate()`` (every decoding strategy,
logits processor, stopping criterion and streamer; beam search reorders the cache) and ``pipeline()`` run on the
files, as Optimum's ``ORTModelFor*`` classes do.

The cache between steps is an :class:`OnnxCache`: the decoder's own arrays (``past_key_values.*`` as ONNX Runtime
returned them: numpy on the CPU, ``OrtValue``s on a GPU provider with I/O binding; a GroupQueryAttention file's
shared buffers), never torch tensors, so a decode step moves only its ids in and its logits out. For an
encoder-decoder, the encoder file's cross-attention keys and values ride in the encoder output as one stacked
tensor (transformers repeats it per beam as it does the encoder's states). Only imported by functions that
already need torch and transformers.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from transformers import GenerationConfig, GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import ModelOutput

from ...errors import InvalidArgumentError
from .runners import SharedBufferDecoder, rows_in, take_rows


class OnnxCache:
    """The decoder's key/value cache between two steps, as the runner keeps it (see the module's docstring)."""

    def __init__(self, runner: Any, state: dict[str, Any], length: int) -> None:
        self.runner, self.state, self.length = runner, state, length

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length

    def reorder_cache(self, beam_idx: torch.Tensor) -> None:
        """Beam search: row ``i`` becomes the old row ``beam_idx[i]`` (a beam of the same input: what the encoder
        gave each input stays as it is)."""
        self.state = self.runner.reorder(self.state, beam_idx.cpu().numpy(), beams_only=True)

    def batch_repeat_interleave(self, repeats: int) -> None:
        rows = np.repeat(np.arange(self.runner.batch_of(self.state)), repeats)
        self.state = self.runner.reorder(self.state, rows)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.state = self.runner.reorder(self.state, indices.cpu().numpy())

    def __len__(self) -> int:
        return self.length


@dataclass
class OnnxLMOutput(ModelOutput):
    logits: torch.Tensor | None = None
    cache: Any = None


@dataclass
class OnnxEncoderOutput(ModelOutput):
    last_hidden_state: torch.Tensor | None = None
    # every decoder layer's cross-attention key and value: [batch, 2 * layers, heads, source length, head size]
    cross_attention: torch.Tensor | None = None


class _DecoderSteps:
    """A decoder file's steps for transformers: :class:`OnnxDecoder` (or the shared-buffer runner of a
    GroupQueryAttention file) plus the batch reordering beam search needs."""

    def __init__(self, decoder: Any) -> None:
        self.decoder = decoder
        self.shared = isinstance(decoder, SharedBufferDecoder)

    def batch_of(self, state: dict[str, Any]) -> int:
        if self.shared:
            return int(state["batch"])
        return rows_in(next(iter(state.values())))

    def empty(self, batch: int, capacity: int | None) -> dict[str, Any]:
        return self.decoder.empty_cache(batch, capacity=capacity)

    def step(self, ids: np.ndarray, mask: np.ndarray, state: dict[str, Any]) -> tuple[np.ndarray, dict[str, Any]]:
        return self.decoder.step(ids, mask, state, keep=True)

    def reorder(self, state: dict[str, Any], rows: np.ndarray, beams_only: bool = False) -> dict[str, Any]:
        if self.shared:
            return self.decoder.reorder(state, rows)
        return {name: take_rows(value, rows) for name, value in state.items()}


class _Seq2SeqSteps:
    """An encoder-decoder's decoder steps for transformers (:class:`~.seq2seq.OnnxSeq2Seq`)."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.moving = set(runner.self_names)

    def batch_of(self, state: dict[str, Any]) -> int:
        return rows_in(state[self.runner.self_names[0]])

    def reorder(self, state: dict[str, Any], rows: np.ndarray, beams_only: bool = False) -> dict[str, Any]:
        """Rows taken in ``rows``' order; between beams of one input (``beams_only``) the encoder's states, mask
        and cross-attention cache are the same for every row concerned, so only the decoder's own cache moves."""
        moving = self.moving if beams_only else state.keys()
        return {name: take_rows(value, rows) if name in moving else value for name, value in state.items()}


def configs_of(model: Any, config: Any) -> tuple[Any, Any]:
    """The transformers config and generation config of an export (or of ``config``: an object or a folder)."""
    from ...results.export import source_of

    if config is not None and not isinstance(config, (str, Path)):
        return config, GenerationConfig.from_model_config(config)
    source = source_of(model)
    torch_model = getattr(source, "model", None)
    if config is None and torch_model is not None and getattr(torch_model, "config", None) is not None:
        generation = getattr(torch_model, "generation_config", None)  # a copy: the two models' stay apart
        return torch_model.config, copy.deepcopy(generation) or GenerationConfig.from_model_config(torch_model.config)
    location = config if config is not None else getattr(source, "location", None)
    if location is None:
        raise InvalidArgumentError(
            "to_transformers() needs the model's transformers config: pass an export of a Hugging Face model, or "
            "config=<the model's folder, hub id or config object> for a bare .onnx file.")
    loaded = transformers.AutoConfig.from_pretrained(str(location))
    try:
        generation = GenerationConfig.from_pretrained(str(location))
    except OSError:  # no generation_config.json: the model config's own fields
        generation = GenerationConfig.from_model_config(loaded)
    return loaded, generation


class _OnnxModel(PreTrainedModel):
    """What the three wrappers share: no torch parameters, the device and dtype of the logits they return."""

    base_model_prefix = "onnx"
    main_input_name = "input_ids"
    _supports_sdpa = True  # attention runs in the files: any implementation transformers asks for is fine
    _can_set_experts_implementation_cached_value = True  # so do a mixture of experts' experts

    def __init__(self, config: Any, path: Path, provider: str) -> None:
        super().__init__(copy.deepcopy(config))  # the user's model keeps its own config untouched
        self.onnx_path, self.provider = path, provider
        self.step_ms: list[float] = []  # each forward's time in ONNX Runtime (the encoder's added to the first)

    @property
    def device(self) -> torch.device:  # logits come back to the host; the cache stays where the provider keeps it
        return torch.device("cpu")

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # the cache is the files' own (OnnxCache), made by the first forward

    def _init_weights(self, module: Any) -> None:  # nothing to initialize: the weights are in the files
        return None

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        """transformers' ``generate()``; on the CPU provider its own torch work between the runs (logits
        processors, beam search) takes one thread: torch's threads spinning after those small ops held the
        cores ONNX Runtime's next run wanted (4-beam Marian-base: 562 -> 535 ms per batch on 2 cores)."""
        if self.provider != "CPUExecutionProvider":
            return super().generate(*args, **kwargs)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return super().generate(*args, **kwargs)
        finally:
            torch.set_num_threads(threads)

    def generation_inputs(self, inputs: Any, tokenizer: Any, pad: int, rules: Any
                          ) -> tuple[dict[str, torch.Tensor], list[list[int]], int]:
        """``onnx_nb.generate``'s inputs as this model's ``generate()`` takes them, the prompts (token lists, for
        the result), and how many leading tokens of each returned row are not new."""
        from .runners import left_pad, prompt_ids

        prompts = prompt_ids(inputs, tokenizer)
        ids, mask = left_pad(prompts, pad)
        return {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}, prompts, ids.shape[1]

    def row_groups(self, prompts: list[list[int]], pad: int) -> tuple[list[list[int]], str]:
        """Which prompts run together (:func:`onnx_nb.steps.generate.batches.groups_for`): all of them here."""
        from .batches import PADDED

        return [list(range(len(prompts)))], PADDED

    def length_settings(self, before: int, max_new_tokens: int) -> dict[str, int]:
        """The length in all (a config's ``max_length`` beside ``max_new_tokens`` would be a warning)."""
        return {"max_length": before + max_new_tokens}

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.config.model_type}, {self.onnx_path.name}, {self.provider}): "
                "transformers' generate() and pipeline() on ONNX Runtime")


# tensors generate() passes that the files take in another form: positions (from the mask, as transformers counts
# them), the cache's positions, a decoder mask (causal already)
_DERIVED = {"position_ids", "cache_position", "decoder_attention_mask", "decoder_position_ids"}


def _refuse_unread(kwargs: dict[str, Any]) -> None:
    """An input tensor the files do not take is an error, never silently dropped (GPT-2 adds token type
    embeddings for ``token_type_ids`` a BERT tokenizer hands it: the file has no such input)."""
    unread = sorted(k for k, v in kwargs.items() if isinstance(v, torch.Tensor) and k not in _DERIVED)
    if unread:
        raise InvalidArgumentError(
            f"The ONNX file takes no {', '.join(unread)}; drop {'them' if len(unread) > 1 else 'it'} (a tokenizer "
            "that makes them: tokenizer.model_input_names = ['input_ids', 'attention_mask']), or export the model "
            "with that input.")


def _logits(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))


class OnnxForCausalLM(_OnnxModel, GenerationMixin):
    """A decoder file exported with its cache, as a transformers causal LM."""

    def __init__(self, config: Any, path: Path, provider: str, decoder: Any) -> None:
        super().__init__(config, path, provider)
        self.steps = _DecoderSteps(decoder)

    def row_groups(self, prompts: list[list[int]], pad: int) -> tuple[list[list[int]], str]:
        """One left-padded batch where the file tolerates left padding, else one batch per prompt length."""
        from .batches import groups_for

        return groups_for(self.steps.decoder, prompts, pad)

    def prepare_inputs_for_generation(self, input_ids: torch.Tensor, cache: OnnxCache | None = None,
                                      attention_mask: torch.Tensor | None = None, **kwargs: Any) -> dict[str, Any]:
        seen = cache.get_seq_length() if cache is not None else 0
        return {"input_ids": input_ids[:, seen:], "attention_mask": attention_mask, "cache": cache,
                "max_length": kwargs.get("max_length"),
                **{k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)}}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                cache: OnnxCache | None = None, max_length: int | None = None, **kwargs: Any) -> OnnxLMOutput:
        _refuse_unread(kwargs)
        ids = input_ids.cpu().numpy().astype(np.int64)
        seen = cache.length if cache is not None else 0
        total = seen + ids.shape[1]
        mask = (attention_mask.cpu().numpy() if attention_mask is not None
                else np.ones((ids.shape[0], total), np.int64))
        state = cache.state if cache is not None else self.steps.empty(ids.shape[0], max_length)
        start = time.perf_counter()
        logits, state = self.steps.step(ids, mask[:, :total], state)
        self.step_ms.append((time.perf_counter() - start) * 1e3)
        return OnnxLMOutput(logits=_logits(logits), cache=OnnxCache(self.steps, state, total))


class _OnnxEncoder(torch.nn.Module):
    """The encoder file as the module ``get_encoder()`` returns: its states and the cross-attention cache."""

    def __init__(self, runner: Any) -> None:
        super().__init__()
        self.runner = runner
        self.ms = 0.0
        self.main_input_name = runner.encoder_names[0]

    def forward(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                input_features: torch.Tensor | None = None, input_values: torch.Tensor | None = None,
                pixel_values: torch.Tensor | None = None, **kwargs: Any) -> OnnxEncoderOutput:
        feed: dict[str, np.ndarray] = {}
        for name, features in (("input_features", input_features), ("input_values", input_values),
                               ("pixel_values", pixel_values)):
            if features is not None:
                feed[name] = features.cpu().numpy().astype(np.float32)
        if input_ids is not None:
            feed["input_ids"] = input_ids.cpu().numpy().astype(np.int64)
            feed["attention_mask"] = (attention_mask.cpu().numpy().astype(np.int64) if attention_mask is not None
                                      else np.ones_like(feed["input_ids"]))
        missing = [n for n in self.runner.encoder_names if n not in feed]
        if missing:
            raise InvalidArgumentError(f"The encoder file takes {', '.join(self.runner.encoder_names)}; "
                                       f"{', '.join(missing)} missing.")
        start = time.perf_counter()
        encoded = self.runner.encode(feed)
        self.ms = (time.perf_counter() - start) * 1e3
        layers = len(self.runner.self_names) // 2
        cross = np.stack([encoded[f"present.{i}.encoder.{kv}"] for i in range(layers) for kv in ("key", "value")], 1)
        return OnnxEncoderOutput(last_hidden_state=torch.from_numpy(encoded["encoder_hidden_states"]),
                                 cross_attention=torch.from_numpy(cross))

class OnnxForSeq2SeqLM(_OnnxModel, GenerationMixin):
    """An encoder-decoder's two files (the encoder's computes the cross-attention cache once) as a transformers
    sequence-to-sequence LM."""

    def __init__(self, config: Any, path: Path, provider: str, runner: Any) -> None:
        super().__init__(config, path, provider)
        self.runner = runner
        self.steps = _Seq2SeqSteps(runner)
        self.encoder = _OnnxEncoder(runner)
        self.main_input_name = runner.encoder_names[0]

    def get_encoder(self, modality: str | None = None) -> _OnnxEncoder:
        return self.encoder

    def generation_inputs(self, inputs: Any, tokenizer: Any, pad: int, rules: Any
                          ) -> tuple[dict[str, torch.Tensor], list[list[int]], int]:
        """The encoder's inputs; ``generate()`` returns the decoder's start (and forced) tokens before the new."""
        from ..export.caches.seq2seq import encoder_feed

        feed = encoder_feed(inputs, tokenizer, tuple(self.runner.encoder_names), pad)
        return {k: torch.from_numpy(v) for k, v in feed.items()}, [], len(rules.prefix) + 1

    def prepare_inputs_for_generation(self, decoder_input_ids: torch.Tensor, cache: OnnxCache | None = None,
                                      attention_mask: torch.Tensor | None = None,
                                      encoder_outputs: OnnxEncoderOutput | None = None,
                                      **kwargs: Any) -> dict[str, Any]:
        seen = cache.get_seq_length() if cache is not None else 0
        return {"decoder_input_ids": decoder_input_ids[:, seen:], "attention_mask": attention_mask,
                "encoder_outputs": encoder_outputs, "cache": cache,
                **{k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)}}

    def forward(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                decoder_input_ids: torch.Tensor | None = None, encoder_outputs: Any = None,
                cache: OnnxCache | None = None, input_features: torch.Tensor | None = None,
                pixel_values: torch.Tensor | None = None, **kwargs: Any) -> OnnxLMOutput:
        _refuse_unread(kwargs)
        if decoder_input_ids is None:
            raise InvalidArgumentError("decoder_input_ids are needed: the decoder file runs one step at a time "
                                       "(generate() passes them).")
        if cache is None:
            if encoder_outputs is None:
                encoder_outputs = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                                               input_features=input_features, pixel_values=pixel_values)
            state = self._first_state(encoder_outputs, attention_mask)
            seen = 0
        else:
            state, seen = cache.state, cache.length
        ids = decoder_input_ids.cpu().numpy().astype(np.int64)
        start = time.perf_counter()
        logits, state = self.runner.step(ids, state)
        self.step_ms.append((time.perf_counter() - start) * 1e3 + (self.encoder.ms if cache is None else 0.0))
        return OnnxLMOutput(logits=_logits(logits), cache=OnnxCache(self.steps, state, seen + ids.shape[1]))

    def _first_state(self, encoder_outputs: Any, attention_mask: torch.Tensor | None) -> dict[str, np.ndarray]:
        cross = getattr(encoder_outputs, "cross_attention", None)
        if cross is None:
            raise InvalidArgumentError("encoder_outputs must come from this model's encoder (get_encoder()): the "
                                       "decoder file reads the cross-attention cache the encoder file computes.")
        hidden = encoder_outputs["last_hidden_state"].cpu().numpy()
        stacked = cross.cpu().numpy()
        encoded = {"encoder_hidden_states": hidden}
        for i in range(stacked.shape[1] // 2):  # contiguous once here, or ONNX Runtime copies them at every step
            encoded[f"present.{i}.encoder.key"] = np.ascontiguousarray(stacked[:, 2 * i])
            encoded[f"present.{i}.encoder.value"] = np.ascontiguousarray(stacked[:, 2 * i + 1])
        mask = attention_mask.cpu().numpy() if attention_mask is not None and "input_ids" in \
            self.runner.encoder_names else None
        return self.runner.start(encoded, mask)

class _Strides(torch.nn.Module):
    def __init__(self, stride: int) -> None:
        super().__init__()
        self.stride = (stride,)

class _WhisperShape(torch.nn.Module):
    """What Whisper's generate() reads of ``self.model``: its two convolutions' strides (1 and 2)."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.config = config
        self.encoder = torch.nn.Module()
        self.encoder.conv1, self.encoder.conv2 = _Strides(1), _Strides(2)

def speech_class() -> type:
    from transformers.models.whisper.generation_whisper import WhisperGenerationMixin

    class OnnxForSpeechSeq2Seq(WhisperGenerationMixin, OnnxForSeq2SeqLM):
        """Whisper's two files with Whisper's own generate(): language and task tokens, timestamps, long-form
        audio in 30-second windows, temperature fallback."""

        def __init__(self, config: Any, path: Path, provider: str, runner: Any) -> None:
            super().__init__(config, path, provider, runner)
            self.model = _WhisperShape(config)

        def generation_inputs(self, inputs: Any, tokenizer: Any, pad: int, rules: Any
                              ) -> tuple[dict[str, torch.Tensor], list[list[int]], int]:
            """As an encoder-decoder's; Whisper's ``generate()`` returns the tokens after its prompt."""
            return super().generation_inputs(inputs, tokenizer, pad, rules)[0], [], 0

        def length_settings(self, before: int, max_new_tokens: int) -> dict[str, int]:
            return {"max_new_tokens": max_new_tokens}  # Whisper counts its own prompt

    return OnnxForSpeechSeq2Seq

