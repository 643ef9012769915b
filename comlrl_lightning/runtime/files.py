"""Writing files so that a crash or a full disk never leaves a torn one under its final name."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Union


def write_atomically(target: Path, data: Union[bytes, memoryview]) -> None:
    """``data`` to ``target`` through ``<target>.tmp`` in the same folder: written, flushed and fsynced,
    then renamed onto ``target`` (and the folder fsynced). ``target`` holds the old or the new bytes,
    never part of them; a failed write leaves no temporary file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(target.name + ".tmp")
    try:
        with open(temporary, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    fsync_directory(target.parent)


def fsync_directory(directory: Path) -> None:
    # Makes the rename itself durable on POSIX; platforms that cannot open a directory skip it.
    try:
        handle = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)
    except OSError:
        pass
