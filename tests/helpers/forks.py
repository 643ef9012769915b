"""Run a function in processes forked from the test's own: one process, or the ranks of a process group.

A run launched as a fresh interpreter spends most of its time importing (torch, Lightning and
transformers take about 10 s per process on a 2-core CI machine); a fork starts with all of it
imported. Use it where the process itself is what a test needs (a run killed with SIGKILL, two ranks
of one group), not where starting the program is the subject: the console script, ``python -m``,
Lightning's own launchers (the command line's sharded refusal, the multi-node tests) keep their
fresh interpreters.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List

FATAL_MARKS = ("terminate called", "what():", "Fatal Python error", "Traceback")
"""Where a process's own account of its death starts: a C++ abort (gloo's threads) says so before any traceback."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_forked(function: Callable[..., Any], args: tuple, log: Path, environment: Dict[str, str]) -> int:
    """Fork a process that sets ``environment``, calls ``function(*args)`` with its stdout and stderr in
    ``log``, and exits 0 (a ``SystemExit``'s status; 1 if it raised, its traceback in the log); returns
    its pid. The child never returns into the test's process, and no test-process cleanup (pytest's,
    xdist's) runs in it."""
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        descriptor = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(descriptor, 1)
        os.dup2(descriptor, 2)
        # pytest's capture replaced sys.stdout and sys.stderr with objects of its own: write to the log
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        faulthandler.enable(file=2)  # a process killed by a signal other than SIGKILL prints its Python stacks
        os.environ.update(environment)
        function(*args)
        code = 0
    except SystemExit as stop:  # a command line's main() exits with its status
        code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


def in_folder(folder: Path, function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)`` with ``folder`` as the working directory (a forked process's own)."""
    os.chdir(folder)
    return function(*args)


def run_forked(
    function: Callable[..., Any],
    *args: Any,
    log: Path,
    timeout: float = 300.0,
    environment: Dict[str, str] | None = None,
) -> int:
    """``function(*args)`` in one forked process (output in ``log``, ``environment`` added to its own);
    its exit status, a signal as its negative number (``-9``: killed by SIGKILL). Past the timeout it
    is killed and AssertionError raised."""
    pid = start_forked(function, args, log, environment or {})
    codes = wait_all([pid], time.monotonic() + timeout, stop_others_after=None)
    if codes == [None]:
        raise AssertionError(f"the forked process ran past {timeout:.0f} s:\n{account(log)}")
    return codes[0]


def run_forked_ranks(
    function: Callable[..., Any], *args: Any, logs: Path, world_size: int = 2, timeout: float = 300.0, expect: int = 0
) -> None:
    """Call ``function(*args)`` in ``world_size`` forked ranks, each with the environment a launcher such
    as ``torchrun`` gives it (``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``,
    ``NODE_RANK``), so Lightning sees processes created externally and runs its strategy's setup on each;
    rank r's output in ``logs/rank_<r>.log``. Returns when every rank exited ``expect``; otherwise (a rank
    exited otherwise or was killed, or the timeout passed) the others are ended and AssertionError names
    what each said."""
    logs.mkdir(parents=True, exist_ok=True)
    port = str(free_port())
    pids = []
    for rank in range(world_size):
        environment = dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, WORLD_SIZE=str(world_size), NODE_RANK="0")
        environment.update(RANK=str(rank), LOCAL_RANK=str(rank))
        pids.append(start_forked(function, args, logs / f"rank_{rank}.log", environment))
    codes = wait_all(pids, time.monotonic() + timeout, stop_others_after=10.0, expect=expect)
    if any(code != expect for code in codes):
        accounts = "\n".join(f"--- rank {rank}:\n{account(logs / f'rank_{rank}.log')}" for rank in range(world_size))
        raise AssertionError(f"ranks exited {codes} (None: killed past the timeout):\n{accounts}")


def wait_all(pids: List[int], deadline: float, stop_others_after: float | None, expect: int = 0) -> List[int | None]:
    """Each process's exit status (a signal as its negative number; ``None``: still running at the
    deadline, then killed). ``stop_others_after``: seconds after one exits other than ``expect``, the
    ones still running are killed (a rank waiting on a dead peer's collective would wait long); their
    status is SIGKILL's."""
    codes: Dict[int, int | None] = {}
    failed_at = None
    while len(codes) < len(pids):
        for pid in pids:
            if pid not in codes:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    codes[pid] = os.waitstatus_to_exitcode(status)
                    if codes[pid] != expect and failed_at is None:
                        failed_at = time.monotonic()
        now = time.monotonic()
        past_deadline = now > deadline
        stop = stop_others_after is not None and failed_at is not None and now > failed_at + stop_others_after
        for pid in [pid for pid in pids if pid not in codes] if past_deadline or stop else []:
            os.kill(pid, signal.SIGKILL)
            status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            codes[pid] = None if past_deadline else status
        if len(codes) < len(pids):
            time.sleep(0.05)
    return [codes[pid] for pid in pids]


def account(log: Path, each: int = 3000) -> str:
    """A process's first account of a death and its log's end: the process that failed first says why,
    and another rank's later "connection reset" would otherwise fill the tail."""
    text = log.read_text(errors="replace")
    found = [at for at in (text.find(mark) for mark in FATAL_MARKS) if at >= 0]
    first = min(found, default=-1)
    if first < 0 or first >= len(text) - each:
        return text[-2 * each :]
    return f"{text[first : first + each]}\n...\n{text[-each:]}"
