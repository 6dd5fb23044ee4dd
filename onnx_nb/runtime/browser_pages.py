"""The pages ONNX Runtime Web runs in: a headless Chromium started for the purpose (:class:`HeadlessPage`, files served
from localhost) or the notebook's own page (:class:`NotebookPage`, through the widget's comm); which Chromium, and its
flags."""

from __future__ import annotations

import base64
import itertools
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import BrowserError


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
        """Large bytes (ORT Web, a model) fetched by the page from memory instead of passed as base64; held until the
        call they are given to returns (the page fetches them before it runs the request)."""
        self._files[f"/files/{name}"] = (data, "application/octet-stream")
        return {"url": f"/files/{name}"}

    def call(self, msg: dict[str, Any], buffers: list[Any]) -> tuple[dict[str, Any], list[bytes]]:
        if self._error is not None or not self._thread.is_alive():
            raise BrowserError(f"The headless Chromium page is gone: {self._error}")
        wire = [b if isinstance(b, dict) else base64.b64encode(bytes(b)).decode() for b in buffers]
        box: list[Any] = []
        done = threading.Event()
        self._jobs.put((msg, wire, box, done))
        answered = done.wait(timeout=REPLY_TIMEOUT_S)
        for b in buffers:  # fetched by now: a model is not kept in this process's memory for the page's lifetime
            if isinstance(b, dict):
                self._files.pop(b["url"], None)
        if not answered:
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
        ident = next(PAGE_IDS)
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


STATIC = Path(__file__).resolve().parent.parent / "static"

BROWSERS = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome", "/usr/bin/google-chrome-stable")


REPLY_TIMEOUT_S = 600.0

HANDSHAKE_S = 8.0  # how long a notebook waits for its page to say it is there


PAGE_IDS = itertools.count(1)

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
