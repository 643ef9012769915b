"""The names ``comlrl_lightning.models`` had, kept for configs, checkpoints and scripts written before
the reward model and the critics were named for what they are (``comlrl_lightning.models.SharedCritic``
still runs).

New code and the shipped configs name the homes: :mod:`comlrl_lightning.joint_reward` (the joint
Bradley–Terry reward model of MARLHF) and :mod:`comlrl_lightning.critics` (the MAAC and IAC critics).
The old module paths ``comlrl_lightning.models.joint_reward`` and ``comlrl_lightning.models.critics``
re-export them.

Imports: the modules it re-exports; nothing in the package imports it.
"""

from comlrl_lightning.critics import Critic, IndividualCritics, SharedCritic
from comlrl_lightning.joint_reward import (
    JointRewardModel,
    RewardModelFit,
    RewardModelOptions,
    RewardModelOracle,
    RewardScorer,
)

__all__ = [
    "Critic",
    "IndividualCritics",
    "JointRewardModel",
    "RewardModelFit",
    "RewardModelOptions",
    "RewardModelOracle",
    "RewardScorer",
    "SharedCritic",
]
