"""The names of :mod:`comlrl_lightning.critics` under the path they had before it moved (configs, checkpoints
and scripts written before keep working); new code imports them from there."""

from comlrl_lightning.critics import (
    CRITIC_TYPES,
    Critic,
    CriticType,
    IndividualCritics,
    SharedCritic,
    ValueHead,
    ValueModel,
    encode_texts,
    maac_critic_text,
)

__all__ = [
    "CRITIC_TYPES",
    "Critic",
    "CriticType",
    "IndividualCritics",
    "SharedCritic",
    "ValueHead",
    "ValueModel",
    "encode_texts",
    "maac_critic_text",
]
