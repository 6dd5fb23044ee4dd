"""The bad-input catalogue (docs/bad-input.md): every case raises an OnnxNbError subclass whose message
names the problem and the fix, leaves the user's files as they were, and the next call works.

Each case is one row of ``CASES``: ``(id, entry point, expected error, message pattern, call)``. The
documentation lists the same ids; a test keeps the two in step.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from IPython.core.error import UsageError

import onnx_nb
from onnx_nb.steps.variants.quantizing import CalibrationError

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "bad-input.md"


class Buckets(torch.nn.Module):
    """searchsorted has no ONNX translation in either exporter (cummax, the case before, has onnx-nb's own now)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.searchsorted(torch.tensor([-1.0, 0.0, 1.0]), x)


class World:
    """Files and results the cases work on, made once in a temporary folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)).eval()
        self.result = onnx_nb.export(self.model, torch.randn(2, 4), out=root / "good" / "model.onnx", progress=False)
        self.path = self.result.path
        self.kept = root / "mine" / "precious.onnx"  # the user's own file: never touched
        self.kept.parent.mkdir()
        self.kept.write_bytes(self.path.read_bytes())
        good = self.path.read_bytes()
        self.empty = self.write("empty.onnx", b"")
        self.truncated = self.write("truncated.onnx", good[: len(good) // 3])
        self.corrupt = self.write("corrupt.onnx", bytes(b ^ 0x5A for b in good[:200]) + good[200:])
        self.png = self.write("picture.onnx", b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
        self.text = self.write("notes.onnx", b"these are my notes, not a model\n" * 20)
        (root / "empty_dir").mkdir()
        (root / "empty_dir" / "readme.txt").write_text("no model here")

    def write(self, name: str, data: bytes) -> Path:
        path = self.root / "bad" / name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
        return path

    def feed(self, batch: int = 2) -> dict[str, np.ndarray]:
        return {"input": np.random.default_rng(0).standard_normal((batch, 4)).astype(np.float32)}


Case = tuple[str, str, type[BaseException], str, Callable[[World], Any]]


def magic(line: str) -> Callable[[World], Any]:
    def run(w: World) -> Any:
        from IPython.testing.globalipapp import get_ipython, start_ipython

        shell = start_ipython() or get_ipython()
        shell.run_line_magic("load_ext", "onnx_nb")
        shell.user_ns.update(res=w.result, model=w.model, x=torch.randn(2, 4))
        return shell.run_line_magic(*line.split(" ", 1))
    return run


CASES: list[Case] = [
    # export(): what the user passes as the model and its sample
    ("export-not-a-model", "export()", onnx_nb.InvalidArgumentError, r"Pass a torch\.nn\.Module",
     lambda w: onnx_nb.export(42)),
    ("export-no-sample", "export()", onnx_nb.SampleError, r"pass a sample, e\.g\.",
     lambda w: onnx_nb.export(w.model, progress=False)),
    ("export-sample-wrong-type", "export()", onnx_nb.SampleError, r"is a str, not a tensor",
     lambda w: onnx_nb.export(w.model, "hello", progress=False)),
    ("export-extra-input", "export()", onnx_nb.SampleError, r"takes 1",
     lambda w: onnx_nb.export(w.model, (torch.randn(1, 4), torch.randn(1, 4)), progress=False)),
    ("export-wrong-shape", "export()", onnx_nb.SampleError, r"fails on the sample inputs",
     lambda w: onnx_nb.export(w.model, torch.randn(2, 5), progress=False)),
    ("export-wrong-dtype", "export()", onnx_nb.SampleError, r"fails on the sample inputs.*Long",
     lambda w: onnx_nb.export(w.model, torch.ones(2, 4, dtype=torch.long), progress=False)),
    ("export-axis-beyond-rank", "export()", onnx_nb.SampleError, r"names axis 3",
     lambda w: onnx_nb.export(w.model, torch.randn(2, 4), dynamic={"input": {3: "x"}}, progress=False)),
    ("export-missing-path", "export()", onnx_nb.ModelNotFoundError, r"No such folder",
     lambda w: onnx_nb.export(str(w.root / "nowhere"), progress=False)),
    ("export-folder-without-model", "export()", onnx_nb.ModelNotFoundError, r"has no config\.json",
     lambda w: onnx_nb.export(str(w.root / "empty_dir"), progress=False)),
    ("export-hub-offline", "export()", onnx_nb.HubUnavailableError, r"Pass a local folder instead",
     lambda w: onnx_nb.export("some-org/some-model", out=w.root / "hub.onnx", progress=False)),
    ("export-unsupported-op", "export()", onnx_nb.UnsupportedOperatorError, r"aten::searchsorted",
     lambda w: onnx_nb.export(Buckets(), torch.randn(2, 4), out=w.root / "u.onnx", progress=False)),
    ("export-unknown-exporter", "export()", onnx_nb.InvalidArgumentError, r"exporter='onnxscript'",
     lambda w: onnx_nb.export(w.model, torch.randn(2, 4), exporter="onnxscript")),
    ("export-bad-opset", "export()", onnx_nb.InvalidArgumentError, r"opset",
     lambda w: onnx_nb.export(w.model, torch.randn(2, 4), opset=99)),
    ("export-unknown-task", "export()", onnx_nb.InvalidArgumentError, r"task only applies to Hugging Face",
     lambda w: onnx_nb.export(w.model, torch.randn(2, 4), task="translate-klingon")),
    ("export-cache-on-a-module", "export()", onnx_nb.InvalidArgumentError, r"cache=True is for generative models",
     lambda w: onnx_nb.export(w.model, torch.randn(2, 4), cache=True)),
    ("export-existing-output", "export()", onnx_nb.OutputExistsError, r"overwrite=True",
     lambda w: onnx_nb.export(w.model, torch.randn(2, 4), out=w.kept, progress=False)),
    ("export-output-is-folder", "export()", onnx_nb.OutputExistsError, r"is a folder",
     lambda w: onnx_nb.export(w.model, torch.randn(2, 4), out=w.kept.parent, progress=False)),
    ("export-output-under-a-file", "export()", onnx_nb.OutputNotWritableError, r"Cannot create the output folder",
     lambda w: onnx_nb.export(w.model, torch.randn(2, 4), out=w.kept / "sub" / "m.onnx", progress=False)),
    ("export-pickled-checkpoint", "export()", onnx_nb.UnsafeCheckpointError, r"allow_pickle=True",
     lambda w: (torch.save(w.model, w.root / "whole.pt"),
                onnx_nb.export(w.root / "whole.pt", torch.randn(2, 4), progress=False))),
    # ONNX files that are not what they claim
    ("file-empty", "check_parity()", onnx_nb.InvalidModelError, r"is empty \(0 bytes\)",
     lambda w: onnx_nb.check_parity(w.model, w.empty, w.feed(), progress=False)),
    ("file-truncated", "check_parity()", onnx_nb.InvalidModelError, r"truncated|not a valid ONNX model",
     lambda w: onnx_nb.check_parity(w.model, w.truncated, w.feed(), progress=False)),
    ("file-corrupt", "check_model()", onnx_nb.InvalidModelError, r"not a readable ONNX model|not a valid ONNX",
     lambda w: onnx_nb.check_model(w.corrupt)),
    ("file-not-onnx-png", "optimize()", onnx_nb.InvalidModelError, r"not a readable ONNX model|holds no ONNX graph",
     lambda w: onnx_nb.optimize(w.png)),
    ("file-not-onnx-text", "quantize()", onnx_nb.InvalidModelError, r"not a readable ONNX model|holds no ONNX graph",
     lambda w: onnx_nb.quantize(w.text)),
    ("file-missing", "GraphView()", onnx_nb.InvalidModelError, r"No ONNX file at",
     lambda w: onnx_nb.GraphView(w.root / "gone.onnx")),
    ("file-is-folder", "check_model()", onnx_nb.InvalidModelError, r"is a folder; pass the path of its \.onnx",
     lambda w: onnx_nb.check_model(w.root)),
    # check_parity(): providers, tolerances, samples
    ("parity-unknown-provider", "check_parity()", onnx_nb.InvalidArgumentError, r"Unknown execution provider 'tpu'",
     lambda w: onnx_nb.check_parity(w.result, providers="tpu", progress=False)),
    ("parity-only-unavailable-providers", "check_parity()", onnx_nb.ProviderUnavailableError,
     r"None of the requested execution providers.*available here: cpu",
     lambda w: onnx_nb.check_parity(w.result, providers=("tensorrt",), progress=False)),
    ("parity-negative-tolerance", "check_parity()", onnx_nb.InvalidArgumentError, r"atol must be a number >= 0",
     lambda w: onnx_nb.check_parity(w.result, atol=-1, progress=False)),
    ("parity-no-onnx-model", "check_parity()", onnx_nb.InvalidArgumentError, r"Which ONNX model should be checked",
     lambda w: onnx_nb.check_parity(w.model)),
    ("parity-sample-wrong-names", "check_parity()", onnx_nb.SampleError, r"input|sample",
     lambda w: onnx_nb.check_parity(w.path, w.path, {"pixels": np.ones((1, 4), np.float32)}, progress=False)),
    ("parity-sample-wrong-rank", "check_parity()", onnx_nb.SampleError, r"rank|dimension|shape",
     lambda w: onnx_nb.check_parity(w.path, w.path, {"input": np.ones((4,), np.float32)}, progress=False)),
    ("parity-bad-shapes", "check_parity()", onnx_nb.InvalidArgumentError, r"shape",
     lambda w: onnx_nb.check_parity(w.result, shapes=[{"sequence": 8}], progress=False)),
    ("parity-unknown-probe", "check_parity()", onnx_nb.InvalidArgumentError, r"Unknown probe 'sideways'; choose from",
     lambda w: onnx_nb.check_parity(w.result, probes=["sideways"], progress=False)),
    # benchmark()
    ("bench-nothing", "benchmark()", onnx_nb.InvalidArgumentError, r"needs at least one model",
     lambda w: onnx_nb.benchmark([])),
    ("bench-not-a-file", "benchmark()", onnx_nb.InvalidArgumentError, r"Cannot benchmark a int",
     lambda w: onnx_nb.benchmark(42)),
    ("bench-negative-runs", "benchmark()", onnx_nb.InvalidArgumentError, r"warmup must be >= 0",
     lambda w: onnx_nb.benchmark(w.path, warmup=-1)),
    ("bench-unknown-level", "benchmark()", onnx_nb.InvalidArgumentError, r"level='max'",
     lambda w: onnx_nb.benchmark(w.path, level="max")),
    # optimize() / quantize() / autotune()
    ("optimize-unknown-level", "optimize()", onnx_nb.InvalidArgumentError, r"level='ultra'",
     lambda w: onnx_nb.optimize(w.path, level="ultra")),
    ("optimize-existing-output", "optimize()", onnx_nb.OutputExistsError, r"already exists",
     lambda w: onnx_nb.optimize(w.path, out=w.kept)),
    ("quantize-unknown-method", "quantize()", onnx_nb.InvalidArgumentError, r"method='int3'",
     lambda w: onnx_nb.quantize(w.path, method="int3")),
    ("quantize-unknown-cpu", "quantize()", onnx_nb.InvalidArgumentError, r"target_cpu='486'.*'avx2'",
     lambda w: onnx_nb.quantize(w.path, target_cpu="486")),
    ("quantize-unknown-scheme", "quantize()", onnx_nb.InvalidArgumentError, r"scheme='s4s4'.*'u8u8'",
     lambda w: onnx_nb.quantize(w.path, scheme="s4s4")),
    ("quantize-unknown-int4-algorithm", "quantize()", onnx_nb.InvalidArgumentError, r"algorithm='awq4'.*'hqq'",
     lambda w: onnx_nb.quantize(w.path, method="int4", algorithm="awq4")),
    ("quantize-algorithm-not-int4", "quantize()", onnx_nb.InvalidArgumentError, r"algorithm='hqq' is for method='int4'",
     lambda w: onnx_nb.quantize(w.path, method="dynamic", algorithm="hqq")),
    ("quantize-unknown-mixed-precision", "quantize()", onnx_nb.InvalidArgumentError,
     r"mixed_precision='most': choose 'auto'",
     lambda w: onnx_nb.quantize(w.path, method="int4", mixed_precision="most")),
    ("quantize-calibration-wrong-shape", "quantize()", CalibrationError, r"calibration\[0\]",
     lambda w: onnx_nb.quantize(w.path, method="static", calibration=[{"input": np.ones((2, 7), np.float32)}],
                                out=w.root / "q1.onnx")),
    ("quantize-calibration-wrong-input", "quantize()", CalibrationError, r"has no input 'input' \(it has 'ids'\)",
     lambda w: onnx_nb.quantize(w.path, method="static", calibration=[{"ids": np.ones((2, 4), np.float32)}],
                                out=w.root / "q2.onnx")),
    ("quantize-calibration-empty", "quantize()", CalibrationError, r"empty",
     lambda w: onnx_nb.quantize(w.path, method="static", calibration=[], out=w.root / "q3.onnx")),
    ("autotune-unknown-metric", "autotune()", onnx_nb.InvalidArgumentError, r"metric='speed'",
     lambda w: onnx_nb.autotune(w.result, metric="speed")),
    ("generate-not-a-decoder", "generate()", onnx_nb.InvalidArgumentError,
     r"is not a decoder: generate\(\) needs an input_ids input and a logits output per token .*onnx_nb.export",
     lambda w: onnx_nb.generate(w.path, [[1, 2]])),
    ("quant-debug-no-reference", "quant_debug()", onnx_nb.InvalidArgumentError, r"fp32 parent",
     lambda w: onnx_nb.quant_debug(w.path, w.model)),
    # report, magics (short UsageError naming the onnx-nb error), command line (exit 2, no traceback)
    ("report-existing-file", "Report.save_html()", onnx_nb.OutputExistsError, r"already exists",
     lambda w: __import__("onnx_nb.results.report", fromlist=["Report"]).Report("m", []).save_html(
         w.kept, overwrite=False)),
    ("report-of-not-a-result", "Report.of()", onnx_nb.InvalidArgumentError,
     r"takes the results of onnx-nb's steps .*not a PosixPath", lambda w: onnx_nb.Report.of(w.result, w.path)),
    ("report-of-nothing", "Report.of()", onnx_nb.InvalidArgumentError, r"needs at least one result",
     lambda w: onnx_nb.Report.of()),
    ("magic-export-no-sample", "%onnx_export", UsageError, r"^SampleError: .*pass a sample",
     magic("onnx_export model")),
    ("magic-export-unknown-name", "%onnx_export", UsageError,
     r"^No variable or folder named 'modle'\. Did you mean 'model'\? .*quote it", magic("onnx_export modle")),
    ("magic-parity-unknown-provider", "%onnx_parity", UsageError, r"^InvalidArgumentError: Unknown execution",
     magic("onnx_parity res --providers tpu")),
    ("magic-bench-bad-shapes", "%onnx_bench", UsageError, r"^InvalidArgumentError: --shapes: 'batch' is not",
     magic("onnx_bench res --shapes batch")),
    ("magic-quantize-unknown-method", "%onnx_quantize", UsageError, r"invalid choice|method",
     magic("onnx_quantize res --method int3")),
    ("magic-optimize-missing-file", "%onnx_optimize", UsageError, r"^InvalidModelError: No ONNX file at",
     magic("onnx_optimize nowhere.onnx")),
    ("magic-autotune-unknown-metric", "%onnx_autotune", UsageError, r"invalid choice: 'speed'",
     magic("onnx_autotune res --metric speed")),
    ("magic-generate-no-prompt", "%onnx_generate", UsageError, r"^InvalidArgumentError: Give a prompt",
     magic("onnx_generate res")),
]

CLI_CASES: list[tuple[str, list[str], str]] = [
    ("cli-export-missing", ["export", "{root}/nowhere"], r"ModelNotFoundError: No such folder"),
    ("cli-check-corrupt", ["check", "{path}", "{corrupt}"], r"InvalidModelError"),
    ("cli-bench-unknown-provider", ["bench", "{path}", "--providers", "tpu"], r"Unknown execution provider"),
    ("cli-optimize-existing", ["optimize", "{path}", "--out", "{kept}"], r"OutputExistsError: .*--overwrite"),
    ("cli-quantize-static-no-data", ["quantize", "{path}", "--method", "static"], r"CalibrationError|calibration"),
    ("cli-autotune-not-onnx", ["autotune", "{text}"], r"InvalidModelError: .*notes\.onnx"),
    ("cli-demo-out-is-a-file", ["demo", "--out", "{kept}"], r"OutputExistsError|is a file"),
    ("cli-generate-not-a-decoder", ["generate", "{path}", "--ids", "1,2"], r"is not a decoder: generate\(\) needs"),
    # pipeline reports a failed step (exit 1) with the same error, rather than raising
    ("cli-pipeline-missing", ["pipeline", "{root}/nowhere"], r"ModelNotFoundError: No such folder"),
]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return World(tmp_path_factory.mktemp("bad"))


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input(world: World, case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    ident, _entry, expected, pattern, call = case
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(world.root / "hf"))
    before = digest(world.root / "mine"), digest(world.root / "good")
    here = world.root / "cwd" / ident  # where a step given no out= would write (./onnx_nb_out/<name>/)
    here.mkdir(parents=True)
    monkeypatch.chdir(here)
    monkeypatch.delenv("ONNX_NB_OUT", raising=False)
    with pytest.raises(expected) as info:
        call(world)
    message = str(info.value)
    assert re.search(pattern, message, re.S), f"{ident}: {message}"
    if expected is not UsageError:
        assert isinstance(info.value, onnx_nb.OnnxNbError)
        assert len(message) > 40, f"{ident}: the message should say what to do: {message}"
    assert (digest(world.root / "mine"), digest(world.root / "good")) == before, "the user's files are untouched"
    leftovers = [p for p in world.root.rglob("*") if p.name.startswith(".") and p.name.endswith(".tmp")]
    assert not leftovers, leftovers
    assert not list(here.rglob("*")), f"{ident}: a failed step left {list(here.rglob('*'))}"  # no empty folder


@pytest.mark.parametrize("case", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_bad_input_on_the_command_line(world: World, case: tuple[str, list[str], str]) -> None:
    _ident, argv, pattern = case
    names = {"root": world.root, "path": world.path, "corrupt": world.corrupt, "kept": world.kept,
             "text": world.text}
    done = subprocess.run([sys.executable, "-m", "onnx_nb", *[a.format(**names) for a in argv]],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == (1 if argv[0] == "pipeline" else 2), done.stdout + done.stderr
    assert re.search(pattern, done.stdout + done.stderr, re.S), done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_the_kernel_is_still_usable(world: World) -> None:
    """After every failure above, the same process exports, checks and times a model as usual."""
    result = onnx_nb.export(world.model, torch.randn(3, 4), out=world.root / "after" / "m.onnx", progress=False)
    assert result and onnx_nb.check_parity(result, progress=False)
    assert onnx_nb.benchmark(result, providers="cpu", runs=3, progress=False).rows[0].status == "ok"


def test_catalogue_is_documented() -> None:
    text = DOC.read_text()
    ids = [c[0] for c in CASES] + [c[0] for c in CLI_CASES] + list(SPECIAL)
    missing = [i for i in ids if f"`{i}`" not in text]
    assert not missing, f"docs/bad-input.md lacks {missing}"
    assert len(ids) >= 30


# cases tested elsewhere, because they need their own process, mount or model
SPECIAL = {
    "disk-full-export": "tests/test_disk.py", "disk-full-variant": "tests/test_disk.py",
    "read-only-folder": "tests/test_disk.py", "external-data-escapes": "tests/test_untrusted.py",
    "runtime-crash": "tests/test_untrusted.py", "interrupt": "tests/test_interrupts.py",
}
