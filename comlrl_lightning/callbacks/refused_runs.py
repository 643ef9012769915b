"""A run refused before it logged anything leaves no log version behind.

Lightning creates a CSV logger's ``version_N`` folder before any part of the run is set up, and
LightningCLI writes ``config.yaml`` (the logger ``hparams.yaml``) into it before the data is read;
an option refused then (a missing dataset, a prompt longer than the model's context, a test with no
evaluation items) would leave a version folder that holds no result and shifts the next run's
number. :class:`RefusedRunLogs` removes such a folder when the run ends with a refusal (a
:class:`~comlrl_lightning.errors.ComlrlError`): only a folder holding nothing but those two files,
with no metric logged, and only its own files (anything else in it keeps the folder as it is).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.loggers import CSVLogger

from comlrl_lightning.errors import ComlrlError

START_FILES = frozenset({"config.yaml", "hparams.yaml"})
"""What a run writes into its log folder before it reads any data."""


def holds_only_start_files(names: Iterable[str]) -> bool:
    """Whether a log folder's entries are only what a run writes at its start (or nothing)."""
    return set(names) <= START_FILES


def remove_unused_log_folder(folder: Path) -> bool:
    """Remove ``folder`` if it holds nothing but :data:`START_FILES` (regular files); whether it did."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    entries = list(os.scandir(folder))
    regular = all(entry.is_file(follow_symlinks=False) for entry in entries)
    if not regular or not holds_only_start_files(entry.name for entry in entries):
        return False
    for entry in entries:
        os.unlink(entry.path)
    folder.rmdir()
    return True


def _refused(exception: BaseException) -> bool:
    """Whether ``exception`` is (or was raised from) a refusal of this library."""
    seen = set()
    cause: Any = exception
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, ComlrlError):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


class RefusedRunLogs(Callback):
    """Removes the CSV log folder a refused run made before it logged anything (rank 0; the command
    line adds it to every run)."""

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        if not trainer.is_global_zero or not _refused(exception):
            return
        for logger in trainer.loggers:
            if not isinstance(logger, CSVLogger):
                continue
            folder = Path(logger.log_dir)
            # no metric waiting to be written either: the logger's last save (after this hook) writes nothing
            if folder.is_dir() and holds_only_start_files(os.listdir(folder)) and not logger.experiment.metrics:
                remove_unused_log_folder(folder)


__all__ = ["RefusedRunLogs", "holds_only_start_files", "remove_unused_log_folder"]
