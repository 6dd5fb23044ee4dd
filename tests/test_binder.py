"""binder/ is what mybinder.org reads; repo2docker finds it, and it agrees with pyproject.toml."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_repo2docker_finds_the_binder_files() -> None:
    exe = shutil.which("repo2docker") or str(Path(sys.executable).parent / "repo2docker")
    if not Path(exe).exists():
        pytest.fail("jupyter-repo2docker is part of the test extra; install onnx-nb[test]")
    done = subprocess.run([exe, "--no-build", "--debug", str(ROOT)], capture_output=True, text=True, timeout=180)
    dockerfile = done.stdout + done.stderr
    assert 'pip install --no-cache-dir -r "binder/requirements.txt"' in dockerfile, dockerfile[-2000:]
    assert "python=3.11" in dockerfile or "python-3.11" in dockerfile or "3.11" in dockerfile
    assert re.search(r"apt-get .*install", dockerfile) and "nodejs" in dockerfile
    # the repository is copied before the requirements are installed, since they install "."
    assert dockerfile.index("COPY --chown=0:0 src/ ") < dockerfile.index('-r "binder/requirements.txt"')


def test_requirements_agree_with_pyproject() -> None:
    project = pyproject()["project"]
    lines = [ln.strip() for ln in (ROOT / "binder/requirements.txt").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    torch_pin = Requirement(next(ln for ln in lines if ln.startswith("torch")))
    torch_range = Requirement(next(d for d in project["dependencies"] if d.startswith("torch")))
    pinned = next(iter(torch_pin.specifier)).version
    assert torch_range.specifier.contains(pinned), (torch_pin, torch_range)
    assert "-c constraints/lock.txt" in lines, "Binder installs the versions the suite passed on"
    editable = next(ln for ln in lines if ln.startswith("-e "))
    extras = re.search(r"\[(.*)\]", editable).group(1).split(",")  # type: ignore[union-attr]
    assert all(e in project["optional-dependencies"] for e in extras)
    assert extras == ["tutorials"], "Binder installs what the tutorials import and no more"
    for needed in ("hf", "notebook", "demo", "genai"):  # what tutorials 01-04, 06, 07, 11 and 13 import
        assert needed in " ".join(project["optional-dependencies"]["tutorials"])


def test_tutorials_only_import_what_binder_installs() -> None:
    """A tutorial imports what onnx-nb[tutorials] installs (the standard library, Jupyter's own, onnx-nb's
    dependencies); one that needs an extra beside it says so in its first code cell and installs it there when
    missing, and then imports that extra's modules only."""
    import json

    project = pyproject()["project"]
    allowed = {"os", "tempfile", "numpy", "torch", "transformers", "onnx", "onnx_nb", "pandas", "sys", "pathlib",
               "json", "string", "base64", "io", "shutil", "importlib", "random", "subprocess", "time", "contextlib",
               "logging", "warnings",  # the standard library
               "IPython",  # Jupyter's
               "onnxruntime", "PIL"}  # a dependency of onnx-nb, and pillow in the tutorials extra
    of_extra = {"openvino": {"openvino"}, "diffusion": {"diffusers"}, "vision": {"ultralytics"},
                "tensorflow,sklearn": {"keras", "tensorflow", "tf2onnx", "sklearn"}, "eval": {"lm_eval"}}
    needing = set()
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = [c for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code"]
        first = "".join(cells[0]["source"])
        said = re.search(r'%pip install .*-c \.\./constraints/lock\.txt -e "\.\.\[([\w,]+)\]"', first)
        extra = said.group(1) if said else None
        if extra:
            needing.add(nb.stem)
            assert all(e in project["optional-dependencies"] for e in extra.split(",")), extra
            assert f"# onnx-nb[{extra}] is not in Binder's image" in first and "find_spec(" in first, nb.name
        for cell in cells:
            src = "".join(cell["source"])
            for mod in re.findall(r"^\s*(?:import|from)\s+([\w]+)", src, re.MULTILINE):
                assert mod in allowed | of_extra.get(extra or "", set()), f"{nb.name} imports {mod}"
    assert needing == {"05_providers_latency", "08_diffusion", "09_yolo", "10_beyond_pytorch", "12_evaluation"}, \
        needing


def test_launch_on_binder_links() -> None:
    """The README links Binder (its badge), and every tutorial's first cell links itself there, on the repository
    pyproject.toml names (the address mybinder.org builds binder/ from)."""
    import json

    repo = pyproject()["project"]["urls"]["Repository"].removeprefix("https://github.com/")
    base = f"https://mybinder.org/v2/gh/{repo}/HEAD?urlpath=lab/tree/notebooks/"
    assert f"({base}01_quickstart.ipynb)" in (ROOT / "README.md").read_text()
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        first = "".join(json.loads(nb.read_text())["cells"][0]["source"])
        # a text link: a badge image would be fetched from mybinder.org by every page that shows the notebook, and fail
        # (a console error) offline
        assert f"[Launch on Binder]({base}{nb.name})" in first and "badge_logo" not in first, nb.name
