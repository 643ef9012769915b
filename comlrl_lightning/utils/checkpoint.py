"""``read_checkpoint_metadata``, as the reference (CoMLRL)'s ``comlrl.utils.checkpoint``: a checkpoint's
metadata (``version``, ``trainer_class``, ``sequence``, ``run_id``, ``wandb``) read without restoring
anything (see :func:`comlrl_lightning.checkpoints.metadata.read_checkpoint_metadata`)."""

from comlrl_lightning.checkpoints.metadata import read_checkpoint_metadata

__all__ = ["read_checkpoint_metadata"]
