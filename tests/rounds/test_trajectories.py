"""Joint answers and trajectories sampled turn by turn: who samples what, the transition's turns, early stop."""

from __future__ import annotations

import contextlib

import pytest

from comlrl_lightning.generation.base import Completion, GenerationSettings
from comlrl_lightning.generation.hf import HFGenerator
from comlrl_lightning.rounds.trajectories import (
    sample_joint,
    sample_sides,
    sample_trajectories,
    team_context_check,
    team_sampler,
)
from comlrl_lightning.runtime.rng import RandomStream
from comlrl_lightning.tasks.oracle import Oracle
from comlrl_lightning.tasks.turns import TransitionError, Turns


class ScriptedSampler:
    """Completions named after the call, agent, item and sample; records every call."""

    def __init__(self):
        self.calls = []

    def __call__(self, items, prompts, count):
        self.calls.append((len(items), [list(map(str, p)) for p in prompts], count))
        call = len(self.calls) - 1
        agents = len(prompts[0])
        return [
            [
                [Completion(ids=[call, a, k, j], text=f"c{call}a{a}i{k}s{j}") for j in range(count)]
                for k in range(len(items))
            ]
            for a in range(agents)
        ]


def digit_reward(a, b):
    """The sample index of agent 0's completion, plus 10 per turn (the call index)."""
    text = a[0]
    return [float(text[text.index("s") + 1 :]) + 10 * float(text[1 : text.index("a")])]


def feedback(item, turn, history):
    return [f"t{turn}r{history.rewards[-1]:g}"] * 2


ITEMS = [{"prompt": "x"}, {"prompt": "y"}]
PROMPTS = [["x0", "x1"], ["y0", "y1"]]


def test_trajectory_j_starts_from_candidate_j_and_continues_one_sample_per_turn():
    sampler = ScriptedSampler()
    turns = Turns(num_turns=3, external_transition=feedback)
    sampled = sample_trajectories(sampler, Oracle(digit_reward), turns, ITEMS, PROMPTS, 2, lambda: None)
    assert [call[0] for call in sampler.calls] == [2, 4, 4] and [call[2] for call in sampler.calls] == [2, 1, 1]
    trajectory = sampled[1][1]  # item 1, trajectory 1
    assert [c.text for c in trajectory.completions[0]] == ["c0a0i1s1", "c0a1i1s1"]
    assert [c.text for c in trajectory.completions[1]] == ["c1a0i3s0", "c1a1i3s0"]  # the 4th trajectory of turn 1
    assert trajectory.rewards == [1.0, 10.0, 20.0]
    assert trajectory.prompts[1][0] == "y0c0a0i1s1\n\nt0r1\n"
    assert trajectory.prompts[2][1] == "y0c0a1i1s1\n\nt0r1\n".replace("y0", "y1") + "c1a1i3s0\n\nt1r10\n"


def test_a_joint_answer_is_candidate_j_of_every_agent_as_many_as_every_agent_has():
    def short(items, prompts, count):
        sampled = ScriptedSampler()(items, prompts, count)
        sampled[1][0] = sampled[1][0][:1]  # agent 1 answered item 0 once
        return sampled

    joint = sample_joint(short, ITEMS, PROMPTS, 2)
    assert [[[c.text for c in answer] for answer in per_item] for per_item in joint] == [
        [["c0a0i0s0", "c0a1i0s0"]],
        [["c0a0i1s0", "c0a1i1s0"], ["c0a0i1s1", "c0a1i1s1"]],
    ]


class CountingOracle(Oracle):
    """An oracle that records each ``rewards_many`` call's requests (prompts and joint answers)."""

    def __init__(self, reward):
        super().__init__(reward)
        self.calls = []

    def rewards_many(self, requests):
        self.calls.append(
            [(list(map(str, prompts)), [list(texts) for texts in candidates]) for candidates, prompts, _ in requests]
        )
        return super().rewards_many(requests)


def test_sides_sample_in_step_and_each_turn_of_every_side_is_scored_in_one_call():
    mine, theirs, oracle = ScriptedSampler(), ScriptedSampler(), CountingOracle(digit_reward)
    turns = Turns(num_turns=2, external_transition=feedback)
    sides = sample_sides([mine, theirs], [2, 3], oracle, turns, ITEMS, PROMPTS, lambda: None)
    assert [len(per_item) for per_item in sides[0]] == [2, 2] and [len(per_item) for per_item in sides[1]] == [3, 3]
    assert [call[2] for call in mine.calls] == [2, 1] and [call[0] for call in theirs.calls] == [2, 6]
    first, second = oracle.calls
    # the first turn: one request per item and side, item by item, each side's candidates together
    assert [len(candidates[0]) for _, candidates in first] == [2, 3, 2, 3]
    assert [prompts for prompts, _ in first] == [["x0", "x1"], ["x0", "x1"], ["y0", "y1"], ["y0", "y1"]]
    assert len(second) == 2 * 2 + 2 * 3  # later turns: one request per trajectory (each has its own prompts)
    assert sides[1][1][2].rewards == [2.0, 10.0]


def test_a_trajectory_stops_early_when_its_reward_reaches_the_threshold():
    sampler = ScriptedSampler()
    turns = Turns(num_turns=3, external_transition=feedback, early_termination_threshold=1.0)
    sampled = sample_trajectories(sampler, Oracle(digit_reward), turns, ITEMS[:1], PROMPTS[:1], 2, lambda: None)
    assert len(sampled[0][1].rewards) == 1  # candidate 1 scored 1.0 at turn 0
    assert len(sampled[0][0].rewards) == 2  # candidate 0 scored 0.0, then 10.0 at turn 1: stopped there
    assert [call[0] for call in sampler.calls] == [1, 1]


class Counted:
    """A progress that records its steps (a sampling part adds its size when it ends)."""

    def __init__(self):
        self.steps = []

    def advance(self, count):
        self.steps.append(count)

    @contextlib.contextmanager
    def part(self, size):
        yield
        self.steps.append(size)


def test_progress_counts_every_trajectory_turn_and_the_turns_an_early_stop_skips():
    counted = Counted()
    turns = Turns(num_turns=3, external_transition=feedback, early_termination_threshold=1.0)
    sample_trajectories(
        ScriptedSampler(), Oracle(digit_reward), turns, ITEMS[:1], PROMPTS[:1], 2, lambda: None, counted
    )
    # turn 0: both sampled; candidate 1 stops (2 turns skipped); turn 1: candidate 0 sampled, then stops (1 skipped)
    assert [step for step in counted.steps if step] == [2, 2, 1, 1] and sum(counted.steps) == 2 * 3


def test_a_bad_transition_fails_before_the_next_turn_is_sampled():
    sampler = ScriptedSampler()
    turns = Turns(num_turns=2, external_transition="tests.helpers.turn_helpers.one_message")
    with pytest.raises(TransitionError, match=r"one_message \(item 0, after turn 0\)"):
        sample_trajectories(sampler, Oracle(digit_reward), turns, ITEMS, PROMPTS, 2, lambda: None)
    assert len(sampler.calls) == 1


def test_a_trajectory_the_source_returns_nothing_for_ends_at_its_last_turn():
    class ShortSampler(ScriptedSampler):
        def __call__(self, items, prompts, count):
            result = super().__call__(items, prompts, count)
            if len(self.calls) > 1:
                result[1][0] = []  # agent 1 got no answer for the first trajectory of turn 1
            return result

    turns = Turns(num_turns=2, external_transition=feedback)
    sampled = sample_trajectories(ShortSampler(), Oracle(digit_reward), turns, ITEMS[:1], PROMPTS[:1], 2, lambda: None)
    assert [len(t.rewards) for t in sampled[0]] == [1, 2]


def _long_feedback(item, turn, history):
    return ["m" * 40 if item["prompt"] == "y" else "ok"] * 2


def _at_most_40_characters(agent, prompt):
    return f"agent {agent}'s prompt is {len(prompt) - 40} too long" if len(prompt) > 40 else None


def test_a_trajectory_whose_next_prompt_outgrows_the_context_ends_at_its_last_turn_with_a_warning():
    sampler, counted = ScriptedSampler(), Counted()
    turns = Turns(num_turns=3, external_transition=_long_feedback)
    with pytest.warns(UserWarning) as caught:
        sampled = sample_trajectories(
            sampler, Oracle(digit_reward), turns, ITEMS, PROMPTS, 2, lambda: None, counted, _at_most_40_characters
        )
    assert [[len(t.rewards) for t in per_item] for per_item in sampled] == [[3, 3], [1, 1]]
    assert [call[0] for call in sampler.calls] == [2, 2, 2]  # item 1's trajectories were never sampled again
    assert sum(counted.steps) == 4 * 3  # their skipped turns still count
    assert str(caught[0].message).startswith(
        "2 of 4 trajectories end before turn 2 of 3: the next prompt does not fit the context "
        "(item 1, trajectory 0: agent 0's prompt is 13 too long); each keeps the turns it took."
    )
    assert len(caught) == 1  # one warning for the turn, not one per trajectory


@pytest.mark.slow  # seconds, not milliseconds: the embedded model samples two turns
def test_the_embedded_team_ends_a_trajectory_past_its_context_instead_of_failing_in_generate():
    from comlrl_lightning.team.team import Team

    team = Team(["embedded", "embedded"])  # GPT-2 positions: 512
    settings = GenerationSettings(max_new_tokens=6, temperature=1.0, top_p=1.0, top_k=None)
    items = [{"prompt": "long a"}, {"prompt": "short b"}]
    prompts = [[item["prompt"]] * 2 for item in items]
    turns = Turns(num_turns=2, external_transition="tests.helpers.turn_helpers.long_for_long_items")
    stream = RandomStream(0)
    with pytest.warns(UserWarning, match=r"\(item 0, trajectory 0: agent 0's prompt has 40\d\d tokens; with "):
        sampled = sample_trajectories(
            team_sampler(HFGenerator(), team, settings, stream),
            Oracle(lambda a, b: [0.0]),
            turns,
            items,
            prompts,
            1,
            lambda: team.tokenizers,
            context_check=team_context_check(team, settings),
        )
    assert [len(per_item[0].rewards) for per_item in sampled] == [1, 2]
