"""How many CPU threads torch uses in a run: one for a tiny model, torch's default for a real one, and
always the user's own count.

Why: torch runs one intra-op thread per physical core. A tiny model's operations are too small to
gain from splitting, so a second thread mostly waits at the end of every parallel region, and GNU
OpenMP (libgomp, which torch's Linux wheels use) waits by spinning. When other processes share the
cores, a spinning thread burns the time slices the working thread needs: the default run (271 K
parameters) took 892 s of CPU and 63 minutes with 2 threads against 79 s and 6 minutes with one on a
2-core AMD EPYC that other jobs kept busy (``benchmarks/busy_machine.py`` measures idle against
busy). A real model's operations are large enough to split, and it keeps torch's default.

What can change at run time: :func:`torch.set_num_threads` sets the size of every later parallel
region, so the choice is made once the model is built (its parameters are counted) and before the
first collection. libgomp reads ``OMP_WAIT_POLICY`` and ``GOMP_SPINCOUNT`` once, when it is loaded
(by ``import torch``), so a program cannot change how its threads wait after that: on a shared
machine with several threads, set ``OMP_WAIT_POLICY=PASSIVE`` in the environment before the command.

The user's count always wins: ``COMLRL_LIGHTNING_THREADS=N`` (this package's), else
``OMP_NUM_THREADS=N`` (which torch itself reads), else a count set with :func:`torch.set_num_threads`
before the run (one that differs from torch's default). Only the entry points choose (the command
line and the seed API, which own their process); a Lightning ``Trainer`` built in a user's script
gets the choice by adding a :class:`ThreadDefaults` callback.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, List, Mapping, Optional, Set, Tuple

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.model_summary import get_human_readable_count

from comlrl_lightning.errors import ConfigurationError

THREADS_VARIABLE = "COMLRL_LIGHTNING_THREADS"
"""The environment variable that sets a run's thread count (before ``OMP_NUM_THREADS``)."""
TINY_MODEL_PARAMETERS = 20_000_000
"""Below this many parameters a model runs on one thread. The embedded model (271 K), on a busy
2-core AMD EPYC, took 892 s of CPU with 2 threads against 79 s with one; SmolLM2-135M, the smallest real model the docs use, is far above the line (its matrix
products split across cores). ``benchmarks/busy_machine.py --sizes`` times a training step per
size at 1 and 2 threads."""
TORCH_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
"""What torch reads for its default intra-op thread count, in its order of precedence (the last wins)."""


@dataclass(frozen=True)
class ThreadChoice:
    """A run's thread count and why: ``reason`` is what the run's line prints after the count."""

    count: int
    reason: str

    def line(self) -> str:
        """``"threads: <count> (<reason>)"``: the run's line."""
        return f"threads: {self.count} ({self.reason})"


def requested_threads(environ: Mapping[str, str]) -> Optional[Tuple[int, str]]:
    """The count the user asked for in ``environ`` and the setting that says so (``"NAME=value"``):
    :data:`THREADS_VARIABLE`, else ``OMP_NUM_THREADS``; ``None`` when neither is set (or empty).

    A value that is not a positive whole number is a :class:`~comlrl_lightning.errors.ConfigurationError`
    naming the variable.
    """
    for name in (THREADS_VARIABLE, "OMP_NUM_THREADS"):
        value = environ.get(name, "").strip()
        if not value:
            continue
        # OMP_NUM_THREADS may list a count per nesting level ("4,2"); the first is the outer one
        first = value.split(",")[0].strip()
        if not first.isdigit() or int(first) < 1:
            raise ConfigurationError(f"{name}={value!r}: give a positive whole number of threads.")
        return int(first), f"{name}={value}"
    return None


def torch_default_threads(environ: Mapping[str, str], physical_cores: int) -> int:
    """The intra-op thread count torch starts with: ``MKL_NUM_THREADS``, else ``OMP_NUM_THREADS``,
    else one per physical core (what torch's ``intraop_default_num_threads`` reads)."""
    count = 0
    for name in TORCH_THREAD_VARIABLES:
        first = environ.get(name, "").split(",")[0].strip()
        if first.isdigit() and int(first) > 0:
            count = int(first)
    return count or physical_cores


def choose_threads(parameters: int, current: int, default: int, environ: Mapping[str, str]) -> ThreadChoice:
    """The thread count for a model of ``parameters`` parameters.

    Args:
        parameters: the model's parameter count.
        current: the count torch uses now (:func:`torch.get_num_threads`).
        default: the count torch starts with (:func:`torch_default_threads`); a ``current`` that
            differs was set by the user with :func:`torch.set_num_threads` and is kept.
        environ: the environment (:func:`requested_threads`).

    Returns:
        the user's count where one is given; else one thread below :data:`TINY_MODEL_PARAMETERS`
        parameters; else ``current`` (torch's default).
    """
    size = f"{get_human_readable_count(parameters)} parameters"
    requested = requested_threads(environ)
    if requested is not None:
        count, setting = requested
        return ThreadChoice(count, setting)
    if current != default:
        return ThreadChoice(current, "set with torch.set_num_threads before the run")
    if parameters < TINY_MODEL_PARAMETERS:
        return ThreadChoice(1, f"a small model, {size}; {THREADS_VARIABLE}=N to change")
    return ThreadChoice(current, f"one per core, {size}; {THREADS_VARIABLE}=N to change")


def physical_cores(cpus: Iterable[int], cpu_folder: Path = Path("/sys/devices/system/cpu")) -> int:
    """Physical cores among the logical CPUs ``cpus`` (the ones this process may run on), as torch's
    default counts them (threads of one core count once): distinct ``(package, core)`` pairs in
    Linux's CPU topology; the number of ``cpus`` where that is not readable (other systems)."""
    cpus = list(cpus)
    cores: Set[Tuple[str, str]] = set()
    for cpu in cpus:
        topology = cpu_folder / f"cpu{cpu}" / "topology"
        try:
            cores.add(
                ((topology / "physical_package_id").read_text().strip(), (topology / "core_id").read_text().strip())
            )
        except OSError:
            return len(cpus) or 1
    return len(cores) or 1


def usable_cpus() -> List[int]:
    """The logical CPUs this process may run on (its affinity; every CPU where there is none)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def set_thread_default(module: Any, environ: Optional[Mapping[str, str]] = None) -> ThreadChoice:
    """Choose the thread count for ``module`` (its parameters counted; :func:`choose_threads`) and
    set it with :func:`torch.set_num_threads`; returns the choice."""
    import torch

    environ = os.environ if environ is None else environ
    parameters = sum(parameter.numel() for parameter in module.parameters())
    current = torch.get_num_threads()
    default = torch_default_threads(environ, physical_cores(usable_cpus()))
    choice = choose_threads(parameters, current, default, environ)
    if choice.count != current:
        torch.set_num_threads(choice.count)
    return choice


class ThreadDefaults(Callback):
    """Sets a run's CPU thread count (:func:`set_thread_default`) once its module is built, before
    any work: at the start of fitting, validating, testing or predicting; prints the
    :meth:`ThreadChoice.line` once per trainer (rank 0)."""

    def __init__(self) -> None:
        self.choice: Optional[ThreadChoice] = None

    def _choose(self, pl_module: LightningModule) -> None:
        if self.choice is None:
            self.choice = set_thread_default(pl_module)
            rank_zero_info(self.choice.line())

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._choose(pl_module)

    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._choose(pl_module)

    def on_test_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._choose(pl_module)

    def on_predict_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._choose(pl_module)


__all__ = [
    "THREADS_VARIABLE",
    "TINY_MODEL_PARAMETERS",
    "ThreadChoice",
    "ThreadDefaults",
    "choose_threads",
    "physical_cores",
    "requested_threads",
    "set_thread_default",
    "torch_default_threads",
    "usable_cpus",
]
