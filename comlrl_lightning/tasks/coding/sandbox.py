"""What a program under test may use, and who it runs as: limits, readable paths, spare uids, cleanup.

Every value here is the trainer's: the launcher receives it as its configuration. A program may read
the interpreter's standard library (not its ``site-packages``), the packages :attr:`RunLimits.packages`
names (numpy by default), the system's shared libraries, ``/dev/null`` and ``/dev/urandom``, and
may write only beneath its own empty folder. Running as root, each concurrent run gets its own
spare uid (root ignores the process limit, and a uid of its own lets the trainer find and end every
process the run started, even one that left its session), from a block of uids the trainer claims
for its whole life, host-wide (:class:`UidBlockClaim`).
"""

from __future__ import annotations

import fcntl
import functools
import importlib.util
import math
import os
import signal
import stat
import sys
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Tuple, TypedDict

from comlrl_lightning.errors import ConfigurationError, RunStateError
from comlrl_lightning.runtime.tree_removal import remove_tree

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")
"""Set to 1 in the program's otherwise empty environment, so numpy starts no thread pool (whose
reserved stacks would not fit the address-space limit)."""

SHARED_LIBRARIES = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib")
READABLE_FILES = ("/etc/ld.so.cache",)
DEVICES = ("/dev/null", "/dev/urandom")
SPARE_UID_BASE = 0x60000000
"""Spare uids start here: ``base + block * 256 + slot``, far above any account's and below 2**31
(``block`` < 65536 is the trainer's claimed block, ``slot`` < 256 the run's)."""

MAX_SLOTS = 256
UID_BLOCKS = 65536
UID_LOCK_FOLDERS = ("/run/comlrl-lightning-spare-uids", "/tmp/comlrl-lightning-spare-uids")
"""Where the trainers of one host claim their uid blocks: the first whose parent exists (``/run``
on Linux; ``/tmp``, never ``$TMPDIR``, so that every trainer of the host finds the same folder)."""


@dataclass(frozen=True)
class RunLimits:
    """The limits of one program's run (each set with soft = hard), and the trainer's caps on what
    comes back from it.

    Args:
        address_space_bytes: ``RLIMIT_AS`` of every process of the run.
        memory_bytes: the memory of the whole run, all its processes together (resident pages,
            shared memory and memfd files, page cache, kernel memory): its cgroup's limit, where
            the machine offers a writable cgroup (see :mod:`.run_cgroup`).
        file_size_bytes: ``RLIMIT_FSIZE``: the largest file a program may write.
        open_files: ``RLIMIT_NOFILE``.
        processes: ``RLIMIT_NPROC``: processes and threads of the run's uid (its launcher counts).
        output_bytes: stdout and stderr together; past it the run stops as ``output_limit``.
        message_bytes: the largest reply (one return value); past it the run stops as ``output_limit``.
        packages: importable packages beside the standard library (found in the trainer's environment).
    """

    address_space_bytes: int = 1 << 30
    memory_bytes: int = 1 << 30
    file_size_bytes: int = 16 << 20
    open_files: int = 64
    processes: int = 8
    output_bytes: int = 1 << 20
    message_bytes: int = 1 << 20
    packages: Tuple[str, ...] = ("numpy",)

    def __post_init__(self) -> None:
        for name in (
            "address_space_bytes",
            "memory_bytes",
            "file_size_bytes",
            "open_files",
            "processes",
            "output_bytes",
        ):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ConfigurationError(f"RunLimits.{name} must be a positive integer, got {getattr(self, name)!r}")
        if not isinstance(self.message_bytes, int) or self.message_bytes < 1:
            raise ConfigurationError(f"RunLimits.message_bytes must be a positive integer, got {self.message_bytes!r}")

    def resource_limits(self, timeout: float) -> Dict[str, int]:
        """The launcher's ``setrlimit`` values: CPU seconds just above the wall-clock limit, no core file."""
        return {
            "cpu": max(1, math.ceil(timeout)) + 1,
            "address_space": self.address_space_bytes,
            "file_size": self.file_size_bytes,
            "open_files": self.open_files,
            "processes": self.processes,
            "core": 0,
        }


def environment() -> Dict[str, str]:
    """The program's environment: nothing of the trainer's, only single-threaded numerical libraries."""
    return {name: "1" for name in THREAD_VARIABLES}


def _stdlib_folders() -> List[str]:
    """The standard library's folders on this interpreter's path (its zip, the library, lib-dynload)."""
    base = os.path.realpath(sys.base_prefix)
    found = []
    for entry in sys.path:
        real = os.path.realpath(entry) if entry else ""
        if real.startswith(base + os.sep) and "site-packages" not in real and os.path.exists(real):
            found.append(real)
    return list(dict.fromkeys(found))


class ReadablePaths(TypedDict):
    """What :func:`readable_paths` returns (the launcher's configuration lists)."""

    path: List[str]
    reads: List[str]
    listings: List[str]
    files: List[str]
    devices: List[str]
    packages: List[Tuple[str, str]]


@functools.lru_cache(maxsize=8)
def readable_paths(packages: Tuple[str, ...]) -> ReadablePaths:
    """The paths the launcher opens for the program: ``path`` (its ``sys.path``), ``reads`` (read
    beneath), ``listings`` (list only), ``files``, ``devices``, and ``packages`` (name, folder)."""
    folders = _stdlib_folders()
    reads: List[str] = []
    listings: List[str] = []
    for folder in folders:
        if os.path.isdir(folder) and os.path.isdir(os.path.join(folder, "site-packages")):
            listings.append(folder)  # the library itself: every entry but its site-packages
            reads += [os.path.join(folder, name) for name in sorted(os.listdir(folder)) if name != "site-packages"]
        else:
            reads.append(folder)
    reads += [os.path.realpath(path) for path in SHARED_LIBRARIES if os.path.isdir(path)]
    found: List[Tuple[str, str]] = []
    for name in packages:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise ConfigurationError(f"RunLimits.packages: {name!r} is not an installed package")
        package = Path(list(spec.submodule_search_locations)[0]).resolve()
        found.append((name, str(package)))
        if (package.parent / f"{name}.libs").is_dir():  # the wheel's bundled shared libraries
            found.append((f"{name}.libs", str(package.parent / f"{name}.libs")))
    return {
        "path": folders,
        "reads": reads,
        "listings": listings,
        "files": [path for path in READABLE_FILES if os.path.exists(path)],
        "devices": [path for path in DEVICES if os.path.exists(path)],
        "packages": found,
    }


FOLDER_PREFIX = "comlrl-test-run-"
"""A run's folder is ``<temp>/comlrl-test-run-<trainer pid>-<random>``."""


def run_folder() -> Path:
    """A new, empty run folder (private to root until the run's uid gets its work folder)."""
    return Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-"))


def owner_is_gone(name: str) -> bool:
    """Whether ``name`` (``comlrl-test-run-<trainer pid>-...``, a run's folder or cgroup) belongs
    to a trainer that no longer runs (never this process's)."""
    owner = name[len(FOLDER_PREFIX) :].split("-", 1)[0] if name.startswith(FOLDER_PREFIX) else ""
    if not owner.isdigit() or int(owner) == os.getpid():
        return False
    try:
        os.kill(int(owner), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        return False
    return False  # its trainer still runs


def remove_stale_folders() -> List[Path]:
    """Remove the run folders of trainers that are gone (one killed mid-run leaves its folder),
    whatever their programs left in them (:func:`remove_tree`: never raises); the folders removed."""
    removed = []
    for folder in Path(tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*-*"):
        if owner_is_gone(folder.name) and not remove_tree(folder):
            removed.append(folder)
    return removed


class SlotPool:
    """Small integers for concurrent runs (each root run's spare uid is ``base + slot``)."""

    def __init__(self, size: int = MAX_SLOTS) -> None:
        self.free = list(range(size))
        self.condition = threading.Condition()

    @contextmanager
    def slot(self) -> Iterator[int]:
        with self.condition:
            while not self.free:
                self.condition.wait()
            number = self.free.pop(0)
        try:
            yield number
        finally:
            with self.condition:
                self.free.append(number)
                self.free.sort()
                self.condition.notify()


SLOTS = SlotPool()


def open_lock_folder(path: str) -> int:
    """A descriptor of the uid lock folder ``path``, made if missing; refused (one line naming it)
    unless it is a real folder (not a link) owned by this user (root) that no one else may write."""
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        pass
    except OSError as error:
        raise RunStateError(f"the spare-uid lock folder {path} cannot be made: {error.strerror}") from None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        raise RunStateError(f"the spare-uid lock folder {path} is not a folder ({error.strerror}); remove it") from None
    status = os.fstat(fd)
    if status.st_uid != os.geteuid() or status.st_mode & 0o022:
        os.close(fd)
        raise RunStateError(
            f"the spare-uid lock folder {path} is owned by uid {status.st_uid} with mode {stat.filemode(status.st_mode)}; "
            f"it must be uid {os.geteuid()}'s and writable by no one else: remove it"
        )
    return fd


def claim_free_block(folder: int) -> Tuple[int, int]:
    """The lowest uid block whose lock file in ``folder`` no live process holds, and the descriptor
    holding its ``flock`` (the kernel releases it when the holder dies, however it dies). A lock
    file planted as a link or anything but a regular file is passed over, never followed."""
    for block in range(UID_BLOCKS):
        try:
            fd = os.open(
                f"block-{block}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder
            )
        except OSError:
            continue
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        return block, fd
    raise RunStateError(f"all {UID_BLOCKS} spare-uid blocks are held by live trainers")


class UidBlockClaim:
    """This process's block of :data:`MAX_SLOTS` spare uids, claimed host-wide on first use and held
    while the process lives: an exclusive ``flock`` on ``<folder>/block-<n>.lock``, so two trainers
    of one host (in any pid namespace that shares the folder) never share a uid, and a dead
    trainer's block is free again. A process forked from a holder claims a block of its own."""

    def __init__(self, folder: Optional[str] = None) -> None:
        self.folder = folder
        self.lock = threading.Lock()
        self.held: Optional[Tuple[int, int, int]] = None  # (holder pid, block, lock descriptor)

    def block(self) -> int:
        """The claimed block (claimed now if this process holds none)."""
        with self.lock:
            if self.held is None or self.held[0] != os.getpid():
                folder = open_lock_folder(self.folder or default_lock_folder())
                try:
                    self.held = (os.getpid(), *claim_free_block(folder))
                finally:
                    os.close(folder)
            return self.held[1]

    def release(self) -> None:
        """Give the block back (a process that ends gives it back without this)."""
        with self.lock:
            if self.held is not None and self.held[0] == os.getpid():
                os.close(self.held[2])
            self.held = None


def default_lock_folder() -> str:
    """The first of :data:`UID_LOCK_FOLDERS` whose parent folder exists."""
    return next((path for path in UID_LOCK_FOLDERS if os.path.isdir(os.path.dirname(path))), UID_LOCK_FOLDERS[-1])


SPARE_UIDS = UidBlockClaim()


def spare_uid(slot: int) -> Optional[int]:
    """The uid a run in ``slot`` takes when the trainer is root (``SPARE_UID_BASE + block * 256 +
    slot``, ``block`` this trainer's claimed one); ``None`` for any other user."""
    if os.geteuid() != 0:
        return None
    return SPARE_UID_BASE + SPARE_UIDS.block() * MAX_SLOTS + slot


def uid_and_state(lines: Iterable[str]) -> Tuple[int, str]:
    """The real uid and the state of a ``/proc/<pid>/status`` file's lines, read up to its ``Uid:``
    line (``State:`` comes before it; the name on the first line has its newlines escaped, so it
    cannot fake either line). ``ValueError`` without a ``Uid:`` line."""
    state = ""
    for line in lines:
        if line.startswith("State:"):
            state = line[6:].strip()
        elif line.startswith("Uid:"):
            return int(line[4:].split()[0]), state
    raise ValueError("no Uid line")


def processes_of(uid: int) -> List[int]:
    """Every live process whose real uid is ``uid`` (in any pid namespace: the host's ``/proc``)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as status:
                real_uid, state = uid_and_state(status)
        except (OSError, ValueError, IndexError):
            continue
        if real_uid == uid and not state.startswith(("Z", "X")):  # a zombie is gone already
            found.append(int(entry))
    return found


def end_processes_of(uid: int, rounds: int = 50) -> int:
    """SIGKILL every process of ``uid`` until none is left (a fork bomb may fork between two scans);
    the number of processes it ended."""
    ended = 0
    for _ in range(rounds):
        live = processes_of(uid)
        if not live:
            return ended
        for pid in live:
            try:
                os.kill(pid, signal.SIGKILL)
                ended += 1
            except ProcessLookupError:
                pass
    return ended
