"""Running a generative file step by step in ONNX Runtime: the decoder runners (:class:`OnnxDecoder`, and the
shared key/value buffer of a GroupQueryAttention file), the one runner kept between calls, prompts into a
left-padded batch. Used by :func:`onnx_nb.generate` (:mod:`.generation`, :mod:`.batches`), transformers' models over
the files (:mod:`.hf_model`) and generation parity. Needs no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError
from ...runtime.facts import empty_shape, is_cache, is_state, present_of
from ...runtime.feeds import mask_positions
from ...runtime.shapes import contiguous

# -- running the file ------------------------------------------------------------------------------

class OnnxDecoder:
    """Prefill and decode steps over an exported decoder with a cache, in ONNX Runtime."""

    def __init__(self, path: Any, provider: str = "CPUExecutionProvider", io_binding: bool | None = None,
                 **options: Any) -> None:
        from ...runtime.sessions import session

        # between two steps the logits are processed outside ONNX Runtime: its threads stop spinning after each run
        self.session = session(path, provider, **{"stop_spinning": True, **options})
        # I/O binding: the cache stays where the provider computed it (GPU memory) between steps instead of a
        # round trip through numpy
        self.device = binding_device(self.session, provider, io_binding)
        self.read_signature(path, {i.name: i for i in self.session.get_inputs()},
                            [o.name for o in self.session.get_outputs()])

    def read_signature(self, path: Any, inputs: dict[str, Any], outputs: list[str]) -> None:
        """What the steps need from the file's inputs (each with ONNX Runtime's ``.shape`` and ``.type``) and
        outputs: the cache's names and first shapes, the token input, positions."""
        self.past_names = [n for n in inputs if is_cache(n)]
        self.tokens_input = "inputs_embeds" if "inputs_embeds" in inputs else "input_ids"
        if self.tokens_input not in inputs or not self.past_names:
            raise InvalidArgumentError(
                f"{path} is not a decoder exported with its cache (no past_key_values inputs); export it with "
                "onnx_nb.export(model, cache=True).")
        # a cache of states (Mamba, linear attention): fixed shapes, zeros at first; one token per step
        self.states = {n: tuple(inputs[n].shape[1:]) for n in self.past_names if is_state(n)}
        self.one_token = inputs[self.tokens_input].shape[1] == 1
        attending = [n for n in self.past_names if n not in self.states]
        # each tensor's shape at the first step (key and value, layers may differ: latent caches, Gemma 4)
        self.empty = {n: empty_shape(path, inputs[n].shape) for n in attending}
        self.float_type = np.float16 if "float16" in inputs[self.past_names[0]].type else np.float32
        self.uses_positions = "position_ids" in inputs
        # an older Optimum's merged decoder: an If picks the prompt's graph (no cache yet) or a step's
        self.cache_branch = "use_cache_branch" in inputs
        self.output_names = outputs
        self.input_names = list(inputs)

    def empty_cache(self, batch: int, capacity: int | None = None) -> dict[str, Any]:
        return {n: np.zeros((batch, *self.states[n]), self.float_type) if n in self.states else
                np.zeros((batch, *self.empty[n]), self.float_type) for n in self.past_names}

    def step(self, ids: np.ndarray, mask: np.ndarray, cache: dict[str, np.ndarray],
             keep: bool = True) -> tuple[np.ndarray, dict]:
        """Logits of the new tokens and the cache grown by them; ``mask`` covers cached + new tokens. (``keep``:
        see :meth:`SharedBufferDecoder.step`; these logits are always the caller's own.)"""
        positions = mask_positions(mask, ids.shape[1])
        tokens = {**({"position_ids": positions} if self.uses_positions else {}), **self.token_feed(ids, positions)}
        return self.run_tokens(tokens, mask, cache)

    def run_tokens(self, tokens: dict[str, np.ndarray], mask: np.ndarray,
                   cache: dict[str, Any]) -> tuple[np.ndarray, dict]:
        """Logits of the new tokens given as the file's own inputs (``tokens``: ids or embeddings, positions; what
        the file does not take is left out) and the grown cache. A file of one token per step takes them one at a
        time: the feed is made once (a vision-language prompt's images merged) and sliced token by token."""
        tokens = {name: value for name, value in tokens.items() if name in self.input_names}
        width = tokens[self.tokens_input].shape[1]
        if not (self.one_token and width > 1):
            return self._run(tokens, mask, cache)
        logits = []
        for k in range(-width, 0):
            one = {name: one_token_of(name, value, k) for name, value in tokens.items()}
            step_logits, cache = self._run(one, mask[:, :k + 1 or None], cache)
            logits.append(step_logits)
        return np.concatenate(logits, axis=1), cache

    def _run(self, tokens: dict[str, np.ndarray], mask: np.ndarray,
             cache: dict[str, Any]) -> tuple[np.ndarray, dict]:
        """One run of the file on the new tokens' feed, ``mask`` covering cached + new tokens."""
        feed = self.feed_of(tokens, mask, cache)
        if self.device is not None:
            return self._bound_step(feed)
        out = self.session.run(None, feed)
        named = dict(zip(self.output_names, out))
        grown = {p: named[present_of(p)] for p in self.past_names}
        return named["logits"], grown

    def feed_of(self, tokens: dict[str, np.ndarray], mask: np.ndarray, cache: dict[str, Any]) -> dict[str, Any]:
        """One run's inputs: the new tokens' feed, the mask over cached + new tokens, the cache (and a merged
        decoder's branch: a step's once something is cached)."""
        feed = {**tokens, "attention_mask": mask.astype(np.int64), **cache}
        if self.cache_branch:
            feed["use_cache_branch"] = np.array([mask.shape[1] > tokens[self.tokens_input].shape[1]])
        return feed

    def token_feed(self, ids: np.ndarray, positions: np.ndarray) -> dict[str, np.ndarray]:
        """What the file takes for the new tokens at their ``positions`` (a vision-language model's decoder: their
        embeddings, and positions in sections where it takes them)."""
        return {"input_ids": ids.astype(np.int64)}

    def _bound_step(self, feed: dict[str, Any]) -> tuple[np.ndarray, dict]:
        """One step with I/O binding: cache values are ``OrtValue``s on the provider's device, in and out; only
        the ids, mask and positions go in from the host and only the logits come back to it."""
        assert self.device is not None
        feed = {name: on_device(value, self.device) if is_cache(name) else value
                for name, value in feed.items()}  # the empty first cache
        named = run_bound(self.session, feed, self.output_names, self.device)
        grown = {p: named[present_of(p)] for p in self.past_names}
        return named["logits"].numpy(), grown


def one_token_of(name: str, value: np.ndarray, k: int) -> np.ndarray:
    """Token ``k`` (from the end) of one input of a step's feed: its sequence axis is the last of positions (one
    section per row or several), the third of stacked deepstack additions, else the second."""
    axis = -1 if name == "position_ids" else (2 if name == "deepstack_embeds" else 1)
    return np.take(value, [value.shape[axis] + k], axis=axis)


def binding_device(session: Any, provider: str, io_binding: bool | None) -> str | None:
    """Where a runner keeps its cache between steps with I/O binding (the provider's device), or None (numpy):
    on by default for every provider but the CPU's, where numpy is already home."""
    from ...runtime.providers import DEVICES

    device = DEVICES.get(provider, "cpu")
    wanted = device != "cpu" if io_binding is None else io_binding
    return device if wanted and hasattr(session, "io_binding") else None


def on_device(value: Any, device: str) -> Any:
    """A numpy array as an ``OrtValue`` on ``device``; an ``OrtValue`` as it is."""
    if not isinstance(value, np.ndarray):
        return value
    import onnxruntime as ort

    return ort.OrtValue.ortvalue_from_numpy(contiguous(value), device, 0)


def run_bound(session: Any, feed: dict[str, Any], output_names: list[str], device: str) -> dict[str, Any]:
    """One run with I/O binding: numpy inputs from the host, ``OrtValue`` inputs where they are; the logits come
    back to the host, every other output stays on ``device``. Returns ``OrtValue``s by name."""
    binding = session.io_binding()
    for name, value in feed.items():
        if isinstance(value, np.ndarray):
            binding.bind_cpu_input(name, value)
        else:
            binding.bind_ortvalue_input(name, value)
    for name in output_names:
        binding.bind_output(name, "cpu" if name == "logits" else device, 0)
    session.run_with_iobinding(binding)
    return dict(zip(output_names, binding.get_outputs()))


def rows_in(value: Any) -> int:
    """The batch rows of a numpy array or an ``OrtValue``."""
    return int(value.shape[0] if isinstance(value, np.ndarray) else value.shape()[0])


class SharedBufferDecoder(OnnxDecoder):
    """Steps over a GroupQueryAttention file (:mod:`onnx_nb.steps.variants.gqa`): one preallocated key/value
    buffer per cache tensor, bound as both ``past_key_values.*`` and ``present.*`` (I/O binding), so each decode
    step writes its token in place. The op reads each row's first ``seqlens_k + 1`` positions, so prompts go in
    right-padded; callers still hand left-padded batches and get logits back in that layout. The ``cache`` dict
    they pass around holds the buffers; it grows (copied into a buffer twice as long) when ``capacity`` runs out.
    """

    def __init__(self, path: Any, provider: str, max_positions: int, **options: Any) -> None:
        super().__init__(path, provider, io_binding=True, **options)
        self.max_positions = max_positions  # the rotary tables' length
        self.where = self.device or "cpu"
        logits = next(o for o in self.session.get_outputs() if o.name == "logits")
        on_host = self.where == "cpu" and "float" in logits.type
        # decode steps write their logits straight into a host array: no output objects to build per step
        self.vocab = logits.shape[2] if on_host and isinstance(logits.shape[2], int) else None
        self.logits_type = np.float16 if logits.type == "tensor(float16)" else np.float32

    def empty_cache(self, batch: int, capacity: int | None = None) -> dict[str, Any]:
        """``lengths``: each row's tokens at the prompt, ``added`` since; ``size``: the buffers' positions."""
        return {"batch": batch, "capacity": capacity, "lengths": None, "added": 0, "buffers": {}, "size": 0}

    def reorder(self, cache: dict[str, Any], rows: np.ndarray) -> dict[str, Any]:
        """The cache with its batch rows taken in ``rows``' order (beam search): the buffers and each row's
        length move; the binding is made again at the next step, the mask's ones and the rows' top derived again."""
        if cache["lengths"] is None:
            return {**cache, "batch": len(rows)}
        lengths = cache["lengths"][rows]
        top = int(lengths.max())
        return {**cache, "batch": len(rows), "lengths": lengths, "binding": None, "bound": None, "top": top,
                "buffers": {name: take_rows(value, rows) for name, value in cache["buffers"].items()},
                "ones": np.ones(len(rows) * cache["size"], np.int64),
                "even": len(rows) == 1 or int(lengths.min()) == top}

    def _grow(self, cache: dict[str, Any], needed: int) -> None:
        """Buffers of at least ``needed`` positions (the caller's capacity, else twice the old size), the old
        contents copied in; an all-ones mask of that many positions per row beside them."""
        import onnxruntime as ort

        if needed > self.max_positions:
            raise InvalidArgumentError(f"{needed} tokens are more than the model's {self.max_positions} positions.")
        old, have = cache["buffers"], cache["size"]
        size = min(max(needed, cache["capacity"] or 0, 2 * have), self.max_positions)
        grown = {}
        for name in self.past_names:
            heads, head_size = self.empty[name][0], self.empty[name][-1]  # (GroupQueryAttention files: 4-d only)
            array = np.zeros((cache["batch"], heads, size, head_size), self.float_type)
            if name in old:
                array[:, :, :have] = old[name].numpy()
            grown[name] = ort.OrtValue.ortvalue_from_numpy(array, self.where, 0)
        cache.update(buffers=grown, size=size, ones=np.ones(cache["batch"] * size, np.int64))

    def step(self, ids: np.ndarray, mask: np.ndarray, cache: dict[str, Any],
             keep: bool = True) -> tuple[np.ndarray, dict]:
        """As :meth:`OnnxDecoder.step`; ``keep=False`` returns the logits in the host array the next step
        overwrites (no copy: for a caller done with them before then). Every token of a decode step counts (the
        op has no holes in a row), so after the prompt the lengths are counted here and ``mask`` is not read.

        A decode step does as little as it can between two runs: after a ~3 ms run has streamed the weights
        through the caches, each numpy or binding call costs 5-20 us on a 2-core machine, and that Python is what
        onnxruntime-genai's C++ loop does not pay. The ids go into an array bound once; the mask is a view of
        ones kept beside the buffers while every row has the same length."""
        width = ids.shape[1]
        first = cache["lengths"] is None
        if first:
            lengths = mask.sum(axis=1)
            top = int(lengths.max())
            cache.update(lengths=lengths, top=top, added=0, even=len(lengths) == 1 or int(lengths.min()) == top)
        else:
            cache["added"] += width
            if cache["even"]:
                top = cache["top"] + cache["added"]
            else:
                lengths = cache["lengths"] + cache["added"]
                top = int(lengths.max())
        if top > cache["size"]:
            self._grow(cache, top)
        buffers, batch = cache["buffers"], cache["batch"]
        binding = cache.get("binding")
        if binding is None or cache.get("bound") is not buffers:  # bound once, again only when the buffers grow
            binding = self.session.io_binding()
            if self.vocab is None:
                binding.bind_output("logits", "cpu")  # first: get_outputs() follows the binding order
            for name, value in buffers.items():
                binding.bind_ortvalue_input(name, value)
                binding.bind_ortvalue_output(present_of(name), value)
            cache.update(binding=binding, bound=buffers, out=None, ids=None)
        if first:  # left-padded prompts -> right-padded
            valid = mask[:, -width:].astype(bool)
            feed_ids = np.zeros((batch, width), np.int64)
            for row in range(batch):
                feed_ids[row, :lengths[row]] = ids[row][valid[row]]
            binding.bind_cpu_input("input_ids", feed_ids)
        elif cache["ids"] is not None and cache["ids"].shape == ids.shape:
            cache["ids"][...] = ids  # the bound array: ONNX Runtime reads it in place
        else:
            import onnxruntime as ort

            cache["ids"] = np.array(ids, np.int64)
            binding.bind_ortvalue_input("input_ids", ort.OrtValue.ortvalue_from_numpy(cache["ids"]))
        if cache["even"]:  # every row full: a view of the ones kept beside the buffers
            binding.bind_cpu_input("attention_mask", cache["ones"][:batch * top].reshape(batch, top))
        else:
            binding.bind_cpu_input("attention_mask", (np.arange(top) < lengths[:, None]).astype(np.int64))
        out = cache["out"]
        if self.vocab is None:  # a fresh logits output each step: the last run's has the last run's shape
            binding.bind_output("logits", "cpu")
        elif out is None or out.shape[1] != width or len(out) != batch:  # logits land in a host array
            import onnxruntime as ort

            out = cache["out"] = np.empty((batch, width, self.vocab), self.logits_type)
            binding.bind_ortvalue_output("logits", ort.OrtValue.ortvalue_from_numpy(out))
        self.session.run_with_iobinding(binding)
        logits = binding.get_outputs()[0].numpy() if out is None else out.copy() if keep or first else out
        if first:
            short = width - lengths
            if short.any():  # back to the left-padded layout the caller's positions follow
                aligned = np.empty_like(logits)
                for row, pad in enumerate(short):
                    aligned[row, pad:] = logits[row, :width - pad]
                    aligned[row, :pad] = logits[row, width - pad:]
                logits = aligned
        return logits, cache


def take_rows(value: Any, rows: np.ndarray) -> Any:
    """``value`` (a numpy array or an OrtValue on its device) with its batch rows taken in ``rows``' order."""
    if isinstance(value, np.ndarray):
        return value[rows]
    import onnxruntime as ort

    taken = np.ascontiguousarray(value.numpy()[rows])
    return ort.OrtValue.ortvalue_from_numpy(taken, value.device_name(), 0)


def decoder_for(path: Any, provider: str = "CPUExecutionProvider", io_binding: bool | None = None,
                **options: Any) -> OnnxDecoder:
    """The step runner a decoder file needs: a shared key/value buffer for a GroupQueryAttention file."""
    from ...runtime.onnxfile import gqa_node, load_proto, rotary_positions

    proto = load_proto(path)  # read once here: parsing a large model's file takes seconds
    node = gqa_node(proto)
    gqa, cached = node is not None, any(is_cache(i.name) for i in proto.graph.input)
    # the rotary tables bound the positions (none: no bound)
    positions = rotary_positions(proto, node) if gqa and cached else None
    del proto, node  # a file holding its weights is not held parsed beside its session
    if not cached:
        from .whole_sequence import WholeSequenceDecoder

        return WholeSequenceDecoder(path, provider, **options)  # type: ignore[return-value]
    if not gqa:
        return OnnxDecoder(path, provider, io_binding=io_binding, **options)
    return SharedBufferDecoder(path, provider, positions if positions is not None else 1 << 31, **options)


LAST_RUNNER: dict[str, Any] = {}


def runner_key(path: Path, *how: Any) -> tuple[Any, ...]:
    stat = path.stat()
    return (str(path.resolve()), stat.st_size, stat.st_mtime_ns, *how)


def kept_runner(path: Path, *how: Any) -> Any:
    """The runner of the last ``generate()`` call (a decoder, or an onnxruntime-genai model) if it was for the
    same file (unchanged since: path, size and modification time) and the same provider, binding, threads and
    runtime: calling again skips parsing the file and building a session (seconds for a large model)."""
    return LAST_RUNNER["runner"] if path.is_file() and LAST_RUNNER.get("key") == runner_key(path, *how) else None


def last_runner(path: Path, provider: str, io_binding: bool | None, threads: int | None, runtime: str) -> Any:
    """:func:`kept_runner`, else a new one kept in its place (one is kept: the old one goes first, never two models'
    weights at once)."""
    how = (provider, io_binding, threads, runtime)
    kept = kept_runner(path, *how)
    if kept is not None:
        return kept
    LAST_RUNNER.clear()
    if runtime == "onnxruntime-genai":
        from .genai import GenaiRunner

        runner: Any = GenaiRunner(path, provider, threads)
    else:
        runner = decoder_for(path, provider, io_binding=io_binding, threads=threads)
    LAST_RUNNER.update(key=runner_key(path, *how), runner=runner)
    return runner


def left_pad(prompts: Sequence[Sequence[int]], pad: int) -> tuple[np.ndarray, np.ndarray]:
    """Token lists of different lengths as one left-padded batch (ids and mask)."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise InvalidArgumentError("Every prompt needs at least one token.")
    width = max(len(p) for p in prompts)
    ids = np.full((len(prompts), width), pad, np.int64)
    mask = np.zeros((len(prompts), width), np.int64)
    for row, p in enumerate(prompts):
        ids[row, width - len(p):] = p
        mask[row, width - len(p):] = 1
    return ids, mask


def prompt_ids(inputs: Any, tokenizer: Any) -> list[list[int]]:
    if isinstance(inputs, str) or (isinstance(inputs, (list, tuple)) and inputs and isinstance(inputs[0], str)):
        if tokenizer is None:
            raise InvalidArgumentError("Text prompts need a tokenizer: pass tokenizer=..., or token ids.")
        texts = [inputs] if isinstance(inputs, str) else list(inputs)
        return [list(tokenizer(t)["input_ids"]) for t in texts]
    if hasattr(inputs, "keys"):
        ids = np.asarray(inputs["input_ids"].numpy() if hasattr(inputs["input_ids"], "numpy") else inputs["input_ids"])
        mask = inputs.get("attention_mask")
        mask = np.ones_like(ids) if mask is None else np.asarray(mask.numpy() if hasattr(mask, "numpy") else mask)
        return [[int(t) for t, m in zip(row, mrow) if m] for row, mrow in zip(ids, mask)]
    if isinstance(inputs, (list, tuple)) and inputs and isinstance(inputs[0], (list, tuple)):
        return [[int(t) for t in row] for row in inputs]  # token lists of any lengths
    array = np.asarray(inputs.numpy() if hasattr(inputs, "numpy") else inputs)
    rows = [array] if array.ndim == 1 else list(array)
    return [[int(t) for t in row] for row in rows]
