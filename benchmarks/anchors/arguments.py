"""The command line both anchor scripts take (they run in side environments, without onnx-nb), and the clock that
times each decode step of a Hugging Face ``generate()`` (here and in ``benchmarks/generation.py``)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path


class StepClock:
    """A ``generate(streamer=...)`` that notes when each token arrives: its first ``put()`` is the prompt, the
    second the first new token (the prefill's), each later one a decode step."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def put(self, value: object) -> None:
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass

    def steps(self) -> list[float]:
        """Seconds of each decode step after the first new token."""
        return [b - a for a, b in zip(self.times[1:], self.times[2:])]


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder", type=Path)
    parser.add_argument("--prompt", required=True, help="token ids, comma-separated")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2, help="generations; the first is the untimed one")
    return parser.parse_args()
