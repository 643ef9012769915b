"""The names of :mod:`comlrl_lightning.rounds.replay` under the path they had before it moved (configs, checkpoints
and scripts written before keep working); new code imports them from there."""

from comlrl_lightning.rounds.replay import (
    AllHistoryReplay,
    CurrentReplay,
    LambdaDecayReplay,
    NearestKReplay,
    ReplayBuffer,
    ReplayRule,
    Shard,
    check_lambda,
    lambda_decay_weights,
)

__all__ = [
    "AllHistoryReplay",
    "CurrentReplay",
    "LambdaDecayReplay",
    "NearestKReplay",
    "ReplayBuffer",
    "ReplayRule",
    "Shard",
    "check_lambda",
    "lambda_decay_weights",
]
