"""Pairing rules: a round's joint trajectories (one turn: joint answers) become preference pairs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from comlrl_lightning.generation.base import Completion
from comlrl_lightning.rounds.pairing import PairsAgainst, PairsWithin, pairing_rule, select_against, trajectory_score
from comlrl_lightning.rounds.pairs import PreferencePair
from comlrl_lightning.rounds.round_records import encode_round
from comlrl_lightning.rounds.trajectories import sample_sides, sample_trajectories
from comlrl_lightning.rounds.trajectory_pairs import TrajectoryPair
from comlrl_lightning.runtime.rng import RandomStream
from comlrl_lightning.tasks.oracle import Oracle
from comlrl_lightning.tasks.task import Task
from comlrl_lightning.tasks.turns import Turns
from tests.rounds.test_trajectories import ITEMS, PROMPTS, ScriptedSampler, digit_reward, feedback


def length_reward(a, b):
    return [float(len(a[0]) + len(b[0]))]


def shifted(value):
    return value - 1.0


class Fixed:
    """A sampler that answers ``texts[agent][item][j]`` (as many as listed, whatever is asked)."""

    def __init__(self, texts):
        self.texts = texts

    def __call__(self, items, prompts, count):
        return [
            [[Completion(ids=[ord(c) % 40 for c in t], text=t) for t in per_item] for per_item in a] for a in self.texts
        ]


def _encode(agent, prompt):
    return [len(prompt), agent]


def _one_turn(sides, reward=length_reward, processor=None, items=({},), prompts=(("p0", "p1"),)):
    """Every side's one-turn trajectories of ``sides[side][agent][item][j]`` texts, scored by ``reward``."""
    oracle = Task(reward_func=reward, reward_processor=processor, num_agents=2).oracle
    samplers = [Fixed(texts) for texts in sides]
    return sample_sides(samplers, [0] * len(sides), oracle, Turns(), list(items), list(prompts), lambda: None)


def _against(current, comparator, selection="comparator_reward", limit=None, processor=None):
    sides = _one_turn([[[texts] for texts in current], [[texts] for texts in comparator]], processor=processor)
    return PairsAgainst(selection, limit).pair(sides, Turns(), _encode, RandomStream(0))


# current scores: 2, 4, 6, 1 (+ one extra candidate); comparator scores: 3, 4, 1, 5
CURRENT = [["a", "bb", "ccc", "", "zzzz"], ["a", "bb", "ccc", "d", "z"]]
COMPARATOR = [["aa", "bb", "x", "eeee"], ["a", "bb", "", "e"]]


def test_equal_indices_only_either_side_wins_ties_dropped():
    result = _against(CURRENT, COMPARATOR, selection="all")
    # j=1 is a tie; j=4 has no comparator candidate
    assert [(p.winner_reward, p.loser_reward) for p in result.pairs] == [(3.0, 2.0), (6.0, 1.0), (5.0, 1.0)]
    first = result.pairs[0]
    assert type(first) is PreferencePair  # one turn: the single-turn record
    assert first.winner_completions == ["aa", "a"] and first.loser_completions == ["a", "a"]
    assert first.raw_rewards == [3.0, 2.0] and first.target_raw_reward == 2.0 and first.comparator_raw_reward == 3.0
    assert first.winner_ids == [[ord("a") % 40] * 2, [ord("a") % 40]] and first.prompt_ids == [[2, 0], [2, 1]]
    # mean over every score of both sides, uncompared candidates included
    assert first.candidate_reward_mean == pytest.approx((2 + 4 + 6 + 1 + 5 + 3 + 4 + 1 + 5) / 9)


def test_selection_modes_and_limit():
    by_comparator = _against(CURRENT, COMPARATOR, selection="comparator_reward", limit=2)
    assert [p.comparator_raw_reward for p in by_comparator.pairs] == [5.0, 3.0]
    by_gap = _against(CURRENT, COMPARATOR, selection="reward_gap", limit=2)
    assert [abs(p.winner_reward - p.loser_reward) for p in by_gap.pairs] == [5.0, 4.0]
    shuffled = [_against(CURRENT, COMPARATOR, selection="random").pairs for _ in range(2)]
    assert [p.to_record() for p in shuffled[0]] == [p.to_record() for p in shuffled[1]]  # seeded
    assert len(_against(CURRENT, COMPARATOR, selection="all", limit=1).pairs) == 3  # all ignores the limit


def test_select_against_wins_by_any_gap_and_breaks_comparator_ties_by_the_gap():
    # gaps under one still decide the winner; equal comparator scores are ordered by |gap|, largest first
    scores = {"current": [0.5, 2.0, 4.0, 0.0], "comparator": [0.0, 1.0, 1.0, 0.25]}
    assert select_against(scores, "all", None, RandomStream(0)) == [
        (0, "current", "comparator"),
        (1, "current", "comparator"),
        (2, "current", "comparator"),
        (3, "comparator", "current"),
    ]
    assert [j for j, _, _ in select_against(scores, "comparator_reward", None, RandomStream(0))] == [2, 1, 3, 0]


def test_raw_rewards_are_before_the_processor():
    pair = _against(CURRENT, COMPARATOR, selection="all", processor=shifted).pairs[0]
    assert (pair.winner_reward, pair.loser_reward) == (2.0, 1.0)
    assert pair.raw_rewards == [3.0, 2.0] and pair.target_raw_reward == 2.0


def test_pairs_within_one_item_are_chosen_by_gap_and_keep_no_raw_rewards():
    (side,) = _one_turn([[[["a", "bbb", "cc"]], [["", "", ""]]]])
    result = PairsWithin("reward_gap", 2).pair([side], Turns(), _encode, RandomStream(0))
    assert result.scores == [[1.0, 3.0, 2.0]]
    assert [(p.winner_completions[0], p.loser_completions[0]) for p in result.pairs] == [("bbb", "a"), ("bbb", "cc")]
    assert result.pairs[0].to_record()["raw_rewards"] == [] and result.pairs[0].target_raw_reward is None


def _rewards_whose_mean_depends_on_the_summation_order(count, seed=0):
    """``count`` floats whose left-to-right ``sum / len`` differs from ``numpy.mean`` (pairwise summation)."""
    import random

    rng = random.Random(seed)
    while True:
        values = [rng.uniform(-1.0, 1.0) for _ in range(count)]
        if sum(values) / len(values) != float(np.mean(values)):
            return values


def test_candidate_reward_mean_is_numpys_mean_byte_for_byte_as_the_reference():
    # within an item (base trainers): the reference's float(np.mean(rewards)) over the K candidates
    values = _rewards_whose_mean_depends_on_the_summation_order(8)
    texts = [str(j) for j in range(8)]
    lookup = lambda a, b: [values[int(a[0])]]  # noqa: E731
    sides = _one_turn([[[texts], [texts]]], reward=lookup)
    result = PairsWithin("reward_gap", 1).pair(sides, Turns(), _encode, RandomStream(0))
    (pair,) = result.pairs
    expected = {**pair.to_record(), "candidate_reward_mean": float(np.mean(values))}
    assert pair.to_json() == json.dumps(expected, ensure_ascii=False)
    assert result.reward_mean == float(np.mean(values))
    # against the comparator (iterative): np.mean of current + comparator scores, in that order
    values = _rewards_whose_mean_depends_on_the_summation_order(8, seed=1)
    lookup = lambda a, b: [values[int(a[0])]]  # noqa: E731
    sides = _one_turn([[[texts[:4]], [texts[:4]]], [[texts[4:]], [texts[4:]]]], reward=lookup)
    result = PairsAgainst("all", None).pair(sides, Turns(), _encode, RandomStream(0))
    records = [p.to_record() for p in result.pairs]
    expected = [{**record, "candidate_reward_mean": float(np.mean(values))} for record in records]
    round_bytes, _ = encode_round(1, records)
    assert round_bytes == json.dumps({"iteration": 1, "num_pairs": 4, "pairs": expected}, ensure_ascii=False).encode()


def test_a_one_turn_score_is_the_reward_as_it_is_and_a_longer_one_the_return():
    assert str(trajectory_score(Turns(discount=0.5), [-0.0])) == "-0.0"  # a discounted sum would give 0.0
    assert trajectory_score(Turns(num_turns=2, external_transition=feedback, discount=0.5), [2.0, 4.0]) == 4.0
    assert trajectory_score(Turns(num_turns=2, external_transition=feedback), [2.0, 4.0]) == 4.0


def test_the_shipped_rule_pairs_against_a_comparator_or_within_the_team():
    assert pairing_rule("reward_gap", 2, True) == PairsAgainst("reward_gap", 2)
    assert pairing_rule("random", None, False) == PairsWithin("random", None)
    with pytest.raises(ValueError, match="needs a comparator"):
        pairing_rule("comparator_reward", 2, False)


def test_pairs_of_several_turns_compare_returns_and_hold_every_turn():
    turns = Turns(num_turns=2, external_transition=feedback, discount=0.5)
    sampled = sample_trajectories(ScriptedSampler(), Oracle(digit_reward), turns, ITEMS, PROMPTS, 2, lambda: None)
    result = PairsWithin("reward_gap", None).pair([sampled], turns, _encode, RandomStream(0))
    pair = result.item_pairs[0][0]
    assert isinstance(pair, TrajectoryPair)
    assert result.scores[0] == [0 + 0.5 * 10, 1 + 0.5 * 10]  # every turn-1 sample is s0
    assert (pair.winner_reward, pair.loser_reward) == (6.0, 5.0)
    assert pair.winner_turns.rewards == [1.0, 10.0] and pair.loser_turns.rewards == [0.0, 10.0]
    assert pair.winner_turns.ids[0] == [[0, 0, 0, 1], [1, 0, 1, 0]]
    assert pair.winner_turns.prompt_ids[1][1] == [len(pair.winner_turns.prompts[1][1]), 1]
    assert pair.winner_completions == ["c0a0i0s1", "c0a1i0s1"] and pair.prompts == ["x0", "x1"]
    assert pair.candidate_turn_reward_means == [0.5, 10.0]


def test_pairs_against_the_comparator_compare_trajectory_j_with_trajectory_j():
    turns = Turns(num_turns=2, external_transition=feedback)
    mine = sample_trajectories(ScriptedSampler(), Oracle(digit_reward), turns, ITEMS, PROMPTS, 2, lambda: None)
    theirs = sample_trajectories(ScriptedSampler(), Oracle(digit_reward), turns, ITEMS, PROMPTS, 2, lambda: None)
    theirs[0][0].rewards[-1] = 99.0
    result = PairsAgainst("reward_gap", None).pair([mine, theirs], turns, _encode, RandomStream(0))
    assert len(result.item_pairs[0]) == 1 and not result.item_pairs[1]  # every other trajectory ties
    pair = result.item_pairs[0][0]
    assert (pair.winner_reward, pair.loser_reward) == (99.0, 10.0)
    assert pair.target_raw_reward == 10.0 and pair.comparator_raw_reward == 10.0  # raw rewards untouched
