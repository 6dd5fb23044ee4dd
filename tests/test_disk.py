"""A full disk and a read-only folder, for real: each case runs in a child process inside its own mount
namespace (``unshare --user --map-root-user --mount``) where a small or read-only tmpfs is mounted over
the output folder. Running as root would ignore ``chmod``; a read-only mount refuses root too."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

UNSHARE = shutil.which("unshare")


def namespaces_work() -> bool:
    if UNSHARE is None:
        return False
    probe = subprocess.run([UNSHARE, "--user", "--map-root-user", "--mount", "true"], capture_output=True)
    return probe.returncode == 0


pytestmark = pytest.mark.skipif(not namespaces_work(), reason="user and mount namespaces are not available here")

PRELUDE = """
import os, sys, torch, numpy as np
sys.path.insert(0, {tests!r})
import onnx_nb
mount = {mount!r}
def leftovers():
    return sorted(os.listdir(mount))
def still_usable():
    r = onnx_nb.export(torch.nn.Linear(4, 2), torch.randn(2, 4), out={spare!r} + "/after.onnx", progress=False)
    assert r and onnx_nb.check_parity(r, progress=False), "the next call works"
"""


def run_in_mount(tmp_path: Path, options: str, body: str) -> str:
    mount = tmp_path / "mnt"
    spare = tmp_path / "spare"
    mount.mkdir()
    spare.mkdir()
    script = PRELUDE.format(tests=str(Path(__file__).parent), mount=str(mount), spare=str(spare)) + \
        textwrap.dedent(body)
    (tmp_path / "case.py").write_text(script)
    command = f'mount -t tmpfs -o {options} tmpfs "$1" && exec "$2" "$3"'
    done = subprocess.run([UNSHARE, "--user", "--map-root-user", "--mount", "sh", "-c", command, "_", str(mount),
                           sys.executable, str(tmp_path / "case.py")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_disk_full_before_export(tmp_path: Path) -> None:
    """`disk-full-export`: 4 MB of weights for a 1 MB disk is refused before any work."""
    out = run_in_mount(tmp_path, "size=1m", """
        big = torch.nn.Linear(1024, 1024)
        try:
            onnx_nb.export(big, torch.randn(2, 1024), out=mount + "/m.onnx", progress=False)
        except onnx_nb.DiskFullError as exc:
            print("RAISED", exc)
        assert leftovers() == [], leftovers()
        still_usable()
    """)
    assert "RAISED Writing this model needs about 4.2 MB" in out and "1.0 MB free" in out


def test_disk_fills_while_writing_a_variant(tmp_path: Path) -> None:
    """`disk-full-variant`: the disk fills up mid-write: no half file, no temp folder, a clear error."""
    out = run_in_mount(tmp_path, "size=2m", """
        src = onnx_nb.export(torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU()),
                             torch.randn(2, 1024), out={spare!r} + "/src.onnx", progress=False)
        open(mount + "/keep.txt", "w").write("the user's own file")
        try:
            onnx_nb.optimize(src, level="basic", out=mount + "/opt.onnx")
        except onnx_nb.DiskFullError as exc:
            print("RAISED", exc)
        assert leftovers() == ["keep.txt"], leftovers()
        assert open(mount + "/keep.txt").read() == "the user's own file"
        still_usable()
    """.replace("{spare!r}", repr(str(tmp_path / "spare"))))
    assert "RAISED The disk holding" in out and "filled up while writing" in out


def test_read_only_folder(tmp_path: Path) -> None:
    """`read-only-folder`: export, optimize and the HTML report refuse a read-only folder up front."""
    out = run_in_mount(tmp_path, "ro", """
        src = onnx_nb.export(torch.nn.Linear(4, 2), torch.randn(2, 4), out={spare!r} + "/src.onnx", progress=False)
        calls = [lambda: onnx_nb.export(torch.nn.Linear(4, 2), torch.randn(2, 4), out=mount + "/m.onnx",
                                        progress=False),
                 lambda: onnx_nb.optimize(src, out=mount + "/sub/opt.onnx"),
                 lambda: onnx_nb.pipeline(torch.nn.Linear(4, 2), torch.randn(2, 4), out={spare!r} + "/p",
                                          benchmark=False, progress=False).save_html(mount + "/r.html")]
        for call in calls:
            try:
                call()
            except onnx_nb.OutputNotWritableError as exc:
                print("RAISED", exc)
        assert leftovers() == []
        still_usable()
    """.replace("{spare!r}", repr(str(tmp_path / "spare"))))
    assert out.count("RAISED") == 3, out
    assert "is not writable" in out or "Read-only file system" in out
