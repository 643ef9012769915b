"""A reward function's declared raw range, as the reference (CoMLRL)'s ``comlrl.utils.reward_utils``.

``log_reward_distribution=True`` bins each round's raw rewards over ``reward_func.reward_range``;
:func:`set_reward_range` declares it and checks it at once.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple, TypeVar

from comlrl_lightning.callbacks import reward_distributions

RewardCallable = TypeVar("RewardCallable", bound=Callable[..., Any])


def resolve_reward_range(reward_func: Callable[..., Any]) -> Optional[Tuple[float, float]]:
    """``(minimum, maximum)`` declared by ``reward_func.reward_range``, ``None`` when none is declared;
    a declared range that is not two finite numbers with ``minimum < maximum`` is a ``ValueError``."""
    if getattr(reward_func, "reward_range", None) is None:
        return None
    return reward_distributions.resolve_reward_range(reward_func)


def set_reward_range(reward_func: RewardCallable, minimum: float, maximum: float) -> RewardCallable:
    """Declare the raw output range of ``reward_func`` (``reward_func.reward_range``), check it, return the function."""
    reward_func.reward_range = (float(minimum), float(maximum))  # type: ignore[attr-defined]
    resolve_reward_range(reward_func)
    return reward_func


__all__ = ["resolve_reward_range", "set_reward_range"]
