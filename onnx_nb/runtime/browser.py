"""The browser backend: ONNX Runtime Web (npm ``onnxruntime-web``, bundled in ``onnx_nb/static/ortweb``) running
a model inside a browser page, as providers ``"browser"`` (WASM) and ``"browser-webgpu"``.

In a notebook the page is the notebook's own: a small widget (:class:`NotebookPage`) carries the kernel's requests
and the page's replies as binary buffers (no base64), and the kernel waits for each reply while the cell runs
(``jupyter-ui-poll``). Outside a notebook (the command line, CI) the page is a headless Chromium driven by
Playwright (:class:`HeadlessPage`), served from memory at ``http://localhost`` with cross-origin isolation, so
ORT Web may use threads there; the notebook's page is not isolated, so it runs single-threaded, and every row says
which. :class:`BrowserSession` looks like an ONNX Runtime session (``get_inputs``, ``run``) and times runs inside
the page (``time``), so parity and latency treat the browser as one more backend.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BrowserError, InvalidModelError, NoWebGpuError
from .browser_pages import PAGE_IDS, STATIC, HeadlessPage, NotebookPage, chromium
from .shapes import contiguous

# ORT Web's builds: "wasm" for provider "browser", "webgpu" for "browser-webgpu" (sent to the page only when used)
ORT_BUILDS = {"wasm": ("ortweb/ort.wasm.bundle.min.mjs", "ortweb/ort-wasm-simd-threaded.wasm"),
              "webgpu": ("ortweb/ort.webgpu.bundle.min.mjs", "ortweb/ort-wasm-simd-threaded.asyncify.wasm")}
ORT_FILES = tuple(f for files in ORT_BUILDS.values() for f in files)
WEB_TYPES = {"float32": "tensor(float)", "float16": "tensor(float16)", "float64": "tensor(double)",
             "int64": "tensor(int64)", "int32": "tensor(int32)", "int8": "tensor(int8)", "uint8": "tensor(uint8)",
             "bool": "tensor(bool)", "int16": "tensor(int16)", "uint16": "tensor(uint16)"}
ORT_WEB_VERSION = "1.30.0"  # the bundled onnxruntime-web (js/package.json pins it)
WEB_MAX_IR = 13  # the newest ONNX IR it reads ("Unsupported model IR version: 14, max supported IR version: 13")
WEB_MAX_BYTES = 2**31 - 1  # one ArrayBuffer: the model travels to the page as one file
_PAGES: dict[str, Any] = {}


def bundle_bytes(build: str | None = None) -> int:
    """The extra download the browser backend brings (ORT Web's modules and WASM; one build's, or both)."""
    files = ORT_BUILDS[build] if build else ORT_FILES
    return sum((STATIC / f).stat().st_size for f in files if (STATIC / f).exists())


def where() -> str:
    """Which page runs the model: ``ONNX_NB_BROWSER`` ("notebook" or "headless"), else the notebook's page when
    this is a notebook kernel, else headless Chromium."""
    chosen = os.environ.get("ONNX_NB_BROWSER", "").strip().lower()
    if chosen in ("notebook", "headless"):
        return chosen
    from ..progress import in_notebook

    return "notebook" if in_notebook() else "headless"


def unavailable_reason(ep: str = "wasm") -> str:
    """Why the browser backend cannot run here ('' when it can; whether the page offers WebGPU is known only once a
    page is asked, and then said in the row)."""
    missing = [f for f in ORT_BUILDS[ep] if not (STATIC / f).exists()]
    if missing:
        return (f"ONNX Runtime Web is not bundled ({', '.join(missing)} missing): this checkout was installed without "
                "building js/; run `pip install -e .` (it runs npm) or install a wheel")
    if where() == "notebook":
        try:
            import anywidget  # noqa: F401
            import jupyter_ui_poll  # noqa: F401
        except ImportError as exc:
            return f"the notebook's page needs {exc.name}: pip install 'onnx-nb[notebook]'"
        return ""
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "no browser here: headless runs need playwright (pip install playwright) and a Chromium"
    if chromium() is None:
        return ("no Chromium found for a headless page (apt-get install chromium, or set ONNX_NB_CHROMIUM to a "
                "Chromium or Chrome executable)")
    return ""


def page() -> Any:
    """The page for this process: the notebook's (one widget, shown once) or one headless Chromium. A notebook run
    with no browser (nbconvert, papermill, nbclient) has no page to answer: then headless Chromium, and the rows
    say so."""
    kind = where()
    if kind == "notebook" and "notebook" not in _PAGES:
        try:
            _PAGES["notebook"] = NotebookPage()
        except BrowserError as exc:
            if chromium() is None:
                raise
            _PAGES["notebook"] = HeadlessPage(fallback=str(exc))
    if kind not in _PAGES:
        _PAGES[kind] = HeadlessPage()
    return _PAGES[kind]


_LOADED: dict[tuple[int, str], dict[str, Any]] = {}


def _loaded(pg: Any, build: str, threads: int | None) -> dict[str, Any]:
    """One ORT Web build loaded in the page once: its module and WASM sent (or served) on first use."""
    key = (id(pg), build)
    if key not in _LOADED:
        buffers = [pg.serve(Path(f).name, (STATIC / f).read_bytes()) for f in ORT_BUILDS[build]]
        reply, _ = pg.call({"op": "load", "build": build, "threads": threads or os.cpu_count() or 1}, buffers)
        if reply.get("no_adapter"):
            raise NoWebGpuError(f"{reply['error']} in {pg.where()}")
        if "error" in reply:
            raise BrowserError(f"ONNX Runtime Web ({build}) did not load in {pg.where()}: {reply['error']}")
        _LOADED[key] = reply
    return _LOADED[key]


class BrowserSession:
    """A model in ONNX Runtime Web in a browser page, served like an ONNX Runtime session."""

    def __init__(self, path: str | Path, provider: str = "browser:wasm", *, threads: int | None = None,
                 level: str | None = None, **_ignored: Any) -> None:
        from .onnxfile import NodeArg, load_proto, signature

        self.path = Path(path)
        self.ep = "webgpu" if provider.endswith("webgpu") else "wasm"
        proto = load_proto(self.path)
        if any(i.HasField("data_location") and i.data_location == 1 for i in proto.graph.initializer):
            raise InvalidModelError(f"{self.path.name} keeps its weights in external data files; the browser "
                                    "backend sends one file (browsers cap a buffer at 2 GB): save it without "
                                    "external data, or use optimize(..., target='web').")
        inputs, outputs = signature(proto)
        self._inputs = [NodeArg(t.name, list(t.shape), WEB_TYPES.get(t.dtype, t.dtype)) for t in inputs]
        self._outputs = [NodeArg(t.name, list(t.shape), WEB_TYPES.get(t.dtype, t.dtype)) for t in outputs]
        self.page = page()
        self.info = dict(_loaded(self.page, self.ep, threads))
        self.id = next(PAGE_IDS)
        model = self.page.serve(f"model-{self.id}.onnx", self.path.read_bytes())
        web_level = {"disable": "disabled", None: "all"}.get(level, level)
        reply, _ = self.page.call({"op": "open", "session": self.id, "ep": self.ep, "level": web_level}, [model])
        if "error" in reply:
            raise InvalidModelError(f"ONNX Runtime Web cannot load {self.path.name}: {web_error(reply['error'])}")
        self.options = {"runtime": f"onnxruntime-web {self.info.get('ort_web')}", "ep": self.ep,
                        "page": self.page.where(), "browser": browser_name(self.info.get("user_agent", "")),
                        "threads": self.info.get("threads"),
                        "isolated": "yes" if self.info.get("isolated") else "no (single-threaded)"}
        adapter = self.info.get("adapter")
        if adapter:  # a software adapter (SwiftShader) must never pass for a GPU
            self.options["adapter"] = " ".join(v for v in (adapter.get("vendor"), adapter.get("architecture"),
                                                           adapter.get("description")) if v) or "unnamed"

    def get_inputs(self) -> list[Any]:
        return self._inputs

    def get_outputs(self) -> list[Any]:
        return self._outputs

    def get_providers(self) -> list[str]:
        return [f"browser:{self.ep}"]

    def _feed(self, feed: dict[str, np.ndarray]) -> tuple[list[dict[str, Any]], list[bytes]]:
        specs, data = [], []
        for info in self._inputs:
            if info.name not in feed:
                continue
            value = contiguous(feed[info.name])
            kind = "bool" if value.dtype == np.bool_ else str(value.dtype)
            specs.append({"name": info.name, "type": kind, "dims": list(value.shape)})
            data.append(value.astype(np.uint8).tobytes() if kind == "bool" else value.tobytes())
        return specs, data

    def run(self, output_names: Any, feed: dict[str, np.ndarray], run_options: Any = None) -> list[np.ndarray]:
        specs, data = self._feed(feed)
        reply, buffers = self.page.call({"op": "run", "session": self.id, "inputs": specs}, data)
        if "error" in reply:
            raise RuntimeError(f"ONNX Runtime Web: {web_error(reply['error'])}")
        got = {s["name"]: _array(s, b) for s, b in zip(reply["outputs"], buffers)}
        names = list(output_names) if output_names is not None else [o.name for o in self._outputs]
        return [got[n] for n in names]

    def time(self, feed: dict[str, np.ndarray], *, warmup: int, runs: int | None, min_seconds: float) -> list[float]:
        """Seconds per run, timed inside the page (``performance.now()``, coarsened by browsers to 0.1 ms when the
        page is not cross-origin isolated)."""
        specs, data = self._feed(feed)
        reply, _ = self.page.call({"op": "time", "session": self.id, "inputs": specs, "warmup": warmup,
                                   "runs": runs, "min_seconds": min_seconds}, data)
        if "error" in reply:
            raise RuntimeError(f"ONNX Runtime Web: {web_error(reply['error'])}")
        return [t / 1e3 for t in reply["times_ms"]]

    def close(self) -> None:
        try:
            self.page.call({"op": "close", "session": self.id}, [])
        except Exception:  # noqa: BLE001 - the page may be gone already
            pass


def _array(spec: dict[str, Any], data: bytes) -> np.ndarray:
    kind = spec["type"]
    dtype = np.uint8 if kind == "bool" else np.dtype(kind)
    out = np.frombuffer(data, dtype=dtype).reshape(spec["dims"])
    return out.astype(np.bool_) if kind == "bool" else out.copy()


def web_error(message: str) -> str:
    """ORT Web's message, with the operator it lacks named first when that is the cause."""
    import re

    found = re.search(r"Could not find an implementation for (\w+)\((\d+)\) node with name '([^']*)'", message)
    ir = re.search(r"Unsupported model IR version: (\d+), max supported IR version: (\d+)", message)
    if ir:
        return (f"the file's ONNX IR version is {ir[1]}; ONNX Runtime Web {ORT_WEB_VERSION} reads IR <= {ir[2]}: "
                "optimize(..., target='web') writes one it reads")
    if found:
        return (f"ONNX Runtime Web has no kernel for {found[1]} (opset {found[2]}, node {found[3]!r}); "
                "optimize(..., target='web') makes a variant with operators it runs. ORT Web said: "
                + message.splitlines()[0][:300])
    return message.splitlines()[0][:400] if message else "unknown error"


def browser_name(user_agent: str) -> str:
    """'Chromium 156' / 'HeadlessChrome 156' / 'Firefox 140' from a user agent."""
    import re

    for name in ("HeadlessChrome", "Edg", "Chrome", "Firefox", "Safari"):
        found = re.search(rf"{name}/(\d+)", user_agent)
        if found:
            return f"{'Edge' if name == 'Edg' else name} {found[1]}"
    return user_agent[:40] or "unknown browser"
