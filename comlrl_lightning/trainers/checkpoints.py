"""The seed API's checkpoints: ``checkpoint_dir/checkpoint-{N}`` folders at the reference's commit points.

Layout of one checkpoint (each is self-contained: copy the folder anywhere and resume from it)::

    checkpoint_dir/
      checkpoint-3/
        checkpoint.ckpt          the Lightning checkpoint (weights, optimizers, loops, data state, run record)
        checkpoint.assets/       the round files and policy snapshots the data state names
        checkpoint_owner.json    {"run_id", "sequence", "file", "progress"}: whose checkpoint this is

A *commit* is what the reference (CoMLRL) counts: the base trainers commit once the pairs are
collected and after every epoch, the iterative trainers after every round; the folders are
:class:`~comlrl_lightning.callbacks.checkpoints.CommitCheckpoints`'.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, overload

from lightning.pytorch import Callback, LightningModule, Trainer

from comlrl_lightning.callbacks.checkpoints import CheckpointRecord, CommitCheckpoints
from comlrl_lightning.checkpoints.folders import (
    check_destination,
    check_replaceable,
    folder_beside,
    save_checkpoint_folder,
)
from comlrl_lightning.checkpoints.metadata import (
    CheckpointNotFoundError,
    NoRunRecordError,
    checkpoint_progress,
    load_checkpoint_dict,
    read_checkpoint_metadata,
    resolve_checkpoint,
)
from comlrl_lightning.errors import ConfigurationError, DataError
from comlrl_lightning.generation.base import GenerationSettings
from comlrl_lightning.generation.extra_options import hf_generate_options
from comlrl_lightning.runtime.paths import require_local
from comlrl_lightning.trainers.configs import MADPOConfig
from comlrl_lightning.trainers.mapping import SAMPLING_FIELDS
from comlrl_lightning.validation import OptionError, require


@overload
def resume_source(path: str, trainer_class: str) -> Tuple[Path, Optional[Dict[str, Any]]]: ...
@overload
def resume_source(path: None, trainer_class: str) -> Tuple[None, None]: ...
@overload
def resume_source(path: Optional[str], trainer_class: str) -> Tuple[Optional[Path], Optional[Dict[str, Any]]]: ...


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

    # set by the trainer this is part of (its constructor, its class)
    module: LightningModule
    args: MADPOConfig
    output_dir: Path
    iterative: bool
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
            directory = (
                Path(checkpoint_dir) if checkpoint_dir else folder_beside(resume, self.output_dir / "checkpoints")
            )
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
        trainer, record = self.trainer, self.record
        if trainer is None or record is None:  # train() sets both
            raise OptionError("save_checkpoint() saves the state train() reached; call train() first.")
        target = Path(require_local(output_dir, "save_checkpoint output_dir", "a local folder")).expanduser().absolute()
        check_replaceable(target, record.run_id, "save_checkpoint")
        return str(save_checkpoint_folder(trainer, target, record.run_id, record.sequence))

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


__all__ = [
    "CheckpointMethods",
    "CheckpointPlan",
    "resume_source",
    "saved_generation_kwargs",
]
