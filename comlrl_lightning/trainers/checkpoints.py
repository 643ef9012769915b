"""The seed API's checkpoints: ``checkpoint_dir/checkpoint-{N}`` folders at the reference's commit points.

Layout of one checkpoint (each is self-contained: copy the folder anywhere and resume from it)::

    checkpoint_dir/
      checkpoint-3/
        checkpoint.ckpt          the Lightning checkpoint (weights, optimizers, loops, data state, run record)
        checkpoint.assets/       the round files and policy snapshots the data state names (hard links)
        checkpoint_owner.json    {"run_id", "sequence"}: whose checkpoint this is

A *commit* is what the reference (CoMLRL) counts: the base trainers commit once the pairs are
collected and after every epoch, the iterative trainers after every round. Commit ``N`` is written
as ``checkpoint-N`` when ``N`` is a multiple of ``checkpoint_interval`` or it is the last one.
``checkpoint_total_limit=L`` keeps this run's newest ``L`` (``None`` keeps all); folders of other runs
are never touched, and a run never writes over another run's ``checkpoint-N``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import Checkpoint

from comlrl_lightning.callbacks.checkpoints import CheckpointRecord
from comlrl_lightning.errors import ConfigurationError, DataError, RunStateError
from comlrl_lightning.generation.base import GenerationSettings
from comlrl_lightning.generation.extra_options import hf_generate_options
from comlrl_lightning.options import OptionError, require
from comlrl_lightning.runtime.checkpoint_metadata import (
    CHECKPOINT_FILE,
    CheckpointNotFoundError,
    NoRunRecordError,
    checkpoint_progress,
    load_checkpoint_dict,
    read_checkpoint_metadata,
    resolve_checkpoint,
)
from comlrl_lightning.runtime.compat import epochs_processed
from comlrl_lightning.runtime.files import fsync_directory, write_atomically
from comlrl_lightning.runtime.paths import require_local
from comlrl_lightning.trainers.mapping import SAMPLING_FIELDS

OWNER_FILE = "checkpoint_owner.json"
_FOLDER = re.compile(r"checkpoint-(\d+)")


def owner_of(folder: Path) -> Optional[Tuple[str, int]]:
    """``(run_id, sequence)`` of a ``checkpoint-N`` folder (``None``: not a readable one of this layout)."""
    path = folder / OWNER_FILE
    if folder.is_symlink() or path.is_symlink() or not path.is_file():
        return None
    try:
        owner = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if (
        not isinstance(owner, dict)
        or not isinstance(owner.get("run_id"), str)
        or type(owner.get("sequence")) is not int
    ):
        return None
    return owner["run_id"], owner["sequence"]


def checkpoint_folders(directory: Path) -> List[Tuple[int, Path]]:
    """The ``checkpoint-N`` folders of ``directory`` as ``(N, path)``, by ``N`` (symbolic links skipped)."""
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := _FOLDER.fullmatch(p.name))]
    return sorted((n, p) for n, p in found if p.is_dir() and not p.is_symlink())


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
    return folder.parent if _FOLDER.fullmatch(folder.name) and resume.name == CHECKPOINT_FILE else folder


def check_destination(directory: Path, run_id: str, after: int) -> None:
    """Refuse, before training, a ``checkpoint_dir`` whose ``checkpoint-N`` (``N > after``) belong to
    another run: this run would write over them."""
    for number, folder in checkpoint_folders(directory):
        owner = owner_of(folder)
        if number > after and (owner is None or owner[0] != run_id):
            raise OptionError(
                f"checkpoint_dir {directory} already holds {folder.name} of another run. Resume that run "
                "(resume_from_checkpoint) or give this run an empty checkpoint_dir."
            )


def save_checkpoint_folder(trainer: Trainer, target: Path, run_id: str, sequence: int) -> Path:
    """Write ``target`` (``checkpoint.ckpt``, its assets and the owner file), replacing it as a whole.

    Every process calls it (saving is a collective); the folder is built as ``.<name>.tmp`` and
    renamed into place, the previous one moved aside first and removed after.
    """
    staging, previous = target.with_name(f".{target.name}.tmp"), target.with_name(f".{target.name}.old")
    if trainer.is_global_zero:
        for leftover in (staging, previous):
            shutil.rmtree(leftover, ignore_errors=True)
    trainer.strategy.barrier("comlrl_lightning.checkpoint_folder")
    trainer.save_checkpoint(staging / CHECKPOINT_FILE, weights_only=False)
    if trainer.is_global_zero:
        write_atomically(staging / OWNER_FILE, json.dumps({"run_id": run_id, "sequence": sequence}).encode())
        if target.exists():
            os.replace(target, previous)
        os.replace(staging, target)
        shutil.rmtree(previous, ignore_errors=True)
        fsync_directory(target.parent)
    trainer.strategy.barrier("comlrl_lightning.checkpoint_folder")
    return target


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
        collected = getattr(trainer.datamodule, "last_collection", None) is not None
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
        owner = owner_of(target) if target.exists() else (self.record.run_id, sequence)
        if owner is None or owner[0] != self.record.run_id:
            raise RunStateError(f"{target} belongs to another run; refusing to write over it.")
        save_checkpoint_folder(trainer, target, self.record.run_id, sequence)
        self.saved_at = _position(trainer)
        if trainer.is_global_zero and self.limit is not None:
            self.prune(target)

    def prune(self, latest: Path) -> None:
        """Keep this run's newest ``limit`` folders (by sequence), always including ``latest``."""
        mine = [
            (owner[1], folder)
            for _, folder in checkpoint_folders(self.directory)
            if (owner := owner_of(folder)) is not None and owner[0] == self.record.run_id and folder != latest
        ]
        for _, folder in sorted(mine, reverse=True)[max(self.limit - 1, 0) :]:
            shutil.rmtree(folder)
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
        ``checkpoint-N``), replacing an earlier checkpoint there; returns the folder.

        ``train(resume_from_checkpoint=output_dir)`` continues from it (raise ``num_iterations`` to
        extend a finished run).
        """
        require(self.trainer is not None, "save_checkpoint() saves the state train() reached; call train() first.")
        target = Path(require_local(output_dir, "save_checkpoint output_dir", "a local folder")).expanduser().absolute()
        if target.is_symlink() or (target.exists() and not (target / CHECKPOINT_FILE).is_file()):
            raise FileExistsError(f"Refusing to replace a folder that is not a checkpoint: {target}")
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
    "OWNER_FILE",
    "check_destination",
    "checkpoint_folders",
    "owner_of",
    "save_checkpoint_folder",
]
