"""The names of :mod:`comlrl_lightning.joint_reward` under the path they had before it moved (configs, checkpoints
and scripts written before keep working); new code imports them from there."""

from comlrl_lightning.joint_reward import (
    JOINT_HEADER,
    SEPARATOR,
    JointRewardModel,
    RewardModelFit,
    RewardModelOptions,
    RewardModelOracle,
    RewardScorer,
    Span,
    encode_joint,
    hidden_size_of,
    joint_segments,
    joint_text,
    last_token_states,
    tokens_inside,
    tokens_to_cut,
)

__all__ = [
    "JOINT_HEADER",
    "JointRewardModel",
    "RewardModelFit",
    "RewardModelOptions",
    "RewardModelOracle",
    "RewardScorer",
    "SEPARATOR",
    "Span",
    "encode_joint",
    "hidden_size_of",
    "joint_segments",
    "joint_text",
    "last_token_states",
    "tokens_inside",
    "tokens_to_cut",
]
