"""Each test module's seconds in a recent `make test`, which orders the modules for the
pytest-xdist workers (tests/conftest.py): the longest first, so that the run ends on short
ones instead of one worker running a long module alone (the last run's workers finished 20 s
apart). The figures only order the run; stale ones cost a little time, never a result.

Refresh from a run's JUnit report: `make test PYTEST_ARGS=--junitxml=/tmp/run.xml`, then
`.venv/bin/python -m tests.module_seconds /tmp/run.xml`.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

FILE = Path(__file__).with_name("module_seconds.json")


def load() -> dict[str, float]:
    """Module path (as in a test's node id) -> seconds; empty when the file is missing."""
    try:
        return {str(k): float(v) for k, v in json.loads(FILE.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def from_junit(report: Path) -> dict[str, float]:
    seconds: Counter[str] = Counter()
    # (the JUnit report of our own run, not data from outside)
    for case in ET.parse(report).getroot().iter("testcase"):  # noqa: S314
        module = case.get("classname", "").split(".")[:2]  # tests.test_x[.Class]
        seconds["/".join(module) + ".py"] += float(case.get("time") or 0)
    return {k: round(v, 1) for k, v in sorted(seconds.items(), key=lambda kv: -kv[1])}


if __name__ == "__main__":
    FILE.write_text(json.dumps(from_junit(Path(sys.argv[1])), indent=0) + "\n")
    print(f"{FILE}: {len(load())} modules")
