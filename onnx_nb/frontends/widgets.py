"""Notebook widgets (anywidget): the graph view and the studio dashboard. Their front ends are built
from ``js/`` into ``onnx_nb/static/`` by the package build."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import anywidget
import traitlets

from ..errors import OnnxNbError

STATIC = Path(__file__).resolve().parent.parent / "static"  # onnx_nb/static, built from js/


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

    Example::

        onnx_nb.GraphView(result)                          # the export's graph, grouped by module
        onnx_nb.GraphView(result, overlay=report)          # coloured by a parity report's per-node error
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
    marks = traitlets.Dict().tag(sync=True)  # node -> same/changed/fused/quantized/added/removed (CompareView)
    goto = traitlets.Unicode("").tag(sync=True)  # set a node name: the view opens its groups and centres it

    def __init__(self, model: Any, overlay: Any = None, depth: int | None = None, **kwargs: Any) -> None:
        from ..results.summary import overlay_from
        from .graphdata import default_depth, graph_json

        self._path = Path(getattr(model, "path", model))
        data = graph_json(self._path)
        values, label, highlight = overlay_from(overlay) if overlay is not None else ({}, "", "")
        super().__init__(graph=data, overlay=values, overlay_label=label, highlight=highlight,
                         depth=default_depth(data) if depth is None else depth, **kwargs)

    def __repr__(self) -> str:  # the text a terminal, a saved notebook's text view or nbconvert shows
        extra = f", first diverging node {self.highlight}" if self.highlight else ""
        return (f"GraphView of {self._path.name}: {len(self.graph.get('nodes', []))} nodes"
                f"{', overlay ' + self.overlay_label if self.overlay_label else ''}{extra} (drawn in Jupyter)")

    @traitlets.observe("selected")
    def _on_select(self, change: Any) -> None:
        from .graphdata import node_details

        if change["new"]:
            info = node_details(self._path, change["new"], self.graph)
            info["overlay"] = self.overlay.get(change["new"])
            self.details = info


class CompareView:
    """Two ONNX files side by side in the notebook: each node coloured by what became of it (fused, quantized, added,
    removed, changed), the per-node error of a report on the right, and the counts above; the same view as
    JupyterLab's "Compare ONNX files…".

    ``CompareView(a, b)`` with .onnx paths, ExportResults or variants, or ``CompareView(comparison)`` with what
    ``onnx_nb.compare`` returned. ``overlay``: a ParityReport or QuantDebugReport of ``b``.

    Example::

        v = onnx_nb.quantize(result)
        onnx_nb.CompareView(result, v)
    """

    def __init__(self, a: Any, b: Any = None, overlay: Any = None) -> None:
        from ..steps.inspect.comparing import compare

        self.comparison = a if b is None else compare(a, b, overlay=overlay)
        c = self.comparison
        self.left = GraphView(c.a)
        self.left.marks = c.marks_a
        self.right = GraphView(c.b, overlay=c.errors or None)
        self.right.marks = c.marks_b
        if c.errors:
            self.right.overlay_label = c.error_label

    def _ipython_display_(self) -> None:
        import ipywidgets
        from IPython.display import display

        head = ipywidgets.HTML(self.comparison._repr_html_())
        panes = ipywidgets.HBox([self.left, self.right], layout=ipywidgets.Layout(width="100%"))
        for pane in (self.left, self.right):
            pane.layout = ipywidgets.Layout(flex="1 1 0", min_width="0")
        display(ipywidgets.VBox([head, panes]))

    def __repr__(self) -> str:
        return repr(self.comparison)


class StudioPanel(anywidget.AnyWidget):
    """The studio's front end: tabs, buttons, choices and results (see :class:`Studio`)."""

    _esm = _asset("studio.js")
    _css = _asset("widgets.css")
    model_name = traitlets.Unicode("").tag(sync=True)
    steps: traitlets.List[list[str]] = traitlets.List().tag(sync=True)  # [key, label] per tab, from the plan
    methods: traitlets.List[str] = traitlets.List().tag(sync=True)  # quantize methods, from the plan
    tab = traitlets.Unicode("export").tag(sync=True)
    running = traitlets.Unicode("").tag(sync=True)  # the step running now
    available_providers: traitlets.List[str] = traitlets.List().tag(sync=True)
    providers: traitlets.List[str] = traitlets.List().tag(sync=True)
    shapes = traitlets.Unicode("auto").tag(sync=True)
    quantize_method = traitlets.Unicode("auto").tag(sync=True)
    sliders: traitlets.List[dict[str, Any]] = traitlets.List().tag(sync=True)  # results.parity_view.sliders
    tolerances = traitlets.Dict().tag(sync=True)  # slider key -> value, as ParityReport.rejudge takes them
    html = traitlets.Dict().tag(sync=True)
    busy = traitlets.Bool(False).tag(sync=True)
    status = traitlets.Unicode("ready").tag(sync=True)
    progress = traitlets.Float(0.0).tag(sync=True)

    def __repr__(self) -> str:
        done = ", ".join(k for k, _ in self.steps if k in self.html) or "none yet"
        return f"onnx-nb studio: {self.model_name} ({self.status}; results: {done})"


class Studio:
    """``Studio(model)``: the whole pipeline as a dashboard. Its tabs are the pipeline's own plan
    (:mod:`onnx_nb.steps.plan`): each button runs a step the way :func:`onnx_nb.pipeline` does (what it needs first), a
    failure shows in the tab of the step that failed, moving a tolerance slider re-judges the stored parity errors
    at once, and each step's chart shows in its tab (inline SVG).

    Example::

        onnx_nb.Studio("path/to/bert-folder")              # export, parity, optimize, quantize, latency as tabs
        onnx_nb.Studio(folder, data="dev.jsonl")           # and an Evaluate tab: each file on its task
    """

    def __init__(self, model: Any, sample: Any = None, *, threaded: bool = True, data: Any = None,
                 task_metric: str = "auto", task_budget: float | str | None = None) -> None:
        from ..runtime.files import default_output
        from ..runtime.providers import providers_named
        from ..steps.export.machinery.writing import source_name
        from ..steps.plan import QUANTIZE_METHODS, Run, Settings, tabs

        self.model = model
        self.sample = sample
        self.threaded = threaded
        name = source_name(model)
        # The Studio writes into a folder of its own beside onnx-nb's default one (never over an export made
        # elsewhere of the same model) and replaces its own files when a step runs again.
        out = default_output(f"{name}-studio", taken_ok=True).parent
        self.plan = Run(model, Settings(sample=sample, overwrite=True, name=str(name), min_seconds=0.5, out=out,
                                        data=data, task_metric=task_metric, task_budget=task_budget))
        short = [p.short for p in providers_named("available")]
        self.panel = StudioPanel(model_name=str(name)[-60:], steps=tabs(self.plan.settings),
                                 methods=list(QUANTIZE_METHODS), available_providers=short, providers=["cpu"])
        self._slide(None)
        self.panel.on_msg(self._on_msg)
        self.panel.observe(self._rejudge, names=["tolerances"])
        self.widget = self.panel

    @property
    def results(self) -> dict[str, Any]:
        """Each step's latest result, by step."""
        return dict(self.plan.values)

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

    def _configure(self) -> None:
        from .specs import shapes_from_text

        shapes = shapes_from_text(self.panel.shapes or "auto")
        self.plan.configure(providers=tuple(self.panel.providers) or ("cpu",), parity_shapes=shapes,
                            shapes=None if shapes == "auto" else shapes, quantize=self.panel.quantize_method)

    def run(self, step: str) -> Any:
        """Run one step (with what it needs first), ``"report"``, or ``"all"``, as the buttons do; returns the
        step's result (None when it failed: its tab shows why)."""
        from ..errors import OnnxNbError
        from ..render import esc

        try:
            self._configure()
        except OnnxNbError as exc:  # a bad shapes box: said where the step would have shown its result
            tab = self.panel.tab if step == "all" else step
            self.panel.status = f"{tab}: {exc}"
            self._show(tab, f'<pre class="bad">{esc(type(exc).__name__)}: {esc(exc)}</pre>', None)
            return None
        keys = self._keys(step)
        self.panel.busy = True
        result = None
        try:
            for i, key in enumerate(keys):
                self.panel.status = f"running {key}… ({i + 1}/{len(keys)})"
                self.panel.progress = i / len(keys)
                self.panel.running = key
                self.panel.tab = key
                result = self._step(key)
            failed = [self.plan.records[k] for k in keys
                      if k in self.plan.records and self.plan.records[k].status in ("failed", "skipped")]
            # shown as text by the front end (never markup)
            self.panel.status = f"{step}: done" if not failed else f"{failed[0].step} {failed[0].status}: " \
                f"{failed[0].error}" + (f" (also {', '.join(r.step for r in failed[1:])}: see their tabs)"
                                        if failed[1:] else "")
            self.panel.progress = 1.0
        finally:
            self.panel.running = ""
            self.panel.busy = False
        return result

    def _keys(self, step: str) -> list[str]:
        """The steps a button runs: every tab but transformers.js's ("all"), the report alone, transformers.js's
        folder after the export, or a step after what it needs."""
        if step == "all":
            return [key for key, _ in self.panel.steps if key != "web"]
        if step == "report":
            return [step]
        if step == "web":
            return [step] if "export" in self.plan.values else [*self.plan.missing("export"), "export", step]
        return [*self.plan.missing(step), step]

    def _step(self, key: str) -> Any:
        from ..render import esc

        if key == "report":
            result = self.plan.report()
            self._show(key, result.html_body(), result)
            return result
        if key == "web":
            return self._web()
        result = self.plan.run(key)
        record = self.plan.records[key]
        if record.status in ("failed", "skipped"):
            exc = self.plan.error if record.status == "failed" else None
            what = f"{type(exc).__name__}: {exc}" if exc is not None else record.error
            # error text can quote a hostile model's names: escaped, never markup
            self._show(key, f'<pre class="bad">{esc(what)}</pre>', None)
            return None
        if key == "parity":  # the sliders start at the report's own tolerances (fp32 cosine 0.999, INT8 0.98)
            self._slide(result)
        self._show(key, result.html_body() if hasattr(result, "html_body") else result._repr_html_(), result)
        return result

    def _web(self) -> Any:
        """The folder transformers.js loads, from the export and the quantized file when there is one, checked by
        transformers.js (in this notebook's page), beside the Studio's other files."""
        from ..errors import OnnxNbError
        from ..render import esc
        from ..steps.web.bundle import to_transformers_js

        made = [v for v in (self.plan.values.get("export"), self.plan.values.get("quantize")) if v]
        try:
            folder = Path(self.plan.settings.out or ".") / "transformers-js"
            bundle = to_transformers_js(made, folder, overwrite=True, progress=False)
        except OnnxNbError as exc:  # what it cannot write, said in the tab
            self._show("web", f'<pre class="bad">{esc(type(exc).__name__)}: {esc(exc)}</pre>', None)
            return None
        self._show("web", bundle._repr_html_(), bundle)
        return bundle

    def _show(self, name: str, html: str, result: Any) -> None:
        """The step's result in its tab: the table styled as in the notebook, and its chart below it as inline
        SVG (parity, latency), which needs no script and so shows in the tab, after a reload and when saved."""
        from ..render import CSS

        chart = result.svg() if result is not None and hasattr(result, "svg") else ""
        self.panel.html = {**{k: v for k, v in self.panel.html.items()
                              if k in self.plan.records or k in (name, "web")},
                           name: CSS + html + (f'<div class="onnxnb-studio-chart">{chart}</div>' if chart else "")}

    def _slide(self, report: Any) -> None:
        from ..results.parity_view import sliders

        specs = sliders(report)
        self._sliding = True  # the new starting values are the report's own: nothing to re-judge
        try:
            self.panel.sliders = specs
            self.panel.tolerances = {s["key"]: s["value"] for s in specs}
        finally:
            self._sliding = False

    def _rejudge(self, _change: Any) -> None:
        report = self.plan.values.get("parity")
        if report is None or self._sliding:
            return
        judged = report.rejudge(**{k: float(v) for k, v in self.panel.tolerances.items()
                                   if k in ("atol", "rtol", "min_cosine", "max_scaled")})
        self._show("parity", judged.html_body(), judged)
