"""benchmark(): statistics from known timings, backends, the PyTorch row, profiles."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch

import onnx_nb
from onnx_nb.results.latency import LatencyRow
from onnx_nb.runtime.timing import time_runs


class FakeClock:
    """Each call advances by the next step; timings are then exactly known."""

    def __init__(self, step: float = 0.001) -> None:
        self.t = 0.0
        self.step = step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


class Recorder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)
        self.seen: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(x.clone())
        return self.lin(x).relu()


@pytest.fixture(scope="module")
def linear(tmp_path_factory: pytest.TempPathFactory) -> onnx_nb.ExportResult:
    torch.manual_seed(0)
    return onnx_nb.export(Recorder(), torch.randn(2, 8), out=tmp_path_factory.mktemp("b") / "lin.onnx",
                          exporter="torchscript", progress=False)


def test_statistics_from_known_timings() -> None:
    durations = iter([float(i) for i in range(1, 101)])  # 1..100 ms of fake work
    now = [0.0]

    def clock() -> float:
        return now[0]

    def work() -> None:
        now[0] += next(durations) / 1e3

    times = time_runs(work, warmup=0, runs=100, min_seconds=0, clock=clock)
    row = LatencyRow.from_times("v", "ort:cpu", "s", 4, times, 0.5, {})
    ms = np.arange(1, 101, dtype=float)
    assert row.runs == 100 and row.p50_ms == pytest.approx(np.percentile(ms, 50))
    assert row.p90_ms == pytest.approx(np.percentile(ms, 90)) and row.p99_ms == pytest.approx(np.percentile(ms, 99))
    assert row.mean_ms == pytest.approx(50.5) and row.min_ms == pytest.approx(1.0)
    assert row.std_ms == pytest.approx(float(ms.std(ddof=1)))
    assert row.throughput == pytest.approx(4 / (row.p50_ms / 1e3)) and row.first_run_ms == pytest.approx(500)
    assert row.noisy, "p90 is far above p50 here"


def test_warmup_excluded_and_min_seconds() -> None:
    calls = []
    clock = FakeClock(0.01)
    times = time_runs(lambda: calls.append(1), warmup=3, runs=None, min_seconds=0.5, clock=clock)
    assert len(calls) == 3 + len(times)
    assert len(times) >= 10 and all(t == pytest.approx(0.01) for t in times)


def test_benchmark_rows_with_injected_clock(linear: onnx_nb.ExportResult) -> None:
    table = onnx_nb.benchmark(linear, providers=("cpu", "cuda", "trt"), reference=linear, runs=7, warmup=2,
                              clock=FakeClock(0.002), progress=False)
    rows = {r.backend: r for r in table.rows}
    assert set(rows) == {"torch:cpu", "ort:cpu", "ort:cuda", "ort:trt"}
    cpu = rows["ort:cpu"]
    assert cpu.status == "ok" and cpu.runs == 7 and cpu.p50_ms == pytest.approx(2.0) and cpu.std_ms == pytest.approx(0)
    assert cpu.speedup == pytest.approx(1.0) and cpu.options["graph_level"] == "all"
    for name in ("ort:cuda", "ort:trt"):
        assert rows[name].status == "unavailable" and "available: " in rows[name].note
    assert table, "unavailable rows do not make the table fail"
    frame = table.to_pandas()
    assert {"p50_ms", "p90_ms", "p99_ms", "mean_ms", "std_ms", "min_ms", "throughput", "speedup",
            "first_run_ms", "runs"} <= set(frame.columns)
    data = json.loads(json.dumps(table.to_dict(), default=str))
    assert len(data["rows"]) == 4
    assert "ort:cuda" in repr(table)
    html = table._repr_html_()  # key columns in the table; providers this machine lacks folded into a line each
    key = html.split('<table class="key">')[1].split("</table>")[0]
    assert "p50_ms" in key and "speedup" in key and "options" not in key and "ort:cuda" not in key
    assert "ort:cuda: not available here (1 row)" in html and "graph_level=all" in html.split("<details>")[1]


def test_pytorch_row_uses_the_same_inputs(linear: onnx_nb.ExportResult) -> None:
    model = linear.source.model
    model.seen.clear()
    table = onnx_nb.benchmark(linear, providers="cpu", reference=linear, runs=3, warmup=1,
                              shapes=[{"batch": 5}], progress=False)
    sample = linear.source.sample["x"].numpy()
    expected = np.take(sample, np.arange(5) % 2, axis=0)
    timed = [t for t in model.seen if t.shape[0] == 5]  # the others: one call at the sample to name outputs
    torch_row = next(r for r in table.rows if r.backend.startswith("torch"))
    from onnx_nb.steps.benchmark.measuring import MAX_ROUNDS, ROUND_SECONDS, ROUNDS

    rounds = len(torch_row.rounds_ms)
    calls = int(min(20, max(1, np.ceil(ROUND_SECONDS * 1e3 / torch_row.p50_ms))))
    assert ROUNDS <= rounds <= MAX_ROUNDS
    assert len(timed) == 1 + 1 + 3 + rounds * (1 + calls), "first run + warm-up + timed runs, then the rounds"
    assert all(np.array_equal(t.numpy(), expected) for t in timed)


def test_speedup_intervals_from_interleaved_rounds() -> None:
    """The interval is the order-statistic one for the median of the paired ratios (93.75% for 5 rounds: the
    lowest and highest); a speed-up whose interval includes 1.0 is printed as the interval alone; a table whose
    rows are against different baselines shows the baseline among its key columns."""
    from onnx_nb.results.latency import LatencyRow, key_columns, median_interval, summarize

    assert median_interval([1.0, 2.0, 3.0, 4.0]) is None, "4 values cannot cover 90%"
    assert median_interval([5.0, 1.0, 3.0, 2.0, 4.0]) == (1.0, 5.0)
    assert median_interval([float(i) for i in range(10)]) == (1.0, 8.0)  # 97.9% for [v1, v8]; [v2, v7] is 89%

    def row(variant: str, backend: str, p50: float, rounds: list[float], unpad: bool = False) -> LatencyRow:
        r = LatencyRow(variant, backend, "batch=8", p50_ms=p50, rounds_ms=rounds)
        if unpad:
            r.options["runtime"] = "skips padding"
        return r

    rows = [row("PyTorch eager", "torch:cpu", 50.0, [50, 52, 49, 60, 51]),
            row("PyTorch eager, padding skipped", "torch:cpu", 30.0, [30, 31, 29, 33, 30], unpad=True),
            row("fp32", "ort:cpu", 20.0, [20, 21, 20, 22, 19]),
            row("int8", "ort:cpu", 48.0, [40, 60, 45, 70, 50]),
            row("optimized", "ort:cpu", 10.0, [10, 10, 11, 10, 10], unpad=True),
            row("timed while busy", "ort:cpu", 40.0, [20, 21, 20, 22, 19])]
    table = summarize(rows, {}, [])
    fp32, int8, fast = rows[2], rows[3], rows[4]
    assert fp32.speedup == pytest.approx(2.5) and fp32.baseline == "PyTorch eager"
    assert fp32.speedup_low == pytest.approx(min(50 / 20, 52 / 21, 49 / 20, 60 / 22, 51 / 19))
    assert fp32.separable and fp32.speedup_text().startswith("2.50x [")
    assert not int8.separable and int8.speedup_text().endswith("x, not separable")
    assert "1.04" not in int8.speedup_text(), "no ratio printed that the rounds cannot support"
    assert fast.baseline == "PyTorch eager, padding skipped" and fast.speedup == pytest.approx(3.0)
    busy = rows[5]  # its p50 says 1.25x, the rounds it shared with its baseline say about 2.5x
    assert busy.separable and not busy.supported and busy.noisy
    assert busy.speedup_text() == f"{busy.speedup_low:.2f}-{busy.speedup_high:.2f}x, rounds only"
    assert key_columns(rows)[key_columns(rows).index("speedup") + 1] == "baseline"
    assert "baseline" not in key_columns(rows[2:4]) and rows[0].baseline == "" and rows[0].speedup_text() == "1.00x"
    assert any("not separable" in n for n in table.notes) and any("interleaved rounds" in n for n in table.notes)
    assert any("rounds only" in n for n in table.notes)
    text = repr(table)
    assert "baseline" in text and "not separable" in text


def test_real_timings_and_several_shapes(linear: onnx_nb.ExportResult) -> None:
    table = onnx_nb.benchmark(linear, providers="cpu", reference=linear, shapes=[{"batch": 1}, {"batch": 16}],
                              runs=20, warmup=3, threads=1, progress=False)
    ok = [r for r in table.rows if r.status == "ok"]
    assert len(ok) == 4 and all(r.p50_ms and 0 < r.min_ms <= r.p50_ms <= r.p90_ms <= r.p99_ms for r in ok)
    assert [r.batch for r in ok] == [1, 1, 16, 16]
    fig = table.figure()
    assert fig.layout.xaxis.title.text == "batch size" and len(fig.data) == 2
    assert table.best() is not None and table.best().backend == "ort:cpu"  # type: ignore[union-attr]
    # which provider ran how many nodes of the session's graph (ONNX Runtime's graph-assignment information)
    import onnxruntime as ort

    import onnx_nb.runtime.providers as providers

    ort_rows = [r for r in ok if r.backend == "ort:cpu"]
    if hasattr(ort.InferenceSession, "get_provider_graph_assignment_info"):
        session = ort.InferenceSession(str(linear.path), providers.options(level="all", record_assignment=True))
        counted = sum(len(part.get_nodes()) for part in session.get_provider_graph_assignment_info())
        assert counted > 0 and all(r.options["nodes"] == f"CPU {counted}" for r in ort_rows), ort_rows[0].options
        assert f"nodes=CPU {counted}" in table._repr_html_()  # among the options, under All columns
    else:  # an ONNX Runtime before 1.32: nothing recorded, nothing claimed
        assert all("nodes" not in r.options for r in ort_rows)


def test_rows_say_the_work_they_did_and_their_share_of_this_machines_measured_peak(
        linear: onnx_nb.ExportResult, tmp_path: Path) -> None:
    """Every CPU row of a shape carries the export's arithmetic there (2 x batch x 8 x 4 multiply-accumulates for a
    Linear(8, 4)) and its share of the peak ONNX Runtime's own 1024^3 kernel reaches here: fp32 for the file and
    PyTorch, INT8's (MatMulInteger) for the quantized file."""
    from onnx_nb.steps.benchmark.roofline import int8_file, peak_gops

    int8 = onnx_nb.quantize(linear, out=tmp_path / "lin.int8.onnx")
    # the variant first: every row is still judged on the graph it was made from (the export's)
    table = onnx_nb.benchmark([int8, linear], providers=["cpu", "openvino-runtime"], reference=linear,
                              shapes=[{"batch": 4}, {"batch": 16}], runs=10, warmup=2, threads=1, progress=False)
    ok = [r for r in table.rows if r.status == "ok" and not r.backend.startswith("openvino")]
    assert len(ok) == 6 and [r.work_gops for r in ok] == [pytest.approx(2 * r.batch * 8 * 4 / 1e9) for r in ok]
    fp32, quantized = peak_gops("fp32", 1), peak_gops("int8", 1)
    assert int8_file(Path(int8.path)) and not int8_file(Path(linear.path))
    for r in ok:  # the share is the row's own operations per second over the peak of its arithmetic
        peak = quantized if r.variant == int8.name else fp32
        assert r.of_peak == pytest.approx(r.work_gops / (r.p50_ms / 1e3) / peak) and 0 < r.of_peak < 1
    assert all(r.of_peak is None for r in table.rows if r.backend.startswith("openvino"))  # not the CPU's peaks
    note = next(n for n in table.notes if n.startswith("of peak:"))
    assert f"fp32 {fp32:.0f} GFLOP/s" in note and f"int8 {quantized:.0f} GOP/s" in note and "GB/s" not in note
    assert "of_peak" in table.to_pandas().columns and "of_peak" in repr(table)


def test_memory_is_never_less_than_the_weights(tmp_path: Path) -> None:
    """An ONNX Runtime row's peak_mb is at least the weights its session holds: timed a second time, the file's
    session is kept from the first and the process barely grows (0.07 MB for a 21.9 MB file was shown); the row then
    shows the weights, and its note says what the figure is."""
    import torch

    result = onnx_nb.export(torch.nn.Linear(1024, 2048), torch.randn(2, 1024), out=tmp_path / "big.onnx",
                            progress=False)
    weights = Path(result.path).stat().st_size / 1e6  # MB, as size_mb
    assert weights > 7
    for _ in range(2):
        table = onnx_nb.benchmark(result, runs=5, warmup=1, progress=False, providers="cpu")
        row = next(r for r in table.rows if r.backend == "ort:cpu")
        assert row.peak_mb is not None and row.peak_mb >= weights, (row.peak_mb, weights, row.note)


def test_openvino_runtime_row(linear: onnx_nb.ExportResult) -> None:
    pytest.importorskip("openvino")
    table = onnx_nb.benchmark(linear, providers=["cpu", "openvino-runtime"], runs=5, warmup=1, progress=False)
    ov = [r for r in table.rows if r.backend == "openvino-runtime:cpu"]
    assert ov and ov[0].status == "ok" and ov[0].p50_ms and "openvino" in ov[0].options["runtime"]
    # the precision OpenVINO computes in is said (an f32 file runs in bf16 on CPUs with bf16 instructions)
    assert ov[0].options["precision"] in ("f32", "bf16", "f16"), ov[0].options
    available = onnx_nb.benchmark(linear, runs=3, warmup=0, progress=False)
    assert {"ort:cpu", "openvino-runtime:cpu"} <= {r.backend for r in available.rows}


def test_profile_parsing_on_real_file(tmp_path: Path, linear: onnx_nb.ExportResult) -> None:
    opts = ort.SessionOptions()
    opts.enable_profiling = True
    opts.profile_file_prefix = str(tmp_path / "p")
    sess = ort.InferenceSession(str(linear.path), opts, providers=["CPUExecutionProvider"])
    for _ in range(4):
        sess.run(None, {"x": np.ones((3, 8), np.float32)})
    prof = onnx_nb.parse_profile(sess.end_profiling())
    ops = {o["op_type"] for o in prof.by_op}
    assert ops == {"FusedGemm"}, ops  # ORT fuses Gemm + Relu
    assert prof.runs == 4 and sum(o["share"] for o in prof.by_op) == pytest.approx(1.0)
    assert prof.by_node[0]["total_ms"] >= prof.by_node[-1]["total_ms"]
    assert prof.figure().data and "ms/run" in repr(prof)
    table = onnx_nb.benchmark(linear, providers="cpu", runs=3, profile=True, progress=False)
    assert len(table.profiles) == 1 and "profile" in repr(table)
    with pytest.raises(onnx_nb.InvalidModelError):
        onnx_nb.parse_profile(tmp_path / "missing.json")


def test_magic_and_cli(ip: Any, linear: onnx_nb.ExportResult) -> None:
    ip.user_ns["lin"] = linear
    table = ip.run_line_magic("onnx_bench", "lin --providers cpu,cuda --runs 5 --reference lin --shapes batch=3")
    assert {r.backend for r in table.rows} == {"torch:cpu", "ort:cpu", "ort:cuda"}
    done = subprocess.run([sys.executable, "-m", "onnx_nb", "bench", str(linear.path), "--providers", "cpu",
                           "--runs", "5", "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rows"][0]["runs"] == 5
    assert "onnx-nb benchmark [1/2]" in done.stderr


def test_bad_arguments(linear: onnx_nb.ExportResult) -> None:
    with pytest.raises(onnx_nb.InvalidArgumentError):
        onnx_nb.benchmark(linear, runs=0)
    with pytest.raises(onnx_nb.InvalidArgumentError, match="Cannot benchmark"):
        onnx_nb.benchmark(42)
    with pytest.raises(onnx_nb.InvalidArgumentError, match="Unknown execution provider"):
        onnx_nb.benchmark(linear, providers=["warp-drive"])


def test_onnx_nb_threads_caps_every_sessions_threads(linear: onnx_nb.ExportResult,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """``ONNX_NB_THREADS``: the most threads a session takes, and its count when a call gives none (processes
    sharing the cores each take their share); the rows say the count and why; a bad value is a clear error."""
    from onnx_nb.runtime.providers import options

    monkeypatch.setenv("ONNX_NB_THREADS", "1")
    assert options().intra_op_num_threads == 1 and options(threads=2).intra_op_num_threads == 1
    table = onnx_nb.benchmark(linear, providers="cpu", reference=linear, runs=3, warmup=1, threads=2, progress=False)
    assert {r.backend: r.options.get("intra_op_threads", r.options.get("threads")) for r in table.rows} == {
        "ort:cpu": "1 (ONNX_NB_THREADS)", "torch:cpu": 1}
    monkeypatch.setenv("ONNX_NB_THREADS", "4")
    assert options(threads=2).intra_op_num_threads == 2 and options().intra_op_num_threads == 4
    monkeypatch.delenv("ONNX_NB_THREADS")
    assert options().intra_op_num_threads == 0  # ONNX Runtime's own choice
    monkeypatch.setenv("ONNX_NB_THREADS", "two")
    with pytest.raises(onnx_nb.InvalidArgumentError, match="ONNX_NB_THREADS='two' is not a thread count"):
        options()
