"""A reader's Run All of notebooks/01_quickstart.ipynb, timed per cell (a fresh kernel in a scratch folder, as
nbclient runs it; the Studio's "Run all steps" is not pressed). Issue 74's target: under 2 minutes on 2 quiet cores.

    python benchmarks/quickstart_run_all.py [--rounds 2]

Prints each code cell's seconds, the total per round, the kernel's peak memory, and the load average.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PEAK = "import onnx_nb.runtime.memory as m; print('peak_mb', (m.process_peak_bytes() or 0) // 10**6)"


def run_all() -> tuple[float, list[tuple[float, str]], str]:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(ROOT / "notebooks" / "01_quickstart.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PEAK))
    folder = Path(tempfile.mkdtemp(prefix="quickstart-"))
    client = NotebookClient(nb, kernel_name="python3", timeout=900, resources={"metadata": {"path": str(folder)}})
    cells: list[tuple[float, str]] = []
    try:
        started = time.perf_counter()
        with client.setup_kernel(env={k: v for k, v in os.environ.items() if k != "ONNX_NB_OUT"}):
            for i, cell in enumerate(nb.cells[:-1]):
                t = time.perf_counter()
                client.execute_cell(cell, i)
                if cell.cell_type == "code":
                    cells.append((time.perf_counter() - t, cell.source.splitlines()[0][:72]))
            total = time.perf_counter() - started
            client.execute_cell(nb.cells[-1], len(nb.cells) - 1)
        peak = "".join(o.get("text", "") for o in nb.cells[-1].outputs).strip()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return total, cells, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    for r in range(args.rounds):
        total, cells, peak = run_all()
        for seconds, first in cells:
            print(f"  {seconds:6.1f} s  {first}")
        print(f"round {r + 1}: Run All {total:.1f} s ({'under' if total < 120 else 'over'} 2 minutes), kernel {peak}; "
              f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
