"""Remove a folder tree that someone else made, without ever failing the caller.

:func:`remove_tree` is for folders whose contents were written by code the caller does not trust
(a program under test, a killed run): a tree thousands of levels deep, folders left read-only or
with mode 000, symbolic links planted anywhere, and a process short of file descriptors. It walks
the tree with a loop (no recursion, so no ``RecursionError``), holding one descriptor of the folder
it is in and at most two more for a moment (so a deep tree needs no descriptor per level), opens
every folder with ``O_NOFOLLOW`` (a link is removed as a name, never followed: its target is
untouched), climbs back up through ``..`` only after checking it reaches the folder it came from
(a folder moved meanwhile stops the walk instead of leading outside the tree), and gives a folder
it may not read or change the owner's rights first. What it cannot remove it returns (and logs);
it raises nothing.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import time
from pathlib import Path
from typing import Callable, List, Tuple, TypeVar

logger = logging.getLogger("comlrl_lightning.runtime")

FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
OWNER_RIGHTS = stat.S_IRWXU
"""What a folder is given when the walk may not list or change it (the owner's, and root's, rights)."""
OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)
RETRIES = 6
"""Tries of a step that found no free file descriptor (another thread may close one meanwhile)."""

T = TypeVar("T")
Identity = Tuple[int, int]


class WalkStopped(Exception):
    """The walk cannot go on (no descriptor, or a folder moved under it)."""


def _with_descriptors(step: Callable[[], T]) -> T:
    """``step()``, tried again a few times, 10 ms apart and doubling, while no descriptor is free."""
    for attempt in range(RETRIES):
        try:
            return step()
        except OSError as error:
            if error.errno not in OUT_OF_DESCRIPTORS or attempt == RETRIES - 1:
                raise
            time.sleep(0.01 * 2**attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def _identity(fd: int) -> Identity:
    status = os.fstat(fd)
    return status.st_dev, status.st_ino


def _open_folder(name: str, parent: int) -> int:
    """A descriptor of the folder ``name`` in ``parent``, never through a link; a folder its owner
    (or root) may not read is given the owner's rights first."""
    try:
        return _with_descriptors(lambda: os.open(name, FOLDER_FLAGS, dir_fd=parent))
    except PermissionError:
        pass
    handle = _with_descriptors(
        lambda: os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    )
    try:
        os.chmod(f"/proc/self/fd/{handle}", OWNER_RIGHTS)  # the folder itself: an O_PATH handle is no link
        return _with_descriptors(lambda: os.open(".", FOLDER_FLAGS, dir_fd=handle))
    finally:
        os.close(handle)


def _remove_in(folder: int, remove: Callable[..., None], name: str) -> None:
    """``remove(name)`` (``os.unlink`` or ``os.rmdir``) in ``folder``, after giving ``folder`` its
    owner's rights where it was read-only."""
    try:
        remove(name, dir_fd=folder)
    except PermissionError as refused:
        try:
            os.fchmod(folder, OWNER_RIGHTS)
        except OSError:
            raise refused from None  # not the folder's owner: the removal's own reason
        remove(name, dir_fd=folder)


class _Walk:
    """One removal: the folder it stands in, the way back up, the folders still to enter, what stays."""

    def __init__(self, top: Path) -> None:
        self.top = top
        self.names: List[str] = []  # from the top folder down to the current one
        self.identities: List[Identity] = []  # of the top folder and each folder below it
        self.pending: List[List[str]] = []  # per level: its folders not yet entered
        self.left: List[str] = []
        self.fd = -1

    def where(self, name: str = "") -> str:
        return os.path.join(self.top, *self.names, *([name] if name else []))

    def keep(self, name: str, error: BaseException) -> None:
        self.left.append(f"{self.where(name)} ({getattr(error, 'strerror', None) or error})")

    def clear_files(self) -> List[str]:
        """Unlink every entry of the current folder but its folders (a link is unlinked, never
        followed); the folders, to enter next."""
        with _with_descriptors(lambda: os.scandir(self.fd)) as listing:
            entries = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in listing]
        folders = []
        for name, is_folder in entries:
            if is_folder:
                folders.append(name)
                continue
            try:
                _remove_in(self.fd, os.unlink, name)
            except FileNotFoundError:
                pass
            except OSError as error:
                self.keep(name, error)
        return folders

    def enter(self, name: str) -> bool:
        """Into the folder ``name`` of the current one; ``False`` (and kept) where it cannot be opened."""
        try:
            child = _open_folder(name, self.fd)
        except OSError as error:
            if error.errno in OUT_OF_DESCRIPTORS:
                raise WalkStopped(f"{self.where(name)}: {error.strerror}") from None
            self.keep(name, error)
            return False
        os.close(self.fd)
        self.fd = child
        self.names.append(name)
        self.identities.append(_identity(child))
        return True

    def leave(self) -> None:
        """Up to the parent folder (checked to be the one the walk came from), removing the folder left."""
        parent = _with_descriptors(lambda: os.open("..", FOLDER_FLAGS, dir_fd=self.fd))
        if _identity(parent) != self.identities[-2]:
            os.close(parent)
            raise WalkStopped(f"{self.where()} was moved while it was removed")
        os.close(self.fd)
        self.fd = parent
        name = self.names.pop()
        self.identities.pop()
        try:
            _remove_in(self.fd, os.rmdir, name)
        except FileNotFoundError:
            pass
        except OSError as error:
            if error.errno != errno.ENOTEMPTY:  # a folder not empty holds an entry already kept
                self.keep(name, error)

    def run(self) -> None:
        """Depth first, one folder at a time: clear its files, enter its folders one by one, leave it."""
        above = _with_descriptors(lambda: os.open(self.top.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        try:
            self.fd = _open_folder(self.top.name, above)
        finally:
            os.close(above)
        self.identities.append(_identity(self.fd))
        self.pending.append(self.clear_files())
        while True:
            if self.pending[-1]:
                if self.enter(self.pending[-1].pop()):
                    self.pending.append(self.clear_files())
            elif self.names:
                self.pending.pop()
                self.leave()
            else:
                return

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def remove_tree(path: os.PathLike | str) -> List[str]:
    """Remove ``path`` and everything beneath it (a link or file at ``path`` is removed itself,
    never followed); what could not be removed, as ``"<path> (<reason>)"`` lines, empty when all
    went. Never raises: a failure is returned and logged as a warning."""
    top = Path(os.path.abspath(path))
    walk = _Walk(top)
    try:
        try:
            status = os.lstat(top)
        except FileNotFoundError:
            return []
        if not stat.S_ISDIR(status.st_mode):
            os.unlink(top)
            return []
        walk.run()
        walk.close()
        try:
            os.rmdir(top)  # by name in its parent, which the caller owns and is left as it is
        except FileNotFoundError:
            pass
        except OSError as error:
            if not walk.left:
                walk.left.append(f"{top} ({error.strerror})")
    except (OSError, WalkStopped) as error:
        walk.left.append(f"{top} (stopped: {getattr(error, 'strerror', None) or error})")
    except Exception as error:  # "remove what is gone" must never fail its caller
        walk.left.append(f"{top} (stopped: {type(error).__name__}: {error})")
    finally:
        walk.close()
    if walk.left:
        logger.warning("could not remove %d entries under %s, first: %s", len(walk.left), top, walk.left[0][:300])
    return walk.left


__all__ = ["remove_tree"]
