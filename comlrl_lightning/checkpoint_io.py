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
from pathlib import Path
from typing import Any, Dict, Optional

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from .files import write_atomically


class AtomicCheckpointIO(TorchCheckpointIO):
    """:class:`~lightning.fabric.plugins.io.torch_io.TorchCheckpointIO` with atomic local writes, and
    no loading from a URL: Lightning loads a resume checkpoint with ``weights_only=False``, which
    runs code from the file, so a remote one would run code from the network."""

    def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: Optional[bool] = None) -> Dict[str, Any]:
        if is_remote(str(path)):
            raise ValueError(f"ckpt_path {str(path)!r} is remote; download it and pass a local file "
                             "(a checkpoint is loaded with weights_only=False, which runs code from it).")
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
    if type(strategy.checkpoint_io) is TorchCheckpointIO:
        strategy.checkpoint_io = AtomicCheckpointIO()


__all__ = ["AtomicCheckpointIO", "install", "is_remote"]
