"""Generation in ONNX Runtime: :func:`generate` over a decoder exported with its cache (or an encoder-decoder:
:mod:`onnx_nb.kinds.seq2seq.runner`), and the opset-23 re-export with standard attention ops that ``optimize()`` uses.
The cache layout and the export wrapper: :mod:`onnx_nb.steps.export.caches.decoder`.

One graph serves prefill and decode (as Optimum's merged decoder and onnxruntime-genai do): it takes
``input_ids``, ``attention_mask`` (over past + new tokens), ``position_ids`` and, per layer,
``past_key_values.{i}.key`` / ``.value`` of shape ``[batch, kv_heads, past_sequence, head_size]``
(``past_sequence`` is 0 at the first step), and returns ``logits`` and ``present.{i}.key`` / ``.value``.
Running a file needs no torch: a process that only generates never imports it (the re-export imports it inside).
A model that generates in another shape brings its loop or its step runner (``adapters.registry.SHAPES``): an
encoder-decoder's loop, a vision-language model's chain of files (:mod:`onnx_nb.kinds.vlm`, whose runner imports
torch).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError
from ...results.generation import GenerationResult
from ...runtime.facts import DECODER_START
from .batches import decoder_loop, groups_for
from .rules import generation_config_of, rules_for
from .runners import OnnxDecoder, SharedBufferDecoder, decoder_for, last_runner, left_pad, prompt_ids
from .sampling import pick

__all__ = ["GenerationResult", "OnnxDecoder", "SharedBufferDecoder", "decoder_for",
           "generate", "left_pad"]


def _setting(name: str, generation: Any, config: Any) -> Any:
    """A token id from the generation config (a dict), else from the model config (transformers' order; a
    multimodal config's text part, where transformers 5 keeps the token ids)."""
    value = generation.get(name) if isinstance(generation, dict) else None
    if value is not None:
        return value
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return getattr(text if hasattr(text, name) else config, name, None)


def generate(model: Any, inputs: Any, *, max_new_tokens: int = 20, do_sample: bool = False,
             temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, eos_token_id: int | None = None,
             pad_token_id: int | None = None, seed: int = 0, provider: str = "cpu", tokenizer: Any = None,
             stream: Any = None, io_binding: bool | None = None, threads: int | None = None,
             runtime: str = "onnx-nb", images: Any = None, **settings: Any) -> GenerationResult:
    """Generate tokens with an exported decoder (an ExportResult, a variant or an .onnx path) in ONNX
    Runtime, keeping the key/value cache between steps.

    ``inputs``: text (with a tokenizer: given, or the export's), token id lists of any lengths (batched
    with left padding where the file gives each row its own tokens under it, else one batch per prompt length run
    in lockstep, as ``result.batching`` says: :mod:`onnx_nb.steps.generate.batches`; for an encoder-decoder, the
    encoder's inputs right-padded), a tokenizer's output, an array, audio features (``input_features``) for
    Whisper, or for an image-to-text encoder-decoder (TrOCR, Donut, ViT-GPT2) its images (PIL images, files or
    ``[height, width, 3]`` uint8 arrays, as ``inputs`` or ``images=``: the export's processor makes their pixel
    values) or ``{"pixel_values": ...}``. Greedy unless ``do_sample`` (temperature, top-k, top-p). Stops at
    ``eos_token_id`` (the config's by default) or after ``max_new_tokens``. ``stream``: called with each step's new
    tokens (a notebook display updates as they come). ``io_binding`` (default: on
    for GPU providers) keeps a decoder's cache on the provider's device between steps. ``threads``: ONNX Runtime's
    intra-op threads (default: its own choice, the machine's cores). A second call on the same unchanged file
    reuses the first one's session (one is kept). ``runtime="onnxruntime-genai"`` drives a GroupQueryAttention
    file (``optimize()``'s for Llama-like models) with onnxruntime-genai's C++ loop instead of onnx-nb's Python
    one (:mod:`onnx_nb.steps.generate.genai`; CPU; prompts run one after another, ``stream`` gets one token a call).

    The model's generation config is honoured as transformers' ``generate()`` honours it: ``forced_bos_token_id``
    (mBART, M2M100), ``forced_eos_token_id`` (BART, Pegasus), ``min_length``, ``min_new_tokens``,
    ``repetition_penalty``, ``no_repeat_ngram_size``, ``bad_words_ids``, ``suppress_tokens``,
    ``begin_suppress_tokens`` and ``forced_decoder_ids`` (Whisper), and beam search (``num_beams``,
    ``length_penalty``, ``early_stopping``, ``num_return_sequences``: Marian, BART, T5 and Pegasus default to 4-8
    beams), run by transformers' own beam search over the files (:func:`onnx_nb.to_transformers`); pass any of them
    here to override the config (``num_beams=1`` for greedy). Sampling follows this call's arguments (greedy unless
    ``do_sample``). A setting the loop does not run (``encoder_no_repeat_ngram_size``, Blenderbot's; contrastive
    search, constraints, ``typical_p``, ...), from the config or this call, sends the call through transformers'
    own ``generate()`` over the files (:func:`onnx_nb.to_transformers`), which runs every setting.

    A folder transformers' exporter wrote (``export.json``: its prefill and decode graphs) generates greedily, one
    prompt at a time, by its own protocol (:mod:`onnx_nb.runtime.generation_folders`); onnxruntime-genai's
    builder's folder runs as its ``model.onnx`` does.

    A vision-language model's export (``onnx_nb.export`` of an image-text-to-text model) takes its images as
    ``images=`` (the processor's output, pixel values, or pictures when the processor was saved with the model)
    or inside ``inputs`` (``processor(text=..., images=..., return_tensors="np")``); the prompts hold the image
    tokens the processor put there.

    Example::

        r = onnx_nb.export("facebook/bart-base")
        onnx_nb.generate(r, "A long article ...", max_new_tokens=40, num_beams=4).text
    """
    from ...runtime import generation_folders as folders
    from ...runtime.pictures import Pictures, listed
    from ...runtime.providers import providers_named
    from ..export.adapters.registry import shape_of
    from .genai import check_runtime

    if max_new_tokens < 1:
        raise InvalidArgumentError("max_new_tokens must be at least 1.")
    named = providers_named([provider])[0].name
    tool = folders.folder_tool(model)
    folder = model if tool else None
    runs: Any = None
    if tool == folders.EXPORTER:  # its two graphs as a step runner: the loop below runs them
        if images is not None or runtime != "onnx-nb" or io_binding:
            raise InvalidArgumentError(f"{model} is transformers' exporter's folder: generate() runs its text graphs "
                                       "in onnx-nb's loop (no images, io_binding or other runtime).")
        runs = folders.ExporterDecoder(folders.open_folder(model, named, threads))
    model = folders.decoder_file(model) or model  # a tool's folder of one decoder file (genai's, Optimum's): it
    source = getattr(model, "source", None)
    config = getattr(getattr(source, "model", None), "config", None)
    # the folder's own generation config and tokenizer where the file came in a tool's folder
    generation = generation_config_of(model) if folder is None else folders.folder_generation_config(folder)
    tokenizer = tokenizer if tokenizer is not None else getattr(source, "preprocessor", None) or \
        (folders.folder_tokenizer(folder) if folder is not None else None)
    eos = eos_token_id if eos_token_id is not None else _setting("eos_token_id", generation, config)
    eos_set = set(eos) if isinstance(eos, (list, tuple)) else ({eos} if eos is not None else set())
    pad = pad_token_id if pad_token_id is not None else (_setting("pad_token_id", generation, config) or 0)
    rng = np.random.default_rng(seed)
    path = Path(getattr(model, "path", model))
    shape = shape_of(model) if runs is None else None  # (the exporter's folder: its graphs, run below)
    if images is not None and shape is not None and shape.answer("loop") is not None:  # an encoder-decoder reads
        if inputs is not None:  # its images as its inputs
            raise InvalidArgumentError("Give the images once: as inputs or as images=, not both.")
        inputs, images = images if hasattr(images, "keys") else Pictures(listed(images)), None
    rules = rules_for(generation, eos_set, settings)
    if rules.through_transformers:
        from .transformers_api import generate_with_transformers

        return generate_with_transformers(
            model, inputs, rules, settings, max_new_tokens=max_new_tokens, tokenizer=tokenizer, eos=eos_set, pad=pad,
            provider=named, io_binding=io_binding, threads=threads, stream=stream, seed=seed,
            sampling={"do_sample": do_sample, "temperature": temperature, "top_k": top_k or None, "top_p": top_p},
            runtime=check_runtime(runtime))
    if check_runtime(runtime) != "onnx-nb":
        if images is not None or isinstance(inputs, Pictures):
            raise InvalidArgumentError("runtime='onnxruntime-genai' runs a decoder's text prompts; images run on "
                                       "runtime='onnx-nb'.")
        if rules.active:
            raise InvalidArgumentError(
                "runtime='onnxruntime-genai' runs its own search, without the generation config's rules (forced "
                "tokens, minimum lengths, penalties, suppressed tokens): use runtime='onnx-nb' for them.")
        prompts = prompt_ids(inputs, tokenizer)
        runner = last_runner(path, named, io_binding, threads, runtime)
        made, first, steps = runner.generate(prompts, max_new_tokens=max_new_tokens, do_sample=do_sample,
                                             temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                                             eos=eos_set, stream=stream)
        text = [tokenizer.decode(t, skip_special_tokens=True) for t in made] if tokenizer is not None else None
        return GenerationResult(prompts, made, text, first, steps)
    if runs is not None:
        prompts = prompt_ids(inputs, getattr(tokenizer, "tokenizer", tokenizer))
        groups, batching = groups_for(runs, prompts, pad)
        return decoder_loop(runs, prompts, max_new_tokens, rules, eos_set, pad, tokenizer, stream,
                            lambda logits: pick(logits, do_sample, temperature, top_k, top_p, rng), groups, batching)
    shape = shape or shape_of(model)  # (None only for the exporter's folder, which returned above)
    make_runner = shape.answer("runner")  # a step runner of its own (a chain of files), else the file's decoder
    loop = shape.answer("loop")
    if make_runner is None and images is not None:
        raise InvalidArgumentError("images= is for a vision-language model's export (onnx_nb.export of an "
                                   "image-text-to-text or image-to-text model); this model takes text only.")
    own, inputs = make_runner(model, inputs, images, named, threads) if make_runner else (None, inputs)
    if loop is not None:  # a shape with a loop of its own; a decoder or a chain of files runs the one below
        return loop(model, inputs, max_new_tokens=max_new_tokens, eos=eos_set, pad=pad, provider=named,
                    tokenizer=tokenizer, stream=stream, threads=threads, rules=rules,
                    start=next((v for v in (_setting(n, generation, config) for n in DECODER_START)
                                if v is not None), pad),
                    pick=lambda logits: pick(logits, do_sample, temperature, top_k, top_p, rng))
    decoder = own or last_runner(path, named, io_binding, threads, runtime)
    prompts = prompt_ids(inputs, getattr(tokenizer, "tokenizer", tokenizer))
    groups, batching = groups_for(decoder, prompts, pad)
    return decoder_loop(decoder, prompts, max_new_tokens, rules, eos_set, pad, tokenizer, stream,
                        lambda logits: pick(logits, do_sample, temperature, top_k, top_p, rng), groups, batching)
