"""The ONNX files as a transformers model: :func:`to_transformers` (its ``generate()``, its pipelines) and
``onnx_nb.generate``'s beam search through it (:func:`generate_with_transformers`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ...errors import InvalidArgumentError
from .hf_model import OnnxForCausalLM, configs_of


def _named_like(cls: type, model: Any, config: Any) -> type:
    """``cls`` under the name of the model's own class (``MarianMTModel``, ...): transformers' pipelines look the
    class name up in their task's list and log an error for any other name."""
    from ...results.export import source_of

    torch_model = getattr(source_of(model), "model", None)
    names = [type(torch_model).__name__] if torch_model is not None else getattr(config, "architectures", None) or []
    if not names:
        return cls
    return type(names[0], (cls,), {"__module__": cls.__module__, "__doc__": cls.__doc__,
                                   "__qualname__": f"{cls.__name__}({names[0]})"})


def causal_lm(model: Any, config: Any, path: Path, provider: str, threads: int | None, io_binding: bool | None) -> Any:
    """A decoder's file with its cache as a transformers causal LM: the decoder shape's answer to
    :func:`to_transformers`."""
    from .runners import decoder_for

    return OnnxForCausalLM(config, path, provider, decoder_for(path, provider, io_binding=io_binding, threads=threads))


def to_transformers(model: Any, *, provider: str = "cpu", io_binding: bool | None = None, threads: int | None = None,
                    config: Any = None) -> Any:
    """The exported files of a generative model as a transformers model whose forward runs ONNX Runtime, so
    transformers' own ``generate()`` (any generation config: beam search, every logits processor, stopping
    criteria, streamers) and ``pipeline()`` run on them.

    ``model``: an :class:`~onnx_nb.ExportResult` of a decoder exported with its cache (``*ForCausalLM``), of an
    encoder-decoder (``*ForConditionalGeneration``, ``MarianMTModel``) or of Whisper; a vision-language model's
    export (:class:`~onnx_nb.VlmExport`: ``generate(**processor(text=..., images=..., return_tensors="pt"))``);
    a variant of one
    (``optimize()``'s, ``quantize()``'s); an ``.onnx`` path with ``config=`` (the model's folder, hub id or
    config object); or a generation folder another tool wrote (transformers' exporter's, onnxruntime-genai's
    builder's, Optimum's, transformers.js's: its config and generation config come from the folder).
    ``provider``: ONNX Runtime's (``"cpu"``, ``"cuda"``, ...); on a GPU provider the decoder's cache stays on the
    device between steps (I/O binding; ``io_binding=False`` turns it off). ``threads``: ONNX
    Runtime's intra-op threads. The model's generation config comes along (``model.generation_config``).

    Example::

        r = onnx_nb.export("Helsinki-NLP/opus-mt-en-de")
        m = onnx_nb.to_transformers(r)
        from transformers import pipeline
        pipeline("translation", model=m, tokenizer=r.source.preprocessor, num_beams=4)("Hello world")
    """
    from ...runtime import generation_folders as folders
    from ...runtime.providers import providers_named
    from ..export.adapters.registry import shape_of

    named = providers_named([provider])[0].name
    tool, file = folders.folder_tool(model), folders.decoder_file(model)
    if tool == folders.EXPORTER:  # its two graphs as the decoder's steps
        runs = folders.ExporterDecoder(folders.open_folder(model, named, threads))
        hf_config, generation = configs_of(None, config if config is not None else model)
        wrapped = OnnxForCausalLM(hf_config, runs.folder.files["decode"], named, runs)
        return _ready(wrapped, None, hf_config, generation)
    if file is not None:  # a tool's folder of one decoder file: it, with the folder's config
        if config is None and not (Path(model) / "config.json").is_file():
            raise InvalidArgumentError(f"{model} (written by {tool}) holds no config.json: pass "
                                       "config=<the model's folder, hub id or config object>.")
        model, config = file, config if config is not None else model
    path = Path(getattr(model, "path", model))
    if not path.exists():
        raise InvalidArgumentError(f"{path} does not exist: pass an export (onnx_nb.export(...)) or its .onnx path.")
    hf_config, generation = configs_of(model, config)
    return _ready(shape_of(model).answer("wrapper")(model, hf_config, path, named, threads, io_binding), model,
                  hf_config, generation)


def _ready(wrapped: Any, model: Any, config: Any, generation: Any) -> Any:
    """The wrapped files under the model's own class name, with its generation config, in eval mode."""
    wrapped.__class__ = _named_like(type(wrapped), model, config)
    wrapped.generation_config = generation
    wrapped.eval()
    return wrapped


def generate_with_transformers(model: Any, inputs: Any, rules: Any, overrides: dict[str, Any], *,
                               max_new_tokens: int, tokenizer: Any, eos: set[int], pad: int, provider: str,
                               io_binding: bool | None, threads: int | None, stream: Any, seed: int,
                               sampling: dict[str, Any], runtime: str) -> Any:
    """:func:`onnx_nb.generate` with beam search: transformers' own ``generate()`` over the files (the model
    :func:`to_transformers` makes, kept for the next call like the loops' runners), with the rules and beams of
    the generation config (the wrapped model's) and the call's ``overrides``; the result as the loops give it
    (new tokens per returned sequence, cut after EOS; the first forward's time, then each later one's)."""
    from ...results.generation import GenerationResult
    from .runners import LAST_RUNNER, kept_runner, runner_key

    what = "Beam search" if rules.num_beams > 1 or not rules.elsewhere else \
        f"{', '.join(f'{k}={v!r}' for k, v in rules.elsewhere.items())} (the generation config's or this call's)"
    if runtime != "onnx-nb":
        raise InvalidArgumentError(f"{what} runs on runtime='onnx-nb' (transformers' generate() over ONNX Runtime "
                                   "sessions); onnxruntime-genai's runtime is not used for it.")
    if stream is not None:
        raise InvalidArgumentError(f"stream= shows tokens as onnx-nb's own loop picks them; {what} runs in "
                                   "transformers' generate(), which settles them at the end. Pass num_beams=1 (or "
                                   "the setting's neutral value) to stream.")
    path = Path(getattr(model, "path", model))
    how = (provider, io_binding, threads, "transformers")
    wrapped = kept_runner(path, *how)
    if wrapped is None:
        LAST_RUNNER.clear()  # one model kept at a time
        wrapped = to_transformers(model, provider=provider, io_binding=io_binding, threads=threads)
        LAST_RUNNER.update(key=runner_key(path, *how), runner=wrapped)
    tensors, prompts, prompt = wrapped.generation_inputs(inputs, tokenizer, pad, rules)
    groups, batching = wrapped.row_groups(prompts, pad)
    if len(groups) > 1:  # a file that changes under left padding: one generate() per prompt length
        parts = [generate_with_transformers(
            model, [prompts[r] for r in rows], rules, overrides, max_new_tokens=max_new_tokens, tokenizer=tokenizer,
            eos=eos, pad=pad, provider=provider, io_binding=io_binding, threads=threads, stream=stream, seed=seed,
            sampling=sampling, runtime=runtime) for rows in groups]
        return merged(prompts, groups, parts, batching)
    if sampling["do_sample"]:
        torch.manual_seed(seed)
    else:
        sampling = {"do_sample": False}
    length = wrapped.length_settings(prompt, max_new_tokens)
    wrapped.step_ms = []
    with torch.no_grad():
        out = wrapped.generate(**tensors, **length, eos_token_id=sorted(eos) or None, pad_token_id=pad,
                               **overrides, **sampling)
    tokens = []
    for row in out.tolist():
        new = row[prompt:]
        ends = [i for i, t in enumerate(new) if t in eos]
        tokens.append(new[:ends[0] + 1] if ends else new)
    text = [tokenizer.decode(t, skip_special_tokens=True) for t in tokens] if tokenizer is not None else None
    times = wrapped.step_ms or [0.0]
    return GenerationResult(prompts, tokens, text, times[0], times[1:])


def merged(prompts: list[list[int]], groups: list[list[int]], parts: list[Any], batching: str) -> Any:
    """The results of the batches of ``groups`` as one, each prompt's sequences (``num_return_sequences`` per
    prompt) at its place; the batches' first forwards summed, their later ones in turn."""
    from ...results.generation import GenerationResult

    per = len(parts[0].tokens) // len(groups[0])
    tokens: list[list[int]] = [[] for _ in range(len(prompts) * per)]
    text: list[str] | None = [""] * len(tokens) if parts[0].text is not None else None
    for rows, part in zip(groups, parts):
        for k, row in enumerate(rows):
            tokens[row * per:(row + 1) * per] = part.tokens[k * per:(k + 1) * per]
            if text is not None:
                text[row * per:(row + 1) * per] = part.text[k * per:(k + 1) * per]
    return GenerationResult(prompts, tokens, text, sum(p.prefill_ms for p in parts),
                            [ms for p in parts for ms in p.decode_ms], batching=batching)

