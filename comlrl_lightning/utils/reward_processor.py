"""The names of :mod:`comlrl_lightning.trainers.reward_processor` under the path they had before it moved (configs, checkpoints
and scripts written before keep working); new code imports them from there."""

from comlrl_lightning.trainers.reward_processor import RewardProcessors, Scale, Shift

__all__ = ["RewardProcessors", "Scale", "Shift"]
