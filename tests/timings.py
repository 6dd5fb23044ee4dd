"""Where the suite's time goes: every test's setup, call and teardown seconds, each fixture's setup seconds, the
worker that ran it, when it started and the machine's load then, kept in one JSON file per run (the whole list, not the
slowest 25). ``benchmarks/suite_time.py`` reads it; ``tests/durations.json``, a kept copy of a whole run, orders the
next runs' work (tests/scheduling.py).

Workers time their fixtures and attach them to the setup report; the process that writes the file (the controller
under pytest-xdist, else the one process) collects the reports as they arrive.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

FIXTURES = "onnx_nb_fixtures"
LOAD = "onnx_nb_load"


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


class Recorder:
    """A pytest plugin: records the run and writes it to ``path`` at the end."""

    def __init__(self, config: pytest.Config, path: Path) -> None:
        self.config, self.path = config, path
        self.tests: dict[str, dict[str, Any]] = {}
        self.fixtures: dict[str, float] = {}  # this worker's fixture setups since the last setup report
        self.start = time.time()
        self.load_start = os.getloadavg()

    # --- every process that runs tests -------------------------------------------------------------------------
    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef[Any],
                             request: pytest.FixtureRequest) -> Iterator[None]:
        start = time.perf_counter()
        yield
        seconds = time.perf_counter() - start
        key = f"{fixturedef.argname} ({fixturedef.scope})"
        self.fixtures[key] = self.fixtures.get(key, 0.0) + seconds

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
        outcome = yield
        report = outcome.get_result()
        if call.when == "setup":
            fixtures = {k: round(v, 3) for k, v in self.fixtures.items() if v >= 0.001}
            self.fixtures.clear()
            report.user_properties = [*report.user_properties, (FIXTURES, fixtures),
                                      (LOAD, round(os.getloadavg()[0], 2))]

    # --- the process that writes the file ------------------------------------------------------------------------
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if is_worker(self.config):
            return
        row = self.tests.setdefault(report.nodeid, {"outcome": "passed"})
        row[report.when] = round(report.duration, 3)
        if report.when == "setup" and getattr(report, "start", None):
            row["start"] = round(report.start - self.start, 1)  # seconds into the run: what ran beside what
        node = getattr(report, "node", None)
        row["worker"] = getattr(getattr(node, "gateway", None), "id", None) or "main"
        for key, value in report.user_properties:
            if key == FIXTURES:
                row["fixtures"] = value
            elif key == LOAD:
                row["load"] = value
        if report.failed:
            row["outcome"] = "failed" if report.when == "call" else "error"
        elif report.skipped and row["outcome"] == "passed":
            row["outcome"] = "skipped"

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if is_worker(self.config) or not self.tests:
            return
        record = {
            "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.start)),
            "wall_s": round(time.time() - self.start, 1),
            "cpu": cpu_name(), "cores": os.cpu_count(),
            "workers": int(getattr(self.config.option, "numprocesses", 0) or 0) or 1,
            "load_start": [round(x, 2) for x in self.load_start],
            "load_end": [round(x, 2) for x in os.getloadavg()],
            "args": [str(a) for a in self.config.invocation_params.args],
            "tests": self.tests,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temp = self.path.with_name(self.path.name + ".tmp")
        temp.write_text(json.dumps(record, indent=1) + "\n")
        temp.replace(self.path)
