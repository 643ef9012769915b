"""The files a checkpoint refers to, kept beside it: round files and policy snapshots.

A checkpoint's state names files that live in the run's folders (the replay index names its round
files, the snapshot index its policy snapshots). So that a checkpoint resumes anywhere, the
components put every such file in the checkpoint dict under :data:`ASSETS_KEY` (group, name inside
the group, sha256, size and the live path), and the checkpoint IO places them in the checkpoint's
*asset folder* before it writes the checkpoint itself::

    <dir>/last.ckpt
    <dir>/last.assets/preference_replay/iteration_0001.json
    <dir>/last.assets/policy_snapshots/iteration_0002/agent_0/model.safetensors

An asset never shares its inode with a live file (one the run or a user may still edit in place,
which would change every checkpoint naming it): the first checkpoint that carries a file copies it
from the live file (verified against its digest); later checkpoints beside it hard-link that copy
(an asset of another checkpoint in the same folder, or in a sibling ``checkpoint-N`` folder, with the
same name, size and digest), so a long run stores its history once in its checkpoints, not once
per checkpoint. On resume, :class:`CheckpointAssets` puts a file back into the run's folder when it
is missing there or differs from the digest the checkpoint recorded, as a copy (never a link, for
the same reason). Staging folders are created fresh under unique names (``mkdtemp``), never reused.

Names come from checkpoints, which are data: a name is a relative path of plain parts
(:data:`SAFE_PART`), and nothing is read through a symbolic link or outside the asset folder.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import stat
import tempfile
import uuid
from pathlib import Path, PurePosixPath
from typing import Dict, Iterable, List, Optional, Tuple, Union

from comlrl_lightning.errors import DataError, RunStateError
from comlrl_lightning.runtime.files import remove_path, swap_folder
from comlrl_lightning.runtime.paths import resolves_inside

ASSETS_KEY = "comlrl_lightning.assets"
"""Key of the asset list in a checkpoint dict while it is being written (the IO takes it out)."""

ASSET_SUFFIX = ".assets"
SAFE_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
_NOT_LINKABLE = (errno.EXDEV, errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOTSUP)


class AssetError(RunStateError):
    """A file a checkpoint needs is missing, or differs from its digest, in the run and in the asset folder."""


def asset(group: str, name: str, source: Union[str, os.PathLike], sha256: str, size: int) -> Dict[str, object]:
    """One entry of a checkpoint's asset list (plain types: it may end up inside a checkpoint)."""
    return {"group": group, "name": name, "source": str(source), "sha256": sha256, "size": int(size)}


def asset_folder(checkpoint: Union[str, os.PathLike]) -> Path:
    """The asset folder of the checkpoint ``checkpoint``: ``<dir>/<stem>.assets`` beside it."""
    path = Path(checkpoint)
    return path.with_name(path.stem + ASSET_SUFFIX)


def checked_name(name: str) -> PurePosixPath:
    """``name`` as a relative path of plain parts (no ``..``, no absolute path, no hidden part)."""
    relative = PurePosixPath(str(name))
    if relative.is_absolute() or not relative.parts or not all(SAFE_PART.fullmatch(p) for p in relative.parts):
        raise DataError(f"The checkpoint names the file {str(name)!r}, which is not a plain relative path.")
    return relative


def file_digest(path: Union[str, os.PathLike]) -> str:
    """The sha256 of a regular file (opened without following a symbolic link, read a MiB at a time)."""
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    digest = hashlib.sha256()
    with os.fdopen(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise AssetError(f"{path} is not a regular file.")
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def tree_digests(root: Path) -> Dict[str, Dict[str, object]]:
    """``{relative name: {"sha256", "size"}}`` of every regular file under ``root`` (sorted by name)."""
    files = sorted(path for path in root.rglob("*") if path.is_file() and not path.is_symlink())
    return {
        path.relative_to(root).as_posix(): {"sha256": file_digest(path), "size": path.stat().st_size} for path in files
    }


def place(source: Path, target: Path, sha256: str, verify: bool, link: bool = True) -> None:
    """``target`` becomes the file ``source`` (a hard link, or a copy across file systems or without
    ``link``), atomically.

    A copy is always checked against ``sha256``; a link is the same file, checked only with ``verify``.
    """
    try:
        info = os.lstat(source)
    except FileNotFoundError:
        raise AssetError(f"{source} is missing; the checkpoint needs it.") from None
    if not stat.S_ISREG(info.st_mode):
        raise AssetError(f"{source} is not a regular file; a checkpoint carries regular files only.")
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")  # a fresh name, never a planted one
    try:
        copied = not link
        if link:
            try:
                os.link(source, temporary, follow_symlinks=False)
            except OSError as error:
                if error.errno not in _NOT_LINKABLE:
                    raise
                copied = True
        if copied:
            _copy_new(source, temporary)
        if (copied or verify) and file_digest(temporary) != sha256:
            raise AssetError(f"{source} differs from the sha256 {sha256} the checkpoint recorded for it.")
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)


def _copy_new(source: Path, target: Path) -> None:
    """Copy the regular file ``source`` to ``target``, a name that must not exist yet (``O_EXCL``)."""
    reading = os.open(source, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(reading, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise AssetError(f"{source} is not a regular file; a checkpoint carries regular files only.")
        writing = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(writing, "wb") as out:
            shutil.copyfileobj(handle, out, 1 << 20)


_VERIFIED: Dict[Tuple[int, int, int, int, int], str] = {}
"""sha256 of asset files already hashed in this process, by (device, inode, size, mtime, ctime): a file
rewritten in place with its size and mtime set back still changes its ctime, so it is hashed again."""


def _donor(group: PurePosixPath, name: PurePosixPath, entry: Dict[str, object], folder: Path) -> Optional[Path]:
    """An asset of another checkpoint beside ``folder`` holding the bytes of ``entry`` (same name, size
    and sha256), never the live file itself: the one to link instead of copying the live file again."""
    try:
        live = os.stat(str(entry["source"]))
        live_id = (live.st_dev, live.st_ino)
    except OSError:
        live_id = None
    roots = [p for p in folder.parent.glob("*" + ASSET_SUFFIX) if p != folder]
    roots += [p / ("checkpoint" + ASSET_SUFFIX) for p in folder.parent.parent.glob("checkpoint-*")]
    for root in roots:
        candidate = root / group / name
        try:
            info = os.lstat(candidate)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode) or info.st_size != entry["size"] or (info.st_dev, info.st_ino) == live_id:
            continue
        if root.is_symlink() or not resolves_inside(candidate, root):
            continue
        key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        if _VERIFIED.get(key) != entry["sha256"]:
            if file_digest(candidate) != entry["sha256"]:
                continue
            _VERIFIED[key] = str(entry["sha256"])
        return candidate
    return None


def write_assets(entries: Iterable[Dict[str, object]], folder: Path) -> None:
    """Make ``folder`` hold exactly ``entries`` (``<group>/<name>``), replacing what it held.

    Each file is a hard link to the same file in a sibling checkpoint's assets (:func:`_donor`), else
    a copy of the live file, checked against its digest. The new folder is built in a fresh staging
    folder beside it and swapped in with two renames (the previous one renamed aside under a unique
    name and removed after), so the name never holds a half-built folder.
    """
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
    try:
        for entry in entries:
            group, name = checked_name(str(entry["group"])), checked_name(str(entry["name"]))
            target, source = staging / group / name, Path(str(entry["source"]))
            donor = _donor(group, name, entry, folder)
            place(donor or source, target, str(entry["sha256"]), verify=False, link=donor is not None)
            if target.stat().st_size != entry["size"]:
                raise AssetError(f"{source} changed since it was written: its size differs from the recorded one.")
        os.chmod(staging, 0o755)
        swap_folder(staging, folder)
    except BaseException:
        remove_path(staging)
        raise


def remove_assets(checkpoint: Union[str, os.PathLike]) -> None:
    """Remove the asset folder of ``checkpoint`` (with the checkpoint it belongs to)."""
    remove_path(asset_folder(checkpoint))


class CheckpointAssets:
    """The asset folder of the checkpoint a run resumes from (``None``: the checkpoint has none).

    :meth:`ensure` makes a file of the run's folders match what the checkpoint recorded, taking it
    from the asset folder when it is missing or differs.
    """

    def __init__(self, folder: Optional[Union[str, os.PathLike]]) -> None:
        self.folder = Path(folder) if folder is not None else None
        if self.folder is not None and (self.folder.is_symlink() or not self.folder.is_dir()):
            self.folder = None
        self.restored: List[str] = []

    @classmethod
    def of_checkpoint(cls, checkpoint: Optional[Union[str, os.PathLike]]) -> "CheckpointAssets":
        """The assets beside ``checkpoint`` (a local path; a symbolic link to a checkpoint in the same
        folder, as Lightning's ``save_last="link"`` makes, counts as that checkpoint)."""
        if checkpoint is None:
            return cls(None)
        path = Path(checkpoint)
        if path.is_symlink():
            target = path.resolve()
            path = target if target.parent == path.parent.resolve() else path
        return cls(asset_folder(path))

    def ensure(self, group: str, name: str, sha256: str, root: Path) -> None:
        """``root/name`` holds the bytes with digest ``sha256``: left as it is when it does, else put back
        from ``<folder>/<group>/<name>``; :class:`AssetError` names both places when neither has them.

        ``name`` comes from a checkpoint: a plain relative path, and nothing is read or written
        through a link that leads out of ``root`` or out of the asset folder.
        """
        target = Path(root) / checked_name(name)
        if not resolves_inside(target.parent, root):
            raise AssetError(f"{target} leads outside {root} (a link); the run restores files only into its folders.")
        if target.is_file() and not target.is_symlink() and file_digest(target) == sha256:
            return  # a link is never taken for the file: the checkpoint's copy replaces the link itself
        source = None if self.folder is None else self.folder / checked_name(group) / checked_name(name)
        if source is None or not os.path.lexists(source):
            raise AssetError(f"{target} {_state(target, root)} (sha256 {sha256}), and {self._lacks(group, name)}.")
        if not resolves_inside(source, self.folder):
            raise AssetError(f"{source} leads outside the asset folder {self.folder}.")
        place(source, target, sha256, verify=True, link=False)  # a copy: the run's file is never an asset's inode
        self.restored.append(f"{group}/{name}")

    def _lacks(self, group: str, name: str) -> str:
        return f"its asset folder {self.folder} has no {group}/{name}" if self.folder else "it has no asset folder"


def _state(target: Path, root: Path) -> str:
    """What is wrong with a file of the run that a restore cannot fix."""
    if not os.path.lexists(target):
        return "is missing"
    if not resolves_inside(target, root):
        return f"leads outside {root} (a link)"
    return "differs from the checkpoint's record"


__all__ = [
    "ASSETS_KEY",
    "AssetError",
    "CheckpointAssets",
    "asset",
    "asset_folder",
    "checked_name",
    "file_digest",
    "place",
    "remove_assets",
    "tree_digests",
    "write_assets",
]
