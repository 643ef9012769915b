"""set_reward_range / resolve_reward_range (reward_utils.py): the reference's declaration of a reward's raw
scale, checked when it is declared."""

from __future__ import annotations

import math

import pytest

from comlrl_lightning.trainers.reward_utils import resolve_reward_range, set_reward_range


def reward(a, b):
    return [0.0]


def test_set_reward_range_declares_checks_and_returns_the_function():
    def declared(a, b):
        return [0.0]

    assert set_reward_range(declared, 0, 2) is declared
    assert declared.reward_range == (0.0, 2.0) and resolve_reward_range(declared) == (0.0, 2.0)


def test_no_declared_range_is_none():
    assert resolve_reward_range(reward) is None


@pytest.mark.parametrize(
    "low, high, message",
    [(1.0, 1.0, "minimum must be less than maximum"), (0.0, math.inf, "values must be finite")],
)
def test_a_bad_range_is_a_value_error_naming_the_rule(low, high, message):
    def declared(a, b):
        return [0.0]

    with pytest.raises(ValueError, match=message):
        set_reward_range(declared, low, high)
