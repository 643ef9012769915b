"""A folder this process cannot write in, for tests of read-only run folders."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest


@contextlib.contextmanager
def read_only_folder(folder: Path) -> Iterator[Path]:
    """``folder``, created and made unwritable for this process: its permission bits, or (as root, whom
    they do not stop) a read-only tmpfs mounted there; skips the test where neither is possible."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield folder
        finally:
            folder.chmod(0o755)
        return
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("running as root without permission to mount a read-only file system")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)
