"""How the suite shares two cores (pytest-xdist, ``-n 2``; the README's test command).

- **Units.** pytest-xdist's scheduler (:func:`make_scheduler`) hands out units of work: a unit goes to one worker
  whole and runs in order there. A test file is one unit (its module fixtures are made once), except the files in
  ``GROUPS``, which share a unit with the files they must not run beside (the real browser's pages), and the files
  in ``SPLIT``, whose tests share nothing costly and go one by one (the tutorials).
- **Order.** Units start longest first, by the times ``tests/durations.json`` kept from a whole run (a unit it does
  not know counts as ``UNKNOWN_S`` a test): the last unit to finish is a short one. A worker is sent its next unit
  before it is free (it runs a test only once it knows the one after): the longest waiting goes to the worker
  expected to be free first, the other gets the shortest (:func:`pick_unit`). The docs site (``LAST``) starts
  last and builds once every tutorial's test of the run is done, on either worker (:func:`wait_for`): it renders
  their executed copies.
- **Alone.** A test marked ``alone`` (timing-sensitive checks) runs with nothing beside it: the other worker
  finishes its test and waits (a readers-writer lock on files shared by the workers, a turnstile in front so the
  alone test is not starved; alone tests in a row keep it from one to the next). It runs on every core.
- **Cores and folders.** Each worker runs ONNX Runtime and torch on its share of the cores (``ONNX_NB_THREADS``,
  ``OMP_NUM_THREADS`` for the processes it starts, ``torch.set_num_threads``) and writes what a step given no
  ``out=`` writes under its own temporary folder (``ONNX_NB_OUT``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
KEPT = HERE / "durations.json"
UNKNOWN_S = 5.0
# files that share one unit: nothing in a unit runs beside another test of the same unit
GROUPS = {"test_browser.py": "chromium", "test_lab_viewer.py": "chromium", "test_web.py": "chromium"}
# files whose tests go one by one (no module fixture worth sharing, long tests)
SPLIT = {"test_notebooks.py"}
# files whose unit starts last: the docs site renders the tutorials the run executed, so its build waits for them
# (:func:`wait_for`: they may still run on the other worker)
LAST = {"test_docs.py"}
# the tests that keep a tutorial's executed copy for the docs site (tests/executed.py): the tutorials' tests, and
# 01_quickstart's and 07_browser's runs in a real JupyterLab page
TUTORIALS = ("tests/test_notebooks.py::", "tests/test_browser.py::test_quickstart_and_studio_in_jupyterlab",
             "tests/test_browser.py::test_browser_backend_in_the_notebooks_own_page")


def worker() -> str | None:
    return os.environ.get("PYTEST_XDIST_WORKER")


def worker_count() -> int:
    return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)


def share_of_cores() -> int:
    return max(1, (os.cpu_count() or 1) // worker_count())


def set_worker_environment() -> None:
    """Before torch is imported: a worker's share of the cores for itself and the processes it starts."""
    if worker() is None:
        return
    share = str(share_of_cores())
    os.environ["ONNX_NB_THREADS"] = share
    os.environ["OMP_NUM_THREADS"] = share


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to, from its node id (what pytest-xdist's scheduler sees)."""
    file = nodeid.split("::")[0].rsplit("/", 1)[-1]
    if file in GROUPS:
        return GROUPS[file]
    if file in SPLIT:
        return nodeid.split("[")[0]
    return file


def kept_durations() -> dict[str, float]:
    try:
        tests = json.loads(KEPT.read_text())["tests"]
    except (OSError, ValueError, KeyError):
        return {}
    return {nodeid: sum(row.get(phase, 0.0) for phase in ("setup", "call", "teardown"))
            for nodeid, row in tests.items()}


def order(items: list[pytest.Item]) -> None:
    """The docs site after the tutorials; under pytest-xdist, the longest units first (every worker collects, and
    sorts, the same list; the scheduler queues the units in its order)."""
    docs_last = {item.nodeid: item.path.name in LAST for item in items}
    if worker() is None:
        items.sort(key=lambda item: docs_last[item.nodeid])
        return
    kept = kept_durations()
    units: dict[str, float] = {}
    for item in items:
        unit = unit_of(item.nodeid)
        units[unit] = units.get(unit, 0.0) + kept.get(item.nodeid, UNKNOWN_S)
    position = {item.nodeid: i for i, item in enumerate(items)}
    items.sort(key=lambda item: (docs_last[item.nodeid], -units[unit_of(item.nodeid)], unit_of(item.nodeid),
                                 position[item.nodeid]))


def run_folder(config: pytest.Config) -> Path:
    """A folder of this run's, shared by its workers."""
    base = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    return base.parent if worker() is not None else base


def finished(config: pytest.Config, nodeid: str) -> None:
    """Marks a tutorial's test done (passed or not), for :func:`wait_for` on any worker."""
    if nodeid.startswith(TUTORIALS):
        folder = run_folder(config) / "onnx-nb-finished"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / hashlib.sha1(nodeid.encode()).hexdigest()).touch()


def wait_for(session: pytest.Session, timeout: float = 1800.0) -> list[str]:
    """Waits until every tutorial's test this run collected is done (on whichever worker ran it); returns those
    still not done at the timeout (a worker lost: the docs build then executes those tutorials itself)."""
    import time

    folder = run_folder(session.config) / "onnx-nb-finished"
    wanted = {hashlib.sha1(i.nodeid.encode()).hexdigest(): i.nodeid for i in session.items
              if i.nodeid.startswith(TUTORIALS)}
    deadline = time.monotonic() + timeout
    while True:
        missing = [nodeid for digest, nodeid in wanted.items() if not (folder / digest).exists()]
        if not missing or time.monotonic() > deadline:
            return missing
        time.sleep(2.0)


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist's scope scheduling with our units as the scopes, queued in the collection's order (longest
    first, :func:`order`). A worker is sent its next unit when it has at most two tests left (it runs a test only
    once it knows the one after): the longest unit waiting goes to the worker expected to be free first by the kept
    times, and a worker with longer ahead of it than another gets the shortest (it only waits there, behind a long
    test, while the longest may soon go to the other). None (xdist's own) for a ``--dist`` other than its default."""
    from xdist.scheduler import LoadScopeScheduling

    if config.getvalue("dist") != "load":
        return None
    kept = kept_durations()

    class UnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            self.workqueue.move_to_end(pick_unit(self.workqueue, node, self.assigned_work, kept), last=False)
            super()._assign_work_unit(node)

    config.option.loadscopereorder = False  # the collection's order, not xdist's by-count one
    return UnitScheduling(config, log)


def pick_unit(queue: dict[str, dict[str, bool]], node: Any, assigned: dict[Any, dict[str, dict[str, bool]]],
              kept: dict[str, float]) -> str:
    """The unit of ``queue`` (longest first) to send ``node``: the first, unless another worker's tests not yet done
    are expected to take less time than ``node``'s; then the shortest that may start early (not one of ``LAST``)."""
    def ahead(work: dict[str, dict[str, bool]]) -> float:
        return sum(kept.get(nodeid, UNKNOWN_S) for unit in work.values() for nodeid, done in unit.items() if not done)

    first = next(iter(queue))
    mine = ahead(assigned.get(node, {}))
    if not any(ahead(work) < mine for other, work in assigned.items() if other is not node):
        return first
    early = [unit for unit in queue if unit not in LAST]  # a file's unit is its name (:func:`unit_of`)
    if not early:
        return first
    return min(reversed(early), key=lambda unit: ahead({unit: queue[unit]}))


class AloneLock:
    """The workers' readers-writer lock: every test holds it shared, an ``alone`` test exclusively."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.turnstile = open(folder / "turnstile.lock", "a+")
        self.room = open(folder / "room.lock", "a+")
        self.kept = False  # still held exclusively: the test before was alone, and so is this one

    @contextlib.contextmanager
    def held(self, alone: bool, keep: bool = False) -> Iterator[None]:
        """Around one test. ``keep``: an alone test the next of which is alone too keeps the room for it (the other
        worker would otherwise start a test in between, and that test would be waited for)."""
        exclusive = alone or self.kept
        if not self.kept:
            fcntl.flock(self.turnstile, fcntl.LOCK_EX)
            if not alone:
                fcntl.flock(self.turnstile, fcntl.LOCK_UN)
            fcntl.flock(self.room, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        self.kept = False
        try:
            yield
        finally:
            if alone and keep:
                self.kept = True
            else:
                fcntl.flock(self.room, fcntl.LOCK_UN)
                if exclusive:
                    fcntl.flock(self.turnstile, fcntl.LOCK_UN)


@contextlib.contextmanager
def all_cores() -> Iterator[None]:
    """An alone test runs on every core (a worker's share otherwise)."""
    import torch

    saved = {k: os.environ.pop(k, None) for k in ("ONNX_NB_THREADS", "OMP_NUM_THREADS")}
    before = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
        os.environ.update({k: v for k, v in saved.items() if v is not None})


class Scheduler:
    """A pytest plugin for each worker: the alone lock around each test's whole protocol (its fixtures'
    setup and teardown included), the worker's own output root, and the tutorials' tests marked done."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.lock: AloneLock | None = None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        base = session.config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
        os.environ["ONNX_NB_OUT"] = str(base / "onnx_nb_out")
        if worker() is not None:
            import torch

            torch.set_num_threads(share_of_cores())
            self.lock = AloneLock(run_folder(self.config) / "onnx-nb-alone")

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        finished(self.config, nodeid)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[Any]:
        alone = item.get_closest_marker("alone") is not None
        if self.lock is None:
            yield
            return
        keep = nextitem is not None and nextitem.get_closest_marker("alone") is not None
        with self.lock.held(alone, keep), (all_cores() if alone else contextlib.nullcontext()):
            yield
