"""Checkpoints written atomically (a full disk or a crash never leaves a torn ``.ckpt`` a resume would
trust), and never loaded from a URL.

Lightning writes local checkpoints through an fsspec transaction whose temporary file lives in the
system's temporary folder; committing it *moves* the file across file systems, which is a copy
that a full disk interrupts halfway, leaving a torn ``last.ckpt``. :class:`AtomicCheckpointIO`
writes the bytes to a temporary file in the checkpoint's own folder, flushes and fsyncs it, and
only then renames it onto the final name (and fsyncs the folder): the final name always holds a
complete checkpoint, the previous one or the new one. The team modules install it by themselves
when the strategy uses Lightning's default checkpoint IO.
"""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path
from typing import Any, Dict, Optional

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from comlrl_lightning.runtime.files import fsync_directory, write_atomically


class AtomicCheckpointIO(TorchCheckpointIO):
    """:class:`~lightning.fabric.plugins.io.torch_io.TorchCheckpointIO` with atomic local writes, and
    no loading from a URL: Lightning loads a resume checkpoint with ``weights_only=False``, which
    runs code from the file, so a remote one would run code from the network."""

    def load_checkpoint(
        self, path: Any, map_location: Any = None, weights_only: Optional[bool] = None
    ) -> Dict[str, Any]:
        if is_remote(str(path)):
            raise ValueError(
                f"ckpt_path {str(path)!r} is remote; download it and pass a local file "
                "(a checkpoint is loaded with weights_only=False, which runs code from it)."
            )
        if map_location is None:
            return super().load_checkpoint(path, weights_only=weights_only)
        return super().load_checkpoint(path, map_location=map_location, weights_only=weights_only)

    def save_checkpoint(self, checkpoint: Dict[str, Any], path: Any, storage_options: Optional[Any] = None) -> None:
        if storage_options is not None or is_remote(str(path)):  # remote stores keep Lightning's own path
            return super().save_checkpoint(checkpoint, path, storage_options)
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        write_atomically(Path(path), buffer.getbuffer())


def is_remote(path: str) -> bool:
    """A URL (``https://``, ``s3://``, ...) rather than a local path."""
    scheme, separator, _ = path.partition("://")
    return bool(separator) and scheme.isalnum() and scheme.lower() != "file"


def install(strategy) -> None:
    """Make ``strategy`` write checkpoints atomically, unless it was given a checkpoint IO of its own."""
    from comlrl_lightning.runtime.sharding import is_sharded

    if is_sharded(strategy) and getattr(strategy, "_save_distributed_checkpoint", False):
        _write_folders_atomically(strategy)
    elif type(strategy.checkpoint_io) is TorchCheckpointIO:
        strategy.checkpoint_io = AtomicCheckpointIO()


def _write_folders_atomically(strategy) -> None:
    """A sharded (distributed) checkpoint is a folder every rank writes into; written in place, a crash
    would leave old and new shards mixed under a name a resume trusts. Here every rank writes into
    ``<name>.tmp``, and rank 0 swaps it in once all are done: the name holds a whole checkpoint or
    (between the two renames, with the old one kept as ``<name>.old``) none."""
    if getattr(strategy, "_comlrl_atomic_folders", False):
        return
    save = strategy.save_checkpoint

    def save_checkpoint(checkpoint: Dict[str, Any], filepath: Any, storage_options: Optional[Any] = None) -> None:
        target = Path(strategy.broadcast(str(filepath)))
        staging, previous = target.with_name(target.name + ".tmp"), target.with_name(target.name + ".old")
        if strategy.global_rank == 0:
            for leftover in (staging, previous):
                _remove(leftover)
        strategy.barrier()
        save(checkpoint, staging, storage_options)
        strategy.barrier()
        if strategy.global_rank == 0:
            if target.exists():
                os.replace(target, previous)
            os.replace(staging, target)
            _remove(previous)
            fsync_directory(target.parent)
        strategy.barrier()

    strategy.save_checkpoint = save_checkpoint
    strategy._comlrl_atomic_folders = True


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


__all__ = ["AtomicCheckpointIO", "install", "is_remote"]
