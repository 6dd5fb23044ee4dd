"""Latency of generation: prefill (time to first token) and decode steps (tokens/s) of files exported with their
cache, in ONNX Runtime and in PyTorch eager with its cache and without one (decoders and encoder-decoders).
Called by :func:`benchmarking.benchmark` for such files; only imported by functions that already need torch.
"""

from __future__ import annotations

import inspect
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...errors import InvalidArgumentError
from ...runtime.facts import cache_dims, file_facts, is_cache, is_cross_cache, is_state, present_of
from ...runtime.generation_folders import ExporterFolder, folder_tool
from ...runtime.onnxfile import file_bytes
from ...runtime.providers import threads_for, threads_shown
from ..export.caches.decoder import layout_of
from ..export.caches.hf_names import cache_kwargs
from ..export.caches.states import attends, build_cache, entry_shape

DEFAULT_GENERATION_SHAPES = ({"prompt": 32}, {"past": 32})


ENCODER_SEQUENCE = 16  # encoder length of the timed decode steps of an encoder-decoder (when not fixed)


class OrtStep:
    """One prefill (``past == 0``, ``length`` new tokens) or one decode step (1 token after ``past``) in ORT,
    its inputs built from the file's own signature (a decoder, or an encoder-decoder's decoder file)."""

    def __init__(self, path: Any, provider: str, length: int, past: int, threads: int | None, vocab: int) -> None:
        from ...runtime.sessions import session

        self.session = session(path, provider, threads=threads, level="all", map_weights=False)
        self.floor_bytes = file_bytes(path)  # the weights the session holds: its row's memory is never less
        rng = np.random.default_rng(0)

        def size(dim: Any, default: int) -> int:
            return dim if isinstance(dim, int) else default

        self.shared = file_facts(path).gqa  # past and present bound to one buffer, as generate() does
        self.feed: dict[str, np.ndarray] = {}
        # a file of one token per step (a cache of states): a prefill is ``length`` steps, each fed the last's cache
        self.steps = length if self.session.get_inputs()[0].shape[1:2] == [1] else 1
        length = 1 if self.steps > 1 else length
        for info in self.session.get_inputs():
            name, shape = info.name, info.shape
            value: np.ndarray
            if name in ("input_ids", "decoder_input_ids"):
                value = rng.integers(min(3, vocab - 1), vocab, (1, length))
            elif name == "attention_mask":
                value = np.ones((1, past + length))
            elif name == "encoder_attention_mask":
                value = np.ones((1, size(shape[1], ENCODER_SEQUENCE)))
            elif name == "position_ids":
                value = np.arange(past, past + length)[None]
            elif name == "use_cache_branch":  # an older Optimum's merged decoder: a step's graph after a prompt
                self.feed[name] = np.array([past > 0])
                continue
            elif is_cross_cache(name):
                value = rng.standard_normal((1, shape[1], size(shape[2], ENCODER_SEQUENCE), shape[3]))
            elif is_state(name):  # fixed shape, whatever came before; zeros at a prompt's first token
                value = rng.standard_normal((1, *shape[1:])) * 0.5 if past else np.zeros((1, *shape[1:]))
            elif is_cache(name) and len(shape) == 3:  # a sparse-attention layer's indexer keys
                value = rng.standard_normal((1, past, shape[2]))
            elif is_cache(name):  # a shared buffer holds the new token too (heads and head size: a builder's
                heads, head = cache_dims(path, shape)  # folder names them, its genai_config.json gives them)
                value = rng.standard_normal((1, heads, past + (length if self.shared else 0), head))
            else:  # encoder_hidden_states
                value = rng.standard_normal((1, size(shape[1], ENCODER_SEQUENCE), shape[2]))
            floating = "float" in info.type
            self.feed[name] = value.astype(np.float32 if floating else np.int64)
        self.options = {"graph_level": "all", "intra_op_threads": threads_shown(threads), "step": "prefill" if
                        not past else "decode, cache kept"}
        # a decode step reads every weight and its cache once: the bytes it moves
        self.moved_bytes = self.floor_bytes + sum(v.nbytes for n, v in self.feed.items() if is_cache(n)) \
            if past else None
        self.output_names = [o.name for o in self.session.get_outputs()]
        if self.steps > 1:
            self.options["step"] = f"prefill: {self.steps} one-token steps, each fed the last one's cache"
        self.binding = None
        if self.shared:  # each run writes its tokens at the same positions of the buffer: repeatable
            import onnxruntime as ort

            self.binding = self.session.io_binding()
            self.binding.bind_output("logits", "cpu")
            for name, value in self.feed.items():
                if not is_cache(name):
                    self.binding.bind_cpu_input(name, value)
                    continue
                buffer = ort.OrtValue.ortvalue_from_numpy(value)  # the feed's own memory, in and out
                self.binding.bind_ortvalue_input(name, buffer)
                self.binding.bind_ortvalue_output(present_of(name), buffer)
            self.options["key/value cache"] = "one buffer shared by past and present"

    def __call__(self) -> None:
        if self.binding is not None:
            self.session.run_with_iobinding(self.binding)
        elif self.steps > 1:
            feed = dict(self.feed)
            for k in range(self.steps):
                out = dict(zip(self.output_names, self.session.run(None, feed)))
                feed.update({n: out[present_of(n)] for n in feed if is_cache(n)},
                            attention_mask=np.ones((1, k + 2), np.int64))
        else:
            self.session.run(None, self.feed)


class TorchStep:
    """PyTorch eager: a prefill with the cache on, a decode step on a cache of ``past`` tokens, or (``cache=False``)
    the whole ``past + 1`` tokens again, which is what each new token costs without a cache."""

    def __init__(self, model: Any, length: int, past: int, cache: bool, threads: int | None,
                 layout: Any = None) -> None:
        from transformers import DynamicCache

        from ...runtime.memory import weight_bytes

        vocab = int(getattr(model.config, "vocab_size", 100) or 100)
        g = torch.Generator().manual_seed(0)
        self.model, self.cache_on, self.past = model, cache, past
        total = past + length if not cache else length
        self.ids = torch.randint(min(3, vocab - 1), vocab, (1, total), generator=g)
        self.cache = None
        layout = layout or (layout_of(model) if cache and past else None)
        self.states: list[Any] = []
        if cache and past and layout.states:  # random states (and keys of ``past`` tokens where a layer attends)
            self.states = [torch.randn(entry_shape(e, 1, past), generator=g) for e in layout.states]
            self.layout = layout
        elif cache and past:
            self.cache = DynamicCache(config=model.config)
            for i in range(layout.layers):
                heads, key, value = layout.dims(i)
                self.cache.update(torch.randn(1, heads, past, key, generator=g),
                                  torch.randn(1, heads, past, value, generator=g), i)
        self.mask = torch.ones(1, (past if cache else 0) + total, dtype=torch.long)
        if self.states and not attends(layout.states):
            self.mask = self.mask[:, -total:]  # no layer attends: the new tokens' own mask, as generate() gives it
        # the positions generate() passes (a model left to count them from the mask may count the cached ones too:
        # Qwen-VL after a prompt with an image)
        start = past if cache else 0
        self.positions = {"position_ids": torch.arange(start, start + total)[None]} if \
            "position_ids" in inspect.signature(model.forward).parameters else {}
        self.options = {"mode": "eager, inference_mode", "threads": threads_for(threads) or torch.get_num_threads(),
                        "cache": "on" if cache else "off (whole sequence each token)"}
        self.held_bytes = weight_bytes(model)  # loaded before the row: counted into its peak memory
        cached = [t for layer in getattr(self.cache, "layers", []) for t in (layer.keys, layer.values)
                  if t is not None] + self.states
        # a decode step with its cache reads every weight and the cache once: the bytes it moves
        self.moved_bytes = self.held_bytes + sum(t.numel() * t.element_size() for t in cached) \
            if cache and past else None

    def __call__(self) -> None:
        if self.states:  # the states as they were (a state cache cannot be cropped back), a copy made per step
            self.cache = build_cache(self.model, self.layout.states, self.states)
        with torch.inference_mode():
            self.model(input_ids=self.ids, attention_mask=self.mask, **self.positions,
                       **cache_kwargs(self.model, self.cache), use_cache=self.cache_on, return_dict=True)
        if self.cache is not None and not self.states:
            self.cache.crop(-self.ids.shape[1])  # the step appended its tokens: back to ``past`` for the next call


def benchmark_generation(entries: list[tuple[str, Any, Any]], model: Any, backends: list[tuple[str, Any, str]],
                         shapes: Any, warmup: int, runs: int | None, min_seconds: float, threads: int | None,
                         clock: Any, progress: bool, layout: Any = None) -> Any:
    """Latency of decoders exported with their cache: prefill (time to first token) at prompt lengths and one
    decode step at past lengths (tokens/s), against PyTorch eager with its cache and without one. ``layout``: the
    cache layout the export recorded (read from the model again only when the model came without its export)."""
    from ...progress import Steps
    from ...results.latency import LatencyRow, summarize
    from .measuring import described, lineage, measure, rounds

    specs = list(shapes) if shapes not in (None, "sample", "auto") else list(DEFAULT_GENERATION_SHAPES)
    for spec in specs:
        if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in ("prompt", "past"):
            raise InvalidArgumentError(f"For a decoder with its cache, shapes are {{'prompt': N}} (prefill of N "
                                       f"tokens) or {{'past': N}} (one token after N cached ones), not {spec!r}.")
    from ..export.adapters.registry import adapter_of, shape_of

    # files run together (an export written as several files, or a variant of one of its parts) lead the table
    chained = [obj for _, obj, _ in entries if not isinstance(obj, (str, Path)) and adapter_of(obj).step_files(obj)]
    timing = shape_of(chained[0] if chained else entries[0][2]).answer("timing") if not folder_tool(entries[0][2]) \
        else FolderTiming
    timings = {name: FolderTiming if folder_tool(path) else shape_of(obj).answer("timing")
               for name, obj, path in entries}
    vocab = int(getattr(getattr(model, "config", None), "vocab_size", 100) or 100) if model is not None else 100
    from .roofline import BANDWIDTH_ABOVE, add_bandwidth, bandwidth_gbs

    if any("past" in spec for spec in specs) and max(file_bytes(path) for _, _, path in entries) >= BANDWIDTH_ABOVE:
        bandwidth_gbs(threads)  # measured before any row's session is open: its 256 MB never beside them
    rows: list[Any] = []
    kept: list[tuple[Any, Any]] = []
    total = len(specs) * (len(entries) * len(backends) + (2 if model is not None else 0) + 1)
    with Steps(total, "benchmark", progress) as steps:
        for spec in specs:
            length, past = (spec["prompt"], 0) if "prompt" in spec else (1, spec["past"])
            tag = timing.tag(length, past)
            makers: list[tuple[str, str, Any]] = []
            if timing.prefill_refused and not past:
                rows.append(LatencyRow("*", "*", tag, status="unavailable", note=timing.prefill_refused))
                continue
            if model is not None:
                for label, cache in (("PyTorch eager", True), ("PyTorch eager, no cache", False)):
                    if not past and not cache:
                        continue  # a prefill is the same work with or without a cache
                    makers.append((label, "torch:cpu", timing.torch(model, length, past, cache, threads, layout)))
            for name, obj, path in entries:
                for backend, provider, reason in backends:
                    if reason or provider is None:
                        rows.append(LatencyRow(name, backend, tag, status="unavailable",
                                               note=reason or "the OpenVINO runtime row is not timed for generation"))
                        continue
                    makers.append((name, backend, timings[name].onnx(obj, path, provider, length, past, threads,
                                                                     vocab)))
            for name, backend, make in makers:
                steps.step(f"{name} on {backend}: {tag}")
                row, runner = measure(name, backend, tag, 1, make, warmup, runs, min_seconds, clock, threads)
                rows.append(row)
                if runner is not None:
                    kept.append((row, runner))
                    moved = getattr(runner, "moved_bytes", None)
                    row.moved_gb = moved / 1e9 if moved else None
            steps.step(f"interleaved rounds: {tag}")  # one shape's sessions and caches open at a time
            rounds(kept, clock, threads)
    notes = ["Generation: a 'prefill' row is the time to first token for that prompt; a 'decode' row is one new "
             "token after that many cached ones (throughput = tokens/s at batch 1). 'PyTorch eager, no cache' runs "
             "the whole sequence again for each token: what the cache saves. peak_mb: resident memory the row "
             "needed at its peak (weights, session, activations and, for decode rows, the cache of that many "
             "tokens).", *timing.notes]
    described(entries, rows)
    bandwidth = add_bandwidth(rows, threads)
    # a variant's rows name their parent's, and are marked when slower
    return summarize(rows, {}, notes + ([bandwidth] if bandwidth else []), lineage(entries, rows))


class DecoderTiming:
    """How a decoder's rows are timed: the tag of a row, PyTorch's maker, what the notes add, a prefill's refusal."""

    notes: tuple[str, ...] = ()
    prefill_refused: str | None = None  # why prefill rows are not timed for this shape

    @staticmethod
    def tag(length: int, past: int) -> str:
        return f"prefill {length} tokens" if not past else f"decode 1 token after {past}"

    @staticmethod
    def torch(model: Any, length: int, past: int, cache: bool, threads: int | None, layout: Any) -> Any:
        return partial(TorchStep, model, length, past, cache, threads, layout)

    @staticmethod
    def onnx(obj: Any, path: Any, provider: str, length: int, past: int, threads: int | None, vocab: int) -> Any:
        """The maker of ONNX Runtime's step for an entry (``obj``: an export, a variant or a path; ``path``: its
        file)."""
        return partial(OrtStep, path, provider, length, past, threads, vocab)


class FolderStep:
    """One prefill or decode step of transformers' exporter's folder (its ``prefill`` or ``decode`` graph, run by
    transformers' own runner as :class:`~onnx_nb.runtime.generation_folders.ExporterFolder` drives it): a decode step
    on the model's own cache after a real prefill of ``past`` random tokens, put back to ``past`` after each call."""

    def __init__(self, folder: Path, provider: str, length: int, past: int, threads: int | None, vocab: int) -> None:
        rng = np.random.default_rng(0)
        self.folder = ExporterFolder(folder, provider, threads)
        self.floor_bytes = sum(self.folder.weight_bytes.values())  # both graphs' weights are held
        self.past = past
        self.ids = rng.integers(min(3, vocab - 1), vocab, (1, 1 if past else length))
        self.cache = self.folder.prefill(rng.integers(min(3, vocab - 1), vocab, (1, past)))[1] if past else None
        self.options = {"intra_op_threads": threads_shown(threads), "runner": "transformers' OnnxModelRunner",
                        "step": f"{'decode.onnx, cache kept' if past else 'prefill.onnx'}"}

    def __call__(self) -> None:
        if not self.past:
            self.folder.prefill(self.ids)
            return
        _, after = self.folder.decode(self.ids, self.cache, self.past)
        if after is self.cache:  # grown in place: back to ``past`` tokens for the next call (a new one: kept as is)
            self.cache.crop(self.past)


class FolderTiming(DecoderTiming):
    """transformers' exporter's folder: its steps are :class:`FolderStep`."""

    @staticmethod
    def onnx(obj: Any, path: Any, provider: str, length: int, past: int, threads: int | None, vocab: int) -> Any:
        return partial(FolderStep, Path(path), provider, length, past, threads, vocab)
