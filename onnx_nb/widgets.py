"""Notebook widgets (anywidget): the graph view and the studio dashboard. Their front ends are built
from ``js/`` into ``onnx_nb/static/`` by the package build."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import anywidget
import traitlets

from .errors import OnnxNbError

STATIC = Path(__file__).parent / "static"


def _asset(name: str) -> Path:
    path = STATIC / name
    if not path.exists():
        raise OnnxNbError(
            f"The widget front end {path} is missing: this checkout was installed without building js/. "
            "Run `pip install -e .` (it builds it with npm) or install a wheel."
        )
    return path


class GraphView(anywidget.AnyWidget):
    """The ONNX graph, drawn in the notebook with no server: pan, zoom, module groups, overlays.

    ``GraphView(model, overlay=report)`` where ``model`` is an .onnx path, an ExportResult or a variant,
    and ``overlay`` a ParityReport (per-node error, first diverging node highlighted), a ProfileTable
    (time per node), a QuantDebugReport (dB lost per layer) or a dict node name -> value.
    """

    _esm = _asset("graph.js")
    _css = _asset("widgets.css")
    graph = traitlets.Dict().tag(sync=True)
    overlay = traitlets.Dict().tag(sync=True)
    overlay_label = traitlets.Unicode("").tag(sync=True)
    highlight = traitlets.Unicode("").tag(sync=True)
    selected = traitlets.Unicode("").tag(sync=True)
    details = traitlets.Dict().tag(sync=True)
    depth = traitlets.Int(1).tag(sync=True)
    expanded: traitlets.List[str] = traitlets.List().tag(sync=True)

    def __init__(self, model: Any, overlay: Any = None, depth: int | None = None, **kwargs: Any) -> None:
        from .graphdata import default_depth, graph_json, overlay_from

        self._path = Path(getattr(model, "path", model))
        data = graph_json(self._path)
        values, label, highlight = overlay_from(overlay) if overlay is not None else ({}, "", "")
        super().__init__(graph=data, overlay=values, overlay_label=label, highlight=highlight,
                         depth=default_depth(data) if depth is None else depth, **kwargs)

    @traitlets.observe("selected")
    def _on_select(self, change: Any) -> None:
        from .graphdata import node_details

        if change["new"]:
            info = node_details(self._path, change["new"], self.graph)
            info["overlay"] = self.overlay.get(change["new"])
            self.details = info


class StudioPanel(anywidget.AnyWidget):
    """The studio's front end: tabs, buttons, choices and results (see :class:`Studio`)."""

    _esm = _asset("studio.js")
    _css = _asset("widgets.css")
    model_name = traitlets.Unicode("").tag(sync=True)
    tab = traitlets.Unicode("export").tag(sync=True)
    available_providers: traitlets.List[str] = traitlets.List().tag(sync=True)
    providers: traitlets.List[str] = traitlets.List().tag(sync=True)
    shapes = traitlets.Unicode("auto").tag(sync=True)
    quantize_method = traitlets.Unicode("auto").tag(sync=True)
    atol = traitlets.Float(1e-4).tag(sync=True)
    rtol = traitlets.Float(1e-3).tag(sync=True)
    min_cosine = traitlets.Float(0.98).tag(sync=True)
    html = traitlets.Dict().tag(sync=True)
    busy = traitlets.Bool(False).tag(sync=True)
    status = traitlets.Unicode("ready").tag(sync=True)
    progress = traitlets.Float(0.0).tag(sync=True)


class Studio:
    """``Studio(model)``: the whole pipeline as a dashboard. Buttons run the same core functions as the
    magics (export, check_parity, optimize, quantize, benchmark); moving a tolerance slider re-judges
    the stored parity errors at once; figures appear below the panel."""

    def __init__(self, model: Any, sample: Any = None, *, threaded: bool = True) -> None:
        import ipywidgets

        from .sessions import resolve

        self.model = model
        self.sample = sample
        self.results: dict[str, Any] = {}
        self.threaded = threaded
        from .sources import source_name

        name = source_name(model)
        if name == "model" and isinstance(model, (str, Path)):  # the folder of a package, e.g. .../minilm/model
            name = Path(model).parent.name
        short = [p.short for p in resolve("available")]
        self.panel = StudioPanel(model_name=str(name)[-60:], available_providers=short, providers=["cpu"])
        self.figures = ipywidgets.Output()
        self.panel.on_msg(self._on_msg)
        self.panel.observe(self._rejudge, names=["atol", "rtol", "min_cosine"])
        self.widget = ipywidgets.VBox([self.panel, self.figures])

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    # --- running steps -------------------------------------------------------------------------------
    def _on_msg(self, _widget: Any, content: dict[str, Any], _buffers: Any) -> None:
        if content.get("type") != "run" or self.panel.busy:
            return
        step = str(content.get("step"))
        if self.threaded:
            threading.Thread(target=self.run, args=(step,), daemon=True).start()
        else:
            self.run(step)

    def run(self, step: str) -> Any:
        """Run one step (or ``"all"``) as the buttons do; returns its result."""
        order = ["export", "parity", "optimize", "quantize", "latency", "report"]
        todo = order if step == "all" else [step]
        self.panel.busy = True
        result = None
        name = todo[0]
        try:
            for i, name in enumerate(todo):
                self.panel.status = f"running {name}…"
                self.panel.progress = i / len(todo)
                result = self._step(name)
                self.panel.tab = name
            self.panel.status = f"{step}: done"
            self.panel.progress = 1.0
        except Exception as exc:  # noqa: BLE001 - shown in the failing step's tab; the kernel stays usable
            from .render import esc

            self.panel.status = f"{name} failed: {type(exc).__name__}: {exc}"  # shown as text by the front end
            # error text can quote a hostile model's names: escaped, never markup
            self._show(name, f'<pre class="bad">{esc(type(exc).__name__)}: {esc(exc)}</pre>', None)
            self.panel.tab = name
        finally:
            self.panel.busy = False
        return result

    def _providers(self) -> list[str]:
        return list(self.panel.providers) or ["cpu"]

    def _shapes(self) -> Any:
        from .specs import parse_shapes

        return parse_shapes(self.panel.shapes or "auto")

    def _need(self, step: str) -> Any:
        if step not in self.results:
            self.results[step] = self._step(step)
        return self.results[step]

    def _step(self, name: str) -> Any:
        from . import benchmarking, exporting, optimizing, quantizing
        from .parity.check import check_parity

        res: Any
        if name == "export":
            res = exporting.export(self.model, self.sample, overwrite=True, progress=False)
        elif name == "parity":
            res = check_parity(self._need("export"), providers=self._providers(), shapes=self._shapes(),
                               progress=False)
            bound = next((r.tolerance.min_cosine for r in res.rows if r.tolerance is not None), None)
            if bound:  # the slider starts at the policy's cosine bound (fp32 0.999, INT8 0.98)
                self.panel.min_cosine = bound
        elif name == "optimize":
            res = optimizing.optimize(self._need("export"), overwrite=True, providers=self._providers(),
                                      then=optimizing.precision_after(self.panel.quantize_method))
        elif name == "quantize":
            kwargs: dict[str, Any] = {"calibration": "generated"} if self.panel.quantize_method == "static" else {}
            res = quantizing.quantize(self._need("optimize"), method=self.panel.quantize_method, overwrite=True,
                                      providers=self._providers(), **kwargs)
        elif name == "latency":
            models = {"export (fp32)": self._need("export")}
            models.update({self.results[s].name: self.results[s] for s in ("optimize", "quantize")
                           if s in self.results})
            res = benchmarking.benchmark(models, providers=self._providers(), reference=self._need("export"),
                                         min_seconds=0.5, progress=False)
        else:
            from .results.report import Report, StepResult

            res = Report(self.panel.model_name, [StepResult(s, "ok" if bool(r) else "failed-check", r, "", 0.0)
                                                 for s, r in self.results.items() if s != "report"])
        self.results[name] = res
        html = res.html_body() if hasattr(res, "html_body") else res._repr_html_()
        self._show(name, html, res)
        return res

    def _show(self, name: str, html: str, result: Any) -> None:
        self.panel.html = {**self.panel.html, name: html}
        if result is not None and hasattr(result, "figure") and name in ("parity", "latency"):
            from IPython.display import display

            self.figures.clear_output(wait=True)
            with self.figures:
                display(result.figure())

    def _rejudge(self, _change: Any) -> None:
        report = self.results.get("parity")
        if report is None:
            return
        judged = report.rejudge(atol=self.panel.atol, rtol=self.panel.rtol, min_cosine=self.panel.min_cosine)
        self.panel.html = {**self.panel.html, "parity": judged.html_body()}
