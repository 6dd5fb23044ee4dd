"""Generation folders written by other tools, read as they are and run in ONNX Runtime by the folder's own protocol, so
:func:`onnx_nb.check_parity` and :func:`onnx_nb.generate` work on files onnx-nb did not write.

Read today: transformers' own exporter (``transformers.exporters``: ``ExportedModel.save_pretrained`` writes
``export.json`` naming a ``prefill`` and a ``decode`` graph, each with its own copy of the weights, and the model's
``config.json``; every leaf of the traced call is an input by its path, the cache's included, and an attention mask
only where the export's sample was a padded batch), run by transformers' own runner over onnx-nb's sessions.
onnxruntime-genai's builder's folder (``genai_config.json``) is its ``model.onnx`` (:func:`decoder_file`), which
onnx-nb's own step runner drives. Recognised and refused with what to pass instead: Optimum's ONNX layout
(``decoder_model_merged.onnx``) and a transformers.js folder (``onnx/``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError, InvalidModelError

EXPORTER = "transformers.exporters"
GENAI = "onnxruntime-genai's builder"
OTHERS = {  # a tool's marker file and the decoder file in it that onnx-nb reads as a file
    "genai_config.json": (GENAI, "model.onnx"),
    "decoder_model_merged.onnx": ("Optimum's ONNX exporter", "decoder_model_merged.onnx"),
    "onnx/model.onnx": ("a transformers.js folder", "onnx/model.onnx"),
}


def folder_tool(path: Any) -> str | None:
    """Which tool wrote the generation folder at ``path`` (None: not a folder, or none onnx-nb knows)."""
    if not isinstance(path, (str, Path)) or not Path(path).is_dir():
        return None
    folder = Path(path)
    if (folder / "export.json").is_file():
        return EXPORTER
    return next((tool for marker, (tool, _) in OTHERS.items() if (folder / marker).is_file()), None)


def decoder_file(path: Any) -> Path | None:
    """The one decoder file (with its cache) of a folder whose tool writes one: onnxruntime-genai's builder's (the
    file its ``genai_config.json`` names, ``model.onnx`` by default), which onnx-nb's own runner drives; None for any
    other folder."""
    if folder_tool(path) != GENAI:
        return None
    try:
        config = json.loads((Path(path) / "genai_config.json").read_text())
        name = str(config["model"]["decoder"].get("filename") or OTHERS["genai_config.json"][1])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        name = OTHERS["genai_config.json"][1]
    return Path(path) / name


def open_folder(path: Any, provider: str = "CPUExecutionProvider", threads: int | None = None) -> ExporterFolder:
    """The runnable folder at ``path``; a clear error for one onnx-nb does not run as a folder."""
    tool = folder_tool(path)
    if tool == EXPORTER:
        return ExporterFolder(Path(path), provider, threads)
    for marker, (name, file) in OTHERS.items():
        if tool == name:
            raise InvalidArgumentError(
                f"{path} was written by {name} ({marker}): pass its decoder file, {Path(path) / file}, which onnx-nb "
                "reads as a file; the folders read whole are transformers' exporter's (export.json) and "
                "onnxruntime-genai's builder's (genai_config.json).")
    raise InvalidModelError(
        f"{path} is a folder with no generation layout onnx-nb knows: transformers' exporter writes export.json, "
        "onnxruntime-genai's builder genai_config.json, Optimum decoder_model_merged.onnx. Pass a .onnx file instead.")


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
            raise InvalidArgumentError(
                f"{folder} holds transformers' exporter's {manifest.get('export_format')!r} export of "
                f"{', '.join(components)}: onnx-nb runs its ONNX generation export (export_for_generation: a prefill "
                "and a decode graph).")
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

    def _run(self, name: str, ids: np.ndarray, past: int, cache: Any) -> tuple[np.ndarray, Any]:
        import torch

        total = past + ids.shape[1]
        given = {"input_ids": torch.from_numpy(ids.astype(np.int64)),
                 "attention_mask": torch.ones((ids.shape[0], total), dtype=torch.long),
                 "position_ids": torch.arange(past, total).expand(ids.shape[0], -1).contiguous(),
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
        return self._run("prefill", ids, 0, self.empty_cache())

    def decode(self, token: np.ndarray, cache: Any, past: int) -> tuple[np.ndarray, Any]:
        """The next token's logits after ``past`` tokens held in ``cache``, and the cache with it."""
        return self._run("decode", token, past, cache)

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
