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

import base64
import itertools
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BrowserError, InvalidModelError, NoWebGpuError
from .shapes import contiguous

STATIC = Path(__file__).resolve().parent.parent / "static"
# ORT Web's builds: "wasm" for provider "browser", "webgpu" for "browser-webgpu" (sent to the page only when used)
ORT_BUILDS = {"wasm": ("ortweb/ort.wasm.bundle.min.mjs", "ortweb/ort-wasm-simd-threaded.wasm"),
              "webgpu": ("ortweb/ort.webgpu.bundle.min.mjs", "ortweb/ort-wasm-simd-threaded.asyncify.wasm")}
ORT_FILES = tuple(f for files in ORT_BUILDS.values() for f in files)
BROWSERS = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome", "/usr/bin/google-chrome-stable")
WEB_TYPES = {"float32": "tensor(float)", "float16": "tensor(float16)", "float64": "tensor(double)",
             "int64": "tensor(int64)", "int32": "tensor(int32)", "int8": "tensor(int8)", "uint8": "tensor(uint8)",
             "bool": "tensor(bool)", "int16": "tensor(int16)", "uint16": "tensor(uint16)"}
REPLY_TIMEOUT_S = 600.0
HANDSHAKE_S = 8.0  # how long a notebook waits for its page to say it is there
ORT_WEB_VERSION = "1.30.0"  # the bundled onnxruntime-web (js/package.json pins it)
WEB_MAX_IR = 13  # the newest ONNX IR it reads ("Unsupported model IR version: 14, max supported IR version: 13")
WEB_MAX_BYTES = 2**31 - 1  # one ArrayBuffer: the model travels to the page as one file
_PAGES: dict[str, Any] = {}
_IDS = itertools.count(1)


def bundle_bytes(build: str | None = None) -> int:
    """The extra download the browser backend brings (ORT Web's modules and WASM; one build's, or both)."""
    files = ORT_BUILDS[build] if build else ORT_FILES
    return sum((STATIC / f).stat().st_size for f in files if (STATIC / f).exists())


WEBGPU_FLAGS = "--enable-unsafe-webgpu --enable-features=Vulkan"  # WebGPU is behind a flag on Linux


def chromium_args() -> list[str]:
    """Flags for the headless Chromium: the fixed ones, then ``ONNX_NB_CHROMIUM_ARGS`` when set, else
    :data:`WEBGPU_FLAGS` (WebGPU on; where there is no GPU, Chromium offers SwiftShader's software adapter, and the
    rows say so; ``ONNX_NB_CHROMIUM_ARGS=""`` gives a page with no WebGPU)."""
    extra = os.environ.get("ONNX_NB_CHROMIUM_ARGS")
    return ["--no-sandbox", "--disable-dev-shm-usage", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", *(WEBGPU_FLAGS if extra is None else extra).split()]


def chromium() -> str | None:
    """A Chromium to run headless: ``ONNX_NB_CHROMIUM``, else the system's."""
    env = os.environ.get("ONNX_NB_CHROMIUM")
    if env:
        return env if Path(env).exists() else None
    return next((b for b in BROWSERS if Path(b).exists()), None) or shutil.which("chromium")


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


class HeadlessPage:
    """A headless Chromium page served from memory by a server on 127.0.0.1 that only this process knows the port
    of (cross-origin isolated, so ORT Web may use threads), driven by Playwright on a thread of its own (Playwright's
    sync API refuses a running event loop, as a notebook kernel has)."""

    def __init__(self, fallback: str = "") -> None:
        import queue

        self.fallback = fallback
        self._jobs: queue.Queue[Any] = queue.Queue()
        self._files: dict[str, tuple[bytes, str]] = {}
        self._server = _serve_files(self._files)
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, name="onnx-nb-headless-browser", daemon=True)
        self._thread.start()
        self._ready.wait(timeout=120)
        if self._error is not None or not self._ready.is_set():
            raise BrowserError(f"Could not start a headless Chromium ({chromium()}): {self._error}")

    def _serve(self) -> None:
        try:
            from playwright.sync_api import sync_playwright

            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=chromium(), headless=True, args=chromium_args())
                pg = browser.new_page()
                self._files["/"] = (b"<!doctype html><title>onnx-nb</title>"
                                    b'<script type="module" src="/onnxnb.js"></script>', "text/html")
                self._files["/onnxnb.js"] = ((STATIC / "ortweb_page.js").read_bytes(), "text/javascript")
                pg.goto(f"http://127.0.0.1:{self._server.server_address[1]}/")
                pg.wait_for_function("() => globalThis.onnxnb !== undefined", timeout=60_000)
                self.user_agent = str(pg.evaluate("() => navigator.userAgent"))
                self._ready.set()
                while True:
                    job = self._jobs.get()
                    if job is None:
                        break
                    msg, buffers, box, done = job
                    try:
                        box.append(pg.evaluate("([m, b]) => globalThis.onnxnb.handle(m, b)", [msg, buffers]))
                    except BaseException as exc:  # noqa: BLE001 - handed to the caller
                        box.append(exc)
                    done.set()
                browser.close()
        except BaseException as exc:  # noqa: BLE001 - reported by __init__ or call
            self._error = exc
            self._ready.set()
        finally:
            self._server.shutdown()

    def serve(self, name: str, data: bytes) -> dict[str, str]:
        """Large bytes (ORT Web, a model) fetched by the page from memory instead of passed as base64."""
        self._files[f"/files/{name}"] = (data, "application/octet-stream")
        return {"url": f"/files/{name}"}

    def call(self, msg: dict[str, Any], buffers: list[Any]) -> tuple[dict[str, Any], list[bytes]]:
        if self._error is not None or not self._thread.is_alive():
            raise BrowserError(f"The headless Chromium page is gone: {self._error}")
        wire = [b if isinstance(b, dict) else base64.b64encode(bytes(b)).decode() for b in buffers]
        box: list[Any] = []
        done = threading.Event()
        self._jobs.put((msg, wire, box, done))
        if not done.wait(timeout=REPLY_TIMEOUT_S):
            raise BrowserError(f"The headless Chromium page did not answer {msg['op']} in {REPLY_TIMEOUT_S:g} s")
        if isinstance(box[0], BaseException):
            raise BrowserError(f"The headless Chromium page failed: {box[0]}") from box[0]
        reply, out = box[0]
        return reply, [base64.b64decode(b) for b in out]

    def where(self) -> str:
        return f"headless Chromium ({self.fallback})" if self.fallback else "headless Chromium"


def _serve_files(files: dict[str, tuple[bytes, str]]) -> Any:
    """An HTTP server on 127.0.0.1 (a free port) serving ``files`` from memory, with the headers that make the page
    cross-origin isolated. (Playwright's request interception cannot carry a 90 MB model: the page dies.)"""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body, kind = files.get(self.path.split("?")[0], (b"not found", "text/plain"))
            self.send_response(200 if self.path.split("?")[0] in files else 404)
            for key, value in (("Content-Type", kind), ("Content-Length", str(len(body))),
                               ("Cross-Origin-Opener-Policy", "same-origin"),
                               ("Cross-Origin-Embedder-Policy", "require-corp"), ("Cache-Control", "no-store")):
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, name="onnx-nb-page-files", daemon=True).start()
    return server


class NotebookPage:
    """The notebook's own page, through a one-line widget. The page's replies reach a kernel that is busy running the
    cell that asked: on ipykernel 7 through the comm's routing hook, which the kernel's shell channel thread calls
    for each message while the main thread runs the cell; on ipykernel 6 with jupyter-ui-poll."""

    def __init__(self) -> None:
        import anywidget
        from IPython.display import display

        class OrtWebPage(anywidget.AnyWidget):
            _esm = STATIC / "ortweb.js"

        self.widget = OrtWebPage()
        self._replies: dict[int, dict[str, Any]] = {}
        self._arrived = threading.Condition()
        self.user_agent = ""
        comm = self.widget.comm
        routed = getattr(comm, "_reply_subshell_for", None)
        self._hooked = routed is not None
        if routed is not None:  # ipykernel 7: called on the shell channel thread, as each message arrives

            def hook(data: Any, default: Any) -> Any:
                if isinstance(data, dict) and data.get("method") == "custom":
                    self._take(data.get("content"))
                return routed(data, default)

            comm._reply_subshell_for = hook
        else:
            self.widget.on_msg(lambda _w, content, _b: self._take(content))
        display(self.widget)
        self._wait(lambda: bool(self.user_agent), HANDSHAKE_S)
        if not self.user_agent:
            self.widget.close()
            raise BrowserError(f"no notebook page answered within {HANDSHAKE_S:g} s: the notebook runs with no "
                               "browser open (nbconvert, papermill)")

    def _take(self, content: Any) -> None:
        if not isinstance(content, dict):
            return
        with self._arrived:
            if content.get("ready"):
                self.user_agent = str(content.get("user_agent") or "a browser")
            elif "id" in content:
                self._replies[int(content["id"])] = content
            self._arrived.notify_all()

    def _wait(self, done: Any, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        if self._hooked:
            with self._arrived:
                while not done() and time.monotonic() < deadline:
                    self._arrived.wait(timeout=0.1)
            return
        from jupyter_ui_poll import ui_events

        with ui_events() as poll:
            while not done() and time.monotonic() < deadline:
                poll(20)
                time.sleep(0.005)

    def serve(self, name: str, data: bytes) -> bytes:
        return data

    def call(self, msg: dict[str, Any], buffers: list[Any]) -> tuple[dict[str, Any], list[bytes]]:
        ident = next(_IDS)
        self.widget.send({**msg, "id": ident}, buffers=[memoryview(bytes(b)) for b in buffers])
        self._wait(lambda: ident in self._replies, REPLY_TIMEOUT_S)
        if ident not in self._replies:
            raise BrowserError(
                f"The notebook's page did not answer {msg['op']} in {REPLY_TIMEOUT_S:g} s: is the notebook open in a "
                "browser? (set ONNX_NB_BROWSER=headless to use a headless Chromium instead)")
        reply = self._replies.pop(ident)
        return reply, [base64.b64decode(b) for b in reply.pop("b64", [])]

    def where(self) -> str:
        return "the notebook's page"


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
        self.id = next(_IDS)
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
