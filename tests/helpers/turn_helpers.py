"""Transitions for the multi-turn tests: a plain one, and ones that break the convention."""

from __future__ import annotations

from typing import Any, Dict, List

from comlrl_lightning.tasks.turns import TurnHistory


def reward_feedback(item: Dict[str, Any], turn: int, history: TurnHistory) -> List[str]:
    """Each agent is told the last turn's reward and the other agent's answer."""
    responses = history.responses[-1]
    return [
        f"turn {turn} scored {history.rewards[-1]:.2f}; your partner wrote {responses[1 - agent]}"
        for agent in range(len(responses))
    ]


def raising(item, turn, history):
    raise RuntimeError("feedback service down")


def one_message(item, turn, history):
    return ["only one"]


def not_text(item, turn, history):
    return ["fine", 7]


def long_for_long_items(item, turn, history):
    """Agent 0 of an item whose prompt starts with "long" is told 4,000 characters (past a small
    model's context); every other message is short."""
    return ["x " * 2000 if item["prompt"].startswith("long") else "go on", "go on"]


def too_long_for_agent_0(item, turn, history):
    """Agent 0 is told 4,000 characters after every turn (past the embedded model's 512 positions)."""
    return ["x " * 2000, "go on"]
