"""The names of :mod:`comlrl_lightning.trainers.reward_utils` under the path they had before it moved (configs, checkpoints
and scripts written before keep working); new code imports them from there."""

from comlrl_lightning.trainers.reward_utils import resolve_reward_range, set_reward_range

__all__ = ["resolve_reward_range", "set_reward_range"]
