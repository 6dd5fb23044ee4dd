"""ruff and mypy are part of the suite: a lint or type error fails CI like any test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_clean() -> None:
    dirs = [d for d in ("onnx_nb", "tests", "benchmarks") if (ROOT / d).is_dir()]
    done = subprocess.run([sys.executable, "-m", "ruff", "check", *dirs],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_clean() -> None:
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
