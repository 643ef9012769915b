"""Checkpoints a run can trust on resume: who wrote them, how far they got, and logs that continue.

:class:`CheckpointRecord` writes the run record into every checkpoint (read back with
:func:`~comlrl_lightning.checkpoints.metadata.read_checkpoint_metadata`) and, on resume,
continues the run's CSV log and prints one line saying where the run continues.
:class:`ResumableCheckpoint` is Lightning's ``ModelCheckpoint`` for runs that resume: a resumed run
overwrites its own files (``last.ckpt`` stays the newest state, never ``last-v1.ckpt``) and is not
warned that its own checkpoint folder is not empty. The seed API and the CLI add both.
:class:`CommitCheckpoints` writes self-contained ``checkpoint-{N}`` folders at commits (the seed
API's ``train(checkpoint_dir=...)``; :mod:`~comlrl_lightning.checkpoints.folders`).
"""

from __future__ import annotations

import os
import sys
import uuid
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import Checkpoint, ModelCheckpoint
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities import rank_zero_info

from comlrl_lightning.callbacks.csv_logger import same_log_folder
from comlrl_lightning.checkpoints.folders import (
    CheckpointFolderError,
    check_replaceable,
    checkpoint_folder,
    prune_folders,
    save_checkpoint_folder,
)
from comlrl_lightning.checkpoints.lineage import Lineage, lineage_of, on_line
from comlrl_lightning.checkpoints.metadata import (
    METADATA_KEY,
    METADATA_VERSION,
    CheckpointProgress,
    checkpoint_progress,
    load_checkpoint_dict,
    run_record,
)
from comlrl_lightning.contracts import CollectedOnce, ContinuableLog, RoundSchedule, offers
from comlrl_lightning.errors import DataError, RunStateError
from comlrl_lightning.runtime.compat import enable_version_counter, epochs_processed, version_counter_enabled
from comlrl_lightning.runtime.paths import is_remote
from comlrl_lightning.runtime.quiet import ResumeLines

NOT_EMPTY = "exists and is not empty"


class CheckpointRecord(Callback):
    """The run record in every checkpoint; on resume, the run's identity, its log, one line of where it is.

    The record (under ``"comlrl_lightning.checkpoint"``) holds the format version, ``trainer_class``,
    the commit ``sequence``, the ``run_id`` (new for a fresh run, kept by every resume), the W&B run
    (``id``, ``project``, ``entity``), the CSV log (folder, row count and run; the log is flushed
    first and its folder's ``run.json`` names the run) and the run's line: the ``branch`` (new for
    every part of a run) and the ``forks`` (each earlier branch and the progress at which this part
    left it; :mod:`~comlrl_lightning.checkpoints.lineage`).
    On resume the record's identity is taken over, rows a
    :class:`~comlrl_lightning.callbacks.ResumableCSVLogger` wrote after the checkpoint are dropped (the
    run logs them again), and instead of Lightning's two lines one says where the run continues.

    Args:
        trainer_class: what writes the run (the seed trainer's class name; ``None``: the module's class name).
        run_id: the run's id (``None``: a new one, or the resumed checkpoint's).
    """

    def __init__(self, trainer_class: Optional[str] = None, run_id: Optional[str] = None) -> None:
        self.trainer_class = trainer_class
        self.run_id = run_id or uuid.uuid4().hex
        self.branch = uuid.uuid4().hex  # this part of the run
        self.forks: List[List[Any]] = []  # [branch, epochs, step, batches] of each branch left to get here
        self.sequence = 0
        self.wandb: Optional[Dict[str, str]] = None
        self._counted = False

    @property
    def state_key(self) -> str:
        return METADATA_KEY

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if not self._counted:  # Lightning's resume lines give way to the one line printed here
            ResumeLines.replaced += 1
            self._counted = True

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self._counted:
            ResumeLines.replaced -= 1
            self._counted = False

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self.teardown(trainer, pl_module, "exception")  # a failed run ends without teardown

    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: Dict[str, Any]) -> None:
        checkpoint[METADATA_KEY] = {
            "version": METADATA_VERSION,
            "trainer_class": self.trainer_class or type(pl_module).__name__,
            "sequence": self.sequence,
            "run_id": self.run_id,
            "wandb": wandb_identity(trainer.loggers) or self.wandb,
            "logs": csv_log_record(trainer, self.run_id) if trainer.is_global_zero else None,
            "branch": self.branch,
            "forks": [list(fork) for fork in self.forks],
        }

    def lineage(self) -> Lineage:
        """This part of the run: its run, its branch and the forks that led to it."""
        forks = tuple((str(fork[0]), (int(fork[1]), int(fork[2]), int(fork[3]))) for fork in self.forks)
        return Lineage(self.run_id, self.branch, forks)

    def on_load_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: Dict[str, Any]) -> None:
        path = trainer.ckpt_path or "the checkpoint"
        record = run_record(checkpoint, path) or {}
        self.run_id = record.get("run_id") or self.run_id
        self.sequence = int(record.get("sequence") or 0)
        self.wandb = record.get("wandb")
        progress = checkpoint_progress(checkpoint, path)
        self.forks = fork_list(checkpoint, progress)
        logs = record.get("logs")
        if logs:
            for logger in trainer.loggers:
                if offers(logger, ContinuableLog) and _same_log(logger, logs):  # type: ignore[type-abstract]
                    logger.keep_rows_before(int(logs["rows"]), progress.step)
        rank_zero_info(resume_line(trainer, progress))


def fork_list(checkpoint: Dict[str, Any], progress: CheckpointProgress) -> List[List[Any]]:
    """The forks of a run resumed from ``checkpoint`` (at ``progress``): the checkpoint's own, then its branch."""
    lineage = lineage_of(checkpoint)
    if lineage is None or lineage.branch is None:
        return []
    forks = [[branch, *where] for branch, where in lineage.forks]
    return forks + [[lineage.branch, progress.epochs, progress.step, progress.batches]]


def resume_line(trainer: Trainer, progress: CheckpointProgress) -> str:
    """One line: the checkpoint, and the round (with rounds), epoch and step where the run continues."""
    datamodule = trainer.datamodule  # type: ignore[attr-defined]  # Lightning's connectors set it, unseen by mypy
    where = f"epoch {progress.epochs + 1}, step {progress.step}"
    if offers(datamodule, RoundSchedule) and datamodule.num_train_epochs and datamodule.num_iterations:  # type: ignore[type-abstract]
        where = f"round {progress.epochs // datamodule.num_train_epochs + 1}/{datamodule.num_iterations} ({where})"
    return f"resuming at {where} from {trainer.ckpt_path}"


def wandb_identity(loggers: List[Any]) -> Optional[Dict[str, str]]:
    """``id``, ``project`` and ``entity`` of the first W&B logger whose run exists (``None`` otherwise)."""
    for logger in loggers:
        if isinstance(logger, WandbLogger) and logger.version:
            run = logger.experiment
            identity = {"id": str(logger.version), "project": getattr(run, "project", None) or logger.name}
            identity["entity"] = getattr(run, "entity", None)
            return {key: str(value) for key, value in identity.items() if isinstance(value, str) and value}
    return None


def csv_log_record(trainer: Trainer, run_id: Optional[str] = None) -> Optional[Dict[str, Any]]:
    """Folder, row count and run of the first CSV log that can continue (flushed first, and its
    folder's ``run.json`` naming ``run_id``), else ``None``."""
    for logger in trainer.loggers:
        if offers(logger, ContinuableLog):  # type: ignore[type-abstract]
            logger.save()
            record = {
                "save_dir": str(Path(logger.save_dir).absolute()),
                "name": logger.name,
                "version": logger.version,
                "rows": int(logger.rows_logged),
            }
            if run_id is not None:
                logger.claim(run_id)
                record["run_id"] = run_id
            return record
    return None


def _same_log(logger: Any, logs: Dict[str, Any]) -> bool:
    return same_log_folder(logger.save_dir, logger.name, logs) and logger.version == logs.get("version")


_NOW = (sys.maxsize, sys.maxsize, sys.maxsize)


def written_on_this_line(trainer: Trainer, path: Any) -> Optional[bool]:
    """Whether the checkpoint file ``path`` was written by this part of the run or one it continues
    (its run record's run and line: :func:`~comlrl_lightning.checkpoints.lineage.on_line`);
    ``False`` for a file of another run or line, one without a run record or not a checkpoint;
    ``None`` when ``trainer`` has no :class:`CheckpointRecord` (nothing to tell by)."""
    record = next((c for c in trainer.callbacks if isinstance(c, CheckpointRecord)), None)  # type: ignore[attr-defined]  # Lightning's connectors set it, unseen by mypy
    if record is None:
        return None
    file = Path(path)
    if file.is_symlink() or not file.is_file():
        return False
    try:
        loaded = load_checkpoint_dict(file)
    except (DataError, OSError, RuntimeError, ValueError):
        return False
    lineage = lineage_of(loaded)
    if lineage is None:
        return False
    progress = checkpoint_progress(loaded)
    return on_line(lineage, (progress.epochs, progress.step, progress.batches), record.lineage(), _NOW)


class ResumableCheckpoint(ModelCheckpoint):
    """Lightning's ``ModelCheckpoint`` (same arguments) for runs that resume.

    * A run writes over a file only when it wrote that file itself, in this part or an earlier part
      it continues (the file's run record says so: :func:`written_on_this_line`): a resumed run
      writes ``last.ckpt`` again, so ``last.ckpt`` is always the newest state, while a file of
      another run, or of another line of this run (a resume from an older checkpoint), or without a
      run record gets Lightning's version suffix beside it (``last-v1.ckpt``) and is never removed
      by ``save_top_k``. Two runs sharing a ``dirpath`` never overwrite each other's ``last.ckpt``.
      (A sharded checkpoint, a folder, is told by whether the run resumed, as before.)
    * Lightning's warning that the checkpoint folder is not empty is given for fresh runs only.
    * The checkpoint options may change between the parts of a run; the files of the earlier parts
      stay where they are, and this callback's bookkeeping (top-k) starts with the part it runs in.
    """

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        # whether the run resumes is known only after setup: keep the folder warning until then
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            super().setup(trainer, pl_module, stage)
        self._setup_warnings = list(caught)
        self._versions = version_counter_enabled(self)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        resumed = trainer.ckpt_path is not None
        for caught in getattr(self, "_setup_warnings", []):
            if not (resumed and NOT_EMPTY in str(caught.message)):
                warnings.warn_explicit(caught.message, caught.category, caught.filename, caught.lineno)
        self._setup_warnings = []
        self._record = any(isinstance(callback, CheckpointRecord) for callback in trainer.callbacks)  # type: ignore[attr-defined]  # Lightning's connectors set it, unseen by mypy
        # with a run record, files are told apart by it (file_exists); without one, a resume overwrites
        enable_version_counter(self, getattr(self, "_versions", True) and (self._record or not resumed))
        if self._record and resumed:
            self.forget_files_of_other_lines(trainer)

    def file_exists(self, filepath: Any, trainer: Trainer) -> bool:
        """Whether ``filepath`` is taken: it exists and is not a file this run may write over."""
        if not getattr(self, "_record", False) or is_remote(str(filepath)) or Path(filepath).is_dir():
            return super().file_exists(filepath, trainer) and not (Path(filepath).is_dir() and trainer.ckpt_path)
        taken = trainer.is_global_zero and os.path.lexists(filepath) and not written_on_this_line(trainer, filepath)
        return trainer.strategy.reduce_boolean_decision(bool(taken), all=False)

    def forget_files_of_other_lines(self, trainer: Trainer) -> None:
        """Forget the restored bookkeeping's files that this run no longer owns, so that ``save_top_k``
        and ``save_last`` never remove or write over them.

        A resumed callback's state names the files it kept (``best_k_models``, ``last_model_path``,
        ``best_model_path``); since that checkpoint, another line of the run (a resume from an older
        checkpoint) or another run may have written a file of the same name. Such a file stays where
        it is; the part this callback runs in versions its own name beside it.
        """
        paths = sorted({*self.best_k_models, self.last_model_path, self.best_model_path} - {""})
        found = [str(p) for p in paths if trainer.is_global_zero and _owned_by_another(trainer, p)]
        foreign = set(trainer.strategy.broadcast(found))
        if not foreign:
            return
        self.best_k_models = {path: score for path, score in self.best_k_models.items() if path not in foreign}
        self.last_model_path = "" if self.last_model_path in foreign else self.last_model_path
        if self.best_model_path in foreign:
            best = (min if self.mode == "min" else max)(
                self.best_k_models, key=self.best_k_models.__getitem__, default=""
            )
            self.best_model_path = best
            self.best_model_score = self.best_k_models.get(best)
        if self.kth_best_model_path in foreign:  # refilled (and recomputed) before top-k removes again
            self.kth_best_model_path = ""


def _owned_by_another(trainer: Trainer, path: Any) -> bool:
    """Whether the local checkpoint file ``path`` exists and was not written on this run's line."""
    if is_remote(str(path)) or Path(path).is_dir() or not os.path.lexists(path):
        return False
    return not written_on_this_line(trainer, path)


class CommitCheckpoints(Checkpoint):
    """Counts commits and writes ``directory/checkpoint-{N}`` folders (each self-contained: the
    checkpoint, its asset folder and an owner file; :mod:`~comlrl_lightning.checkpoints.folders`).

    A commit is the end of every ``epochs_per_commit`` epochs and, with ``after_collection``, the
    moment a data module that collects once has collected. Commit ``N`` is written when ``N`` is a
    multiple of ``interval`` or it is the last one; ``limit`` keeps the run's newest ``limit``
    (``None``: all) and never removes a folder with more progress than the one just written. Folders
    the run did not write are never touched, and a run never writes over another run's ``checkpoint-N``.

    Args:
        directory: where the folders go.
        record: the run record; its ``sequence`` is the commit count and goes into every checkpoint.
        interval: commits between written folders.
        limit: how many of the run's folders to keep (``None``: all).
        epochs_per_commit: epochs between commits.
        after_collection: also commit once the pairs are collected.
    """

    def __init__(
        self,
        directory: Path,
        record: CheckpointRecord,
        interval: int = 1,
        limit: Optional[int] = None,
        epochs_per_commit: int = 1,
        after_collection: bool = False,
    ) -> None:
        self.directory, self.record = Path(directory).absolute(), record
        self.interval, self.limit = interval, limit
        self.epochs_per_commit, self.after_collection = epochs_per_commit, after_collection
        self.committed_at: Optional[Tuple[int, int]] = None  # where the last commit was (saved or not)
        self.saved_at: Optional[Tuple[int, int]] = None

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        datamodule = trainer.datamodule  # type: ignore[attr-defined]  # Lightning's connectors set it, unseen by mypy
        collected = offers(datamodule, CollectedOnce) and datamodule.last_collection is not None  # type: ignore[type-abstract]
        if self.after_collection and trainer.current_epoch == 0 and trainer.global_step == 0 and collected:
            self.commit(trainer, force=True)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        epochs = trainer.current_epoch + 1
        if epochs % self.epochs_per_commit == 0:
            last = trainer.should_stop or (trainer.max_epochs is not None and epochs >= trainer.max_epochs)
            self.commit(trainer, force=last)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # A run that stopped early (no pairs: not one epoch ran) ends with a forced commit of where it
        # stopped; one whose last commit fell between intervals has that commit written now.
        position = _position(trainer)
        if self.committed_at != position:
            self.commit(trainer, force=True)
        elif self.saved_at != position:
            self.save(trainer)

    def commit(self, trainer: Trainer, force: bool) -> None:
        self.record.sequence += 1
        self.committed_at = _position(trainer)
        if force or self.record.sequence % self.interval == 0:
            self.save(trainer)

    def save(self, trainer: Trainer) -> None:
        target = checkpoint_folder(self.directory, self.record.sequence)
        try:  # every process checks (as it saves): none starts a save the others refuse
            check_replaceable(target, self.record.run_id, "checkpoint_dir")
        except CheckpointFolderError as error:
            raise RunStateError(f"{target} belongs to another run; refusing to write over it ({error})") from None
        save_checkpoint_folder(trainer, target, self.record.run_id, self.record.sequence)
        self.saved_at = _position(trainer)
        if trainer.is_global_zero and self.limit is not None:
            prune_folders(self.directory, target, self.record.run_id, self.limit)

    def state_dict(self) -> Dict[str, Any]:
        return {}


def _position(trainer: Trainer) -> Tuple[int, int]:
    """Epochs finished (also inside the epoch-end hooks) and optimizer steps."""
    return epochs_processed(trainer), trainer.global_step


__all__ = [
    "CheckpointRecord",
    "CommitCheckpoints",
    "ResumableCheckpoint",
    "csv_log_record",
    "fork_list",
    "resume_line",
    "wandb_identity",
    "written_on_this_line",
]
