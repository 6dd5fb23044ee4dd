"""Ctrl-C (a real SIGINT, as Jupyter's "interrupt kernel" sends) at many moments during export,
parity, quantization and benchmarking: no partial output, no stray temp files, and the next call works.

Each step runs in a child process. It first runs the step once to learn how long it takes, then runs it
again several times with a timer that sends SIGINT to the process at 5%, 20%, ... 95% of that time.
After each interrupt it checks the output folder (the target is either absent or a complete, valid
model; no ``.tmp`` entries) and its private temp folder (nothing beyond the caches a complete run
leaves, such as torch's inductor cache), then the next run goes ahead.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CHILD = """
import faulthandler, os, signal, sys, tempfile, threading, time
faulthandler.enable()  # a native crash after an interrupt (seen once in CI: SIGSEGV, no trace) says where it was
signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with SIGINT ignored (a background job)
from pathlib import Path
sys.path.insert(0, {tests!r})
import numpy as np, torch
import onnx_nb, tiny_models

work = Path({work!r})
out = work / "out"
out.mkdir()
bert = tiny_models.save("bert", work / "bert")
base = onnx_nb.export(str(bert), out=work / "base" / "model.onnx", progress=False)
target = out / "model.onnx"

def step():
{step}

def check(interrupted):
    entries = sorted(p.name for p in out.rglob("*"))
    assert not [e for e in entries if e.endswith(".tmp") or e.startswith(".")], entries
    temps = sorted(os.listdir(tempfile.gettempdir()))
    assert temps == caches, (temps, caches)
    if target.exists():
        onnx_nb.check_model(target)  # complete and valid, never half written
    if interrupted:
        for p in list(out.iterdir()):
            p.unlink()

t0 = time.perf_counter(); step(); full = time.perf_counter() - t0
caches = sorted(os.listdir(tempfile.gettempdir()))  # library caches made by a complete run (torch's) stay
check(False)
for p in list(out.iterdir()):
    p.unlink()
hits = 0
for fraction in (0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95):
    timer = threading.Timer(full * fraction, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        step()
        time.sleep(full)  # the interrupt may still come: let it land here, outside the step
    except KeyboardInterrupt:
        hits += 1
        check(True)
        continue
    finally:
        timer.cancel()
    check(False)
    for p in list(out.iterdir()):
        p.unlink()
step()
check(False)
print("HITS", hits, "FULL", round(full, 2))
"""

STEPS = {
    "export": "onnx_nb.export(str(bert), out=target, overwrite=True, progress=False)",
    "parity": "assert onnx_nb.check_parity(base, progress=False)",
    "quantize": "onnx_nb.quantize(base, method='static', calibration='generated', out=target, overwrite=True)",
    "benchmark": "onnx_nb.benchmark(base, providers='cpu', min_seconds=0.5, profile=True, progress=False)",
}


# (not alone: beside another worker's tests 6 or 7 of the 7 interrupts landed inside each step, 3 are asked)
@pytest.mark.parametrize("name", list(STEPS))
def test_interrupt_leaves_nothing_behind(tmp_path: Path, name: str) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    script = CHILD.format(tests=str(Path(__file__).parent), work=str(tmp_path),
                          step=textwrap.indent(STEPS[name], "    "))
    (tmp_path / "child.py").write_text(script)
    import os

    env = dict(os.environ, TMPDIR=str(tmp), HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, str(tmp_path / "child.py")], capture_output=True, text=True,
                          timeout=500, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    hits = int(done.stdout.split("HITS")[1].split()[0])
    assert hits >= 3, f"only {hits} interrupts landed inside the step: {done.stdout}"


LEFTOVER = """
import sys, warnings
sys.path.insert(0, {tests!r})
from pathlib import Path
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
import onnx_nb, tiny_models

work = Path({work!r})
bert = tiny_models.save("bert", work / "bert")
# what a Ctrl-C inside torch.export's ExitStack.__exit__ leaves (seen in a looped interrupt run): a fake mode still
# entered and the compiling/exporting flags still set
FakeTensorMode().__enter__()
torch.compiler._is_compiling_flag = torch.compiler._is_exporting_flag = True
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    result = onnx_nb.export(str(bert), out=work / "model.onnx", progress=False)
assert result, result.check
told = [str(w.message) for w in caught if "interrupted trace" in str(w.message)]
assert told and "FakeTensorMode" in told[0], told
assert not torch.compiler.is_exporting()
print("OK")
"""


def test_export_after_an_interrupt_left_torch_mid_trace(tmp_path: Path) -> None:
    """The state an interrupt can leave torch in (found by looping the test above: about 1 interrupt in 60) is
    cleared by the next export, which then works and says what it cleared."""
    (tmp_path / "child.py").write_text(LEFTOVER.format(tests=str(Path(__file__).parent), work=str(tmp_path)))
    import os

    done = subprocess.run([sys.executable, str(tmp_path / "child.py")], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert done.returncode == 0 and "OK" in done.stdout, done.stdout[-2000:] + done.stderr[-4000:]
