"""One run per folder: an exclusive lock on a run's replay and snapshot folders while it runs.

Two runs writing ``iteration_NNNN.json`` into the same folder would overwrite each other's round
files, which neither could then resume. The lock is an ``fcntl.flock`` on ``<folder>/.lock``: the
kernel releases it when the process ends in any way (SIGKILL included), so a stale lock from a
dead run never blocks a resume, and a second run (another process, or another trainer in this
process) fails at once with a message naming the folder and the holder's process id.

The lock file is opened without following a symbolic link and must be a regular file: a ``.lock``
planted as a link (to a file the lock record would overwrite) or a folder is refused by name, and
so is a folder the run cannot write in (read-only). A ``.lock`` that is a hard link (another name
of a file elsewhere) is locked but never written: the holder record goes only into a file with one
name, so the other name keeps its bytes.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Optional

from comlrl_lightning.errors import RunStateError
from comlrl_lightning.runtime.files import ensure_writable_folder, open_in_place

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks here
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".lock"


class FolderInUseError(RunStateError):
    """Another run holds the lock of a folder this run needs."""


class FolderLock:
    """An exclusive lock on ``directory`` for as long as it is held (:meth:`acquire` / :meth:`release`)."""

    def __init__(self, directory: os.PathLike | str) -> None:
        self.directory = Path(directory).absolute()
        self.path = self.directory / LOCK_NAME
        self._descriptor: Optional[int] = None

    @property
    def held(self) -> bool:
        return self._descriptor is not None

    def acquire(self) -> "FolderLock":
        if self.held or fcntl is None:
            return self
        ensure_writable_folder(self.directory, "a run folder")
        descriptor = open_in_place(self.path, "the folder's lock file")
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(descriptor)
            os.close(descriptor)
            raise FolderInUseError(
                f"{self.directory} is in use by another run ({holder}). Two runs in one folder overwrite each "
                "other's files; give this run its own folder (trainer.default_root_dir, preference_replay_dir or "
                "policy_checkpoint_dir) or wait for the other run to end."
            ) from None
        if os.fstat(descriptor).st_nlink == 1:  # a hard link's other name is never written through
            os.ftruncate(descriptor, 0)
            os.write(descriptor, json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode())
        self._descriptor = descriptor
        return self

    def release(self) -> None:
        if self._descriptor is not None:
            os.close(self._descriptor)  # closing the descriptor releases the flock
            self._descriptor = None


def _read_holder(descriptor: int) -> str:
    try:
        holder = json.loads(os.pread(descriptor, 4096, 0) or b"{}")
        return f"process {holder.get('pid', '?')} on {holder.get('host', '?')}"
    except (OSError, ValueError):
        return "a process that is still running"


__all__ = ["FolderInUseError", "FolderLock"]
