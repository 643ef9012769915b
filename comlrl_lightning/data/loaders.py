"""The names of :mod:`comlrl_lightning.datamodules.loaders` under the path they had before it moved (configs, checkpoints
and scripts written before keep working); new code imports them from there."""

from comlrl_lightning.datamodules.loaders import (
    EpochLoaders,
    EpochShuffleSampler,
    ResumablePairLoader,
    TrainLoader,
    WithoutLength,
)

__all__ = ["EpochLoaders", "EpochShuffleSampler", "ResumablePairLoader", "TrainLoader", "WithoutLength"]
