"""Generation folders written by other tools, read as they are and run in ONNX Runtime by the folder's own protocol, so
:func:`onnx_nb.check_parity`, :func:`onnx_nb.generate` and :func:`onnx_nb.to_transformers` work on files onnx-nb did
not write.

Read today:
- transformers' own exporter (``transformers.exporters``: ``ExportedModel.save_pretrained`` writes ``export.json``
  naming a ``prefill`` and a ``decode`` graph, each with its own copy of the weights, and the model's
  ``config.json``; every leaf of the traced call is an input by its path, the cache's included, and an attention mask
  only where the export's sample was a padded batch), run by transformers' own runner over onnx-nb's sessions;
- the folders whose tool writes one decoder file with its cache as ``past_key_values.N.key`` / ``.value`` inputs and
  ``present.N.*`` outputs, which onnx-nb's own step runner drives (:func:`decoder_file` names the file):
  onnxruntime-genai's builder's (``genai_config.json``, its ``model.onnx``), Optimum's ONNX layout (``model.onnx``
  beside ``config.json``; an older Optimum's ``decoder_model_merged.onnx``, whose ``use_cache_branch`` input picks
  the prompt's graph or a step's) and a transformers.js folder (``config.json`` on top, the files in ``onnx/``: the
  fp32 one read, a quantized sibling passed as a file)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError, InvalidModelError

EXPORTER = "transformers.exporters"
GENAI = "onnxruntime-genai's builder"
OPTIMUM = "Optimum's ONNX exporter"
TRANSFORMERS_JS = "transformers.js's layout"
DECODER_NAMES = ("model.onnx", "decoder_model_merged.onnx")  # Optimum's names for a decoder with its cache
FOUND_IN = {GENAI: "", OPTIMUM: "", TRANSFORMERS_JS: "onnx"}  # where a tool puts its decoder file


def folder_tool(path: Any) -> str | None:
    """Which tool wrote the generation folder at ``path`` (None: not a folder, or none onnx-nb knows)."""
    if not isinstance(path, (str, Path)) or not Path(path).is_dir():
        return None
    folder = Path(path)
    if (folder / "export.json").is_file():
        return EXPORTER
    if (folder / "genai_config.json").is_file():
        return GENAI
    if (folder / "config.json").is_file():
        for tool in (TRANSFORMERS_JS, OPTIMUM):
            if any((folder / FOUND_IN[tool] / name).is_file() for name in DECODER_NAMES):
                return tool
    return None


def decoder_file(path: Any) -> Path | None:
    """The one decoder file (with its cache) of a folder whose tool writes one, which onnx-nb's own runner drives:
    onnxruntime-genai's builder's (the file its ``genai_config.json`` names, ``model.onnx`` by default), Optimum's
    (``model.onnx``, else ``decoder_model_merged.onnx``), transformers.js's (the same names in ``onnx/``); None for
    any other folder."""
    tool = folder_tool(path)
    if tool not in FOUND_IN:
        return None
    folder = Path(path)
    if tool == GENAI:
        try:
            config = json.loads((folder / "genai_config.json").read_text())
            return folder / str(config["model"]["decoder"].get("filename") or DECODER_NAMES[0])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return folder / DECODER_NAMES[0]
    return next(folder / FOUND_IN[tool] / n for n in DECODER_NAMES if (folder / FOUND_IN[tool] / n).is_file())


def folder_generation_config(path: Any) -> dict[str, Any] | None:
    """The generation config a tool's folder carries as :func:`onnx_nb.generate` reads it: ``generation_config.json``,
    its stop, pad and start tokens filled from ``config.json`` (its text model's for a multimodal one) where it has
    none; None if the folder holds neither."""
    folder = Path(path)
    read: dict[str, dict[str, Any]] = {}
    for name in ("generation_config.json", "config.json"):
        if (folder / name).is_file():
            try:
                read[name] = dict(json.loads((folder / name).read_text()))
            except ValueError as exc:
                raise InvalidModelError(f"{folder / name} is not JSON ({exc}).") from None
    if not read:
        return None
    model = read.get("config.json", {})
    text = model.get("text_config") or {}
    tokens = {k: model.get(k, text.get(k)) for k in ("eos_token_id", "pad_token_id", "bos_token_id")}
    found = dict(read.get("generation_config.json", {}))
    found.update({k: v for k, v in tokens.items() if v is not None and found.get(k) is None})
    return found


def folder_tokenizer(path: Any) -> Any:
    """The tokenizer saved in a tool's folder (``tokenizer.json`` or ``tokenizer_config.json``), else None."""
    folder = Path(path)
    if not any((folder / n).is_file() for n in ("tokenizer.json", "tokenizer_config.json")):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def open_folder(path: Any, provider: str = "CPUExecutionProvider", threads: int | None = None) -> ExporterFolder:
    """transformers' exporter's folder at ``path``, runnable; a clear error for a folder onnx-nb does not read."""
    tool = folder_tool(path)
    if tool == EXPORTER:
        return ExporterFolder(Path(path), provider, threads)
    if tool is not None:
        raise InvalidArgumentError(f"{path} was written by {tool}: pass its decoder file, {decoder_file(path)}.")
    raise InvalidModelError(
        f"{path} is a folder with no generation layout onnx-nb knows: transformers' exporter writes export.json, "
        "onnxruntime-genai's builder genai_config.json, Optimum model.onnx or decoder_model_merged.onnx beside "
        "config.json (transformers.js: in onnx/). Pass a .onnx file instead.")


class ExporterFolder:
    """transformers' exporter's ``prefill`` and ``decode`` graphs, each in an onnx-nb session on the provider asked,
    driven by transformers' own runner for them (``OnnxModelRunner``: the exporter's names for every leaf of the
    traced call, its cache rebuilt as the model's own ``DynamicCache``), so the folder runs by its own protocol."""

    def __init__(self, folder: Path, provider: str, threads: int | None) -> None:
        try:
            from transformers import AutoConfig
            from transformers.exporters.metadata import ExportMetadata
            from transformers.exporters.runners.runner_onnx import OnnxModelRunner
        except ImportError as exc:
            raise InvalidArgumentError(f"{folder} was written by transformers' exporter, whose runner reads it: this "
                                       f"transformers has none ({exc}); pip install -U transformers.") from None

        from . import sessions

        try:
            manifest = json.loads((folder / "export.json").read_text())
            components = dict(manifest["components"])
            files = {name: folder / str(components[name]["file"]) for name in ("prefill", "decode")
                     if name in components}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InvalidModelError(f"{folder / 'export.json'} is not transformers' exporter's manifest: {exc}.") \
                from None
        if manifest.get("export_format", "onnx") != "onnx" or not {"prefill", "decode"} <= set(components):
            split = "language_model" in components and not any(
                word in name for name in components for word in ("image", "vision", "audio"))
            raise InvalidArgumentError(
                f"{folder} holds transformers' exporter's {manifest.get('export_format')!r} export of "
                f"{', '.join(components)}: onnx-nb runs its ONNX generation export (export_for_generation: a prefill "
                "and a decode graph)." + (
                    " This is a multimodal model's split with no graph that takes the image or the audio: "
                    "transformers' generate() computes their features before the prefill its exporter traces, so no "
                    "runtime can generate from a picture with these graphs. onnx_nb.export(model) writes the "
                    "vision (or audio), embed and decoder files, checked against PyTorch." if split else ""))
        if not (folder / "config.json").is_file():
            raise InvalidModelError(f"{folder} has no config.json: transformers' exporter saves the model's config "
                                    "beside its graphs, and the cache is built from it.")
        self.folder, self.manifest, self.tool = folder, manifest, EXPORTER
        self.config = AutoConfig.from_pretrained(folder)
        meta = {name: components[name].get("metadata", {}) for name in ("prefill", "decode")}
        self.architecture = str(meta["prefill"].get("architecture") or "")
        self.versions = dict(meta["prefill"].get("packages") or {})
        self.kwargs = {name: dict(m.get("kwargs") or {}) for name, m in meta.items()}
        caches = {str(v["container"]) for m in self.kwargs.values() for v in m.values()
                  if isinstance(v, dict) and v.get("container") not in (None, "NoneType")}
        if caches - {"DynamicCache"}:
            raise InvalidModelError(f"{folder}: its graphs carry a {', '.join(sorted(caches))}; onnx-nb drives "
                                    "transformers' exporter's folders whose cache is a DynamicCache.")
        self.files = files
        self.runners = {name: OnnxModelRunner(ExportMetadata.from_dict(meta[name]),
                                              sessions.session(path, provider, threads=threads))
                        for name, path in self.files.items()}
        decode_inputs = [i.name for i in self.runners["decode"].session.get_inputs()]
        self.takes_mask = "attention_mask" in decode_inputs

    @property
    def weight_bytes(self) -> dict[str, int]:
        """Each graph's file with its own external data (bytes): the weights are in both."""
        from .onnxfile import file_bytes

        return {name: file_bytes(path) for name, path in self.files.items()}

    def run(self, name: str, ids: np.ndarray, past: int, cache: Any,
             mask: np.ndarray | None = None) -> tuple[np.ndarray, Any]:
        import torch

        from .feeds import mask_positions

        total = past + ids.shape[1]
        mask = np.ones((ids.shape[0], total), np.int64) if mask is None else mask.astype(np.int64)
        given = {"input_ids": torch.from_numpy(ids.astype(np.int64)), "attention_mask": torch.from_numpy(mask),
                 "position_ids": torch.from_numpy(mask_positions(mask, ids.shape[1])),
                 "cache_position": torch.arange(past, total)}
        kwargs = {}
        for key, spec in self.kwargs[name].items():
            if isinstance(spec, dict) and spec.get("container"):
                kwargs[key] = cache
            elif key in given:
                kwargs[key] = given[key]
            else:
                raise InvalidModelError(f"{self.files[name].name} was traced with {key}, which a generation step does "
                                        "not give (input_ids, attention_mask, position_ids, its cache).")
        out = self.runners[name](**kwargs)
        after = next((v for v in (getattr(out, n, None) for n in ("cache", "past_key_values")) if v is not None),
                     cache)
        return out.logits.detach().float().cpu().numpy(), after

    def empty_cache(self) -> Any:
        """The model's own cache before the first token (its config's layer types: full or sliding attention)."""
        from transformers import DynamicCache

        return DynamicCache(config=self.config)

    def prefill(self, ids: np.ndarray) -> tuple[np.ndarray, Any]:
        """The prompt's logits and the cache after it (one prompt: the graphs take no mask unless exported padded)."""
        return self.run("prefill", ids, 0, self.empty_cache())

    def decode(self, token: np.ndarray, cache: Any, past: int) -> tuple[np.ndarray, Any]:
        """The next token's logits after ``past`` tokens held in ``cache``, and the cache with it."""
        return self.run("decode", token, past, cache)

    @staticmethod
    def by_layer(cache: Any) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """``{layer: (keys, values)}`` for the layers that hold them (others hold states the logits judge)."""
        import torch

        def host(t: Any) -> np.ndarray:
            return t.detach().float().cpu().numpy().copy()

        layers = getattr(cache, "layers", None) or []
        return {i: (host(layer.keys), host(layer.values)) for i, layer in enumerate(layers)
                if isinstance(getattr(layer, "keys", None), torch.Tensor) and layer.keys.numel()}

    def greedy(self, prompt: list[int], max_new_tokens: int, eos: set[int] | None = None) -> tuple[list[int],
                                                                                                   float, list[float]]:
        """Greedy new tokens after ``prompt`` (:func:`greedy`)."""
        return greedy(self, prompt, max_new_tokens, eos)


class ExporterDecoder:
    """transformers' exporter's folder as onnx-nb's step runner (``empty_cache`` and ``step``, as a decoder file's
    runner), so :func:`onnx_nb.generate`'s own loop (sampling, the generation config's rules, batches) and
    :func:`onnx_nb.to_transformers` (beam search) run it. Between steps the cache is held as arrays by layer
    (``past_key_values.N.key`` / ``.value``: rows can be taken and repeated) and made into the model's
    ``DynamicCache`` for each call (a sliding-window layer from the window it kept). Graphs without an attention mask
    take rows of one length only (no padding): ``generate()`` then batches prompts by length; graphs traced with a
    batch of one run a batch's rows one after another."""

    def __init__(self, folder: ExporterFolder) -> None:
        self.folder = folder
        self.input_names = ["input_ids"] + (["attention_mask"] if folder.takes_mask else [])
        # graphs traced on one row keep a batch of 1: rows then run one after another within each step
        batch = next(i.shape[0] for i in folder.runners["decode"].session.get_inputs() if i.name == "input_ids")
        self.one_row = batch == 1
        if not folder.takes_mask:
            self.left_padding_safe = False
            self.unpadded_because = "the folder's graphs take no attention mask"

    def empty_cache(self, batch: int, capacity: int | None = None) -> dict[str, np.ndarray]:
        return {}  # nothing before the prompt: the prefill graph starts the model's own cache

    def step(self, ids: np.ndarray, mask: np.ndarray, cache: dict[str, np.ndarray],
             keep: bool = True) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Logits of the new tokens and the cache grown by them; ``mask`` covers cached + new tokens."""
        import torch

        from .facts import CACHE_PREFIX

        if not self.folder.takes_mask and not mask.all():
            raise InvalidArgumentError(f"{self.folder.folder}: the exporter's graphs take no attention mask, so rows "
                                       "of different lengths cannot run in one batch; pass prompts of one length.")
        if self.one_row and ids.shape[0] > 1:
            rows = [self.step(ids[r:r + 1], mask[r:r + 1], {k: v[r:r + 1] for k, v in cache.items()})
                    for r in range(ids.shape[0])]
            return np.concatenate([r[0] for r in rows]), {k: np.concatenate([r[1][k] for r in rows])
                                                          for k in rows[0][1]}
        past = mask.shape[1] - ids.shape[1]
        made = self.folder.empty_cache()
        for i in sorted({int(name.split(".")[-2]) for name in cache}):
            made.update(torch.from_numpy(cache[f"{CACHE_PREFIX}{i}.key"]),
                        torch.from_numpy(cache[f"{CACHE_PREFIX}{i}.value"]), i)
        logits, after = self.folder.run("decode" if past else "prefill", ids, past, made, mask)
        layers = self.folder.by_layer(after)
        if len(layers) != len(getattr(after, "layers", layers)):
            raise InvalidModelError(
                f"{self.folder.folder}: this model's cache holds states other than keys and values, which generate() "
                "and to_transformers() do not carry between a folder's steps; check_parity(model, folder) runs it.")
        grown = {}
        for i, (keys, values) in layers.items():
            grown[f"{CACHE_PREFIX}{i}.key"], grown[f"{CACHE_PREFIX}{i}.value"] = keys, values
        return logits, grown


def greedy(runs: Any, prompt: list[int], max_new_tokens: int, eos: set[int] | None = None) -> tuple[list[int], float,
                                                                                                  list[float]]:
    """Greedy new tokens after ``prompt`` from anything with ``prefill(ids)`` and ``decode(token, cache, past)``
    (stopped at ``eos``, kept), the prefill's ms and each later step's."""
    import time

    start = time.perf_counter()
    logits, cache = runs.prefill(np.array([prompt], np.int64))
    first = (time.perf_counter() - start) * 1e3
    tokens: list[int] = []
    steps: list[float] = []
    while True:
        tokens.append(int(logits[0, -1].argmax()))
        if len(tokens) == max_new_tokens or tokens[-1] in (eos or set()):
            return tokens, first, steps
        start = time.perf_counter()
        logits, cache = runs.decode(np.array([[tokens[-1]]], np.int64), cache, len(prompt) + len(tokens) - 1)
        steps.append((time.perf_counter() - start) * 1e3)
