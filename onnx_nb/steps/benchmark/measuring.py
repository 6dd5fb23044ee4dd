"""One latency row, measured the same way for every backend and family (benchmark() and the generation rows): a
first call, warm-up, timed calls, peak memory, PyTorch's threads set for torch rows, and interleaved rounds of every
row at the end that pair each row with its baseline (the speed-ups' intervals) and flag rows timed while the machine
was busy; which row a variant's parent is (its lineage)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import InsufficientMemoryError
from ...render import sig
from ...results.latency import LatencyRow
from ...runtime.timing import Clock, time_runs, until_separated

ROUNDS = 5  # interleaved rounds once every row is timed: the speed-ups' intervals come from them
MAX_ROUNDS = 15  # more rounds while an interval includes 1.0 ...
MORE_ROUNDS_SECONDS = 30.0  # ... for at most this long (and at most as long again as the first rounds)
ROUND_SECONDS = 0.05  # each row's timed calls in a round (at least one, at most 20)
REMEASURE_RATIO = 1.3  # p50 and the rounds' median this far apart: the machine was busy during one of them


def measure(variant: str, backend: str, tag: str, batch: int, make: Callable[[], Any], warmup: int,
             runs: int | None, min_seconds: float, clock: Clock, threads: int | None) -> tuple[LatencyRow, Any]:
    """The row, and the runner (kept for the re-measure; None when the backend failed)."""
    torch_threads = torch_threads_set(threads) if backend.startswith("torch") else contextlib.nullcontext()
    from ...runtime.memory import peak_memory

    with torch_threads, peak_memory() as peak:
        try:
            t0 = clock()
            runner = make()
            runner()
            first = clock() - t0
            if getattr(runner, "isolated", False):  # timed inside the worker: no copying between processes
                times = runner.session.time(runner.feed, warmup=warmup, runs=runs, min_seconds=min_seconds)
            else:
                times = time_runs(runner, warmup=warmup, runs=runs, min_seconds=min_seconds, clock=clock)
        except InsufficientMemoryError:
            raise  # refused before the session was made: no row of this step can run here
        except Exception as exc:  # noqa: BLE001 - a backend that fails is a row, not a crash
            from ...errors import telling_lines

            return LatencyRow(variant, backend, tag, status="error",
                              note=f"{type(exc).__name__}: {telling_lines(exc, 400)}"), None
    row = LatencyRow.from_times(variant, backend, tag, batch, times, first, runner.options)
    if peak.added_bytes is not None and not getattr(runner, "isolated", False):  # a worker's memory is its own
        grown = peak.added_bytes + getattr(runner, "held_bytes", 0)
        floor = getattr(runner, "floor_bytes", 0)  # a session holds its file's weights whatever the process had
        row.peak_mb = max(grown, floor) / 1e6
        if floor > grown:
            row.note = (row.note + "; " if row.note else "") + (
                f"peak_mb: the file's weights ({floor / 1e6:.1f} MB), which the session holds; the process grew "
                f"only {grown / 1e6:.2f} MB (memory it had touched before was reused)")
    return row, runner


def rounds(kept: list[tuple[LatencyRow, Any]], clock: Clock, threads: int | None) -> None:
    """Time every kept row again in :data:`ROUNDS` interleaved rounds once all rows are done, each round in a new
    shuffled order and each visit starting with an untimed call (on two cores a row's time depends on which session
    ran just before it). Every row gets one median per round (``rounds_ms``): a row and its baseline timed in the same
    round give one paired ratio, and the ratios' spread is the speed-up's interval (:func:`results.latency.summarize`).
    While an interval still includes 1.0, more rounds run, at most as long again as the first ones
    (:data:`MORE_ROUNDS_SECONDS` at most, :data:`MAX_ROUNDS` in all). A row whose p50 and rounds disagree by more than
    :data:`REMEASURE_RATIO` was timed while the machine was busy and is flagged noisy, however small its own
    spread."""
    import random

    from ...results.latency import baselines, unsettled

    if not kept:
        return
    for row, _ in kept:
        row.rounds_ms = []
    started, done, first = clock(), 0, 0.0
    pairs = baselines([row for row, _ in kept])
    while done < ROUNDS or (done < MAX_ROUNDS and unsettled(pairs)
                            and clock() - started < min(MORE_ROUNDS_SECONDS, first * 2)):
        order = list(kept)
        random.Random(done).shuffle(order)
        for row, runner in order:
            visit(row, runner, clock, threads)
        done += 1
        if done == ROUNDS:
            first = clock() - started
    for row, _ in kept:
        if not row.rounds_ms:
            continue
        again = float(np.median(row.rounds_ms))
        row.remeasure_ms = again
        if row.p50_ms and again > 0:
            ratio = max(row.p50_ms, again) / min(row.p50_ms, again)
            if ratio > REMEASURE_RATIO:
                row.noisy = True
                row.note = (f"{row.note}; " if row.note else "") + (
                    f"{len(row.rounds_ms)} interleaved rounds gave {sig(again)} ms against p50 {sig(row.p50_ms)} ms "
                    f"({ratio:.1f}x apart): the machine was busy during one of them")
    kept.clear()
    from ...runtime.memory import give_back

    give_back()  # the rows' sessions are closed: their memory goes before the next shape's open


def visit(row: LatencyRow, runner: Any, clock: Clock, threads: int | None) -> None:
    """One round's look at a row: an untimed call, then calls for about :data:`ROUND_SECONDS` (1 to 20); their
    median joins ``row.rounds_ms``. A runner that fails now leaves the row as it was measured."""
    calls = int(min(20, max(1, np.ceil(ROUND_SECONDS * 1e3 / row.p50_ms)))) if row.p50_ms else 1
    torch_threads = torch_threads_set(threads) if row.backend.startswith("torch") else contextlib.nullcontext()
    try:
        with torch_threads:
            if getattr(runner, "isolated", False):  # timed where the session lives, as its row was
                times = runner.session.time(runner.feed, warmup=1, runs=calls, min_seconds=0.0)
            else:
                times = time_runs(runner, warmup=1, runs=calls, min_seconds=0.0, clock=clock)
    except Exception:  # noqa: BLE001 - the row stands as measured
        return
    row.rounds_ms.append(float(np.median(times)) * 1e3)


@contextlib.contextmanager
def torch_threads_set(threads: int | None) -> Iterator[None]:
    import torch

    from ...runtime.providers import threads_for

    before = torch.get_num_threads()
    threads = threads_for(threads)
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def time_files(paths: Mapping[str, Path], feed: Mapping[str, np.ndarray], *, threads: int | None = None,
               rounds: int = 3, reference: tuple[str, ...] = ()) -> dict[str, float]:
    """Median ms per run of each ONNX file on the CPU provider, timed interleaved (:func:`timing.until_separated`):
    in each round an untimed call, then three timed (nine per file at most: enough to choose between files whose
    times differ by more than their rounds do; 21 calls per file made MiniLM's INT8 choice the most of quantize()'s
    time), two rounds where they already name the fastest file beyond doubt (``reference``: files timed beside the
    candidates, not among them: a parent)."""
    from ...runtime.sessions import session

    runners: dict[str, Callable[[], Any]] = {}
    for name, path in paths.items():
        s = session(path, "CPUExecutionProvider", threads=threads, level="all", check_graph=False)
        own = {i.name: np.asarray(feed[i.name]) for i in s.get_inputs()}
        runners[name] = partial(s.run, None, own)
    times = until_separated(runners, rounds=rounds, warmup=1, runs=3, reference=reference)
    return {name: float(np.median(t)) * 1e3 for name, t in times.items()}


def described(entries: list[tuple[str, Any, Path]], rows: list[LatencyRow]) -> None:
    """Each model's file size and the accuracy its own check measured (a variant's parity against its reference:
    the lowest cosine and argmax agreement; an export's check against PyTorch) on its rows, beside their speed."""
    from ...runtime.onnxfile import file_bytes

    about: dict[str, tuple[float | None, float | None, float | None]] = {}
    for name, obj, path in entries:
        # a folder of graphs (transformers' exporter's): every graph's file with its data, as it lies on disk
        size = file_bytes(path) if not Path(path).is_dir() else sum(file_bytes(p) for p in Path(path).glob("*.onnx"))
        parity = getattr(obj, "parity", None)
        found = [r for r in getattr(parity, "rows", None) or [] if r.status in ("pass", "fail")]
        cosines = [r.cosine for r in found if r.cosine is not None]
        tops = [r.argmax_agreement for r in found if r.argmax_agreement is not None]
        if not found:
            check = getattr(obj, "check", None) or {}
            cosines = [check["cosine"]] if isinstance(check.get("cosine"), (int, float)) else []
            tops = [check["argmax_agreement"]] if isinstance(check.get("argmax_agreement"), (int, float)) else []
        about[name] = (size / 1e6 if size else None, min(cosines) if cosines else None, min(tops) if tops else None)
    for row in rows:
        if row.variant in about:
            row.size_mb, row.cosine, row.top1 = about[row.variant]


def lineage(entries: list[tuple[str, Any, Path]], rows: list[LatencyRow]) -> dict[str, str]:
    """Each row's parent (the entry whose file its variant was made from, when benchmarked too) set on the row;
    returns what is known of why a variant may be slower than its parent (variant name -> reason)."""
    from ...runtime.cpu import this_cpu

    by_path = {resolved(path): name for name, _obj, path in entries}
    parents, why, failed = {}, {}, set()
    for name, obj, _path in entries:
        if getattr(obj, "parity", None) is not None and not obj:  # a variant whose own parity check failed
            failed.add(name)
        parent = getattr(obj, "parent", None)
        if parent is not None and resolved(Path(parent)) in by_path:
            parents[name] = by_path[resolved(Path(parent))]
        recipe = getattr(obj, "recipe", None) or {}
        if recipe.get("method") in ("dynamic", "static"):
            cpu = this_cpu()
            why[name] = (f"INT8 products on {cpu.kernel} take 16-bit steps (no VNNI here)" if cpu.saturates else
                         "the INT8 products do not outweigh quantizing the activations at this size"
                         if recipe["method"] == "dynamic" else "")
    for row in rows:
        row.parent = parents.get(row.variant, row.parent)
        if row.variant in failed and not row.failed_parity:
            row.failed_parity = True
            row.note = f"its file failed its parity check: timed, never the one to pick. {row.note}".strip()
    return why


def resolved(path: Path) -> Path:
    """``path`` resolved (as given where it cannot be)."""
    try:
        return Path(path).resolve()
    except OSError:
        return Path(path)
