"""The names of :mod:`comlrl_lightning.tasks.turns` under the path they had before it moved (configs, checkpoints
and scripts written before keep working); new code imports them from there."""

from comlrl_lightning.tasks.turns import (
    ERROR_CHARS,
    PLAIN_TURN_SEPARATOR,
    TransitionError,
    TurnHistory,
    Turns,
    call_transition,
    next_prompt,
    trajectory_return,
)

__all__ = [
    "ERROR_CHARS",
    "PLAIN_TURN_SEPARATOR",
    "TransitionError",
    "TurnHistory",
    "Turns",
    "call_transition",
    "next_prompt",
    "trajectory_return",
]
