"""The checkpoints of the seed API's ``train()``: which file a resume reads, where new ones go, how often, how many."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Tuple

from lightning.pytorch.callbacks import ModelCheckpoint

from comlrl_lightning.options import require
from comlrl_lightning.runtime.paths import require_local


def checkpoint_file(path: Optional[str]) -> Optional[str]:
    """A ``.ckpt`` file, or ``last.ckpt`` inside a folder."""
    if path is None:
        return None
    candidate = Path(require_local(path, "resume_from_checkpoint", "a local checkpoint file or folder"))
    if candidate.is_dir():
        candidate = candidate / "last.ckpt"
    require(candidate.is_file(), f"resume_from_checkpoint: no checkpoint at {candidate}.")
    return str(candidate)


def checkpointing(
    resume_from_checkpoint: Optional[str],
    checkpoint_dir: Optional[str],
    checkpoint_interval: int,
    checkpoint_total_limit: Optional[int],
    default_dir: Path,
    epochs_per_commit: int,
) -> Tuple[Optional[str], Optional[ModelCheckpoint]]:
    """The checkpoint to resume from and the callback that writes new ones (``None``: no checkpoints).

    Checkpoints are written only when one of the four options is given: ``last.ckpt`` and one every
    ``checkpoint_interval`` commits (``epochs_per_commit`` epochs each), the newest
    ``checkpoint_total_limit`` of them, into ``checkpoint_dir``, else beside the resumed checkpoint,
    else ``default_dir``.
    """
    require(
        isinstance(checkpoint_interval, int) and not isinstance(checkpoint_interval, bool) and checkpoint_interval >= 1,
        "checkpoint_interval must be a positive integer.",
    )
    require(
        checkpoint_total_limit is None or (isinstance(checkpoint_total_limit, int) and checkpoint_total_limit >= 1),
        "checkpoint_total_limit must be a positive integer or None.",
    )
    resume = checkpoint_file(resume_from_checkpoint)
    tracking = (
        resume_from_checkpoint is not None
        or checkpoint_dir is not None
        or checkpoint_interval != 1
        or checkpoint_total_limit is not None
    )
    if not tracking:
        return resume, None
    # a resumed run keeps writing beside the checkpoint it resumed unless told otherwise
    directory = checkpoint_dir or (str(Path(resume).parent) if resume else str(default_dir))
    limit = dict(save_top_k=checkpoint_total_limit, monitor="step", mode="max") if checkpoint_total_limit else {}
    callback = ModelCheckpoint(
        dirpath=directory,
        save_last=True,
        save_on_train_epoch_end=True,
        every_n_epochs=checkpoint_interval * epochs_per_commit,
        **limit,
    )
    return resume, callback


__all__ = ["checkpoint_file", "checkpointing"]
