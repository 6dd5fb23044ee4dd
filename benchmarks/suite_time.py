"""Where the test suite's time goes: by file, by fixture, by worker, the slowest tests, and the machine's load.

Reads the record a pytest run writes (tests/timings.py: every test's setup, call and teardown seconds, each
fixture's setup seconds, the worker and the load at its start). The README's test command writes
``build/test-durations/suite.json`` (and ``lowest.json`` for the lower-bound subset); ``tests/durations.json`` is a
kept copy of a whole run, which orders the next runs' work (tests/scheduling.py).

    python benchmarks/suite_time.py                      # the last whole run (build/test-durations/suite.json)
    python benchmarks/suite_time.py FILE --top 40        # another record, more rows
    python benchmarks/suite_time.py FILE --against OLD   # files side by side with an older record
    python benchmarks/suite_time.py FILE --beside TEXT   # what ran beside the tests whose id holds TEXT
    python benchmarks/suite_time.py FILE --keep          # FILE becomes tests/durations.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LAST = ROOT / "build" / "test-durations" / "suite.json"
KEPT = ROOT / "tests" / "durations.json"
PHASES = ("setup", "call", "teardown")


def total(row: dict[str, Any]) -> float:
    return float(sum(row.get(p, 0.0) for p in PHASES))


def file_of(nodeid: str) -> str:
    return nodeid.split("::")[0]


def by_file(tests: dict[str, dict[str, Any]]) -> dict[str, tuple[float, int, str, float]]:
    """file -> (seconds, tests, its slowest test, that test's seconds)."""
    out: dict[str, tuple[float, int, str, float]] = {}
    for nodeid, row in tests.items():
        seconds, count, slowest, most = out.get(file_of(nodeid), (0.0, 0, "", -1.0))
        if total(row) > most:
            slowest, most = nodeid.split("::", 1)[-1], total(row)
        out[file_of(nodeid)] = (seconds + total(row), count + 1, slowest, most)
    return out


def by_fixture(tests: dict[str, dict[str, Any]]) -> dict[str, tuple[float, int]]:
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for row in tests.values():
        for name, seconds in (row.get("fixtures") or {}).items():
            out[name][0] += seconds
            out[name][1] += 1
    return {k: (v[0], int(v[1])) for k, v in out.items()}


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def report(record: dict[str, Any], top: int, against: dict[str, Any] | None) -> str:
    tests = record["tests"]
    busy = sum(total(r) for r in tests.values())
    wall = float(record.get("wall_s") or busy)
    outcomes: dict[str, int] = defaultdict(int)
    for row in tests.values():
        outcomes[row.get("outcome", "passed")] += 1
    loads = [r["load"] for r in tests.values() if "load" in r]
    out = [
        f"run started {record.get('started')} on {record.get('cpu')} ({record.get('cores')} cores), "
        f"{record.get('workers', 1)} worker(s); {len(tests)} tests: "
        + ", ".join(f"{n} {k}" for k, n in sorted(outcomes.items())),
        f"wall {minutes(wall)}; test time {minutes(busy)} (setup + call + teardown summed over the tests); "
        f"{busy / wall:.2f} tests running on average" if wall else "",
        f"load average (1, 5, 15 min) at the start {record.get('load_start')}, at the end {record.get('load_end')}"
        + (f"; at the tests' starts: median {sorted(loads)[len(loads) // 2]:.2f}, max {max(loads):.2f}"
           if loads else ""),
    ]
    workers: dict[str, float] = defaultdict(float)
    for row in tests.values():
        workers[row.get("worker", "main")] += total(row)
    if len(workers) > 1:
        out.append("busy per worker: " + ", ".join(f"{w} {minutes(s)}" for w, s in sorted(workers.items())))
    files = by_file(tests)
    old = by_file(against["tests"]) if against else {}
    rows = []
    for name, (seconds, count, slowest, most) in sorted(files.items(), key=lambda kv: -kv[1][0]):
        row = [name, str(count), minutes(seconds), f"{100 * seconds / busy:.1f}%"]
        if against:
            row.append(minutes(old[name][0]) if name in old else "-")
        rows.append([*row, f"{slowest[:60]} {most:.0f}s"])
    header = ["file", "tests", "time", "share", *(["before"] if against else []), "slowest test"]
    out += ["", "by file", table(rows, header)]
    fixtures = sorted(by_fixture(tests).items(), key=lambda kv: -kv[1][0])[:top]
    out += ["", "by fixture (setup seconds, summed over its set-ups)",
            table([[n, str(c), f"{s:.1f}"] for n, (s, c) in fixtures], ["fixture (scope)", "set-ups", "seconds"])]
    slow = sorted(tests.items(), key=lambda kv: -total(kv[1]))[:top]
    out += ["", f"the {len(slow)} slowest tests",
            table([[n, f"{r.get('setup', 0):.1f}", f"{r.get('call', 0):.1f}", f"{r.get('teardown', 0):.1f}",
                    f"{total(r):.1f}", str(r.get("worker", "")), str(r.get("load", ""))] for n, r in slow],
                  ["test", "setup", "call", "teardown", "total", "worker", "load"])]
    return "\n".join(line for line in out if line is not None)


def beside(tests: dict[str, dict[str, Any]], text: str) -> str:
    """For each test whose id holds ``text``: the tests that ran on other workers while it ran, and for how long."""
    out = []
    for nodeid, row in tests.items():
        if text not in nodeid or "start" not in row:
            continue
        start, end = row["start"], row["start"] + total(row)
        out.append(f"{nodeid} on {row.get('worker')}: {start:.0f}-{end:.0f} s into the run ({total(row):.1f} s)")
        for other, o in sorted(tests.items(), key=lambda kv: kv[1].get("start", 0.0)):
            if other == nodeid or "start" not in o or o.get("worker") == row.get("worker"):
                continue
            overlap = min(end, o["start"] + total(o)) - max(start, o["start"])
            if overlap > 0.5:
                out.append(f"    {overlap:6.1f} s beside {other} ({o.get('worker')}, load {o.get('load', '-')})")
    return "\n".join(out) or f"no test id holds {text!r} (or the record has no start times)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("record", nargs="?", type=Path, default=LAST)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--against", type=Path, help="an older record: its per-file times beside these")
    parser.add_argument("--beside", metavar="TEXT", help="what ran beside the tests whose id holds TEXT")
    parser.add_argument("--keep", action="store_true", help="copy the record to tests/durations.json")
    args = parser.parse_args(argv)
    if not args.record.is_file():
        print(f"no record at {args.record}: run the suite first (bash scripts/dev test)", file=sys.stderr)
        return 2
    record = json.loads(args.record.read_text())
    against = json.loads(args.against.read_text()) if args.against else None
    print(beside(record["tests"], args.beside) if args.beside else report(record, args.top, against))
    if args.keep:
        shutil.copyfile(args.record, KEPT)
        print(f"\nkept as {KEPT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
