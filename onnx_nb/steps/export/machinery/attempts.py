"""The one loop every single-file route runs (the PyTorch exporters, the Keras / TensorFlow / scikit-learn
converters): each candidate writes into a staging folder, the file is checked in ONNX Runtime, the first that passes
(or the last, its failed check a warning) is published at the target; a full disk stops at once, any other failure
goes on to the next candidate and is kept to say why."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ....errors import first_line
from ....results.export import ExportCheck


@dataclass
class Outcome:
    """What the loop ended with: the candidate published (``name``, empty when every one failed to write), its
    files and check, what each earlier candidate did (``attempts``: name -> why it was not kept; ``errors``: the
    exceptions of those that failed to write), what the writer returned for the one kept, the seconds every attempt
    took together."""

    name: str = ""
    files: list[Path] = field(default_factory=list)
    check: ExportCheck = field(default_factory=ExportCheck.none)
    attempts: dict[str, str] = field(default_factory=dict)
    errors: dict[str, BaseException] = field(default_factory=dict)
    written: Any = None
    seconds: float = 0.0


def first_that_passes(order: list[str], target: Path, write: Callable[[str, Path], Any],
                      check: Callable[[str, Path, Any], Mapping[str, Any]], steps: Any, *, verb: str, against: str,
                      stop_on: tuple[type[BaseException], ...] = (), describe: Callable[[BaseException], str] | None
                      = None) -> Outcome:
    """Run ``write(name, staged_path)`` for each name in ``order`` into a staging folder beside ``target``, then
    ``check(name, staged_path, written)``; publish the first file whose check passes, or the last one written (its
    check then says what differs). ``stop_on``: exceptions no other candidate would fare better with (besides a full
    disk, an interrupt and running out of memory). ``describe``: an exception as the attempt's one line."""
    from ....runtime.files import disk_error, publish, staging_dir

    fatal: tuple[type[BaseException], ...] = (KeyboardInterrupt, MemoryError, *stop_on)
    outcome = Outcome()
    started = time.perf_counter()  # every attempt counts, failed ones included
    for i, name in enumerate(order):
        if i:
            steps.add(2)  # another candidate: its writing and its check
        steps.step(f"{verb} {name}")
        with staging_dir(target) as tmp:
            staged = tmp / target.name
            try:
                written = write(name, staged)
            except fatal:
                raise
            except Exception as exc:
                full = disk_error(exc, target.parent)
                if full is not None:  # no other candidate would fare better
                    raise full from exc
                outcome.attempts[name] = describe(exc) if describe else f"{type(exc).__name__}: {first_line(exc, 300)}"
                outcome.errors[name] = exc
                steps.step(f"{name} failed")
                continue
            steps.step("checking in ONNX Runtime")
            result = ExportCheck.of(check(name, staged, written))
            if not result.passed and name != order[-1]:
                why = result.error or result.summary
                outcome.attempts[name] = f"its graph did not match {against}: {why}"
                continue
            steps.step("saving")
            outcome.files = publish(staged, target)
            outcome.name, outcome.check, outcome.written = name, result, written
            outcome.seconds = time.perf_counter() - started
            return outcome
    outcome.seconds = time.perf_counter() - started
    return outcome
