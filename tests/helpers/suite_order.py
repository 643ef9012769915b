"""The suite's files longest first, by their measured durations, so two workers finish together.

CI runs ``pytest -n 2 --dist loadfile --no-loadscope-reorder``: xdist hands whole files to the two
workers in collection order, a file to whichever worker has run out. With the longest files first
(longest-processing-time-first) the short ones fill in at the end; xdist's own order (most tests
first) put the heaviest files, which hold few tests, last, where one worker ran them alone.

``tests/durations.json`` holds each file's seconds from a run in CI's conditions (2 cores, both
tiers). Refresh it from such a run's output, run with ``--durations=0``::

    python -m pytest -p no:cacheprovider -n 2 --dist loadfile --no-loadscope-reorder --durations=0 > suite.log
    python -m tests.helpers.suite_order suite.log

or from ``bash .ci/run``'s own output with ``--durations=0`` added to its suite line: only the log's first
durations report is read (the suite's; the vLLM stage's and the benchmarks' tests report after it).
A file missing from the table (a new one) counts :data:`UNMEASURED_SECONDS`.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Sequence

DURATIONS = Path(__file__).resolve().parents[1] / "durations.json"
UNMEASURED_SECONDS = 5.0
"""A new file's guess: about the median file's time, so it neither leads nor trails the order."""
DURATION_LINE = re.compile(r"^\s*([0-9.]+)s\s+(?:setup|call|teardown)\s+([^:\s]+)::")
REPORT_HEADER = re.compile(r"^=+ slowest (?:\d+ )?durations =+$")
"""The line pytest opens a durations report with."""


def file_seconds(report: str) -> Dict[str, float]:
    """Each test file's total seconds (setup, call and teardown of its tests) in the first ``--durations=0``
    report of ``report`` (a log of several pytest runs, as CI's, holds one report each)."""
    totals: Dict[str, float] = defaultdict(float)
    lines = report.splitlines()
    start = next((index + 1 for index, line in enumerate(lines) if REPORT_HEADER.match(line.strip())), 0)
    for line in lines[start:]:
        match = DURATION_LINE.match(line)
        if match:
            totals[match.group(2)] += float(match.group(1))
        elif totals and line.startswith("="):  # the report's end: the summary line
            break
    return dict(totals)


def longest_first(paths: Sequence[str], seconds: Dict[str, float]) -> List[str]:
    """``paths`` (each once) ordered by ``seconds``, longest first; equal times keep their order."""
    unique = list(dict.fromkeys(paths))
    return sorted(unique, key=lambda path: -seconds.get(path, UNMEASURED_SECONDS))


def order_items(items: list) -> None:
    """Reorder pytest's ``items`` in place: files longest first, each file's tests in their own order."""
    seconds = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    by_file: Dict[str, list] = defaultdict(list)
    for item in items:
        by_file[item.nodeid.split("::", 1)[0]].append(item)
    items[:] = [item for path in longest_first(list(by_file), seconds) for item in by_file[path]]


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.helpers.suite_order SUITE_LOG (a run with --durations=0)", file=sys.stderr)
        return 2
    totals = file_seconds(Path(argv[0]).read_text(encoding="utf-8"))
    if not totals:
        print(f"{argv[0]}: no '--durations=0' lines (seconds, phase, test id) found", file=sys.stderr)
        return 1
    ordered = {path: round(totals[path], 1) for path in longest_first(list(totals), totals)}
    DURATIONS.write_text(json.dumps(ordered, indent=1) + "\n")
    print(f"{DURATIONS}: {len(ordered)} files, {sum(ordered.values()):.0f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
