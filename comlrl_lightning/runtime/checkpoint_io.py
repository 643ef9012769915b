"""The names of :mod:`comlrl_lightning.checkpoints.io` under the path they had before it moved (configs, checkpoints
and scripts written before keep working); new code imports them from there."""

from comlrl_lightning.checkpoints.io import (
    SPAWN_WEIGHTS,
    AtomicCheckpointIO,
    AtomicModelParallelStrategy,
    atomic_checkpoint_plugins,
    checked_checkpoint,
    is_remote,
    read_checkpoint,
    save_folder_atomically,
    write_checkpoint_assets,
)

__all__ = [
    "AtomicCheckpointIO",
    "AtomicModelParallelStrategy",
    "SPAWN_WEIGHTS",
    "atomic_checkpoint_plugins",
    "checked_checkpoint",
    "is_remote",
    "read_checkpoint",
    "save_folder_atomically",
    "write_checkpoint_assets",
]
