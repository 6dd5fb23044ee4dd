"""The table of tested versions (docs/development.md, the site's "Development" page) says what the two locks
hold; the locks pin exact versions and the package's own ranges admit both."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.lower_bounds


def pins(lock: str) -> dict[str, str]:
    found = {}
    for line in (ROOT / "constraints" / lock).read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"{lock}: {line!r} is not an exact pin"
            found[re.sub(r"[-_.]+", "-", name.strip().lower())] = version.strip()
    return found


def test_versions_table_matches_the_locks() -> None:
    text = (ROOT / "docs" / "development.md").read_text()
    table = text.split("<!-- versions:", 1)[1].split("<!-- /versions -->", 1)[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[3:] if line.startswith("|")]
    lock, lowest = pins("lock.txt"), pins("lowest.txt")
    assert len(rows) >= 10
    for name, locked, low in rows:
        assert lock[name] == locked, (name, lock[name], locked)
        assert lowest[name] == low, (name, lowest[name], low)


def test_the_ranges_admit_both_locks() -> None:
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    required = [Requirement(r) for r in project["dependencies"] + extras["hf"] + extras["notebook"]]
    lock, lowest = pins("lock.txt"), pins("lowest.txt")
    for req in required:
        name = re.sub(r"[-_.]+", "-", req.name.lower())
        for held in (lock, lowest):
            assert req.specifier.contains(held[name], prereleases=True), (str(req), held[name])
        if req.specifier and any(s.operator == ">=" for s in req.specifier):
            bound = next(s.version for s in req.specifier if s.operator == ">=")
            assert lowest[name].split("+")[0].startswith(bound) or name == "torch", \
                f"{name}: lowest.txt holds {lowest[name]}, not the lower bound {bound}"
