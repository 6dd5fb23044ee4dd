"""A notebook's outputs without the paths of the machine that ran it: the folder it ran in becomes relative
(``/tmp/nbrun/onnx_nb_out/quickstart/model.onnx`` -> ``onnx_nb_out/quickstart/model.onnx``) and a temporary folder
a cell made becomes ``$TMP`` (``/tmp/tmpbs5ps7sx/plain.onnx`` -> ``$TMP/plain.onnx``). Used on every executed copy
(tests/test_notebooks.py, the docs' own runs) and, as a command, on the shipped notebooks:

    python scripts/notebook_paths.py [--folder /where/it/ran] notebooks/*.ipynb
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

# a temporary folder: the system's (/tmp/..., /var/folders/... on macOS) with its one-off name
TEMP = re.compile(r"(?:/private)?(?:/tmp|/var/folders/[\w-]+/[\w-]+/T)/[\w.-]+")


def scrub_text(text: str, folder: str | None = None, temp: str | None = None) -> str:
    if temp:  # the temporary folder the kernel was given: its folders read as the system's
        text = text.replace(temp.rstrip("/") + "/", "/tmp/")
    if folder:
        text = text.replace(folder.rstrip("/") + "/", "")
    return TEMP.sub("$TMP", text)


def scrub(nb: Any, folder: str | Path | None = None, temp: str | Path | None = None) -> Any:
    """``nb`` (an nbformat notebook) with every output's text scrubbed, in place; returned. ``temp``: the
    temporary folder (TMPDIR) the kernel ran with, if not the system's."""
    where = str(folder) if folder is not None else None
    temp = str(temp) if temp is not None else None
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if "text" in out:
                out["text"] = scrub_text(_joined(out["text"]), where, temp)
            for mime, value in (out.get("data") or {}).items():
                if mime.startswith("text/"):
                    out["data"][mime] = scrub_text(_joined(value), where, temp)
    return nb


def _joined(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def main(args: list[str]) -> None:
    import nbformat

    folder = args[1] if args[:1] == ["--folder"] else None
    for path in args[2:] if folder else args:
        nbformat.write(scrub(nbformat.read(path, as_version=4), folder), path)


if __name__ == "__main__":
    main(sys.argv[1:])
