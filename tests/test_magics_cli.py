"""The ``%onnx_export`` magic in a real IPython shell, and the ``onnx-nb`` command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from IPython.core.error import UsageError

import onnx_nb


def test_magic_exports_a_variable(ip: object, tmp_path: Path) -> None:
    ip.user_ns["net"] = torch.nn.Sequential(torch.nn.Linear(4, 2))  # type: ignore[attr-defined]
    ip.user_ns["x"] = torch.randn(2, 4)  # type: ignore[attr-defined]
    out = tmp_path / "net.onnx"
    result = ip.run_line_magic("onnx_export", f"net --sample x --out {out} --exporter torchscript")  # type: ignore[attr-defined]
    assert isinstance(result, onnx_nb.ExportResult) and result.path == out and result.exporter == "torchscript"
    static = ip.run_line_magic("onnx_export", f"net --sample x --out {tmp_path / 's.onnx'} --static")  # type: ignore[attr-defined]
    assert static.inputs[0].shape == [2, 4]


def test_magic_exports_a_folder(ip: object, tiny_dirs: dict[str, Path], tmp_path: Path) -> None:
    result = ip.run_line_magic("onnx_export", f"{tiny_dirs['vit']} --out {tmp_path / 'v.onnx'}")  # type: ignore[attr-defined]
    assert result.source.task == "image-classification"


def test_magic_errors_are_short(ip: object, tmp_path: Path) -> None:
    ip.user_ns["net"] = torch.nn.Linear(4, 2)  # type: ignore[attr-defined]
    with pytest.raises(UsageError, match=r"^SampleError: Linear is a plain"):
        ip.run_line_magic("onnx_export", "net")  # type: ignore[attr-defined]
    with pytest.raises(UsageError, match="--sample 'nothing' is not a variable"):
        ip.run_line_magic("onnx_export", "net --sample nothing")  # type: ignore[attr-defined]
    (tmp_path / "m.onnx").write_bytes(b"mine")
    ip.user_ns["x"] = torch.randn(1, 4)  # type: ignore[attr-defined]
    with pytest.raises(UsageError, match="already exists"):
        ip.run_line_magic("onnx_export", f"net --sample x --out {tmp_path / 'm.onnx'}")  # type: ignore[attr-defined]
    assert (tmp_path / "m.onnx").read_bytes() == b"mine"


def test_magic_help_lists_options() -> None:
    from onnx_nb.frontends.magics import OnnxMagics

    doc = OnnxMagics.onnx_export.__doc__ or ""
    for flag in ("--sample", "--task", "--out", "--opset", "--exporter", "--static", "--overwrite"):
        assert flag in doc


def test_quantize_flags_reach_quantize() -> None:
    """--algorithm and --mixed-precision as quantize() takes them (the CLI and %onnx_quantize share the parser)."""
    import argparse

    from onnx_nb.frontends import specs

    parser = argparse.ArgumentParser()
    for flags, kwargs, _where in specs.QUANTIZE:
        parser.add_argument(*flags, **kwargs)
    for given, expected in (([], "auto"), (["--mixed-precision", "off"], None), (["--mixed-precision", "1.3"], 1.3)):
        ns = parser.parse_args(["m.onnx", "--method", "int4", "--algorithm", "gptq", *given])
        kwargs = specs.quantize_kwargs(ns)
        assert kwargs["mixed_precision"] == expected and kwargs["algorithm"] == "gptq", kwargs


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "onnx_nb", *args], capture_output=True, text=True,
                          timeout=300)


def test_cli_export(tiny_dirs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "bert.onnx"
    done = cli("export", str(tiny_dirs["bert"]), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "exporter" in done.stdout and "[batch, sequence]" in done.stdout
    assert "onnx-nb export [3/5] exporting with dynamo" in done.stderr
    again = cli("export", str(tiny_dirs["bert"]), "--out", str(out))
    assert again.returncode == 2 and "OutputExistsError" in again.stderr and "--overwrite" in again.stderr
    assert "Traceback" not in again.stderr


def test_cli_bad_path(tmp_path: Path) -> None:
    done = cli("export", str(tmp_path / "missing"))
    assert done.returncode == 2 and "No such folder" in done.stderr


def test_cli_demo(tmp_path: Path) -> None:
    folder = tmp_path / "demo"
    done = cli("demo", "--out", str(folder))
    assert done.returncode == 0, done.stderr
    assert (folder / "model.onnx").exists() and (folder / "report.html").exists()
    assert "all-MiniLM-L6-v2" in (folder / "report.html").read_text()
    assert "passed" in done.stdout
    from onnx_nb.frontends.demo import demo_folder

    # the demo may replace its own files: its folder is accepted again (the pipeline then runs with overwrite=True,
    # as tests/test_plan.py checks; a second whole demo here cost 48 s of the suite)
    assert demo_folder(folder) == folder and (folder / "report.html").exists()
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep")
    refused = cli("demo", "--out", str(other))
    assert refused.returncode == 2 and (other / "notes.txt").read_text() == "keep"


def test_pipeline_magic_and_cli(ip: object, tiny_dirs: dict[str, Path], tmp_path: Path) -> None:
    report = ip.run_line_magic(  # type: ignore[attr-defined]
        "onnx_pipeline", f"{tiny_dirs['bert']} --out {tmp_path / 'm'} --html {tmp_path / 'r.html'}")
    assert [s.step for s in report.steps] == ["export", "parity", "optimize", "quantize", "latency"]
    assert report and (tmp_path / "r.html").read_text().count("<details open><summary><b>") == 5  # a section a step
    done = cli("pipeline", str(tiny_dirs["vit"]), "--out", str(tmp_path / "v"), "--quantize", "none", "--json")
    assert done.returncode == 0, done.stderr
    import json

    assert [s["step"] for s in json.loads(done.stdout)["steps"]] == ["export", "parity", "optimize", "latency"]


def test_pipeline_keeps_going_past_a_failed_step(tmp_path: Path) -> None:
    import onnx_nb

    class Noisy(torch.nn.Module):  # random at inference: no export can match it; the rest still runs
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.rand_like(x)

    report = onnx_nb.pipeline(Noisy(), torch.randn(2, 4), out=tmp_path / "a", progress=False)
    statuses = {s.step: s.status for s in report.steps}
    assert statuses["export"] == "failed-check" and statuses["parity"] == "failed-check", statuses
    assert statuses["latency"] == "ok", statuses
    assert not report and "✗" in report._repr_html_()
    page = report.save_html(tmp_path / "report.html").read_text()
    assert "onnx-nb report" in page
    # each figure in its step's section: the parity histogram after the parity section starts, the latency
    # chart after the latency one; inline, the sections start folded (their tables were shown above)
    sections = {s.step: page.index(f"<summary><b>{s.step}</b></summary>") for s in report.steps}
    assert sections["parity"] < page.index("Parity errors") < sections["latency"] < page.index("Latency per variant")
    assert "<details open>" in page and "<details open>" not in report._repr_html_()

    class Empty(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> None:
            return None

    broken = onnx_nb.pipeline(Empty(), torch.randn(2, 4), out=tmp_path / "b", progress=False)
    statuses = {s.step: s.status for s in broken.steps}
    assert statuses["export"] == "failed" and statuses["parity"] == "skipped" and statuses["latency"] == "skipped"
    assert "SampleError" in broken.steps[0].error and "failed" in repr(broken)


def test_cli_shows_no_library_noise(tiny_dirs: dict[str, Path], tmp_path: Path) -> None:
    """Every command's stderr holds onnx-nb's own progress lines and nothing else: the libraries' warnings and log
    lines (transformers, torch's exporters, ONNX Runtime's optimizer and quantizer) go into the results' warnings."""
    out = tmp_path / "bert.onnx"
    commands = [
        ("export", str(tiny_dirs["bert"]), "--out", str(out)),
        ("check", str(tiny_dirs["bert"]), str(out)),
        ("optimize", str(out), "--out", str(tmp_path / "opt.onnx")),
        ("quantize", str(tmp_path / "opt.onnx"), "--out", str(tmp_path / "q.onnx")),
        ("bench", str(out), "--runs", "3"),
        ("export", str(tiny_dirs["gpt2"]), "--out", str(tmp_path / "gpt2.onnx")),
        ("generate", str(tmp_path / "gpt2.onnx"), "--ids", "5,6,7", "--max-new-tokens", "3"),
    ]
    for command in commands:
        done = cli(*command)
        assert done.returncode in (0, 1), (command, done.stderr[-2000:])
        noise = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("onnx-nb ")]
        assert not noise, (command[0], noise[:10])


def test_readme_magic_example_runs_as_written(ip: object, tiny_dirs: dict[str, Path], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's magic block, cell by cell, with its placeholder folder a real one: ``result`` is bound by the
    assignment, and ``--reference result`` is that variable (it was looked up on the Hugging Face Hub)."""
    import re

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = re.search(r"```ipython\n(.*?)```", readme, re.S)
    assert block, "the README's magic example"
    monkeypatch.chdir(tmp_path)  # the export writes under ./onnx_nb_out
    monkeypatch.delenv("ONNX_NB_OUT", raising=False)
    ip.user_ns.pop("result", None)  # type: ignore[attr-defined]
    for line in block.group(1).strip().splitlines():
        line = line.replace("path/to/hf-folder", str(tiny_dirs["bert"]))
        outcome = ip.run_cell(line)  # type: ignore[attr-defined]
        assert outcome.success, (line, outcome.error_in_exec)
    table = outcome.result
    assert isinstance(ip.user_ns["result"], onnx_nb.ExportResult)  # type: ignore[attr-defined]
    assert any(row.backend.startswith("torch") and row.status == "ok" for row in table.rows), table
    with pytest.raises(UsageError, match=r"No variable or folder named .reslt.\. Did you mean"):
        ip.run_line_magic("onnx_bench", "result --reference reslt")  # type: ignore[attr-defined]
