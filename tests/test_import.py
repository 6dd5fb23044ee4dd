"""``import onnx_nb`` stays light."""

from __future__ import annotations

import re
import subprocess
import sys

HEAVY = ["torch", "transformers", "onnxruntime", "IPython", "plotly", "onnx", "pandas", "numpy", "tensorflow", "keras",
         "sklearn", "tf2onnx", "skl2onnx"]


def test_import_pulls_in_no_heavy_module() -> None:
    code = (f"import sys, onnx_nb; heavy = {HEAVY!r}; print([m for m in heavy if m in sys.modules]); "
            "print(onnx_nb.__version__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[0] == "[]", out.stdout


def test_import_is_fast() -> None:
    """Cumulative import time of onnx_nb itself (best of three), from -X importtime."""
    best = float("inf")
    for _ in range(3):
        out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import onnx_nb"],
                             capture_output=True, text=True, check=True)
        line = [ln for ln in out.stderr.splitlines() if re.search(r"\|\s+onnx_nb$", ln)][-1]
        best = min(best, int(line.split("|")[1]) / 1e6)
    assert best < 0.3, f"import onnx_nb took {best:.3f} s"


def test_lazy_names_resolve() -> None:
    import onnx_nb

    assert callable(onnx_nb.export)
    assert onnx_nb.ExportResult.__name__ == "ExportResult"


def test_function_names_survive_submodule_imports() -> None:
    """Importing the CLI or magics first must not shadow onnx_nb.export with a module."""
    import onnx_nb
    import onnx_nb.frontends.cli
    import onnx_nb.steps.export.exporting

    assert callable(onnx_nb.export) and onnx_nb.export.__module__ == "onnx_nb.steps.export.exporting"
