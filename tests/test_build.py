"""The widgets' front end is built into the package: a wheel or sdist installs with no npm."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ["onnx_nb/static/graph.js", "onnx_nb/static/studio.js", "onnx_nb/static/widgets.css",
          "onnx_nb/static/ortweb.js", "onnx_nb/static/ortweb_page.js", "onnx_nb/static/transformers_web.js",
          "onnx_nb/static/transformers_node.mjs",
          "onnx_nb/static/ortweb/ort.wasm.bundle.min.mjs", "onnx_nb/static/ortweb/ort-wasm-simd-threaded.wasm",
          "onnx_nb/static/ortweb/ort.webgpu.bundle.min.mjs",
          "onnx_nb/static/ortweb/ort-wasm-simd-threaded.asyncify.wasm", "onnx_nb/labextension/package.json"]
# what JupyterLab and the Jupyter server find in a wheel (its .data folder goes to the environment's prefix)
SHARED = ["share/jupyter/labextensions/onnx-nb/package.json", "share/jupyter/labextensions/onnx-nb/install.json",
          "etc/jupyter/jupyter_server_config.d/onnx_nb.json"]


def test_static_assets_are_built_not_committed() -> None:
    for asset in ASSETS:
        assert (ROOT / asset).exists(), f"{asset} is built by `pip install -e .` (the hatch build hook)"
    tracked = subprocess.run(["git", "ls-files", "onnx_nb/static", "onnx_nb/labextension"], cwd=ROOT,
                             capture_output=True, text=True)
    assert tracked.stdout.strip() == "", "built files are not committed"


def test_sdist_then_wheel_without_npm(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "build", "--sdist", "--outdir", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True, timeout=600)
    sdist = next(tmp_path.glob("onnx_nb-*.tar.gz"))
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    assert all(any(n.endswith(a) for n in names) for a in ASSETS), "the sdist carries the built front end"
    # Build the wheel from the sdist on a PATH where npm and node cannot be found.
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("git",):
        if shutil.which(tool):
            os.symlink(shutil.which(tool), bare / tool)  # type: ignore[arg-type]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{bare}"}
    assert shutil.which("npm", path=env["PATH"]) is None
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(tmp_path / "w"),
                           str(sdist)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    wheel = next((tmp_path / "w").glob("onnx_nb-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    assert set(ASSETS) <= set(names)
    data = [n.split(".data/data/", 1)[1] for n in names if ".data/data/" in n]
    assert set(SHARED) <= set(data), "the prebuilt JupyterLab extension and the server extension's config"
    assert any(n.startswith("share/jupyter/labextensions/onnx-nb/static/remoteEntry.") for n in data)
    assert "onnx_nb/tutorials/01_quickstart.ipynb" in names, "the launcher's tutorials travel in the wheel"
