"""Writing the run's files: never torn, never through a link, never into something that is not a file.

:func:`write_atomically` replaces a file by a complete new one (a crash or a full disk never leaves a
torn one under its final name); :func:`open_in_place` opens a file the run rewrites in place (a
lock record) without following a symbolic link; :func:`refuse_non_regular` checks a file another
library will rewrite in place. A link planted under one of these names (``.lock -> ~/.bashrc``) is
refused, never followed: the run writes only the files it names.

A *hard* link is a second name of the same file: writing one name in place writes the other.
:func:`own_copy` gives a file that is about to be rewritten in place (``hparams.yaml``,
``metrics.csv``, ``config.yaml``) an inode of its own first (a copy renamed over the name), so the
other name keeps its bytes. :func:`swap_folder` puts a folder built in a fresh staging folder in
place with two renames (the name holds the old folder or the new one, never a half-built one).
:func:`read_bounded` reads a file whose size someone else controls (an
owner file, a round file, a lock record) without reading more than a bound: a larger file is a
:class:`FileTooLargeError` naming the file and the bound, before any of it is read.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
import uuid
from pathlib import Path
from typing import BinaryIO, Callable, Union

from comlrl_lightning.errors import RunStateError

_NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


class FileTooLargeError(RunStateError):
    """A file the run reads is larger than any file of its kind this library writes."""


def read_bounded(path: Path, limit: int, what: str) -> bytes:
    """The bytes of the regular file ``path``, read without following a symbolic link and never more
    than ``limit`` of them: a larger file (by its size, or by what a read finds past the size) is a
    :class:`FileTooLargeError` naming ``path``, ``what`` it is and the bound, raised before it is read.

    A missing file is ``FileNotFoundError``; a link, a folder or a special file a
    :class:`~comlrl_lightning.errors.RunStateError`.
    """
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        descriptor = os.open(path, flags)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise RunStateError(_not_a_file(Path(path), what)) from None
        raise
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise RunStateError(_not_a_file(Path(path), what))
        if info.st_size > limit:
            raise FileTooLargeError(_too_large(path, what, info.st_size, limit))
        data = handle.read(limit + 1)
    if len(data) > limit:  # the file grew after the size was taken
        raise FileTooLargeError(_too_large(path, what, len(data), limit))
    return data


def _too_large(path: Path, what: str, size: int, limit: int) -> str:
    return (
        f"{path} ({what}) is {size} bytes, more than the {limit} bytes such a file holds; it is not a file "
        "this library wrote, and is not read. Remove it, or give the run a folder of its own."
    )


def own_copy(path: Path, what: str) -> None:
    """Give the regular file ``path`` an inode of its own when it shares one with another name (a hard
    link, ``st_nlink > 1``): its bytes are copied to a new file beside it, which is renamed over
    ``path``, so the file can be rewritten in place without writing the other name. Nothing there
    is fine; a symbolic link or another kind of file is a :class:`~comlrl_lightning.errors.RunStateError`."""
    refuse_non_regular(path, what)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if info.st_nlink <= 1:
        return
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        source = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(source, "rb") as reading, os.fdopen(descriptor, "wb") as writing:
            shutil.copyfileobj(reading, writing)
            writing.flush()
            os.fsync(writing.fileno())
        os.chmod(temporary, stat.S_IMODE(info.st_mode))
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    fsync_directory(path.parent)


def write_atomically(target: Path, data: Union[bytes, memoryview, Callable[[BinaryIO], None]]) -> None:
    """``data`` to ``target`` through ``<target>.tmp`` in the same folder: written, flushed and fsynced,
    then renamed onto ``target`` (and the folder fsynced). ``target`` holds the old or the new bytes,
    never part of them; a failed write leaves no temporary file. ``data`` may be a function that
    writes into the open file itself (``torch.save`` of a checkpoint streams it, with no copy of
    its bytes in memory).

    The temporary file is created exclusively (a leftover, or a link planted under its name, is
    removed first and never followed); the rename replaces ``target`` itself, a link included,
    never what a link points to. A folder or another non-file under ``target`` is refused.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    refuse_non_regular(target, "a file the run writes", links=True)
    temporary = target.with_name(target.name + ".tmp")
    refuse_non_regular(temporary, "a temporary file the run writes", links=True)
    try:
        temporary.unlink(missing_ok=True)  # a crash's leftover, or a planted link: the link goes, not its target
        with open(temporary, "xb") as handle:  # O_EXCL: a link created meanwhile fails, it is not followed
            data(handle) if callable(data) else handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException as error:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        if isinstance(error, OSError) and error.errno in _NOT_WRITABLE:
            raise RunStateError(_not_writable(target.parent, error)) from None
        raise
    fsync_directory(target.parent)


def open_in_place(path: Path, what: str) -> int:
    """A read-write descriptor of the regular file ``path`` (created if missing), opened without
    following a symbolic link; a link, a folder or any other kind of file there is a
    :class:`~comlrl_lightning.errors.RunStateError` naming ``path`` and ``what`` it is for."""
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        descriptor = os.open(path, flags | getattr(os, "O_NONBLOCK", 0), 0o644)  # a FIFO must not block the open
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise RunStateError(_not_a_file(path, what)) from None
        if error.errno in _NOT_WRITABLE:
            raise RunStateError(_not_writable(path.parent, error)) from None
        raise
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise RunStateError(_not_a_file(path, what))
    return descriptor


def refuse_non_regular(path: Path, what: str, links: bool = False) -> None:
    """Nothing, or a regular file, at ``path``; a symbolic link (unless ``links``: the caller replaces
    the link itself), a folder or another kind of file is a :class:`~comlrl_lightning.errors.RunStateError`."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISREG(mode) or (links and stat.S_ISLNK(mode)):
        return
    raise RunStateError(_not_a_file(path, what))


LOG_FILES = ("hparams.yaml", "metrics.csv")
"""Files Lightning's loggers rewrite in place in their log folder."""


def check_log_files(trainer) -> None:
    """The files ``trainer``'s loggers rewrite in place (:data:`LOG_FILES` in each ``log_dir``) are
    regular files or absent: a symbolic link planted there would be written through, so it is
    refused; a hard link gets a copy of its own (:func:`own_copy`), so the other name is untouched."""
    for logger in trainer.loggers:
        log_dir = getattr(logger, "log_dir", None)
        if log_dir and trainer.is_global_zero:
            for name in LOG_FILES:
                own_copy(Path(log_dir) / name, "a log file Lightning rewrites in place")


def ensure_writable_folder(folder: Path, what: str) -> None:
    """Create ``folder`` if needed; a folder this process cannot create or write in is a
    :class:`~comlrl_lightning.errors.RunStateError` naming it and ``what`` it is for."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise RunStateError(f"{folder} ({what}) is not a folder; give the run a folder of its own.") from None
    except OSError as error:
        if error.errno in _NOT_WRITABLE:
            raise RunStateError(_not_writable(folder, error, what)) from None
        raise


def _not_a_file(path: Path, what: str) -> str:
    kind = _kind(path)
    return (
        f"{path} ({what}) is {kind}, not a regular file; the run never follows links or writes into "
        "other kinds of file. Remove it, or give the run a folder of its own."
    )


def _kind(path: Path) -> str:
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return "missing"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "a special file"


def _not_writable(folder: Path, error: OSError, what: str = "") -> str:
    reason = "read-only file system" if error.errno == errno.EROFS else "permission denied"
    named = f" ({what})" if what else ""
    return f"{folder}{named} is not writable ({reason}); the run writes its files there. Give it a writable folder."


def remove_path(path: Path) -> None:
    """Remove ``path``: a folder with what it holds, a file or a link (never what a link points to)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def swap_folder(staging: Path, target: Path, remove: Callable[[Path], None] = remove_path) -> None:
    """Put the folder ``staging`` (built beside ``target``) at ``target`` with two renames: a previous
    ``target`` is renamed aside under a unique name (``.<name>.<hex>.old``) first and handed to
    ``remove`` after, so the name always holds the old folder or the new one, never a half-built
    one. The parent folder is fsynced (the renames are durable)."""
    previous = None
    if os.path.lexists(target):
        previous = target.with_name(f".{target.name}.{uuid.uuid4().hex}.old")
        os.rename(target, previous)
    os.rename(staging, target)
    if previous is not None:
        remove(previous)
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
