"""The names of :mod:`comlrl_lightning.tasks.oracle` under the path they had before it moved (configs, checkpoints
and scripts written before keep working); new code imports them from there."""

from comlrl_lightning.tasks.oracle import (
    CallableSpec,
    Oracle,
    RewardFunctionError,
    Scorer,
    ScoreRequest,
    ScoringProgress,
    accepts_batch,
    call_reward_batch,
    call_reward_function,
    function_name,
    resolve_callable,
    resolve_reward_range,
    score_requests,
)

__all__ = [
    "CallableSpec",
    "Oracle",
    "RewardFunctionError",
    "ScoreRequest",
    "Scorer",
    "ScoringProgress",
    "accepts_batch",
    "call_reward_batch",
    "call_reward_function",
    "function_name",
    "resolve_callable",
    "resolve_reward_range",
    "score_requests",
]
