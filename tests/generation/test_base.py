"""What every generation backend shares: the context a prompt must fit."""

from __future__ import annotations

from comlrl_lightning.generation.base import agent_context, context_overflow, prompt_overflow
from comlrl_lightning.team.team import Team


def test_a_prompt_fits_when_its_tokens_and_the_new_tokens_reach_the_context_and_no_further():
    assert context_overflow(492, 20, 512, "agent 0") is None
    assert context_overflow(493, 20, 512, "agent 1") == (
        "agent 1's prompt has 493 tokens; with max_new_tokens=20 that is 1 more than the model's context of 512"
    )
    assert context_overflow(10**6, 20, None, "agent 0") is None  # a model that names no context is not checked


def test_the_embedded_team_reads_its_context_from_its_config_and_counts_tokens_as_it_encodes():
    team = Team(["embedded"])
    assert agent_context(team, 0) == 512
    assert prompt_overflow(team, 0, "x " * 10, 6) is None
    length = len(team.encode_prompts(0, ["x " * 600])[0])
    assert prompt_overflow(team, 0, "x " * 600, 6) == (
        f"agent 0's prompt has {length} tokens; with max_new_tokens=6 that is {length + 6 - 512} more than "
        "the model's context of 512"
    )
