"""Timing: seconds per call (warm-up, a run count or a time budget), several candidates interleaved in shuffled
rounds, and ONNX files timed side by side. Used by benchmark(), by optimize()'s route and level choices and by
the isolation worker, so it sits below all of them."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

Clock = Callable[[], float]
MIN_RUNS = 10
MAX_RUNS = 10_000


def time_runs(fn: Callable[[], Any], *, warmup: int, runs: int | None, min_seconds: float,
              clock: Clock = time.perf_counter) -> list[float]:
    """Seconds per call of ``fn``: ``warmup`` calls first (not kept), then ``runs`` calls, or as many
    as fit in ``min_seconds`` (at least 10)."""
    for _ in range(warmup):
        fn()
    times: list[float] = []
    start = clock()
    while True:
        t0 = clock()
        fn()
        times.append(clock() - t0)
        if runs is not None:
            if len(times) >= runs:
                break
        elif (len(times) >= MIN_RUNS and clock() - start >= min_seconds) or len(times) >= MAX_RUNS:
            break
    return times


def interleaved(runners: Mapping[str, Callable[[], Any]], *, rounds: int = 3, warmup: int = 2, runs: int = 5,
                seed: int = 0, clock: Clock = time.perf_counter) -> dict[str, list[float]]:
    """Seconds per call of each runner, visited in a new shuffled order every round, each visit starting with
    ``warmup`` untimed calls: on a small machine a candidate's time depends on which one ran just before it
    (the previous session's threads still spinning), and this spreads that bias over every candidate."""
    import random

    order = list(runners)
    times: dict[str, list[float]] = {name: [] for name in order}
    for round_ in range(rounds):
        random.Random(seed + round_).shuffle(order)
        for name in order:
            times[name] += time_runs(runners[name], warmup=warmup, runs=runs, min_seconds=0.0, clock=clock)
    return times


def until_separated(runners: Mapping[str, Callable[[], Any]], *, rounds: int = 3, warmup: int = 1, runs: int = 3,
                    seed: int = 0, reference: Collection[str] = (), clock: Clock = time.perf_counter
                    ) -> dict[str, list[float]]:
    """Seconds per call of each runner, in rounds as :func:`interleaved` times them (each in a new shuffled order,
    untimed calls first), stopping after two rounds when they already name the fastest candidate beyond doubt (its
    slowest call faster than every other candidate's fastest: with three calls per round, two samples of one
    distribution fall apart so by chance 2 times in 924); ``rounds`` at most. ``reference``: runners timed beside
    the candidates (a parent to compare with) and left out of that test. For the choices made between files
    (routes, levels, INT8 schemes), where the third round of a clear choice changed nothing and cost a third of
    the time."""
    times: dict[str, list[float]] = {name: [] for name in runners}
    candidates = [name for name in runners if name not in reference]
    for round_ in range(rounds):
        for name, seconds in interleaved(runners, rounds=1, warmup=warmup, runs=runs, seed=seed + round_,
                                         clock=clock).items():
            times[name] += seconds
        if round_ >= 1 and len(candidates) > 1:
            best = min(candidates, key=lambda n: sorted(times[n])[len(times[n]) // 2])
            if all(max(times[best]) < min(times[n]) for n in candidates if n != best):
                break
    return times
