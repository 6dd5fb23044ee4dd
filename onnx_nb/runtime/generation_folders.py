"""Generation folders written by other tools, read as they are and run in ONNX Runtime by the folder's own protocol, so
:func:`onnx_nb.check_parity` and :func:`onnx_nb.generate` work on files onnx-nb did not write.

Read today: transformers' own exporter (``transformers.exporters``: ``ExportedModel.save_pretrained`` writes
``export.json`` naming a ``prefill`` and a ``decode`` graph, each with its own copy of the weights; the cache goes in
as ``input.cache.layers.{i}.keys`` / ``.values`` and comes out as ``cache.layers.{i}...`` (prefill) or
``output.cache.layers.{i}...`` (decode); an attention mask only where the export's sample was a padded batch).
Recognised and refused with what to pass instead: onnxruntime-genai's builder (``genai_config.json``), Optimum's ONNX
layout (``decoder_model_merged.onnx``) and a transformers.js folder (``onnx/``): their decoder file is one onnx-nb
reads as a file."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError, InvalidModelError

EXPORTER = "transformers.exporters"
LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.(keys|values)$")  # a cache tensor of transformers' exporter, by layer
OTHERS = {  # a tool's marker file and the decoder file in it that onnx-nb reads as a file
    "genai_config.json": ("onnxruntime-genai's builder", "model.onnx"),
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


def open_folder(path: Any, provider: str = "CPUExecutionProvider", threads: int | None = None) -> ExporterFolder:
    """The runnable folder at ``path``; a clear error for one onnx-nb does not run as a folder."""
    tool = folder_tool(path)
    if tool == EXPORTER:
        return ExporterFolder(Path(path), provider, threads)
    for marker, (name, file) in OTHERS.items():
        if tool == name:
            raise InvalidArgumentError(
                f"{path} was written by {name} ({marker}): pass its decoder file, {Path(path) / file}, which onnx-nb "
                "reads as a file; folders read whole are transformers' exporter's (export.json).")
    raise InvalidModelError(
        f"{path} is a folder with no generation layout onnx-nb knows: transformers' exporter writes export.json, "
        "onnxruntime-genai's builder genai_config.json, Optimum decoder_model_merged.onnx. Pass a .onnx file instead.")


class ExporterFolder:
    """transformers' exporter's ``prefill`` and ``decode`` graphs, one ONNX Runtime session each; the cache as a
    dict of the exporter's names (``cache.layers.{i}.keys``)."""

    def __init__(self, folder: Path, provider: str, threads: int | None) -> None:
        from . import sessions

        try:
            manifest = json.loads((folder / "export.json").read_text())
            components = manifest["components"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InvalidModelError(f"{folder / 'export.json'} is not transformers' exporter's manifest: {exc}.") \
                from None
        if manifest.get("export_format", "onnx") != "onnx" or not {"prefill", "decode"} <= set(components):
            raise InvalidArgumentError(
                f"{folder} holds transformers' exporter's {manifest.get('export_format')!r} export of "
                f"{', '.join(components)}: onnx-nb runs its ONNX generation export (export_for_generation: a prefill "
                "and a decode graph).")
        self.folder, self.manifest = folder, manifest
        meta = components["prefill"].get("metadata", {})
        self.architecture = str(meta.get("architecture") or "")
        self.versions = dict(meta.get("packages") or {})
        self.files = {name: folder / components[name]["file"] for name in ("prefill", "decode")}
        self.sessions = {name: sessions.session(path, provider, threads=threads) for name, path in self.files.items()}
        decode_inputs = [i.name for i in self.sessions["decode"].get_inputs()]
        self.takes_mask = "attention_mask" in decode_inputs
        names = sorted((int(m[1]), m[2], n) for n in decode_inputs if (m := LAYER.search(n)))
        self.layers = 1 + max((i for i, _, _ in names), default=-1)
        if not names:
            raise InvalidModelError(f"{self.files['decode']} takes no cache (no cache.layers.N.keys input): it is not "
                                    "transformers' exporter's decode graph.")

    @property
    def weight_bytes(self) -> dict[str, int]:
        """Each graph's file with its own external data (bytes): the weights are in both."""
        from .onnxfile import file_bytes

        return {name: file_bytes(path) for name, path in self.files.items()}

    def _run(self, name: str, ids: np.ndarray, past: int, cache: dict[str, np.ndarray]) -> tuple[np.ndarray,
                                                                                               dict[str, np.ndarray]]:
        session = self.sessions[name]
        total = past + ids.shape[1]
        given = {"input_ids": ids.astype(np.int64),
                 "attention_mask": np.ones((ids.shape[0], total), np.int64),
                 "position_ids": np.broadcast_to(np.arange(past, total, dtype=np.int64), ids.shape).copy(),
                 "cache_position": np.arange(past, total, dtype=np.int64)}
        feed = {}
        for spec in session.get_inputs():
            key = spec.name.removeprefix("input.")
            value = given.get(spec.name, cache.get(key))
            if value is None:
                raise InvalidModelError(f"{self.files[name].name} takes {spec.name}, which transformers' exporter's "
                                        "generation protocol does not give (input_ids, position_ids, its cache).")
            feed[spec.name] = value
        out = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))
        logits = out.pop("logits")
        return logits, {k.removeprefix("output."): v for k, v in out.items()}

    def prefill(self, ids: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The prompt's logits and the cache after it (one prompt: the graphs take no mask unless exported padded)."""
        return self._run("prefill", ids, 0, {})

    def decode(self, token: np.ndarray, cache: dict[str, np.ndarray], past: int) -> tuple[np.ndarray,
                                                                                          dict[str, np.ndarray]]:
        """The next token's logits after ``past`` tokens held in ``cache``, and the cache with it."""
        return self._run("decode", token, past, cache)

    def by_layer(self, cache: dict[str, np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
        """``[(keys, values)]`` per layer, in layer order."""
        found: dict[int, dict[str, np.ndarray]] = {}
        for name, value in cache.items():
            m = LAYER.search(name)
            if m:
                found.setdefault(int(m[1]), {})[m[2]] = value
        return [(found[i]["keys"], found[i]["values"]) for i in sorted(found)]

    def greedy(self, prompt: list[int], max_new_tokens: int, eos: set[int] | None = None) -> tuple[list[int],
                                                                                                   float, list[float]]:
        """Greedy new tokens after ``prompt`` (stopped at ``eos``, kept), the prefill's ms and each step's."""
        import time

        start = time.perf_counter()
        logits, cache = self.prefill(np.array([prompt], np.int64))
        first = (time.perf_counter() - start) * 1e3
        tokens: list[int] = []
        steps: list[float] = []
        while True:
            tokens.append(int(logits[0, -1].argmax()))
            if len(tokens) == max_new_tokens or tokens[-1] in (eos or set()):
                return tokens, first, steps
            start = time.perf_counter()
            logits, cache = self.decode(np.array([[tokens[-1]]], np.int64), cache, len(prompt) + len(tokens) - 1)
            steps.append((time.perf_counter() - start) * 1e3)
