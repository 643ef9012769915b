"""The seed API's checkpoints: ``checkpoint_dir/checkpoint-{N}`` folders at the reference's commit points.

Layout of one checkpoint (each is self-contained: copy the folder anywhere and resume from it)::

    checkpoint_dir/
      checkpoint-3/
        checkpoint.ckpt          the Lightning checkpoint (weights, optimizers, loops, data state, run record)
        checkpoint.assets/       the round files and policy snapshots the data state names
        checkpoint_owner.json    {"run_id", "sequence", "file", "progress"}: whose checkpoint this is

A *commit* is what the reference (CoMLRL) counts: the base trainers commit once the pairs are
collected and after every epoch, the iterative trainers after every round. Commit ``N`` is written
as ``checkpoint-N`` when ``N`` is a multiple of ``checkpoint_interval`` or it is the last one.
``checkpoint_total_limit=L`` keeps this run's newest ``L`` (``None`` keeps all) and never removes a
checkpoint with more progress than the one just written; folders the run did not write (another
run's, a copy, a user's folder: :mod:`~comlrl_lightning.runtime.checkpoint_folders`) are never
touched, and a run never writes over another run's ``checkpoint-N``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import Checkpoint

from comlrl_lightning.callbacks.checkpoints import CheckpointRecord
from comlrl_lightning.data.contract import CollectedOnce, offers
from comlrl_lightning.errors import ConfigurationError, DataError, RunStateError
from comlrl_lightning.generation.base import GenerationSettings
from comlrl_lightning.generation.extra_options import hf_generate_options
from comlrl_lightning.runtime.checkpoint_folders import (
    CheckpointFolderError,
    check_destination,
    check_replaceable,
    checkpoint_folders,
    owned_by,
    remove_written,
    save_checkpoint_folder,
)
from comlrl_lightning.runtime.checkpoint_metadata import (
    CHECKPOINT_FILE,
    CHECKPOINT_FOLDER,
    CheckpointNotFoundError,
    NoRunRecordError,
    checkpoint_progress,
    load_checkpoint_dict,
    read_checkpoint_metadata,
    resolve_checkpoint,
)
from comlrl_lightning.runtime.compat import epochs_processed
from comlrl_lightning.runtime.files import FileTooLargeError, fsync_directory
from comlrl_lightning.runtime.paths import require_local
from comlrl_lightning.trainers.mapping import SAMPLING_FIELDS
from comlrl_lightning.validation import OptionError, require


def resume_source(path: Optional[str], trainer_class: str) -> Tuple[Optional[Path], Optional[Dict[str, Any]]]:
    """The checkpoint file ``resume_from_checkpoint`` means and its metadata (``None`` for a checkpoint
    written without a run record); a checkpoint of another trainer class is refused."""
    if path is None:
        return None, None
    require_local(path, "resume_from_checkpoint", "a local checkpoint file or folder")
    try:
        resume = resolve_checkpoint(path)
    except CheckpointNotFoundError as error:
        raise OptionError(f"resume_from_checkpoint: {error}") from None
    try:
        metadata = read_checkpoint_metadata(resume)
    except NoRunRecordError:
        return resume, None
    if metadata["trainer_class"] != trainer_class:
        raise OptionError(
            f"resume_from_checkpoint: {resume} was written by {metadata['trainer_class']}; a {trainer_class} "
            f"cannot continue it. Resume it with {metadata['trainer_class']}, or start a new run."
        )
    return resume, metadata


def saved_generation_kwargs(checkpoint: Dict[str, Any], path: Any) -> Optional[Dict[str, Any]]:
    """The ``train(**generation_kwargs)`` the run of ``checkpoint`` was given (``None``: it records none);
    a record that is not a mapping is a :class:`~comlrl_lightning.errors.DataError` naming the file."""
    hyper = checkpoint.get("hyper_parameters")
    saved = hyper.get("generation_kwargs") if isinstance(hyper, dict) else None
    if saved is not None and not (isinstance(saved, dict) and all(isinstance(key, str) for key in saved)):
        raise DataError(f"{path}: hyper_parameters.generation_kwargs is not a mapping of option names.")
    try:  # an option a newer version saved, or a value of the wrong kind: named with the file, now
        named = {key: value for key, value in (saved or {}).items() if key in SAMPLING_FIELDS}
        GenerationSettings(
            **named, extra=hf_generate_options({k: v for k, v in (saved or {}).items() if k not in named})
        )
    except ConfigurationError as error:
        raise DataError(f"{path}: the generation kwargs the checkpoint saved cannot be used: {error}") from None
    return saved


def default_directory(resume: Optional[Path], output_dir: Path) -> Path:
    """Where checkpoints go without ``checkpoint_dir``: beside the resumed one (the folder that holds its
    ``checkpoint-N``, or its ``.ckpt`` file), else ``<output_dir>/checkpoints``."""
    if resume is None:
        return output_dir / "checkpoints"
    folder = resume.parent
    return folder.parent if CHECKPOINT_FOLDER.fullmatch(folder.name) and resume.name == CHECKPOINT_FILE else folder


class CommitCheckpoints(Checkpoint):
    """Counts the reference's commits and writes ``checkpoint-{N}`` folders (see the module docstring).

    Args:
        directory: ``checkpoint_dir``.
        record: the run record; its ``sequence`` is the commit count and goes into every checkpoint.
        interval: ``checkpoint_interval``.
        limit: ``checkpoint_total_limit`` (``None``: keep all).
        epochs_per_commit: epochs between commits (``num_train_epochs`` for the iterative trainers, else 1).
        after_collection: also commit once the pairs are collected (the base trainers).
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
        datamodule = trainer.datamodule
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
        sequence = self.record.sequence
        target = self.directory / f"checkpoint-{sequence}"
        try:  # every process checks (as it saves): none starts a save the others refuse
            check_replaceable(target, self.record.run_id, "checkpoint_dir")
        except CheckpointFolderError as error:
            raise RunStateError(f"{target} belongs to another run; refusing to write over it ({error})") from None
        save_checkpoint_folder(trainer, target, self.record.run_id, sequence)
        self.saved_at = _position(trainer)
        if trainer.is_global_zero and self.limit is not None:
            self.prune(target)

    def prune(self, latest: Path) -> None:
        """Keep this run's newest ``limit`` folders, always including ``latest``: of the folders this run
        wrote (:func:`owned_by`) with no more progress than ``latest``, the newest ``limit - 1`` stay
        (by progress, then sequence). A folder with more progress than ``latest`` (a later commit of
        the line a resume from an older checkpoint left) is never removed; nor is a folder the run
        did not write, or what else a folder holds (:func:`remove_written`)."""
        newest = owned_by(latest, self.record.run_id)
        if newest is None:
            return
        mine = []
        for _, folder in checkpoint_folders(self.directory):
            try:
                owned = owned_by(folder, self.record.run_id) if folder != latest else None
            except FileTooLargeError:  # not the run's (it writes small owner files), and never read
                owned = None
            if owned is not None and owned.progress <= newest.progress:
                mine.append((owned.progress, owned.sequence, folder))
        for _, _, folder in sorted(mine, reverse=True)[max(self.limit - 1, 0) :]:
            remove_written(folder)
        fsync_directory(self.directory)

    def state_dict(self) -> Dict[str, Any]:
        return {}


@dataclass
class CheckpointPlan:
    """What ``train()`` does with checkpoints: the file it resumes (and its metadata), its callbacks,
    and whether checkpoint tracking is on."""

    resume: Optional[str] = None
    metadata: Optional[Dict[str, Any]] = None
    callbacks: List[Callback] = field(default_factory=list)
    tracking: bool = False


class CheckpointMethods:
    """The seed's checkpoint API on a trainer (the reference's ``TrainingCheckpointMixin``).

    Needs ``module``, ``args``, ``output_dir``, ``iterative`` and, after ``train()``, ``trainer``.
    """

    trainer: Optional[Trainer] = None
    record: Optional[CheckpointRecord] = None

    def checkpoint_plan(
        self, resume_from_checkpoint: Optional[str], checkpoint_dir: Optional[str], interval: int, limit: Optional[int]
    ) -> CheckpointPlan:
        """Check ``train()``'s checkpoint arguments, find the checkpoint to resume (refusing another
        trainer's) and build the run record and, when tracking is on, the commit callback."""
        require(
            isinstance(interval, int) and not isinstance(interval, bool) and interval >= 1,
            "checkpoint_interval must be a positive integer.",
        )
        require(
            limit is None or (isinstance(limit, int) and not isinstance(limit, bool) and limit >= 1),
            "checkpoint_total_limit must be a positive integer or None.",
        )
        if checkpoint_dir is not None:
            require_local(checkpoint_dir, "checkpoint_dir", "a local folder")
        resume, metadata = resume_source(resume_from_checkpoint, type(self).__name__)
        self.record = CheckpointRecord(type(self).__name__, run_id=(metadata or {}).get("run_id"))
        tracking = resume is not None or checkpoint_dir is not None or interval != 1 or limit is not None
        plan = CheckpointPlan(str(resume) if resume else None, metadata, [self.record], tracking)
        if tracking:
            directory = Path(checkpoint_dir) if checkpoint_dir else default_directory(resume, self.output_dir)
            check_destination(directory.absolute(), self.record.run_id, (metadata or {}).get("sequence") or 0)
            per_commit = self.args.num_train_epochs if self.iterative else 1
            plan.callbacks.append(
                CommitCheckpoints(directory, self.record, interval, limit, per_commit, not self.iterative)
            )
        return plan

    def save_checkpoint(self, output_dir: str) -> str:
        """Write the state the last ``train()`` reached as a checkpoint folder (laid out as a
        ``checkpoint-N``) at ``output_dir``; returns the folder.

        ``output_dir`` is new, empty, or a checkpoint folder this run wrote (which is replaced); any
        other folder (one holding files of yours, or another run's checkpoint) is refused with a
        :class:`CheckpointFolderError` (a ``FileExistsError``) and nothing in it changes.
        ``train(resume_from_checkpoint=output_dir)`` continues from it (raise ``num_iterations`` to
        extend a finished run).
        """
        require(self.trainer is not None, "save_checkpoint() saves the state train() reached; call train() first.")
        target = Path(require_local(output_dir, "save_checkpoint output_dir", "a local folder")).expanduser().absolute()
        check_replaceable(target, self.record.run_id, "save_checkpoint")
        return str(save_checkpoint_folder(self.trainer, target, self.record.run_id, self.record.sequence))

    def load_checkpoint(self, checkpoint: str) -> Dict[str, Any]:
        """Load a checkpoint's weights (the agents, and the reward model, critics and reference copies
        it holds) into this trainer's module, e.g. to ``evaluate()`` or ``save_model()`` them, and
        return its progress (``epochs``, ``step``, ``batches``, ``round``).

        ``checkpoint`` is what ``resume_from_checkpoint`` takes; one of another trainer class is
        refused. To continue its training (optimizers, data, loop position), use
        ``train(resume_from_checkpoint=...)``.
        """
        path, _ = resume_source(checkpoint, type(self).__name__)
        loaded = load_checkpoint_dict(path)
        progress = vars(checkpoint_progress(loaded, path)).copy()
        if not isinstance(loaded.get("state_dict"), dict):
            raise DataError(f"{path}: the checkpoint holds no state_dict (the weights).")
        self.module.configure_model()
        self.module.on_load_checkpoint(loaded)
        self.module.load_state_dict(loaded["state_dict"])
        return progress


def _position(trainer: Trainer) -> Tuple[int, int]:
    """Epochs finished (also inside the epoch-end hooks) and optimizer steps."""
    return epochs_processed(trainer), trainer.global_step


__all__ = [
    "CheckpointMethods",
    "CheckpointPlan",
    "CommitCheckpoints",
    "default_directory",
    "resume_source",
    "saved_generation_kwargs",
]
