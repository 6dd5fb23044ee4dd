"""The executed copies of the tutorials that the documentation site renders (docs/_ext/onnx_nb_docs.py), kept by the
tests that run them: tests/test_notebooks.py (nbclient) and, for 07_browser, tests/test_browser.py (a real
JupyterLab page, where its browser rows come from). The site executes a tutorial itself only when no copy made from
the notebook's current content is here."""

from __future__ import annotations

import copy
import hashlib
import sys
from pathlib import Path
from typing import Any

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
EXECUTED = NOTEBOOKS.parent / "build" / "executed"
sys.path.insert(0, str(NOTEBOOKS.parent / "scripts"))  # notebook_paths (scripts/ is not a package)


def keep(nb: Any, name: str, folder: Path, temp: Path | None = None) -> None:
    """Keep ``nb`` (tutorial ``name`` as it ran in ``folder``, its kernel's temporary folder ``temp``) for the site:
    stamped with the shipped notebook's SHA-256, without the paths of this run."""
    import nbformat
    from notebook_paths import scrub

    nb = copy.deepcopy(nb)
    nb.metadata["onnx_nb_source_sha256"] = hashlib.sha256((NOTEBOOKS / name).read_bytes()).hexdigest()
    EXECUTED.mkdir(parents=True, exist_ok=True)
    nbformat.write(scrub(nb, folder, temp=temp), EXECUTED / name)
