"""The host memory one test-runner run can take: hostile programs that fork and fill memory.

The programs: ``forks`` starts ``--children`` processes that each touch ``--megabytes`` MB;
``memfd`` fills memfd files (16 MiB each, the file-size limit) until it runs out of descriptors,
alone, after touching ``--megabytes`` MB, and in ``--children`` processes that each do both.
Each program runs through ``run_tests`` (every isolation layer this machine has, or with the run's
memory cgroup switched off: ``--without-cgroup``). The host-memory peak of a run is read from a
measurement cgroup that this process joins first (so every run it starts is charged to it): its
peak usage while the run lasts minus its usage before. Needs root and a writable memory controller
(cgroup v1 ``memory`` or cgroup v2 with ``memory``); prints one JSON line per program.

    sudo python benchmarks/runner_memory.py [--without-cgroup] [--children 4] [--megabytes 500]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Dict, Tuple

from comlrl_lightning.tasks.coding import run_tests

FORKS = """
import os, time
def f(children, megabytes):
    ready = []
    for _ in range(children):
        read, write = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            block = b"x" * (megabytes << 20)  # touched: every page resident
            os.write(write, b"1")
            time.sleep(60)
        os.close(write)
        ready.append(read)
    return sum(len(os.read(fd, 1)) for fd in ready)
"""

MEMFD = """
import os, time
def fill(megabytes):
    heap, held, chunk = b"x" * (megabytes << 20), [], b"x" * (1 << 20)
    while True:
        try:
            fd = os.memfd_create("m")
        except OSError:
            return len(held)
        held.append(fd)
        try:
            for _ in range(1 << 12):
                os.write(fd, chunk)
        except OSError:
            pass
def f(children, megabytes):
    done = []
    for _ in range(children):
        read, write = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            os.write(write, bytes([min(255, fill(megabytes))]))
            time.sleep(60)
        os.close(write)
        done.append(read)
    return [os.read(fd, 1)[0] for fd in done] if done else [fill(megabytes)]
"""


def measurement_group() -> Tuple[Path, str, str]:
    """A fresh memory cgroup this process joins: its folder and its usage and peak files."""
    v1 = Path("/sys/fs/cgroup/memory")
    if (v1 / "memory.max_usage_in_bytes").exists():
        own = next(line.split(":", 2)[2].strip() for line in open("/proc/self/cgroup") if ":memory:" in line)
        group = v1 / own.lstrip("/") / f"runner-memory-{os.getpid()}"
        usage, peak = "memory.usage_in_bytes", "memory.max_usage_in_bytes"
    else:
        own = next(line.split(":", 2)[2].strip() for line in open("/proc/self/cgroup") if line.startswith("0::"))
        group = Path("/sys/fs/cgroup") / own.lstrip("/") / f"runner-memory-{os.getpid()}"
        usage, peak = "memory.current", "memory.peak"
    group.mkdir()
    (group / "cgroup.procs").write_text(str(os.getpid()))
    return group, usage, peak


def measure(group: Path, usage: str, peak: str, program: str, children: int, megabytes: int) -> Dict:
    before = int((group / usage).read_text())
    (group / peak).write_text("0")  # resets the peak to the usage now
    item = {
        "task_id": "memory/1",
        "entry_point": "f",
        "test": f"def check(candidate):\n    assert candidate({children}, {megabytes}) is not None\n",
    }
    started = time.monotonic()
    report = run_tests(program, item, timeout=20.0)
    return {
        "peak_mib": round((int((group / peak).read_text()) - before) / (1 << 20)),
        "status": report.status,
        "detail": report.detail[:120],
        "seconds": round(time.monotonic() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--without-cgroup", action="store_true", help="switch the run's memory cgroup off")
    parser.add_argument("--children", type=int, default=4)
    parser.add_argument("--megabytes", type=int, default=500)
    args = parser.parse_args()
    group, usage, peak = measurement_group()
    try:
        from comlrl_lightning.tasks.coding import runner

        layers = runner.active_isolation()
        off = ("memory_cgroup",) if args.without_cgroup and "memory_cgroup" in layers else ()
        with runner._layers_off_for_measurement(*off):
            cases = (("forks", FORKS, args.children, args.megabytes), ("memfd", MEMFD, 0, 0))
            cases += (("memfd", MEMFD, 0, args.megabytes), ("memfd", MEMFD, args.children, args.megabytes))
            for name, program, children, megabytes in cases:
                result = measure(group, usage, peak, program, children, megabytes)
                on = layers.get("memory_cgroup", False) and not off
                row = {"program": name, "children": children, "megabytes": megabytes, **result, "memory_cgroup": on}
                print(json.dumps(row), flush=True)
    finally:
        (group.parent / "cgroup.procs").write_text(str(os.getpid()))
        for _ in range(50):  # the runs' last processes may still be exiting
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


if __name__ == "__main__":
    main()
