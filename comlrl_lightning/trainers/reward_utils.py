"""A reward function's declared raw range, as the reference (CoMLRL)'s ``comlrl.utils.reward_utils``.

``log_reward_distribution=True`` bins each round's raw rewards over ``reward_func.reward_range``;
:func:`set_reward_range` declares it and checks it at once.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from comlrl_lightning.tasks.oracle import resolve_reward_range

RewardCallable = TypeVar("RewardCallable", bound=Callable[..., Any])


def set_reward_range(reward_func: RewardCallable, minimum: float, maximum: float) -> RewardCallable:
    """Declare the raw output range of ``reward_func`` (``reward_func.reward_range``), check it, return the function."""
    reward_func.reward_range = (float(minimum), float(maximum))  # type: ignore[attr-defined]
    resolve_reward_range(reward_func)
    return reward_func


__all__ = ["resolve_reward_range", "set_reward_range"]
