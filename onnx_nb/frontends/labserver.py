"""The Jupyter server extension behind onnx-nb's JupyterLab viewer: it reads .onnx files' structure in the server
process (external weight files are never read, no kernel is started) and makes the launcher's notebooks.

Routes (under the server's base URL, all authenticated like Jupyter's own API):
  GET  onnx-nb/api/graph?path=F            the graph, its summary and any saved per-node overlay
  GET  onnx-nb/api/details?path=F&node=N   one node's weight statistics (reads only that node's weights)
  POST onnx-nb/api/cost {path, shapes}     parameters, MACs and FLOPs per module at those shapes
  GET  onnx-nb/api/compare?a=F&b=G         two graphs, nodes matched and marked
  GET  onnx-nb/api/tutorials               the tutorials the launcher offers
  POST onnx-nb/api/notebook {kind, ...}    a new notebook: "export" (a model), "studio" or "tutorial" (a copy)
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import InvalidArgumentError, OnnxNbError, first_line

MAX_NODES = 200_000  # beyond this the browser cannot draw the graph: the summary still shows


def resolve(root: str, relative: str, allow_hidden: bool = True) -> Path:
    """A path the browser sent (relative to the server's root, '/'-separated) as a file inside the root (and, when
    the server hides them, not a hidden one)."""
    if not isinstance(relative, str) or not relative.strip():
        raise InvalidArgumentError("No file path was given.")
    base = Path(root).resolve()
    target = (base / relative.lstrip("/")).resolve()
    if target != base and base not in target.parents:
        raise InvalidArgumentError(f"{relative} is outside the folder this Jupyter server serves.")
    if not allow_hidden and any(part.startswith(".") for part in target.relative_to(base).parts):
        raise InvalidArgumentError(f"{relative} is hidden, and this Jupyter server does not serve hidden files.")
    return target


def _stamp(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return str(path), st.st_mtime_ns, st.st_size


@lru_cache(maxsize=4)
def _read(stamp: tuple[str, int, int]) -> tuple[Any, dict[str, Any]]:
    """A file read once (without external data) for its summary and its graph; kept while it is unchanged."""
    from ..steps.inspect.structure import read, summary
    from .graphdata import graph_json

    path, proto = read(Path(stamp[0]))
    info = summary(path, proto=proto)
    graph = graph_json(path, proto) if info.nodes <= MAX_NODES else {"name": path.name, "nodes": [], "edges": []}
    return info, graph


def _graph(stamp: tuple[str, int, int]) -> dict[str, Any]:
    return _read(stamp)[1]


def graph_payload(path: Path) -> dict[str, Any]:
    from ..results.summary import overlay_from
    from ..steps.inspect.comparing import sidecar
    from ..steps.inspect.structure import axes_of
    from .graphdata import default_depth

    start = time.perf_counter()
    info, graph = _read(_stamp(path))
    overlay: dict[str, Any] = {}
    found = sidecar(path)
    if found:
        try:
            values, label, highlight = overlay_from(found[1])
            overlay = {"values": values, "label": label, "highlight": highlight, "source": found[0].name}
        except (TypeError, ValueError, AttributeError):  # a hand-edited or foreign JSON: the model still opens
            overlay = {"values": {}, "label": "", "highlight": "", "source": f"{found[0].name} (unreadable, ignored)"}
    summary = info.to_dict() | {"path": path.name}  # the server's own folders stay on the server
    return {"graph": graph, "summary": summary, "axes": axes_of(info.inputs), "depth": default_depth(graph),
            "overlay": overlay, "seconds": round(time.perf_counter() - start, 3)}


def details_payload(path: Path, node: str) -> dict[str, Any]:
    from .graphdata import node_details

    return node_details(path, node, _graph(_stamp(path)))


def cost_payload(path: Path, shapes: Any) -> dict[str, Any]:
    from ..steps.inspect.structure import summary

    if not isinstance(shapes, dict):
        raise InvalidArgumentError("shapes must be an object: axis or input name -> size or shape.")
    info = summary(path, shapes=shapes)
    return {"summary": info.to_dict() | {"path": path.name}, "by_module": info.by_module()}


def compare_payload(a: Path, b: Path) -> dict[str, Any]:
    from ..steps.inspect.comparing import compare
    from .graphdata import default_depth

    result = compare(a, b)
    ga, gb = _graph(_stamp(a)), _graph(_stamp(b))
    return {"a": {"graph": ga, "depth": default_depth(ga)}, "b": {"graph": gb, "depth": default_depth(gb)},
            "marks_a": result.marks_a, "marks_b": result.marks_b, "into": result.into, "matched": result.matched,
            "errors": result.errors, "error_label": result.error_label,
            "counts": {k: list(v) for k, v in result.counts().items()}, "notes": result.notes}


def tutorials_dir() -> Path | None:
    """The tutorials: inside the installed package (wheels), or the repository's notebooks/ (a checkout)."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "tutorials", here.parent / "notebooks"):
        if candidate.is_dir() and any(candidate.glob("*.ipynb")):
            return candidate
    return None


def tutorials() -> list[dict[str, str]]:
    folder = tutorials_dir()
    if folder is None:
        return []
    out = []
    for f in sorted(folder.glob("[0-9]*.ipynb")):
        title = f.stem
        try:
            cells = json.loads(f.read_text(encoding="utf-8"))["cells"]
            first = "".join(cells[0]["source"]).splitlines()[0]
            title = re.sub(r"^[#\s]*(\d+\s*·\s*)?", "", first).strip() or title  # "# 06 · Generation" -> "Generation"
        except (OSError, ValueError, KeyError, IndexError):
            pass
        out.append({"file": f.name, "title": title})
    return out


def _short(folder: Path, model: str) -> str:
    """The model as a notebook's name: the demo, a folder's or a file's own name, a hub id's last part."""
    from ..runtime.files import safe_name
    from ..steps.export.machinery.writing import source_name

    if not model:
        return "demo"
    local = (folder / model).expanduser()
    name = source_name(local) if local.exists() else model.rstrip("/").split("/")[-1]
    return safe_name(name.removesuffix(".onnx"))


def _free_name(folder: Path, stem: str) -> Path:
    """``stem.ipynb`` in ``folder``, or ``stem-1.ipynb``, ...: the name is taken (created empty, exclusively) before
    it is returned, so neither an existing notebook nor a second request's is ever overwritten."""
    n = 0
    while True:
        candidate = folder / (f"{stem}.ipynb" if n == 0 else f"{stem}-{n}.ipynb")
        try:
            candidate.open("x").close()
            return candidate
        except FileExistsError:
            n += 1


def _notebook(cells: list[tuple[str, str]]) -> str:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell(src) if kind == "md" else nbformat.v4.new_code_cell(src)
                for kind, src in cells]
    return nbformat.writes(nb)


def notebook_payload(root: str, body: dict[str, Any], allow_hidden: bool = True) -> dict[str, str]:
    from ..runtime.report_file import atomic_write_text

    folder = resolve(root, str(body["cwd"]), allow_hidden) if body.get("cwd") else Path(root).resolve()
    if not folder.is_dir():
        raise InvalidArgumentError(f"{body.get('cwd')} is not a folder.")
    kind = body.get("kind")
    model = str(body.get("model") or "").strip()
    if kind == "tutorial":
        source = tutorials_dir()
        name = str(body.get("file") or "")
        if source is None or name not in {t["file"] for t in tutorials()}:
            raise InvalidArgumentError(f"No tutorial named {name!r}.")
        target = _free_name(folder, Path(name).stem)
        atomic_write_text(target, (source / name).read_text(encoding="utf-8"))
    elif kind in ("export", "studio"):
        # an empty name: the demo model (all-MiniLM-L6-v2, the demo extra), never a dialog that does nothing
        call = repr(model) if model else "onnx_nb.default_model_path()"
        title = f"`{model}`" if model else "the demo model (all-MiniLM-L6-v2)"
        if kind == "export":
            cells = [("md", f"# Export {title}\nThe export and its parity check at other shapes; its graph; then "
                            "optimize and quantize, each re-validated, and all three timed on the CPU against PyTorch "
                            "eager (`providers=\"available\"` adds every backend here, OpenVINO's among them)."),
                     ("code", f"import onnx_nb\n\nresult = onnx_nb.export({call})\nresult"),
                     ("code", "report = onnx_nb.check_parity(result)\nreport"),
                     ("code", "onnx_nb.GraphView(result)"),
                     ("code", "fast = onnx_nb.optimize(result)\nvariant = onnx_nb.quantize(fast)\nvariant"),
                     ("code", 'onnx_nb.benchmark([result, fast, variant], reference=result, providers="cpu")')]
        else:
            cells = [("md", f"# onnx-nb Studio: {title}"),
                     ("code", f"import onnx_nb\n\nonnx_nb.Studio({call})")]
        target = _free_name(folder, f"onnx-nb {kind} {_short(folder, model)}")
        atomic_write_text(target, _notebook(cells))
    else:
        raise InvalidArgumentError(f"Unknown notebook kind {kind!r}: use export, studio or tutorial.")
    return {"path": target.relative_to(Path(root).resolve()).as_posix()}


def _handlers(serverapp: Any) -> list[tuple[str, Any]]:
    from jupyter_server.auth.decorator import authorized
    from jupyter_server.base.handlers import APIHandler
    from jupyter_server.utils import url_path_join
    from tornado import web

    root = serverapp.root_dir
    base_dir = str(Path(root).resolve())
    hidden = bool(getattr(serverapp.contents_manager, "allow_hidden", False))

    def private(text: str) -> str:  # the server's own folders stay out of what the browser is told
        return text.replace(base_dir + os.sep, "").replace(base_dir, ".")

    class Base(APIHandler):
        auth_resource = "contents"  # Jupyter's authorizer decides, as for the contents API (a read-only role reads)

        async def answer(self, fn: Any, *args: Any) -> None:
            try:
                data = await asyncio.get_running_loop().run_in_executor(None, fn, *args)
            except OnnxNbError as exc:
                self.set_status(400)
                data = {"error": private(str(exc)), "kind": type(exc).__name__}
            except Exception as exc:  # noqa: BLE001 - any file the user double-clicks: a message, never a stuck tab
                self.set_status(400)
                data = {"error": private(f"This file could not be read: {type(exc).__name__}: {first_line(exc)}"),
                        "kind": type(exc).__name__}
            self.finish(json.dumps(data, default=str))

        def path_arg(self, name: str) -> Path:
            return resolve(root, self.get_argument(name, ""), hidden)

        def body(self) -> dict[str, Any]:
            try:
                data = json.loads(self.request.body or b"{}")
            except ValueError:
                data = None
            if not isinstance(data, dict):
                raise web.HTTPError(400, "expected a JSON object")
            return data

    class Graph(Base):
        @web.authenticated
        @authorized("read")
        async def get(self) -> None:
            await self.answer(lambda: graph_payload(self.path_arg("path")))

    class Details(Base):
        @web.authenticated
        @authorized("read")
        async def get(self) -> None:
            await self.answer(lambda: details_payload(self.path_arg("path"), self.get_argument("node", "")))

    class Cost(Base):
        @web.authenticated
        @authorized("read")
        async def post(self) -> None:
            body = self.body()
            await self.answer(lambda: cost_payload(resolve(root, str(body.get("path", "")), hidden),
                                                   body.get("shapes", {})))

    class Compare(Base):
        @web.authenticated
        @authorized("read")
        async def get(self) -> None:
            await self.answer(lambda: compare_payload(self.path_arg("a"), self.path_arg("b")))

    class Tutorials(Base):
        @web.authenticated
        @authorized("read")
        async def get(self) -> None:
            await self.answer(tutorials)

    class Notebook(Base):
        @web.authenticated
        @authorized("write")
        async def post(self) -> None:
            body = self.body()
            await self.answer(lambda: notebook_payload(root, body, hidden))

    base = serverapp.web_app.settings["base_url"]
    routes = {"graph": Graph, "details": Details, "cost": Cost, "compare": Compare, "tutorials": Tutorials,
              "notebook": Notebook}
    return [(url_path_join(base, "onnx-nb", "api", name), handler) for name, handler in routes.items()]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    serverapp.web_app.add_handlers(".*$", _handlers(serverapp))
    serverapp.log.info("onnx-nb: .onnx viewer routes registered under onnx-nb/api")
