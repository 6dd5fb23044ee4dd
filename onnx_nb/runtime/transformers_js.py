"""transformers.js (npm ``@huggingface/transformers``) running a folder onnx-nb wrote: the task's pipeline at each
precision, every output and the generated tokens back as JSON (``js/src/transformers_check.js``), in one of two
places.

- **A browser page** (:func:`run_in_page`): its browser build, bundled by the build hook on the ONNX Runtime Web
  build onnx-nb already ships (``onnx_nb/static/transformers_web.js``), in the page the browser backend uses (the
  notebook's own, else a headless Chromium: :func:`onnx_nb.runtime.browser.page`); the folder's files travel as the
  backend's buffers and transformers.js reads them from memory.
- **Node.js** (:func:`run_check`): its Node.js build (with onnxruntime-node) from the npm registry when onnx-nb is built
  (``js/package.json`` pins it, ``js/package-lock.json`` locks it; ``js/.npmrc`` keeps onnxruntime-node's install
  script from fetching CUDA binaries), so a source checkout has it in ``js/node_modules``;
  ``$ONNX_NB_TRANSFORMERS_JS`` names another ``node_modules`` folder that holds it (an installed wheel carries no Node
  packages). The fastest to test.

Nothing is downloaded at run time."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from ..errors import TransformersJsError
from .browser_pages import STATIC

PACKAGE = ("@huggingface", "transformers")
MODULES_VARIABLE = "ONNX_NB_TRANSFORMERS_JS"
SCRIPT = STATIC / "transformers_node.mjs"  # js/src/transformers_node.js, bundled
# js/src/transformers_web.js, bundled twice: transformers.js's browser build on ONNX Runtime Web's WASM build and on
# its WebGPU build (the builds the browser backend ships: their WASM comes from there)
WEB_BUILDS = {"wasm": STATIC / "transformers_web.js", "webgpu": STATIC / "transformers_webgpu.js"}
CHECKOUT_MODULES = Path(__file__).resolve().parents[2] / "js" / "node_modules"
# a pipeline task -> the prefixes of transformers.js's model mappings that serve it (its own registry, read below)
TASK_MAPPINGS = {"feature-extraction": ("MODEL_MAPPING_NAMES_",),
                 "text-classification": ("MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",),
                 "token-classification": ("MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",),
                 "fill-mask": ("MODEL_FOR_MASKED_LM_MAPPING_NAMES",),
                 "text-generation": ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",),
                 "text2text-generation": ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",),
                 "question-answering": ("MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",),
                 "automatic-speech-recognition": ("MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",),
                 "image-classification": ("MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",),
                 "image-to-text": ("MODEL_FOR_VISION_2_SEQ_MAPPING_NAMES",)}


def node_modules() -> Path:
    """The ``node_modules`` folder transformers.js is read from (``$ONNX_NB_TRANSFORMERS_JS``, else the checkout's
    ``js/node_modules``); it may not hold the package (:func:`unavailable_reason`)."""
    chosen = os.environ.get(MODULES_VARIABLE, "").strip()
    return Path(chosen).expanduser() if chosen else CHECKOUT_MODULES


def version() -> str:
    """The version of the transformers.js copy :func:`node_modules` holds ("" when none)."""
    try:
        return str(json.loads((node_modules().joinpath(*PACKAGE) / "package.json").read_text())["version"])
    except (OSError, ValueError, KeyError):
        return ""


def _unbuilt(path: Path) -> str:
    return f"{path.name} is not built: this checkout was installed without building js/ (pip install -e . runs npm)"


def _entry() -> Path:
    """transformers.js's Node.js distribution, whose source names its model mappings and image processors."""
    return node_modules().joinpath(*PACKAGE) / "dist" / "transformers.node.mjs"


@functools.lru_cache(maxsize=4)
def _names(entry: Path) -> tuple[dict[str, dict[str, str]], frozenset[str], frozenset[str]]:
    """transformers.js's model mappings (``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` ...: model type -> class), image
    processor classes, and the model types whose cache it names per decoder and encoder (``getNormalizedConfig``'s
    cases that set ``num_decoder_layers``), read from ``entry``'s source once."""
    text = entry.read_text()
    mapped = {}
    for name, body in re.findall(r"var (MODEL_\w*MAPPING_NAMES\w*) = /\* @__PURE__ \*/ new Map\(\[(.*?)\]\);", text,
                                 re.S):
        mapped[name] = dict(re.findall(r'\["([\w-]+)",\s*"(\w+)"\]', body))
    found = re.search(r"__export\(image_processors_exports, \{(.*?)\}\);", text, re.S)
    normalized = re.search(r"^function getNormalizedConfig\(.*?^}", text, re.S | re.M)
    cross = {kind for group in (normalized.group(0) if normalized else "").split("break;")
             if '"num_decoder_layers"' in group for kind in re.findall(r'case "([\w-]+)":', group)}
    return (mapped, frozenset(re.findall(r"(\w+): \(\) =>", found.group(1))) if found else frozenset(),
            frozenset(cross))


def cross_cache_named(named_type: str, config: Any) -> bool:
    """Whether transformers.js names a decoder's cache ``past_key_values.{i}.decoder.*`` beside a cross-attention
    cache ``.encoder.*`` (TrOCR's, mBART's, Whisper's) rather than ``past_key_values.{i}.key`` alone (GPT-2's): its
    source's answer where its copy is here (and its ``getNormalizedConfig`` still reads as 4.x wrote it), else
    whether the config counts decoder layers as those types' do."""
    named = _names(_entry())[2] if version() else frozenset()
    if named:
        return named_type in named
    return any(hasattr(config, n) for n in ("decoder_layers", "num_decoder_layers"))


def image_processors() -> frozenset[str]:
    """The image processor classes transformers.js names (``ViTImageProcessor``, ``BeitFeatureExtractor`` ...);
    empty where its copy is not here."""
    return _names(_entry())[1] if version() else frozenset()


def mappings() -> dict[str, dict[str, str]]:
    """transformers.js's model mappings by name (``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` -> model type -> class);
    empty where its copy is not here."""
    return _names(_entry())[0] if version() else {}


def registered(task: str) -> dict[str, str] | None:
    """The model types (-> class) transformers.js registers for ``task``; None where its copy is not here or the
    task is not one onnx-nb checks."""
    if not version() or task not in TASK_MAPPINGS:
        return None
    return {t: c for name, types in mappings().items() if name.startswith(TASK_MAPPINGS[task])
            for t, c in types.items()}


def unavailable_reason() -> str:
    """Why transformers.js cannot run under Node.js here ("" when it can)."""
    if not SCRIPT.exists():
        return _unbuilt(SCRIPT)
    if shutil.which("node") is None:
        return "Node.js is not on PATH (transformers.js runs under Node.js here); install Node.js 18 or newer"
    if not version():
        return (f"transformers.js is not in {node_modules()}: a source checkout gets it when onnx-nb is built "
                f"(npm, js/package.json); elsewhere run `npm install @huggingface/transformers` in a folder and set "
                f"{MODULES_VARIABLE} to its node_modules")
    return ""


def run_check(root: Path, name: str, task: str, dtypes: list[str], texts: list[str], max_new_tokens: int,
              images: list[dict[str, Any]] | None = None, audio: list[list[float]] | None = None,
              timeout: float = 600.0) -> dict[str, Any]:
    """transformers.js's run of the folder ``root/name``: the task's pipeline at each of ``dtypes`` on ``texts``
    (greedy generation of ``max_new_tokens`` tokens for text generation), or on ``images`` for an image task (each
    ``{"width", "height", "data"}``: RGB bytes, row by row), or on ``audio`` clips (samples at the feature
    extractor's rate) for speech recognition. Returns the script's JSON: ``version``,
    ``where`` and ``runs`` (per dtype: ``inputs``, ``outputs``, ``answer``, ``tokens``, ``load_ms``, ``run_ms`` or
    ``error``). Raises :class:`TransformersJsError` when it cannot run or its process fails."""
    reason = unavailable_reason()
    if reason:
        raise TransformersJsError(f"transformers.js cannot check the folder: {reason}.")
    request = {"root": str(root), "name": name, "task": task, "dtypes": dtypes, "texts": texts,
               "max_new_tokens": max_new_tokens, "images": images or [], "audio": audio or []}
    ask = root / f".{name}.check.json"
    ask.write_text(json.dumps(request))
    try:
        done = subprocess.run(["node", str(SCRIPT), str(node_modules()), str(ask)], capture_output=True, text=True,
                              timeout=timeout, env={**os.environ, "NODE_NO_WARNINGS": "1"})
    except subprocess.TimeoutExpired as exc:
        raise TransformersJsError(f"transformers.js did not finish checking {root / name} within {timeout:.0f} s; "
                                  "check fewer precisions or texts.") from exc
    finally:
        ask.unlink(missing_ok=True)
    last = (done.stdout.strip().splitlines() or [""])[-1]
    try:
        return dict(json.loads(last))
    except ValueError as exc:  # the process died before its answer
        said = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
        raise TransformersJsError(f"transformers.js's check of {root / name} failed (exit {done.returncode}): "
                                  f"{said}") from exc


def page_unavailable_reason(build: str = "wasm") -> str:
    """Why transformers.js cannot run in a browser page here on ONNX Runtime Web's ``build`` ("" when it can; whether
    the page offers WebGPU is known once it is asked)."""
    from .browser import unavailable_reason as browser_reason

    if not WEB_BUILDS[build].exists():
        return _unbuilt(WEB_BUILDS[build])
    return browser_reason(build)


_SENT: set[tuple[int, str]] = set()  # (page, build) transformers.js's browser build was sent to


def run_in_page(root: Path, name: str, task: str, dtypes: list[str], texts: list[str], max_new_tokens: int,
                images: list[dict[str, Any]] | None = None, audio: list[list[float]] | None = None,
                build: str = "wasm") -> dict[str, Any]:
    """transformers.js's browser build running the folder ``root/name`` in the browser backend's page (the notebook's,
    else a headless Chromium) on ONNX Runtime Web's ``build`` ("wasm": one thread; "webgpu": the page's adapter): the
    same answer as :func:`run_check`, ``where`` naming the page."""
    from ..errors import NoWebGpuError
    from .browser import ORT_BUILDS, page

    reason = page_unavailable_reason(build)
    if reason:
        raise TransformersJsError(f"transformers.js cannot check the folder in a browser page: {reason}.")
    pg = page()
    first = (id(pg), build) not in _SENT
    buffers: list[Any] = [pg.serve(WEB_BUILDS[build].name, WEB_BUILDS[build].read_bytes()),
                          pg.serve(f"tjs-ort-{build}.wasm", (STATIC / ORT_BUILDS[build][1]).read_bytes())] \
        if first else [b"", b""]
    folder = root / name
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    buffers += [pg.serve(f"tjs/{name}/{f}", (folder / f).read_bytes()) for f in files]
    reply, _ = pg.call({"op": "tjs", "build": build, "name": name, "files": files, "task": task, "dtypes": dtypes,
                        "texts": texts, "max_new_tokens": max_new_tokens, "images": images or [],
                        "audio": audio or []}, buffers)
    if reply.get("no_adapter"):
        raise NoWebGpuError(f"transformers.js on WebGPU: {reply['error']} in {pg.where()}")
    if "error" in reply:
        raise TransformersJsError(f"transformers.js failed in {pg.where()}: {reply['error']}")
    _SENT.add((id(pg), build))
    reply["where"] = f"{reply.get('where', 'a browser')} in {pg.where()}"
    return dict(reply)
