"""The suite's own machinery (tests/scheduling.py, tests/timings.py, benchmarks/suite_time.py): units of work, the
alone lock, and the report of where the time went."""

from __future__ import annotations

import re
import sys
import threading
import time
from pathlib import Path

import scheduling

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import suite_time


def test_units_keep_a_file_together_and_group_what_must_not_run_side_by_side() -> None:
    assert scheduling.unit_of("tests/test_parity.py::test_a[x]") == "test_parity.py"
    assert scheduling.unit_of("tests/test_browser.py::test_a") == scheduling.unit_of("tests/test_web.py::test_b")
    first, second = (scheduling.unit_of(f"tests/test_notebooks.py::test_{n}[a]") for n in ("quickstart", "yolo"))
    assert first != second and first == "tests/test_notebooks.py::test_quickstart"


def test_an_alone_test_waits_for_the_others_and_is_not_starved(tmp_path: Path) -> None:
    """Three workers' locks on one folder: while one holds it shared, an alone test waits; a shared request made
    after the alone test asked waits behind it (the turnstile), then gets in once it is done."""
    shared, alone, late = (scheduling.AloneLock(tmp_path) for _ in range(3))
    events: list[str] = []
    release_shared, alone_asked = threading.Event(), threading.Event()

    def hold_shared() -> None:
        with shared.held(alone=False):
            events.append("shared in")
            release_shared.wait(5)
            events.append("shared out")

    def hold_alone() -> None:
        alone_asked.set()
        with alone.held(alone=True):
            events.append("alone in")
            time.sleep(0.3)
            events.append("alone out")

    def ask_late() -> None:
        with late.held(alone=False):
            events.append("late in")

    threads = [threading.Thread(target=hold_shared)]
    threads[0].start()
    while "shared in" not in events:
        time.sleep(0.01)
    threads.append(threading.Thread(target=hold_alone))
    threads[1].start()
    alone_asked.wait(5)
    time.sleep(0.2)  # the alone test is queued at the turnstile, waiting for the shared holder
    threads.append(threading.Thread(target=ask_late))
    threads[2].start()
    time.sleep(0.2)
    assert events == ["shared in"], events
    release_shared.set()
    for t in threads:
        t.join(10)
    assert events == ["shared in", "shared out", "alone in", "alone out", "late in"], events


def test_an_alone_test_followed_by_another_keeps_the_room(tmp_path: Path) -> None:
    """Two alone tests in a row hold the lock from the first into the second: a test the other worker asks for in
    between waits for both (it would otherwise get in, and the second alone test would wait for it)."""
    alone, other = scheduling.AloneLock(tmp_path), scheduling.AloneLock(tmp_path)
    events: list[str] = []
    first_in = threading.Event()

    def other_worker() -> None:
        first_in.wait(5)
        with other.held(alone=False):
            events.append("other in")

    thread = threading.Thread(target=other_worker)
    thread.start()
    with alone.held(alone=True, keep=True):
        first_in.set()
        time.sleep(0.3)  # the other worker now waits at the turnstile
        events.append("first out")
    time.sleep(0.3)  # between the two alone tests: the other worker must not get in
    with alone.held(alone=True):
        events.append("second in")
    thread.join(10)
    assert events == ["first out", "second in", "other in"], events


def test_the_longest_unit_goes_to_the_worker_free_first() -> None:
    """A worker with the longer wait ahead gets the shortest unit (it only waits behind its long test), unless the
    shortest is the docs site, which must start last; a worker with the shorter wait ahead gets the longest."""
    kept = {"tests/test_long.py::t": 100.0, "tests/test_mid.py::t": 30.0, "tests/test_short.py::t": 1.0,
            "tests/test_docs.py::t": 0.5, "tests/test_big.py::t": 200.0, "tests/test_small.py::t": 20.0}
    queue = {f"test_{n}.py": {f"tests/test_{n}.py::t": False} for n in ("long", "mid", "short", "docs")}
    busy, idle = {"test_big.py": {"tests/test_big.py::t": False}}, {"test_small.py": {"tests/test_small.py::t": False}}
    assigned: dict[object, dict[str, dict[str, bool]]] = {"gw0": busy, "gw1": idle}
    assert scheduling.pick_unit(queue, "gw0", assigned, kept) == "test_short.py"
    assert scheduling.pick_unit(queue, "gw1", assigned, kept) == "test_long.py"
    assert scheduling.pick_unit(queue, "gw0", {"gw0": busy, "gw1": busy}, kept) == "test_long.py"  # a tie
    assert scheduling.pick_unit({"test_docs.py": queue["test_docs.py"]}, "gw0", assigned, kept) == "test_docs.py"
    busy["test_big.py"]["tests/test_big.py::t"] = True  # done: nothing ahead of gw0 now
    assert scheduling.pick_unit(queue, "gw0", assigned, kept) == "test_long.py"


def test_the_report_says_where_the_time_went() -> None:
    record = {"started": "2026-12-02T00:00:00", "wall_s": 100.0, "cpu": "AMD EPYC", "cores": 2, "workers": 2,
              "load_start": [1.0, 1.0, 1.0], "load_end": [2.0, 2.0, 2.0], "tests": {
                  "tests/test_a.py::test_slow": {"setup": 30.0, "call": 50.0, "teardown": 0.5, "worker": "gw0",
                                                 "fixtures": {"model (module)": 29.5}, "load": 1.5, "start": 1.0},
                  "tests/test_a.py::test_quick": {"call": 1.0, "worker": "gw0", "start": 82.0},
                  "tests/test_b.py::test_other": {"call": 60.0, "worker": "gw1", "outcome": "failed", "start": 2.0},
              }}
    text = suite_time.report(record, 10, None)
    assert "3 tests: 1 failed, 2 passed" in text and "wall 1:40" in text
    files = text.split("by file")[1].split("by fixture")[0]
    assert files.index("tests/test_a.py") < files.index("tests/test_b.py") and "test_slow 80s" in files
    assert re.search(r"model \(module\)\s+1\s+29\.5", text)
    beside = suite_time.beside(record["tests"], "test_other")
    assert "60.0 s beside tests/test_a.py::test_slow" in beside and "test_quick" not in beside, beside
