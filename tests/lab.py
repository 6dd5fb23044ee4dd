"""A real JupyterLab on 127.0.0.1 driven by Debian's Chromium through Playwright (../shared/browser-testing.md)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


def kernel_peak_mb(lab: str, root: Path, notebook: str) -> int:
    """The resident peak (MB) of the kernel running ``notebook`` (its path under ``root``) in the JupyterLab ``lab``
    serves, asked of the kernel itself (``process_peak_bytes``: ``VmHWM`` kept across the resets onnx-nb's own peak
    figures make, which a reading from outside would miss); nothing is left in the kernel's namespace."""
    from notebook_memory import PEAK_EXPR

    return int(kernel_print(lab, root, notebook, PEAK_EXPR))


# every widget the kernel holds, model id -> its state (as nbclient's store_widget_state saves it), as JSON
WIDGET_STATES = ("__import__('json').dumps({k: w.get_state() for k, w in __import__('ipywidgets.widgets.widget', "
                 "fromlist=['_']).__dict__['_instances'].items()}, default=str)")


def kernel_widgets(lab: str, root: Path, notebook: str) -> dict[str, Any]:
    """The state of every widget the kernel running ``notebook`` holds, by model id: what the page draws them from
    (JupyterLab saves none in the notebook by default)."""
    return dict(json.loads(kernel_print(lab, root, notebook, WIDGET_STATES)))


def kernel_print(lab: str, root: Path, notebook: str, expression: str) -> str:
    """What ``print(expression)`` prints in the kernel running ``notebook`` (its path under ``root``) in the
    JupyterLab ``lab`` serves, through the kernel's connection file."""
    from jupyter_client import BlockingKernelClient

    base, token = lab.split("|")
    with urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=30) as answer:
        sessions = json.load(answer)
    kernel = next(s["kernel"]["id"] for s in sessions if s["path"] == notebook)
    client = BlockingKernelClient()
    client.load_connection_file(str(root / ".lab" / "rt" / f"kernel-{kernel}.json"))
    client.start_channels()
    printed: list[str] = []
    try:
        client.wait_for_ready(timeout=60)
        client.execute_interactive(f"print({expression})", store_history=False, timeout=60,
                                   output_hook=lambda m: printed.append(m["content"]["text"])
                                   if m["msg_type"] == "stream" else None)
    finally:
        client.stop_channels()
    return "".join(printed)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def jupyterlab(root: Path) -> Iterator[str]:
    """Start Lab serving ``root``; yields the base URL with the token."""
    port, token = free_port(), "onnxnbtest"
    env = dict(os.environ)
    env.pop("ONNX_NB_OUT", None)  # as a user's: a step given no out= writes beside the notebook (./onnx_nb_out)
    for var, sub in (("JUPYTER_CONFIG_DIR", "cfg"), ("JUPYTER_RUNTIME_DIR", "rt"),
                     ("JUPYTERLAB_SETTINGS_DIR", "settings"), ("JUPYTERLAB_WORKSPACES_DIR", "ws"),
                     ("IPYTHONDIR", "ipython")):
        env[var] = str(root / ".lab" / sub)
        Path(env[var]).mkdir(parents=True, exist_ok=True)
    settings = Path(env["JUPYTERLAB_SETTINGS_DIR"])
    for rel, data in (("@jupyterlab/notebook-extension/tracker.jupyterlab-settings",
                       {"autoStartDefaultKernel": True, "windowingMode": "none"}),
                      ("@jupyterlab/apputils-extension/notification.jupyterlab-settings",
                       {"fetchNews": "false", "checkForUpdates": False, "doNotDisturbMode": True})):
        (settings / rel).parent.mkdir(parents=True, exist_ok=True)
        (settings / rel).write_text(json.dumps(data))
    log = open(root / ".lab" / "lab.log", "w")  # closed in the finally below
    proc = subprocess.Popen([sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1",
                             f"--port={port}", "--allow-root", f"--IdentityProvider.token={token}",
                             f"--ServerApp.root_dir={root}", "--ServerApp.port_retries=0"],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError("JupyterLab exited:\n" + (root / ".lab" / "lab.log").read_text()[-3000:])
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError as exc:
                if time.time() > deadline:
                    tail = (root / ".lab" / "lab.log").read_text()[-3000:]
                    raise RuntimeError("JupyterLab did not answer:\n" + tail) from exc
                time.sleep(0.5)
        yield f"{base}|{token}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


@contextmanager
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            yield b.new_page(viewport={"width": 1400, "height": 1800})
        finally:
            b.close()


def watch_console(page: Any) -> list[str]:
    """The page's console errors and uncaught errors from now on: what a user with the developer tools open sees."""
    seen: list[str] = []
    page.on("console", lambda m: seen.append(f"console.error: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: seen.append(f"page error: {e}"))
    return seen


def open_notebook(page: Any, base_token: str, name: str) -> None:
    """Open ``name`` alone: ``reset`` starts from an empty workspace, not the tabs an earlier page left open."""
    base, token = base_token.split("|")
    page.goto(f"{base}/lab/tree/{name}?token={token}&reset")
    page.get_by_text("Python 3 (ipykernel) | Idle").first.wait_for(timeout=120_000)


def run_all(page: Any) -> None:
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_text("Run All Cells", exact=True).click()


def wait_idle(page: Any, timeout_s: float) -> None:
    """Until every cell has run: no cell shows [*] and the kernel is idle."""
    deadline = time.time() + timeout_s
    time.sleep(2)
    while time.time() < deadline:
        busy = page.locator(".jp-InputPrompt:has-text('[*]')").count()
        if busy == 0 and page.get_by_text("Python 3 (ipykernel) | Idle").count():
            return
        time.sleep(1)
    raise TimeoutError("cells still running")


def run_notebook(page: Any, base_token: str, name: str, timeout_s: float) -> None:
    """Open a notebook, run all its cells, wait until they are done."""
    open_notebook(page, base_token, name)
    run_all(page)
    wait_idle(page, timeout_s)


def save(page: Any, path: Path, every_cell: bool = True) -> Any:
    """Save the open notebook (Ctrl+S) and read it back once the file on disk is the saved one: modified since, no
    backup copy beside it (Jupyter Server's atomic writing keeps ``.~name`` while it rewrites the file in place), and
    readable, with every code cell's outputs (``every_cell``; else some: a cell may print nothing)."""
    import nbformat

    before = path.stat().st_mtime_ns
    page.locator(".jp-Notebook").first.click()
    page.keyboard.press("Control+s")
    for _ in range(60):
        page.wait_for_timeout(500)
        if path.stat().st_mtime_ns == before or path.with_name(".~" + path.name).exists():
            continue
        try:
            saved = nbformat.read(path, as_version=4)
        except Exception:  # noqa: BLE001 - caught mid-write: read again
            continue
        code = [c for c in saved.cells if c.cell_type == "code" and c.source.strip()]
        if (all if every_cell else any)(c.outputs for c in code):
            return saved
    raise AssertionError(f"JupyterLab did not save {path.name}'s outputs")


def copy_clean(src: Path, dst_dir: Path) -> Path:
    """A copy of a notebook without outputs, so what shows comes from this run."""
    import nbformat

    nb = nbformat.read(src, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.metadata.pop("widgets", None)
    dst = dst_dir / src.name
    nbformat.write(nb, dst)
    return dst


def available() -> bool:
    return Path(CHROMIUM).exists()


def mount(page: Any, bundle: str, widget: Any, size: tuple[int, int] = (900, 600)) -> None:
    """Draw a widget with its real front-end bundle (``onnx_nb/static/<bundle>.js`` and the widgets' CSS, as
    anywidget loads them) from the widget's real state, on a blank page: no JupyterLab needed."""
    import base64

    static = Path(__file__).resolve().parent.parent / "onnx_nb" / "static"
    state = {k: v for k, v in widget.get_state().items() if not k.startswith("_")}
    page.set_content(f"<div id=root style='width:{size[0]}px;height:{size[1]}px'></div>")
    page.add_style_tag(content=(static / "widgets.css").read_text())
    page.evaluate("""async ([src, state]) => {
        const mod = await import('data:text/javascript;base64,' + src);
        const model = { get: (k) => state[k], set: (k, v) => { state[k] = v; }, save_changes() {},
                        on: () => {}, send() {} };
        mod.default.render({ model, el: document.getElementById('root') });
    }""", [base64.b64encode((static / f"{bundle}.js").read_bytes()).decode(), state])
