"""``RewardProcessors``: the reference (CoMLRL)'s ready-made reward processors.

A reward processor maps the reward function's raw value to the score pairs are ranked by
(``reward_processor=`` of the trainers). These are small callable objects rather than the
reference's lambdas, so a run's parts can be pickled (checkpoints, ``ddp_spawn``) and printed.
"""

from __future__ import annotations


class Scale:
    """``x -> x * factor``."""

    def __init__(self, factor: float = 1.0) -> None:
        self.factor = factor

    def __call__(self, value: float) -> float:
        return value * self.factor

    def __repr__(self) -> str:
        return f"RewardProcessors.scale({self.factor!r})"


class Shift:
    """``x -> x + value``."""

    def __init__(self, value: float = 0.0) -> None:
        self.value = value

    def __call__(self, reward: float) -> float:
        return reward + self.value

    def __repr__(self) -> str:
        return f"RewardProcessors.shift({self.value!r})"


class RewardProcessors:
    """Collection of reward processing functions to modify raw rewards (the reference's names)."""

    @staticmethod
    def scale(factor: float = 1.0) -> Scale:
        """A processor that scales rewards by ``factor``."""
        return Scale(factor)

    @staticmethod
    def shift(value: float = 0.0) -> Shift:
        """A processor that shifts rewards by the constant ``value``."""
        return Shift(value)


__all__ = ["RewardProcessors", "Scale", "Shift"]
