"""The command line and the protocol every candidate script here follows (the anchors run in side environments,
without onnx-nb), and the clock that times each decode step of a Hugging Face ``generate()`` (here and in
``benchmarks/generation.py``).

Protocol: the script loads its model once, then runs one greedy generation for each line it reads on stdin and
prints its result as one JSON line (tokens, time to first token s, decode s, each decode step's s); it ends at EOF.
``benchmarks/generation.py`` keeps every candidate's process alive for the whole run, so rounds interleave cheaply.
By hand: ``printf 'go\ngo\n' | python genai_generate.py FOLDER --prompt 5,6,7``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


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
    parser.add_argument("--runtime", default="onnx-nb", help="onnx-nb's candidates: generate(runtime=...)")
    return parser.parse_args()


class Served:
    """The other end of :func:`serve`: a candidate's script in a process of its own (a side environment's
    python, or this one's), started at the first request and kept for the whole run."""

    def __init__(self, command: list[str]) -> None:
        self.command = command
        self.process: Any = None

    def request(self) -> dict[str, Any]:
        import subprocess
        import tempfile

        if self.process is None:
            self.errors = tempfile.TemporaryFile(mode="w+")  # stderr to a file: a full pipe would block the child
            self.process = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=self.errors, text=True, cwd=Path(__file__).parent)
        self.process.stdin.write("go\n")
        self.process.stdin.flush()
        for line in self.process.stdout:
            if line.startswith("{"):
                return dict(json.loads(line))
        self.errors.seek(0)
        raise RuntimeError(f"{self.command[1]} failed: {self.errors.read()[-800:]}")

    def peak_bytes(self) -> int | None:
        """The candidate process's resident peak so far (``VmHWM``), None before it started."""
        if self.process is None:
            return None
        with open(f"/proc/{self.process.pid}/status") as f:
            return next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:")), None)

    def close(self) -> None:
        if self.process is not None:
            self.process.stdin.close()
            self.process.wait(timeout=60)


def serve(generation: Callable[[], dict[str, Any]]) -> None:
    """One generation per line on stdin, its result as a JSON line on stdout, until stdin closes."""
    for _ in sys.stdin:
        print(json.dumps(generation()), flush=True)
