"""Make the package index's torchvision load beside a CPU-only torch (the development environment's fix).

The setup pins torch==2.13.0 from a local CPU wheel; the only torchvision 0.28.0 wheel on the index is a CUDA build
whose compiled operators (``_C.so``: nms, roi_align, ...) link against ``libc10_cuda.so`` and ``libtorch_cuda.so``,
which a CPU torch does not have, so ``torchvision.ops.nms`` fails with "operator torchvision::nms does not exist".
This script, run by ``scripts/dev`` after installing, does nothing when torchvision's operators already work (a CUDA
torch, or a CPU torch with the CPU torchvision from PyTorch's own index). Otherwise it compiles the 17 CUDA entry
points ``_C.so`` refers to as functions that abort if ever called (``scripts/torchvision_cuda_stub.c``; they are only
reached from CUDA kernels) and installs an import hook that loads them, with the CUDA runtime the wheel bundles,
just before ``torchvision`` is imported. The CPU kernels that then run are torchvision's own.

Users do not need this: ``pip install torch torchvision`` from one index gives a matching pair.

    python scripts/torchvision_cpu.py      # with the venv's python; needs gcc (well under a second of compiling)
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

HOOK = "onnx_nb_torchvision_cpu"
CHECK = "import torch, torchvision; torchvision.ops.nms(torch.zeros(1, 4), torch.ones(1), 0.5)"
HOOK_SOURCE = '''"""Written by onnx-nb's scripts/torchvision_cpu.py: the CUDA stand-ins, loaded before torchvision."""
import ctypes
import glob
import importlib.abc
import os
import sys

LIBS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torchvision.libs")


class _Preload(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torchvision":
            sys.meta_path.remove(self)
            for pattern in ("libcudart.*.so.*", "libc10_cuda.so", "libtorch_cuda.so"):
                for lib in sorted(glob.glob(os.path.join(LIBS, pattern)))[:1]:
                    ctypes.CDLL(lib, mode=os.RTLD_GLOBAL)
        return None


sys.meta_path.insert(0, _Preload())
'''


def works() -> bool:
    return subprocess.run([sys.executable, "-c", CHECK], capture_output=True).returncode == 0


def main() -> int:
    if works():
        return 0
    site = Path(sysconfig.get_paths()["purelib"])
    libs = site / "torchvision.libs"
    if not (site / "torchvision").is_dir():
        print("torchvision_cpu: torchvision is not installed here; nothing to do", file=sys.stderr)
        return 0
    libs.mkdir(exist_ok=True)
    stub = Path(__file__).with_name("torchvision_cuda_stub.c")
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(libs / "libc10_cuda.so"),
                    "-Wl,-soname,libc10_cuda.so", str(stub)], check=True)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(libs / "libtorch_cuda.so"),
                    "-Wl,-soname,libtorch_cuda.so", "-x", "c", "/dev/null"], check=True)
    (site / f"{HOOK}.py").write_text(HOOK_SOURCE)
    (site / f"{HOOK}.pth").write_text(f"import {HOOK}\n")
    if not works():
        print("torchvision_cpu: torchvision's operators still do not load:", file=sys.stderr)
        subprocess.run([sys.executable, "-c", CHECK])
        return 1
    print("torchvision_cpu: torchvision's CPU operators load beside the CPU torch", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
