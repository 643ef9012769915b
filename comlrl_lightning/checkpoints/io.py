"""Checkpoints written atomically (a full disk or a crash never leaves a torn ``.ckpt`` a resume would
trust), and never loaded from a URL.

Lightning writes local checkpoints through an fsspec transaction whose temporary file lives in the
system's temporary folder; committing it *moves* the file across file systems, which is a copy
that a full disk interrupts halfway, leaving a torn ``last.ckpt``. :class:`AtomicCheckpointIO`
writes the bytes to a temporary file in the checkpoint's own folder, flushes and fsyncs it, and
only then renames it onto the final name (and fsyncs the folder): the final name always holds a
complete checkpoint, the previous one or the new one. The entry points (the command line and the
seed API) build their Trainer with it as a plugin unless the config names a checkpoint IO
(:func:`atomic_checkpoint_plugins`), and with :class:`AtomicModelParallelStrategy` where the config
names FSDP2's ``ModelParallelStrategy``; a Trainer of your own takes them as
``Trainer(plugins=[AtomicCheckpointIO()])`` and ``strategy=AtomicModelParallelStrategy(...)`` (nothing
changes a Trainer once it is built).

It also keeps a checkpoint self-contained: the files its state refers to (round files, policy
snapshots, listed under :data:`~comlrl_lightning.checkpoints.assets.ASSETS_KEY`) are placed
in the checkpoint's asset folder before the checkpoint is written, and removed with it
(:mod:`comlrl_lightning.checkpoints.assets`).
"""

from __future__ import annotations

import pickle
import shutil
import struct
import tempfile
import warnings
import zipfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import torch
from lightning.fabric.plugins.io.checkpoint_io import CheckpointIO
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.strategies import ModelParallelStrategy

from comlrl_lightning.checkpoints.assets import (
    ASSETS_KEY,
    asset_folder,
    remove_assets,
    write_assets,
)
from comlrl_lightning.errors import DataError
from comlrl_lightning.runtime.compat import saves_distributed_checkpoint
from comlrl_lightning.runtime.files import swap_folder, write_atomically
from comlrl_lightning.runtime.paths import is_remote, require_local

SPAWN_WEIGHTS = ".temp.ckpt"
"""The file a spawned run's rank 0 hands its weights back in (Lightning's multiprocessing launcher)."""


class AtomicCheckpointIO(TorchCheckpointIO):
    """:class:`~lightning.fabric.plugins.io.torch_io.TorchCheckpointIO` with atomic local writes, and
    no loading from a URL: Lightning loads a resume checkpoint with ``weights_only=False``, which
    runs code from the file, so a remote one would run code from the network."""

    def load_checkpoint(
        self, path: Any, map_location: Any = None, weights_only: Optional[bool] = None
    ) -> Dict[str, Any]:
        # a checkpoint is loaded with weights_only=False, which runs code from it: never from the network
        require_local(path, "ckpt_path", "a local checkpoint file")
        options: Dict[str, Any] = {"weights_only": weights_only}
        if map_location is not None:
            options["map_location"] = map_location
        load = lambda: super(AtomicCheckpointIO, self).load_checkpoint(path, **options)  # noqa: E731
        if Path(str(path)).name == SPAWN_WEIGHTS:  # Lightning's own hand-over of rank 0's weights, not a checkpoint
            return load()
        return checked_checkpoint(path, load)

    def save_checkpoint(self, checkpoint: Dict[str, Any], path: Any, storage_options: Optional[Any] = None) -> None:
        if storage_options is not None or is_remote(str(path)):  # remote stores keep Lightning's own path
            return super().save_checkpoint(checkpoint, path, storage_options)
        # the files first: a checkpoint is never in place before the files it names
        write_checkpoint_assets(checkpoint, Path(path))
        # streamed into the temporary file: a bytes buffer would hold a second copy of every weight
        # and optimizer state in memory (and more while it grows)
        write_atomically(Path(path), lambda handle: torch.save(checkpoint, handle))

    def remove_checkpoint(self, path: Any) -> None:
        super().remove_checkpoint(path)
        if not is_remote(str(path)):
            remove_assets(path)


def write_checkpoint_assets(checkpoint: Dict[str, Any], path: Path) -> None:
    """Take the asset list out of ``checkpoint`` and place its files in the asset folder of ``path``
    (a checkpoint that names no files gets none: an earlier one's folder under that name goes)."""
    entries = checkpoint.pop(ASSETS_KEY, None)
    if entries is None:
        remove_assets(path)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    write_assets(entries, asset_folder(path))


_UNREADABLE = (
    pickle.UnpicklingError,
    EOFError,
    KeyError,
    IndexError,
    struct.error,
    UnicodeDecodeError,
    zipfile.BadZipFile,
)
"""What ``torch.load`` raises for bytes that are not a saved object (random bytes, text, an empty file):
found by loading 3,000 random byte strings."""

_UNREADABLE_ARCHIVE = ("PytorchStreamReader", "Invalid magic number")
"""torch's ``RuntimeError`` messages for a torn or foreign zip archive and a torn legacy file."""


def checked_checkpoint(path: Any, load: Callable[[], Any], option: str = "ckpt_path") -> Dict[str, Any]:
    """``load()`` of the checkpoint at ``path``, or :class:`~comlrl_lightning.errors.DataError` naming
    ``option`` and the file when it is not a Lightning checkpoint (torch's own message for random
    bytes is a page about ``weights_only``, which is not the problem)."""
    try:
        with warnings.catch_warnings():  # bytes read as a pickle header: not worth torch's page of advice
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            checkpoint = load()
    except _UNREADABLE as error:
        raise DataError(_not_a_checkpoint(path, option, type(error).__name__)) from None
    except RuntimeError as error:  # a torn or foreign archive
        if not any(text in str(error) for text in _UNREADABLE_ARCHIVE):
            raise
        raise DataError(_not_a_checkpoint(path, option, "not a complete torch archive")) from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise DataError(_not_a_checkpoint(path, option, f"a saved {type(checkpoint).__name__} without a state_dict"))
    return checkpoint


def read_checkpoint(path: Any, option: str = "ckpt_path") -> Dict[str, Any]:
    """The local checkpoint at ``path`` read as plain data (``weights_only=True``, on the CPU), checked
    like :func:`checked_checkpoint`; a remote ``path`` is refused."""
    require_local(path, option, "a local checkpoint file")
    return checked_checkpoint(path, lambda: torch.load(path, weights_only=True, map_location="cpu"), option)


def _not_a_checkpoint(path: Any, option: str, why: str) -> str:
    return f"{option} {str(path)!r} is not a Lightning checkpoint ({why}); pass a .ckpt file a run wrote."


def atomic_checkpoint_plugins(plugins: Any = None) -> List[Any]:
    """``plugins`` (none, one, or a list) as a list for a Trainer being built, with an
    :class:`AtomicCheckpointIO` added unless one of them is a checkpoint IO already (the entry points
    build their Trainer with it; yours takes ``plugins=[AtomicCheckpointIO()]``)."""
    given = [] if plugins is None else list(plugins) if isinstance(plugins, (list, tuple)) else [plugins]
    if any(isinstance(plugin, CheckpointIO) for plugin in given):
        return given
    return given + [AtomicCheckpointIO()]


class AtomicModelParallelStrategy(ModelParallelStrategy):
    """Lightning's ``ModelParallelStrategy`` (FSDP2) whose sharded checkpoint folders are replaced
    whole (:func:`save_folder_atomically`); a single-file checkpoint (``save_distributed_checkpoint=False``)
    goes through the checkpoint IO as before. The command line builds this one where a config names
    ``ModelParallelStrategy``; name it yourself in a Trainer of your own."""

    def save_checkpoint(self, checkpoint: Dict[str, Any], filepath: Any, storage_options: Optional[Any] = None) -> None:
        if not saves_distributed_checkpoint(self):
            return super().save_checkpoint(checkpoint, filepath, storage_options)
        save_folder_atomically(self, super().save_checkpoint, checkpoint, filepath, storage_options)


def save_folder_atomically(
    strategy: Any,
    save: Callable[[Dict[str, Any], Any, Optional[Any]], None],
    checkpoint: Dict[str, Any],
    filepath: Any,
    storage_options: Optional[Any] = None,
) -> None:
    """``save`` a sharded (distributed) checkpoint, a folder every rank writes into, without a torn one
    ever under its name: written in place, a crash would leave old and new shards mixed under a name a
    resume trusts. Every rank writes into ``<name>`` inside a staging folder rank 0 created fresh
    (``.<name>.XXXXXXXX.tmp``, as ``mkdtemp``: never an existing folder or a link), and rank 0 swaps it
    in once all are done: the name holds a whole checkpoint or (between the two renames, with the old
    one renamed aside under a unique name) none. The checkpoint's files go to its asset folder first."""
    target = Path(strategy.broadcast(str(filepath)))
    staging: Optional[str] = None
    if strategy.global_rank == 0:
        write_checkpoint_assets(checkpoint, target)
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    root = Path(strategy.broadcast(staging))
    staged = root / target.name  # inside a fresh folder: the strategy creates it, as it would the target
    checkpoint.pop(ASSETS_KEY, None)  # every rank: the list is not part of the sharded state
    strategy.barrier()
    try:
        save(checkpoint, staged, storage_options)
    except BaseException:
        if strategy.global_rank == 0:  # the staging folder is the run's own, created fresh above
            shutil.rmtree(root, ignore_errors=False)
        raise
    strategy.barrier()
    if strategy.global_rank == 0:
        swap_folder(staged, target)
        root.rmdir()
    strategy.barrier()


__all__ = [
    "AtomicCheckpointIO",
    "AtomicModelParallelStrategy",
    "atomic_checkpoint_plugins",
    "checked_checkpoint",
    "is_remote",
    "read_checkpoint",
    "write_checkpoint_assets",
]
