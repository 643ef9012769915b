"""``checkpoint-N`` folders on disk (the seed API's commits): who wrote them, writing one, removing one.

A folder is the run's only when its content says so (:func:`owned_by`): the owner file names the
run and the identity of the folder's ``checkpoint.ckpt``, whose own run record names the run and
the commit. The run writes a folder through a staging folder created fresh (``mkdtemp``), writes
over only an empty folder or one of its own holding only what it wrote (:func:`check_replaceable`),
and removes from a folder only what it wrote (:func:`remove_written`).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from lightning.pytorch import Trainer

from comlrl_lightning.checkpoints.assets import asset_folder
from comlrl_lightning.checkpoints.metadata import (
    CHECKPOINT_FILE,
    CHECKPOINT_FOLDER,
    METADATA_KEY,
    load_checkpoint_dict,
)
from comlrl_lightning.errors import DataError, RunStateError
from comlrl_lightning.runtime.compat import epoch_batches_processed, epochs_processed
from comlrl_lightning.runtime.files import (
    FileTooLargeError,
    fsync_directory,
    read_bounded,
    swap_folder,
    write_atomically,
)
from comlrl_lightning.validation import OptionError

OWNER_FILE = "checkpoint_owner.json"
OWNER_LIMIT = 64 << 10
"""The largest owner file read (64 KiB; the run writes about 200 bytes)."""

WRITTEN = (CHECKPOINT_FILE, asset_folder(CHECKPOINT_FILE).name, OWNER_FILE)
"""What the run writes into a ``checkpoint-N`` folder, and all it ever removes from one."""


class CheckpointFolderError(RunStateError, FileExistsError):
    """A folder the run would write a checkpoint into holds what the run did not write."""


@dataclass(frozen=True)
class Owned:
    """A ``checkpoint-N`` folder this run wrote: its commit ``sequence`` and the ``progress`` it saved."""

    sequence: int
    progress: Tuple[int, int, int]


def read_owner(folder: Path) -> Optional[Dict[str, Any]]:
    """The owner file of ``folder`` (``None``: missing, a link, or not one of this layout), read at most
    :data:`OWNER_LIMIT` bytes (a larger one is a :class:`~comlrl_lightning.runtime.files.FileTooLargeError`)."""
    path = folder / OWNER_FILE
    if folder.is_symlink() or path.is_symlink() or not path.is_file():
        return None
    try:
        owner = json.loads(read_bounded(path, OWNER_LIMIT, "a checkpoint's owner file"))
    except (UnicodeDecodeError, ValueError, FileNotFoundError):
        return None
    if (
        not isinstance(owner, dict)
        or not isinstance(owner.get("run_id"), str)
        or type(owner.get("sequence")) is not int
    ):
        return None
    return owner


def owner_of(folder: Path) -> Optional[Tuple[str, int]]:
    """``(run_id, sequence)`` the owner file of a ``checkpoint-N`` folder claims (``None``: none readable).
    A claim only: :func:`owned_by` tells whether the run really wrote the folder."""
    owner = read_owner(folder)
    return None if owner is None else (owner["run_id"], owner["sequence"])


def owned_by(folder: Path, run_id: str) -> Optional[Owned]:
    """The folder's sequence and progress when the run ``run_id`` wrote it, else ``None``.

    Recognised by content, not by name: the owner file names ``run_id`` and the identity (device and
    inode) of the folder's ``checkpoint.ckpt``, and that checkpoint's own run record names the same
    run and sequence. An owner file copied or forged into another folder names another file's
    identity, and a copied checkpoint folder holds new files: neither is the run's, so the run never
    writes over or removes it.
    """
    owner = read_owner(folder)
    if owner is None or owner["run_id"] != run_id:
        return None
    checkpoint = folder / CHECKPOINT_FILE
    try:
        info = os.lstat(checkpoint)
    except OSError:
        return None
    progress = owner.get("progress")
    if stat.S_ISLNK(info.st_mode) or owner.get("file") != [info.st_dev, info.st_ino]:
        return None
    if not (isinstance(progress, list) and len(progress) == 3 and all(type(v) is int for v in progress)):
        return None
    if not stat.S_ISDIR(info.st_mode):  # a sharded checkpoint (a folder) has no record to read here
        try:
            record = load_checkpoint_dict(checkpoint).get(METADATA_KEY)
        except (DataError, OSError, RuntimeError, ValueError):
            return None
        if (
            not isinstance(record, dict)
            or record.get("run_id") != run_id
            or record.get("sequence") != owner["sequence"]
        ):
            return None
    return Owned(owner["sequence"], (progress[0], progress[1], progress[2]))


def checkpoint_folders(directory: Path) -> List[Tuple[int, Path]]:
    """The ``checkpoint-N`` folders of ``directory`` as ``(N, path)``, by ``N`` (symbolic links skipped)."""
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := CHECKPOINT_FOLDER.fullmatch(p.name))]
    return sorted((n, p) for n, p in found if p.is_dir() and not p.is_symlink())


def checkpoint_folder(directory: Path, number: int) -> Path:
    """``directory/checkpoint-{number}``: the name :data:`CHECKPOINT_FOLDER` reads back."""
    return directory / f"checkpoint-{number}"


def folder_beside(resume: Optional[Path], default: Path) -> Path:
    """Where a run's ``checkpoint-N`` folders go: beside the checkpoint file ``resume`` (the folder
    holding its ``checkpoint-N``, or the file's own folder), else ``default``."""
    if resume is None:
        return default
    folder = resume.parent
    return folder.parent if CHECKPOINT_FOLDER.fullmatch(folder.name) and resume.name == CHECKPOINT_FILE else folder


def prune_folders(directory: Path, latest: Path, run_id: str, limit: int) -> None:
    """Keep the run's newest ``limit`` folders of ``directory``, always including ``latest``: of the
    folders the run wrote (:func:`owned_by`) with no more progress than ``latest``, the newest
    ``limit - 1`` stay (by progress, then sequence). A folder with more progress than ``latest`` (a
    later commit of the line a resume from an older checkpoint left) is never removed; nor is a
    folder the run did not write, or what else a folder holds (:func:`remove_written`)."""
    newest = owned_by(latest, run_id)
    if newest is None:
        return
    mine = []
    for _, folder in checkpoint_folders(directory):
        try:
            owned = owned_by(folder, run_id) if folder != latest else None
        except FileTooLargeError:  # not the run's (it writes small owner files), and never read
            owned = None
        if owned is not None and owned.progress <= newest.progress:
            mine.append((owned.progress, owned.sequence, folder))
    for _, _, folder in sorted(mine, reverse=True)[max(limit - 1, 0) :]:
        remove_written(folder)
    fsync_directory(directory)


def check_destination(directory: Path, run_id: str, after: int) -> None:
    """Refuse, before training, a ``checkpoint_dir`` whose ``checkpoint-N`` (``N > after``) this run did
    not write (:func:`owned_by`): this run would write over them."""
    for number, folder in checkpoint_folders(directory):
        if number > after and owned_by(folder, run_id) is None:
            raise OptionError(
                f"checkpoint_dir {directory} already holds {folder.name} of another run. Resume that run "
                "(resume_from_checkpoint) or give this run an empty checkpoint_dir."
            )


def check_replaceable(target: Path, run_id: str, what: str) -> None:
    """Refuse (:class:`CheckpointFolderError`) to write a checkpoint folder at ``target`` unless nothing
    is there, an empty folder, or a checkpoint folder this run wrote holding only what it wrote."""
    if not os.path.lexists(target):
        return
    if target.is_symlink() or not target.is_dir():
        raise CheckpointFolderError(f"{what}: {target} is not a folder (a link or a file); nothing is written there.")
    names = sorted(entry.name for entry in target.iterdir())
    if not names:
        return
    foreign = [name for name in names if name not in WRITTEN]
    if foreign or owned_by(target, run_id) is None:
        listed = ", ".join((foreign or names)[:5]) + (", ..." if len(foreign or names) > 5 else "")
        raise CheckpointFolderError(
            f"{what}: {target} is not a checkpoint folder of this run (it holds {listed}); nothing in it is "
            "replaced or removed. Pass a new or empty folder."
        )


def remove_written(folder: Path) -> None:
    """Remove what the run wrote into ``folder`` (:data:`WRITTEN`), then the folder when that leaves it
    empty; anything else in it stays (with a warning naming the folder)."""
    for name in WRITTEN:  # the owner file last: a folder half removed is no longer taken for the run's
        path = folder / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif os.path.lexists(path):
            path.unlink()
    try:
        folder.rmdir()
    except OSError:
        if folder.is_dir():
            warnings.warn(
                f"{folder} keeps files the run did not write; only the run's checkpoint was removed.", stacklevel=2
            )


def save_checkpoint_folder(trainer: Trainer, target: Path, run_id: str, sequence: int) -> Path:
    """Write ``target`` (``checkpoint.ckpt``, its assets and the owner file), replacing it as a whole
    (the caller checked that it is absent, empty, or this run's: :func:`check_replaceable`).

    Every process calls it (saving is a collective). The folder is built in a staging folder
    created fresh under a unique name (``.checkpoint-N.XXXXXXXX.tmp``, as ``mkdtemp``: never an
    existing folder or a link) and put in place by :func:`~comlrl_lightning.runtime.files.swap_folder`
    (what the run wrote in a previous folder there is removed after).
    """
    staging = None
    if trainer.is_global_zero:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        os.chmod(staging, 0o777 & ~_umask())
    staging_path = Path(str(trainer.strategy.broadcast(staging)))
    try:
        trainer.save_checkpoint(staging_path / CHECKPOINT_FILE, weights_only=False)
    except BaseException:
        if trainer.is_global_zero:  # the staging folder is the run's own, created fresh above
            shutil.rmtree(staging_path)
        raise
    if trainer.is_global_zero:
        info = os.lstat(staging_path / CHECKPOINT_FILE)
        owner = {"run_id": run_id, "sequence": sequence, "file": [info.st_dev, info.st_ino]}
        owner["progress"] = list(_progress(trainer))
        write_atomically(staging_path / OWNER_FILE, json.dumps(owner).encode())
        swap_folder(staging_path, target, remove_written)
    trainer.strategy.barrier("comlrl_lightning.checkpoint_folder")
    return target


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _progress(trainer: Trainer) -> Tuple[int, int, int]:
    """Epochs finished, optimizer steps and batches of the unfinished epoch, as the owner file keeps them."""
    return epochs_processed(trainer), trainer.global_step, epoch_batches_processed(trainer)


__all__ = [
    "CheckpointFolderError",
    "OWNER_FILE",
    "OWNER_LIMIT",
    "Owned",
    "WRITTEN",
    "check_destination",
    "check_replaceable",
    "checkpoint_folder",
    "checkpoint_folders",
    "folder_beside",
    "owned_by",
    "owner_of",
    "read_owner",
    "prune_folders",
    "remove_written",
    "save_checkpoint_folder",
]
