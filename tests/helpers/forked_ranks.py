"""Run a function as the ranks of one process group, each rank a fork of the test's own process.

A two-process run launched as a fresh interpreter spends most of its time importing (torch, Lightning
and transformers take about 10 s per process on a 2-core CI machine, twice per run); a fork starts with
all of it imported. Each rank gets the environment a launcher such as ``torchrun`` gives it
(``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``, ``NODE_RANK``), so
Lightning sees processes created externally and runs the strategy's own setup on each. Lightning's own
launchers are tested where they are the subject (the command line's sharded refusal, the multi-node
tests).
"""

from __future__ import annotations

import faulthandler
import os
import signal
import socket
import time
import traceback
from pathlib import Path
from typing import Any, Callable, List

FATAL_MARKS = ("terminate called", "what():", "Fatal Python error", "Traceback")
"""Where a rank's own account of its death starts: a C++ abort (gloo's threads) says so before any traceback."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_forked_ranks(
    function: Callable[..., Any], *args: Any, logs: Path, world_size: int = 2, timeout: float = 300.0
) -> None:
    """Call ``function(*args)`` in ``world_size`` forked ranks; each rank's stdout and stderr go to
    ``logs/rank_<r>.log``. Returns when every rank exited 0; otherwise (a rank failed, was killed, or
    the timeout passed: the others are ended) raises AssertionError with the first account of a death."""
    logs.mkdir(parents=True, exist_ok=True)
    port, pids = free_port(), []
    for rank in range(world_size):
        pid = os.fork()
        if pid == 0:  # the rank: never returns into the test's process
            _run_rank(function, args, rank, world_size, port, logs / f"rank_{rank}.log")
        pids.append(pid)
    codes = _wait_all(pids, time.monotonic() + timeout)
    if any(code != 0 for code in codes):
        raise AssertionError(f"ranks exited {codes}:\n" + failure_output(logs, world_size))


def _run_rank(function: Callable[..., Any], args: tuple, rank: int, world_size: int, port: int, log: Path) -> None:
    code = 1
    try:
        descriptor = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(descriptor, 1)
        os.dup2(descriptor, 2)
        faulthandler.enable(file=2)  # a rank killed by a signal (gloo's abort) prints its Python stacks
        os.environ.update(
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            WORLD_SIZE=str(world_size),
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            NODE_RANK="0",
        )
        function(*args)
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)  # no test-process cleanup (pytest's, xdist's) runs in a fork


def _wait_all(pids: List[int], deadline: float) -> List[int]:
    """Each rank's exit status (a signal as its negative number); after a failure or past the deadline
    the ranks still running are killed (a rank waiting on a dead peer's collective would wait long)."""
    codes: dict = {}
    failed_at = None
    while len(codes) < len(pids):
        for pid in pids:
            if pid in codes:
                continue
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                codes[pid] = os.waitstatus_to_exitcode(status)
                if codes[pid] != 0 and failed_at is None:
                    failed_at = time.monotonic()
        now = time.monotonic()
        if len(codes) < len(pids) and (now > deadline or (failed_at is not None and now > failed_at + 10)):
            for pid in pids:
                if pid not in codes:
                    os.kill(pid, signal.SIGKILL)
                    codes[pid] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        time.sleep(0.05)
    return [codes[pid] for pid in pids]


def failure_output(logs: Path, world_size: int, each: int = 3000) -> str:
    """Each rank's first account of a death and its log's end: the rank that failed first says why,
    and another rank's later "connection reset" would otherwise fill the tail."""
    parts = []
    for rank in range(world_size):
        text = (logs / f"rank_{rank}.log").read_text(errors="replace")
        found = [at for at in (text.find(mark) for mark in FATAL_MARKS) if at >= 0]
        first = min(found, default=-1)
        if first < 0 or first >= len(text) - each:
            parts.append(f"--- rank {rank}:\n{text[-2 * each :]}")
        else:
            parts.append(f"--- rank {rank}:\n{text[first : first + each]}\n...\n{text[-each:]}")
    return "\n".join(parts)
