"""Sphinx configuration of onnx-nb's documentation site (MyST Markdown pages, MyST-NB tutorials, autodoc).

Build it as the test command does (tests/test_docs.py), warnings as errors and no network:

    .venv/bin/python -m sphinx -W --keep-going -E -b html docs build/docs/html
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE / "_ext")]

import onnx_nb  # noqa: E402

if os.environ.get("READTHEDOCS") and "ONNX_NB_CHROMIUM" not in os.environ:
    # Read the Docs has no Debian chromium: the browser tutorial uses Playwright's (.readthedocs.yaml installs it)
    found = sorted(Path.home().glob(".cache/ms-playwright/chromium-*/chrome-linux*/chrome"))
    if found:
        os.environ["ONNX_NB_CHROMIUM"] = str(found[-1])

project = "onnx-nb"
author = "onnx-nb contributors"
copyright = "onnx-nb contributors"
release = version = onnx_nb.__version__

extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "onnx_nb_docs"]
exclude_patterns = ["_build", "_ext", "**/.ipynb_checkpoints"]
root_doc = "index"
smartquotes = False  # '--flag' and 'auto' stay as typed (the argument tables, the messages in the catalogue)

# Markdown: heading anchors so that [text](page.md#a-heading) links are checked too
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]
myst_links_external_new_tab = False

# The tutorials come executed (docs/_ext/onnx_nb_docs.py): never execute here, never reach a widget CDN.
nb_execution_mode = "off"
nb_ipywidgets_js: dict[str, dict[str, str]] = {}
nb_merge_streams = True

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
autodoc_default_options = {"exclude-members": "__init__, __new__"}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "furo"
html_title = f"onnx-nb {release}"
html_static_path = ["_static"]
html_css_files = ["onnx_nb.css"]
html_logo = None
html_theme_options = {"navigation_with_keys": True}
html_show_sourcelink = False
