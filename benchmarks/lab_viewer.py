"""How fast a double-clicked .onnx becomes an interactive graph in JupyterLab: a real Lab and Chromium (tests/lab.py),
each file opened `--rounds` times in shuffled order, the time from the double-click to the drawn graph and the
server's share (reading the structure), beside the file's size and node count.

    python benchmarks/lab_viewer.py FILE.onnx [FILE.onnx ...] [--rounds 3]

Files are hard-linked into a temporary server root beside them (their external data too: onnx-nb refuses symlinked
data files)."""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import lab


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    import onnx_nb

    with tempfile.TemporaryDirectory(dir=args.files[0].resolve().parent.parent) as tmp:
        root = Path(tmp)
        names = []
        for i, f in enumerate(args.files):
            folder = root / f"m{i}"
            folder.mkdir()
            for sibling in f.resolve().parent.iterdir():  # the .onnx and its data files, hard-linked
                if sibling.is_file():
                    os.link(sibling, folder / sibling.name)
            names.append(f"m{i}/{f.name}")
        times: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
        with lab.jupyterlab(root) as base_token, lab.browser() as page:
            base, token = base_token.split("|")
            for _ in range(args.rounds):
                order = names[:]
                random.shuffle(order)
                for name in order:
                    folder, file = name.split("/")
                    page.goto(f"{base}/lab/tree/{folder}?token={token}&reset")  # the folder in the file browser
                    item = page.locator(f'.jp-DirListing-item[title^="Name: {file}"]').first
                    item.wait_for(timeout=120_000)
                    start = time.perf_counter()
                    item.dblclick()
                    page.wait_for_function("() => [...document.querySelectorAll('.onnxnb-lab-viewer')]"
                                           ".some(v => v.dataset.state)", timeout=120_000)
                    viewer = page.locator(".onnxnb-lab-viewer").last
                    if viewer.get_attribute("data-state") != "ready":
                        raise SystemExit(f"{name}: {viewer.inner_text()}")
                    wall = time.perf_counter() - start
                    server = float(viewer.get_attribute("data-server-seconds") or "nan")
                    times[name].append((wall, server))
        print(f"load average {os.getloadavg()[0]:.2f}")
        print("open s: double-click to drawn graph, first open and median of the rest (the server keeps what it read "
              "while the file is unchanged)")
        print(f"{'file':40} {'size':>10} {'nodes':>6} {'first open s':>13} {'server s':>9} {'again s':>8}")
        for f, name in zip(args.files, names):
            s = onnx_nb.summary(f)
            walls, servers = [t[0] for t in times[name]], [t[1] for t in times[name]]
            size = (s.file_bytes + s.external_bytes) / 2**20
            again = statistics.median(walls[1:]) if len(walls) > 1 else float("nan")
            print(f"{str(f)[-40:]:40} {size:8.0f} MB {s.nodes:6d} {walls[0]:13.2f} {servers[0]:9.3f} {again:8.2f}")


if __name__ == "__main__":
    main()
