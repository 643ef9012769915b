"""A cgroup per run: one memory and one process budget for all of a run's processes together.

``RLIMIT_AS`` bounds each process's address space, not a run: a program that forks takes it once
per process, and pages of a memfd or of shared memory that are not mapped count against no address
space at all. A cgroup counts every page the run's processes charge (resident, shared memory,
memfd and tmpfs files, page cache, and under cgroup v2 kernel memory) and every task they start,
whatever they do. The trainer makes one per run beneath its own cgroup (named like the run's
folder, ``comlrl-test-run-<trainer pid>-...``), with ``memory_bytes`` as its memory limit (and
no swap) and ``processes`` as its task limit; the launcher moves itself into it while still
privileged, before it forks the program, so every process of the run starts inside.

Which hierarchy is probed, never assumed: cgroup v2 (``memory.max``, ``pids.max``) where the
trainer's own cgroup offers the ``memory`` and ``pids`` controllers to its children (or can be
made to), else cgroup v1's ``memory`` and ``pids`` hierarchies where they are mounted writable.
Where neither works (no cgroup file system, a container that mounts it read-only, a user without
rights), :func:`find_parents` returns ``None`` and the runner falls back to one process per run
(see the launcher), so that ``RLIMIT_AS`` bounds the run.
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

from comlrl_lightning.tasks.coding.sandbox import FOLDER_PREFIX, owner_is_gone

logger = logging.getLogger("comlrl_lightning.tasks.coding")

Mount = Tuple[str, str, str, Tuple[str, ...]]
"""A mount: its root within its file system, its mount point, its type, its super options."""


def parse_mounts(lines: Iterable[str]) -> List[Mount]:
    """The cgroup mounts of a ``/proc/self/mountinfo`` file's lines."""
    found = []
    for line in lines:
        left, separator, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not separator or len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        root, point = (field.encode().decode("unicode_escape") for field in fields[3:5])  # "\040" is a space
        found.append((root, point, tail[0], tuple(tail[2].split(","))))
    return found


def parse_own_groups(lines: Iterable[str]) -> Dict[str, str]:
    """The cgroup of each hierarchy of a ``/proc/self/cgroup`` file's lines: ``""`` for cgroup v2's,
    else each controller (or ``name=``) of a v1 hierarchy, to its path."""
    groups = {}
    for line in lines:
        parts = line.rstrip("\n").split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                groups[controller] = parts[2]
    return groups


def folder_of(mount: Mount, path: str) -> Optional[Path]:
    """The folder of the cgroup ``path`` under ``mount`` (``None`` where the mount does not show it)."""
    root, point = mount[0].rstrip("/"), mount[1]
    if path != root and not path.startswith(root + "/"):
        return None
    return Path(point, path[len(root) :].lstrip("/"))


@dataclass(frozen=True)
class CgroupParents:
    """Where the runs' cgroups are made: ``version`` 2 (``memory`` is the one folder, ``pids`` is
    ``None``) or 1 (a folder in the memory hierarchy and one in the pids hierarchy)."""

    version: int
    memory: Path
    pids: Optional[Path]


def _enable_controllers(folder: Path) -> bool:
    """Whether ``folder``'s children get the memory and pids controllers (asked for where they do not)."""
    try:
        enabled = (folder / "cgroup.subtree_control").read_text().split()
        if not {"memory", "pids"} <= set(enabled):
            (folder / "cgroup.subtree_control").write_text("+memory +pids")
        return {"memory", "pids"} <= set((folder / "cgroup.subtree_control").read_text().split())
    except OSError:  # not ours to change, or a cgroup with processes of its own (not the root)
        return False


def find_parents(mountinfo: str = "/proc/self/mountinfo", cgroup: str = "/proc/self/cgroup") -> Optional[CgroupParents]:
    """The folders beneath which this process may make runs' cgroups, or ``None`` where it may not."""
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as lines:
            mounts = parse_mounts(lines)
        with open(cgroup, encoding="utf-8", errors="replace") as lines:
            own = parse_own_groups(lines)
    except OSError:
        return None
    for mount in mounts:
        if mount[2] == "cgroup2" and "" in own:
            folder = folder_of(mount, own[""])
            if folder is not None and os.access(folder, os.W_OK) and _enable_controllers(folder):
                return CgroupParents(2, folder, None)
    folders: Dict[str, Path] = {}
    for mount in mounts:
        for controller in ("memory", "pids"):
            if mount[2] == "cgroup" and controller in mount[3] and controller in own:
                folder = folder_of(mount, own[controller])
                if folder is not None and os.access(folder, os.W_OK):
                    folders[controller] = folder
    if set(folders) == {"memory", "pids"}:
        return CgroupParents(1, folders["memory"], folders["pids"])
    return None


def _write(folder: Path, name: str, value: int, required: bool = True) -> None:
    try:
        (folder / name).write_text(str(value))
    except FileNotFoundError:
        if required:
            raise


class RunCgroup:
    """One run's cgroup (one folder under v2, two under v1): made with its limits, then removed."""

    def __init__(self, parents: CgroupParents, name: str, memory_bytes: int, processes: int) -> None:
        self.version = parents.version
        self.folders = [parents.memory / name] + ([parents.pids / name] if parents.pids is not None else [])
        made: List[Path] = []
        try:
            for folder in self.folders:
                folder.mkdir(mode=0o755)
                made.append(folder)
            memory, pids = self.folders[0], self.folders[-1]
            if self.version == 2:
                _write(memory, "memory.max", memory_bytes)
                _write(memory, "memory.swap.max", 0, required=False)
                _write(memory, "memory.oom.group", 1, required=False)  # an OOM kill ends the whole run
            else:
                _write(memory, "memory.limit_in_bytes", memory_bytes)
                _write(memory, "memory.memsw.limit_in_bytes", memory_bytes, required=False)  # no swap beyond
            _write(pids, "pids.max", processes)
        except OSError:
            for folder in made:
                _remove_group(folder)
            raise

    @classmethod
    def for_run(cls, parents: CgroupParents, slot: int, memory_bytes: int, processes: int) -> "RunCgroup":
        """A new cgroup for a run in ``slot`` of this trainer."""
        return cls(parents, f"{FOLDER_PREFIX}{os.getpid()}-{slot}-{secrets.token_hex(4)}", memory_bytes, processes)

    @property
    def procs_files(self) -> List[str]:
        """The files a process writes its pid to, to join (every one)."""
        return [str(folder / "cgroup.procs") for folder in self.folders]

    def oom_kills(self) -> int:
        """How many of the run's processes the kernel killed for the memory limit."""
        events = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            for line in (self.folders[0] / events).read_text().splitlines():
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
        except (OSError, ValueError):
            pass
        return 0

    def remove(self) -> bool:
        """Remove the cgroup once its processes are gone (they were ended: give them a moment to
        exit); ``False`` where one stays (the next trainer's sweep removes it)."""
        return all([_remove_group(folder) for folder in self.folders])


def _remove_group(folder: Path, tries: int = 50) -> bool:
    for _ in range(tries):
        try:
            folder.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:  # EBUSY: a process of the run is still exiting
            time.sleep(0.01)
    logger.debug("the run cgroup %s stays: its processes have not exited", folder)
    return False


def remove_stale_groups(parents: Optional[CgroupParents]) -> List[Path]:
    """Remove the runs' cgroups of trainers that are gone; those removed."""
    if parents is None:
        return []
    removed = []
    for parent in [parents.memory] + ([parents.pids] if parents.pids is not None else []):
        try:
            stale = [folder for folder in parent.glob(f"{FOLDER_PREFIX}*-*") if owner_is_gone(folder.name)]
        except OSError:
            continue
        removed += [folder for folder in stale if _remove_group(folder, tries=1)]
    return removed
