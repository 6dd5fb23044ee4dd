"""The site's own Sphinx extension: the reference pages generated from the code, and the tutorials rendered
from executed copies.

- ``{onnx-nb-api}``: an autodoc entry for every name in ``onnx_nb.__all__``, grouped (steps, results, views,
  runtime helpers, errors); a name added to ``__all__`` shows up without editing a page.
- ``{onnx-nb-magics}`` / ``{onnx-nb-cli}``: each ``%onnx_*`` magic and each ``onnx-nb`` subcommand with its usage
  and a table of its arguments, read from the very parsers the magics and the command line use (built from
  ``onnx_nb/frontends/specs.py``), so the pages cannot drift from them.
- The tutorials: ``notebooks/*.ipynb`` rendered with their outputs. The tests keep every tutorial they run in
  ``build/executed/`` (``tests/executed.py``: nbclient's runs, and 07_browser's in JupyterLab; stamped with the
  source's SHA-256); a tutorial with no copy made from its current content is executed here (nbclient, in a scratch
  folder). Widgets show their text fallback (a static
  page has no kernel) and plotly figures are drawn by the plotly.js that ships with the plotly package.
  ``ONNX_NB_DOCS_EXECUTE=0`` renders a tutorial that has no executed copy without its outputs (a quick build).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import inspect
import json
import os
import shutil
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util import logging

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
EXECUTED = ROOT / "build" / "executed"  # written by the tests (tests/executed.py), and here
TUTORIALS = ROOT / "docs" / "tutorials"  # the rendered copies (git-ignored)
STAMP = "onnx_nb_source_sha256"
WIDGET = "application/vnd.jupyter.widget-view+json"
PLOTLY = "application/vnd.plotly.v1+json"
log = logging.getLogger(__name__)


# --- the API reference -------------------------------------------------------------------------------------------

GROUPS = (("Steps", "function"), ("Results", "result"), ("Views and widgets", "view"),
          ("Runtime helpers", "runtime"), ("Errors", "error"))


def _group(name: str, obj: Any) -> str:
    module = getattr(obj, "__module__", "") or ""
    if isinstance(obj, type) and issubclass(obj, Exception):
        return "error"
    if module.startswith("onnx_nb.frontends.widgets"):
        return "view"
    if module.startswith("onnx_nb.runtime"):
        return "runtime"
    if isinstance(obj, type):
        return "result"
    return "function"


class ApiDirective(Directive):
    """Every public name of ``onnx_nb`` (``__all__``), grouped, each through autodoc."""

    def run(self) -> list[nodes.Node]:
        import onnx_nb

        names = [n for n in onnx_nb.__all__ if n != "__version__"]
        grouped: dict[str, list[tuple[str, Any]]] = {key: [] for _, key in GROUPS}
        for name in names:
            obj = getattr(onnx_nb, name)
            grouped[_group(name, obj)].append((name, obj))
        lines: list[str] = []
        for title, key in GROUPS:
            if not grouped[key]:
                continue
            lines += [title, "-" * len(title), ""]
            for name, obj in grouped[key]:
                if key == "error":
                    lines += [f".. autoexception:: onnx_nb.{name}", "   :show-inheritance:", ""]
                elif isinstance(obj, type):
                    lines += [f".. autoclass:: onnx_nb.{name}", "   :members:", ""]
                else:
                    lines += [f".. autofunction:: onnx_nb.{name}", ""]
        return _parse(self, lines)


def _parse(directive: Directive, lines: list[str]) -> list[nodes.Node]:
    from sphinx.util.nodes import nested_parse_with_titles

    node = nodes.section()
    node.document = directive.state.document
    source = directive.state.document.current_source or "onnx-nb-docs"
    nested_parse_with_titles(directive.state, StringList(lines, source=source), node)
    return list(node.children)


# --- the magics and the command line, from their parsers -------------------------------------------------------------

def _table(parser: argparse.ArgumentParser) -> nodes.table:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            continue
        flag = ", ".join(action.option_strings) or action.dest
        if action.nargs in ("?", "*"):
            flag = f"[{flag}]" if action.nargs == "?" else f"[{flag} ...]"
        elif action.nargs == "+":
            flag = f"{flag} [...]"
        values = "|".join(str(c) for c in action.choices) if action.choices else ""
        if isinstance(action, argparse._StoreTrueAction):
            values = "flag"
        elif action.type is not None and not values:
            values = getattr(action.type, "__name__", str(action.type))
        default = "" if action.default in (None, False, argparse.SUPPRESS) else repr(action.default)
        rows.append((flag, values, default, action.help or ""))
    return _docutils_table(("argument", "values", "default", "what it does"), rows, literal=(0, 1, 2))


def _docutils_table(headers: tuple[str, ...], rows: list[tuple[str, ...]], literal: tuple[int, ...]) -> nodes.table:
    table = nodes.table(classes=["onnx-nb-args"])
    group = nodes.tgroup(cols=len(headers))
    table += group
    for width in (22, 18, 12, 48):
        group += nodes.colspec(colwidth=width)
    head = nodes.thead()
    group += head
    head += _row(headers, ())
    body = nodes.tbody()
    group += body
    for row in rows:
        body += _row(row, literal)
    return table


def _row(cells: tuple[str, ...], literal: tuple[int, ...]) -> nodes.row:
    row = nodes.row()
    for i, text in enumerate(cells):
        entry = nodes.entry()
        para = nodes.paragraph()
        if text:
            para += nodes.literal(text, text) if i in literal else nodes.Text(text)
        entry += para
        row += entry
    return row


def _usage(parser: argparse.ArgumentParser) -> nodes.literal_block:
    # IPython's magic parsers write "::\n\n  %name ..." (a docstring's literal block); argparse "usage: prog ..."
    text = parser.format_usage().replace("::", "", 1).strip().removeprefix("usage: ").replace("%%", "%", 1)
    text = textwrap.fill(" ".join(text.split()), 100, subsequent_indent="    ", break_on_hyphens=False,
                         break_long_words=False)
    return nodes.literal_block(text, text, language="text")


def _entry(directive: Directive, title: str, anchor: str, doc: str, parser: argparse.ArgumentParser) -> nodes.section:
    section = nodes.section(ids=[anchor], names=[anchor])
    section += nodes.title(title, "", nodes.literal(title, title))
    if doc:
        section += _parse(directive, inspect.cleandoc(doc).splitlines())
    section += _usage(parser)
    section += _table(parser)
    directive.state.document.note_explicit_target(section, section)  # a label: page.md#anchor links resolve
    return section


class MagicsDirective(Directive):
    """Each ``%onnx_*`` magic: its docstring, its usage and its arguments, from IPython's own parser."""

    def run(self) -> list[nodes.Node]:
        from onnx_nb.frontends.magics import OnnxMagics

        out: list[nodes.Node] = []
        for name in sorted(OnnxMagics.magics["line"]):
            func = getattr(OnnxMagics, name)
            parser = func.parser
            out.append(_entry(self, f"%{name}", name.replace("_", "-"), parser.description or "", parser))
        return out


class CliDirective(Directive):
    """Each ``onnx-nb`` subcommand: its help line, usage and arguments, from the command line's parser."""

    def run(self) -> list[nodes.Node]:
        from onnx_nb.frontends import cli

        parser = cli.parser()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        helps = {a.dest: a.help for a in sub._choices_actions}
        out: list[nodes.Node] = []
        for name, subparser in sub.choices.items():
            doc = (helps.get(name) or "").capitalize() + "."
            out.append(_entry(self, f"onnx-nb {name}", f"onnx-nb-{name}", doc, subparser))
        return out


# --- the tutorials ------------------------------------------------------------------------------------------------

def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def executed(notebook: Path) -> Any:
    """The executed copy of ``notebook`` made from its current content: the tests' copy, else executed now."""
    import nbformat

    kept = EXECUTED / notebook.name
    if kept.exists():
        nb = nbformat.read(kept, as_version=4)
        if nb.metadata.get(STAMP) == _sha(notebook):
            return nb
    if os.environ.get("ONNX_NB_DOCS_EXECUTE") == "0":  # a writer's quick build: the tutorial without outputs
        return nbformat.read(notebook, as_version=4)
    from nbclient import NotebookClient

    log.info(f"onnx-nb docs: executing {notebook.name} (no executed copy of its current content)")
    nb = nbformat.read(notebook, as_version=4)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as scratch:
        # the kernel's own log stays quiet below errors (ipykernel warns that it runs over TCP): a library's
        # notice on the kernel's stderr is never a problem of the page
        NotebookClient(nb, kernel_name="python3", timeout=600, store_widget_state=True,
                       extra_arguments=["--IPKernelApp.log_level=ERROR"],
                       resources={"metadata": {"path": scratch}}).execute()
        sys.path.insert(0, str(ROOT / "scripts"))
        from notebook_paths import scrub

        scrub(nb, scratch)  # the page shows no path of this run
    nb.metadata[STAMP] = _sha(notebook)
    EXECUTED.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, kept)
    return nb


def for_the_page(nb: Any) -> Any:
    """A static page's copy: widgets as their text, plotly figures as a div plotly.js draws."""
    import plotly.io as pio

    nb = copy.deepcopy(nb)
    script = '<script src="../_static/plotly.min.js"></script>'  # once, before the first figure (4.6 MB, no CDN)
    nb.metadata.pop("widgets", None)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        kept = []
        for out in cell.get("outputs", []):
            data = out.get("data")
            if data is not None:
                data.pop(WIDGET, None)
                if PLOTLY in data:
                    figure = data.pop(PLOTLY)
                    figure = json.loads(figure) if isinstance(figure, str) else figure
                    data.pop("text/html", None)
                    data["text/html"] = script + pio.to_html(figure, include_plotlyjs=False, full_html=False,
                                                             validate=False, default_height=460,
                                                             config={"responsive": True})
                    script = ""
                if not data:
                    continue
            kept.append(out)
        cell["outputs"] = kept
    return nb


def prepare_tutorials(app: Sphinx) -> None:
    import nbformat

    TUTORIALS.mkdir(exist_ok=True)
    names = set()
    for notebook in sorted(NOTEBOOKS.glob("*.ipynb")):
        names.add(notebook.name)
        text = nbformat.writes(for_the_page(executed(notebook)))
        target = TUTORIALS / notebook.name
        if not target.exists() or target.read_text() != text:
            target.write_text(text)
    for stale in TUTORIALS.glob("*.ipynb"):
        if stale.name not in names:
            stale.unlink()


def copy_plotly(app: Sphinx, exception: Exception | None) -> None:
    if exception is None and app.builder.format == "html":
        import plotly

        source = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
        shutil.copyfile(source, Path(app.outdir) / "_static" / "plotly.min.js")


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("onnx-nb-api", ApiDirective)
    app.add_directive("onnx-nb-magics", MagicsDirective)
    app.add_directive("onnx-nb-cli", CliDirective)
    app.connect("builder-inited", prepare_tutorials)
    app.connect("build-finished", copy_plotly)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
