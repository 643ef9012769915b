"""The test runner: a program's tests, counted and decided in the trainer, the program kept outside.

``run_tests(program, item)`` runs ``program`` in its own fresh, limited, isolated process (see
:mod:`.child`, :mod:`.launcher` and :mod:`.sandbox`) and the item's trusted ``check`` here, with
``candidate`` a call into that process whose return value comes back as plain data (see
:mod:`.check_transform` and :mod:`.plain_data`). The program never sees a test and never reports a
verdict: the worst it can do is return wrong values, stop, or be stopped, and each of those fails
its tests. ``run_tests_batch`` runs many programs in parallel, one thread per program in flight;
one program's timeout never holds up another's.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Literal, Mapping, Optional, Sequence, cast

from comlrl_lightning.errors import ConfigurationError, ConfigurationTypeError
from comlrl_lightning.runtime.text import one_line_text
from comlrl_lightning.tasks.coding.check_transform import CheckOutcome, compile_check, run_check
from comlrl_lightning.tasks.coding.child import ChildProcess, ChildStopped
from comlrl_lightning.tasks.coding.run_cgroup import RunCgroup, find_parents, remove_stale_groups
from comlrl_lightning.tasks.coding.sandbox import SLOTS, RunLimits, remove_stale_folders, spare_uid

logger = logging.getLogger("comlrl_lightning.tasks.coding")

Status = Literal["finished", "timeout", "crash", "output_limit", "memory", "syntax_error", "missing_entry_point"]
"""Why a run stopped: ``finished`` (the check ran to its end; tests may still have failed), the
wall-clock or CPU limit, the program's process died or broke the protocol, too much output (or a
reply or file over its limit), a ``MemoryError``, a program that does not parse, no entry point."""

LAYERS = ("spare_uid", "user_namespace", "network_namespace", "pid_namespace", "landlock", "memory_cgroup")
DETAIL_CHARS = 400
PROBE = {"task_id": "probe", "entry_point": "probe", "prompt": "", "test": "def check(f):\n    assert f() == 1\n"}


@dataclass(frozen=True)
class TestReport:
    """One program's result on one item's tests.

    Args:
        passed: tests (asserts of ``check`` that depend on the program) that passed: each ran and held every time.
        total: the item's tests.
        status: why the run stopped (:data:`Status`).
        detail: short: why it stopped early, or the first failing test and its error.
    """

    __test__ = False  # not a pytest test class

    passed: int
    total: int
    status: Status
    detail: str = ""

    @property
    def fraction(self) -> float:
        """The share of the item's tests that passed (0 for an item without tests)."""
        return self.passed / self.total if self.total else 0.0


_detected: Optional[Dict[str, Any]] = None
"""The isolation layers this machine and kernel give a run, probed once per process (:func:`_detect`:
a probe program per try). Kept for the process on purpose: it is a fact of the machine, the same
for every reward, run and thread, one entry (bounded), and probing again per reward would start
processes for an answer that cannot change while the process lives."""
_detect_lock = threading.Lock()


def _run_cgroup(slot: int, limits: RunLimits) -> Optional[RunCgroup]:
    """A cgroup for a run in ``slot`` (see :mod:`.run_cgroup`), ``None`` where none can be made."""
    parents = find_parents()
    if parents is None:
        return None
    try:
        return RunCgroup.for_run(parents, slot, limits.memory_bytes, limits.processes)
    except OSError as error:
        logger.debug("test runner: no cgroup for the run: %s", error)
        return None


def _probe(layers: Dict[str, bool], uid_slot: int) -> Optional[Dict[str, bool]]:
    """The layers a probe program reports with ``layers`` wanted (none required), or ``None`` if it failed."""
    group = _run_cgroup(uid_slot, RunLimits()) if layers.get("memory_cgroup") else None
    wanted: Dict[str, Any] = {**layers, "memory_cgroup": group.procs_files if group else []}
    isolation = {"uid": spare_uid(uid_slot) if layers.get("spare_uid", True) else None, "layers": wanted}
    child = ChildProcess("def probe():\n    return 1\n", "probe", 10.0, RunLimits(), {**isolation, "required": {}})
    try:
        child.start()
        return dict(child.reported_layers) if child.call() == 1 else None
    except (ChildStopped, OSError) as error:
        logger.debug("test runner probe with %s failed: %s", layers, error)
        return None
    finally:
        child.close()
        if group is not None:
            group.remove()


def _detect() -> Dict[str, Any]:
    global _detected
    with _detect_lock:
        if _detected is None:
            remove_stale_folders()
            remove_stale_groups(find_parents())
            with SLOTS.slot() as slot:
                every = {name: True for name in LAYERS}
                found = _probe(every, slot) or _probe({**every, "user_namespace": False}, slot)
                found = found or _probe({name: name == "spare_uid" for name in LAYERS}, slot) or {}
            layers = {name: bool(found.get(name)) for name in LAYERS}
            layers.update(landlock_network=bool(found.get("landlock_network")))
            layers.update(landlock_signals=bool(found.get("landlock_signals")))
            _detected = layers
            logger.log(
                logging.INFO if all(layers.values()) else logging.WARNING,
                "test runner isolation on this machine: %s",
                ", ".join(f"{name.replace('_', ' ')} {'on' if on else 'OFF'}" for name, on in layers.items()),
            )
    return _detected


def active_isolation() -> Dict[str, bool]:
    """Which isolation layers the runner uses on this machine (detected once, with a probe program,
    and then required of every run): ``spare_uid``, ``user_namespace``, ``network_namespace``,
    ``pid_namespace``, ``landlock`` (files), ``landlock_network`` (no TCP bind or connect),
    ``landlock_signals`` (no signal to a process outside the run) and ``memory_cgroup`` (one memory
    and task limit for all of a run's processes; without it a program may start no process)."""
    return dict(_detect())


_switched_off: frozenset = frozenset()
"""Layers switched off by :func:`_layers_off_for_measurement` (the benchmarks' switch, reachable
from no config or public name); empty in every run."""
NAMESPACES = ("user_namespace", "network_namespace", "pid_namespace")


@contextmanager
def _layers_off_for_measurement(*names: str) -> Iterator[None]:
    """Run without the isolation layers ``names`` inside this block, so the benchmark
    (``benchmarks/runner_rows.py``) and its test can measure what each layer costs. Process-wide,
    not exported, reachable from no config; a warning is logged. Switching off the user namespace
    switches off the network and pid namespaces too (they are entered inside it)."""
    global _switched_off
    unknown = sorted(set(names) - set(LAYERS))
    if unknown:
        raise ConfigurationError(f"unknown isolation layers {unknown}; known: {list(LAYERS)}")
    off = set(names) | (set(NAMESPACES) if "user_namespace" in names else set())
    if off:
        logger.warning("test runner: measuring with isolation layers OFF: %s", ", ".join(sorted(off)))
    saved, _switched_off = _switched_off, frozenset(off)
    try:
        yield
    finally:
        _switched_off = saved


def _isolation(slot: int, group: Optional[RunCgroup]) -> Dict[str, Any]:
    """What the run's launcher sets up (``layers``; the cgroup's as its ``cgroup.procs`` files) and
    must set up (``required``: every layer this machine has, but those switched off to measure)."""
    layers = _detect()
    wanted = {name: layers[name] and name not in _switched_off for name in LAYERS}
    files = group.procs_files if group is not None and wanted["memory_cgroup"] else []
    return {
        "uid": spare_uid(slot) if layers["spare_uid"] else None,
        "layers": {**wanted, "memory_cgroup": files},
        "required": wanted,
    }


def _report(
    outcome: CheckOutcome, total: int, stopped: Optional[ChildStopped], memory: bool, memory_limit: str = ""
) -> TestReport:
    """The report; a crash of a run whose cgroup killed a process for memory (``memory_limit``
    says the limit) is a ``memory`` stop."""
    if stopped is not None and stopped.status == "crash" and memory_limit:
        stopped = ChildStopped("memory", f"over the run's memory limit of {memory_limit}")
    status = cast(Status, stopped.status) if stopped is not None else ("memory" if memory else "finished")
    parts = [stopped.detail] if stopped is not None else []
    if outcome.first_failure and (stopped is None or ChildStopped.__name__ not in outcome.first_failure):
        parts.append(outcome.first_failure)
    detail = "; ".join(parts)  # one safe line: a check's own error may quote what the program returned
    return TestReport(outcome.passed, total, status, one_line_text(detail, DETAIL_CHARS))


def _check_program(program: Any) -> str:
    if not isinstance(program, str):
        raise ConfigurationTypeError(f"run_tests: the program must be a str, got {type(program).__name__}")
    return program


def run_tests(
    program: str, item: Mapping[str, Any], timeout: float = 10.0, limits: Optional[RunLimits] = None
) -> TestReport:
    """Run ``item``'s tests on ``program`` (a Python source defining ``item["entry_point"]``).

    Args:
        program: the source under test, untrusted.
        item: a HumanEval-format item: ``task_id``, ``entry_point``, ``test`` (defining
            ``check(candidate)``), optionally ``prompt`` (whose imports, functions and classes the
            check may use).
        timeout: the wall-clock limit in seconds for the program's whole run (start and every call).
        limits: the run's resource limits (:class:`RunLimits`' defaults when ``None``).

    Raises:
        DataError: the item has no tests, its test does not parse or it has no ``entry_point``.
    """
    compiled = compile_check(item)
    program = _check_program(program)
    if not isinstance(timeout, (int, float)) or not 0 < timeout <= 3600:
        raise ConfigurationError(f"run_tests: timeout must be in (0, 3600] seconds, got {timeout!r}")
    limits = limits or RunLimits()
    with SLOTS.slot() as slot:
        wanted = _detect()["memory_cgroup"] and "memory_cgroup" not in _switched_off
        group = _run_cgroup(slot, limits) if wanted else None
        try:
            child = ChildProcess(program, compiled.entry_point, float(timeout), limits, _isolation(slot, group))
            try:
                child.start()
                outcome = run_check(compiled, child, uncatchable=(ChildStopped,))
            except ChildStopped:
                outcome = CheckOutcome(executions=[0] * compiled.total, held=[False] * compiled.total)
            finally:
                child.close()
            killed = group is not None and group.oom_kills() > 0
            memory_limit = f"{limits.memory_bytes / (1 << 20):g} MiB (all its processes together)" if killed else ""
        finally:
            if group is not None:
                group.remove()
    return _report(outcome, compiled.total, child.stopped, child.memory_error, memory_limit)


def default_workers() -> int:
    """The cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def run_tests_batch(
    programs: Sequence[str],
    items: Sequence[Mapping[str, Any]],
    timeout: float = 10.0,
    workers: Optional[int] = None,
    limits: Optional[RunLimits] = None,
) -> List[TestReport]:
    """:func:`run_tests` for each ``(program, item)`` pair, ``workers`` at a time (the cores when
    ``None``), reports in the order given. Every item is checked before any program starts."""
    if len(programs) != len(items):
        raise ConfigurationError(f"run_tests_batch: {len(programs)} programs for {len(items)} items")
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise ConfigurationError(f"run_tests_batch: workers must be a positive integer, got {workers!r}")
    for item in items:
        compile_check(item)
    for program in programs:
        _check_program(program)
    if not programs:
        return []
    count = min(workers or default_workers(), len(programs))
    with ThreadPoolExecutor(max_workers=count, thread_name_prefix="comlrl-test-runner") as pool:
        return list(pool.map(lambda pair: run_tests(pair[0], pair[1], timeout, limits), zip(programs, items)))
