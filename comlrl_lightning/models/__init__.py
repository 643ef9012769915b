"""Models trained beside the team: the joint Bradley–Terry reward model and the critics.

:class:`JointRewardModel` scores a joint response (every agent's completion) with one scalar, and
:class:`RewardScorer` tokenizes, truncates and batches for it; :class:`RewardModelOracle` lets it
score collection like a task reward; :class:`RewardModelOptions` (and :class:`RewardModelFit`, with
a fit's epochs and batch size) are a module's ``reward_model`` option. :class:`SharedCritic` (MAAC) and :class:`IndividualCritics`
(IAC) are the actor-critic backends' value models, chosen on the module as ``critic``.

Imports: :mod:`comlrl_lightning.team`, :mod:`comlrl_lightning.runtime` and the foundation modules;
nothing above.
"""

from comlrl_lightning.models.critics import Critic, IndividualCritics, SharedCritic
from comlrl_lightning.models.joint_reward import (
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
