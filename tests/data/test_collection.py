"""Pairs of iterative rounds: current candidate j against comparator candidate j."""

from __future__ import annotations

import pytest

from comlrl_lightning.data.collection import (
    Candidates,
    build_pairs_against,
    pair_from_record,
)
from comlrl_lightning.data.task import Task
from comlrl_lightning.generation.base import Completion
from comlrl_lightning.runtime.rng import RandomStream


def length_reward(a, b):
    return [float(len(a[0]) + len(b[0]))]


def shifted(value):
    return value - 1.0


def _side(texts_per_agent):
    return [[[Completion(ids=[ord(c) % 40 for c in t], text=t) for t in texts]] for texts in texts_per_agent]


def _build(current_texts, comparator_texts, selection="comparator_reward", limit=None, processor=None):
    task = Task(reward_func=length_reward, reward_processor=processor, num_agents=2)
    current = Candidates(prompts=[["p0", "p1"]], prompt_ids=[[[1], [2]]], completions=_side(current_texts))
    return build_pairs_against(current, _side(comparator_texts), task.oracle, [{}], selection, limit, RandomStream(0))


# current scores: 2, 4, 6, 1 (+ one extra candidate); comparator scores: 3, 4, 1, 5
CURRENT = [["a", "bb", "ccc", "", "zzzz"], ["a", "bb", "ccc", "d", "z"]]
COMPARATOR = [["aa", "bb", "x", "eeee"], ["a", "bb", "", "e"]]


def test_equal_indices_only_either_side_wins_ties_dropped():
    result = _build(CURRENT, COMPARATOR, selection="all")
    # j=1 is a tie; j=4 has no comparator candidate
    assert [(p.winner_reward, p.loser_reward) for p in result.pairs] == [(3.0, 2.0), (6.0, 1.0), (5.0, 1.0)]
    first = result.pairs[0]
    assert first.winner_completions == ["aa", "a"] and first.loser_completions == ["a", "a"]
    assert first.raw_rewards == [3.0, 2.0] and first.target_raw_reward == 2.0 and first.comparator_raw_reward == 3.0
    assert first.winner_ids == [[ord("a") % 40] * 2, [ord("a") % 40]]
    # mean over every score of both sides, uncompared candidates included
    assert first.candidate_reward_mean == pytest.approx((2 + 4 + 6 + 1 + 5 + 3 + 4 + 1 + 5) / 9)


def test_selection_modes_and_limit():
    by_comparator = _build(CURRENT, COMPARATOR, selection="comparator_reward", limit=2)
    assert [p.comparator_raw_reward for p in by_comparator.pairs] == [5.0, 3.0]
    by_gap = _build(CURRENT, COMPARATOR, selection="reward_gap", limit=2)
    assert [abs(p.winner_reward - p.loser_reward) for p in by_gap.pairs] == [5.0, 4.0]
    shuffled = [_build(CURRENT, COMPARATOR, selection="random").pairs for _ in range(2)]
    assert [p.to_record() for p in shuffled[0]] == [p.to_record() for p in shuffled[1]]  # seeded
    assert len(_build(CURRENT, COMPARATOR, selection="all", limit=1).pairs) == 3  # all ignores the limit


def test_raw_rewards_are_before_the_processor():
    pair = _build(CURRENT, COMPARATOR, selection="all", processor=shifted).pairs[0]
    assert (pair.winner_reward, pair.loser_reward) == (2.0, 1.0)
    assert pair.raw_rewards == [3.0, 2.0] and pair.target_raw_reward == 2.0


def test_records_become_trainable_pairs_by_retokenizing_text():
    from comlrl_lightning.team.team import Team

    team = Team(["embedded", "embedded"])
    record = _build(CURRENT, COMPARATOR, selection="all").pairs[0].to_record()
    pair = pair_from_record(record, team)
    tokenizer = team.tokenizers[0]
    assert pair.winner_ids[0] == tokenizer("aa", add_special_tokens=False)["input_ids"]
    assert pair.prompt_ids[1] == tokenizer("p1", add_special_tokens=True)["input_ids"]
    assert pair.to_record() == record


def _rewards_whose_mean_depends_on_the_summation_order(count, seed=0):
    """``count`` floats whose left-to-right ``sum / len`` differs from ``numpy.mean`` (pairwise summation)."""
    import random

    import numpy as np

    rng = random.Random(seed)
    while True:
        values = [rng.uniform(-1.0, 1.0) for _ in range(count)]
        if sum(values) / len(values) != float(np.mean(values)):
            return values


def _lookup_task(values):
    """A task whose reward of a joint candidate is ``values[int(first agent's text)]``."""
    return Task(reward_func=lambda a, b: [values[int(a[0])]], num_agents=2)


def test_candidate_reward_mean_is_numpys_mean_byte_for_byte_as_the_reference():
    import json

    import numpy as np

    from comlrl_lightning.data.collection import build_pairs_within
    from comlrl_lightning.data.round_records import encode_round

    # within an item (base trainers): the reference's float(np.mean(rewards)) over the K candidates
    values = _rewards_whose_mean_depends_on_the_summation_order(8)
    texts = [str(j) for j in range(8)]
    candidates = Candidates(prompts=[["p0", "p1"]], prompt_ids=[[[1], [2]]], completions=_side([texts, texts]))
    result = build_pairs_within(candidates, _lookup_task(values).oracle, [{}], "reward_gap", 1, RandomStream(0))
    (pair,) = result.pairs
    expected = {**pair.to_record(), "candidate_reward_mean": float(np.mean(values))}
    assert pair.to_json() == json.dumps(expected, ensure_ascii=False)
    assert result.reward_mean == float(np.mean(values))
    # against the comparator (iterative): np.mean of current + comparator scores, in that order
    values = _rewards_whose_mean_depends_on_the_summation_order(8, seed=1)
    current = Candidates(prompts=[["p0", "p1"]], prompt_ids=[[[1], [2]]], completions=_side([texts[:4], texts[:4]]))
    comparator = _side([texts[4:], texts[4:]])
    result = build_pairs_against(current, comparator, _lookup_task(values).oracle, [{}], "all", None, RandomStream(0))
    records = [p.to_record() for p in result.pairs]
    expected = [{**record, "candidate_reward_mean": float(np.mean(values))} for record in records]
    round_bytes, _ = encode_round(1, records)
    assert round_bytes == json.dumps({"iteration": 1, "num_pairs": 4, "pairs": expected}, ensure_ascii=False).encode()


class BatchLengthReward:
    """``length_reward`` in the batch form: one call for many joint answers, one value each."""

    accepts_batch = True

    def __init__(self):
        self.calls = []

    def __call__(self, a, b, batch_items=None):
        self.calls.append((list(a), list(b), list(batch_items)))
        return [float(len(x) + len(y)) for x, y in zip(a, b)]


def test_a_batch_reward_scores_a_whole_round_in_one_call_with_the_same_pairs():
    items = [{"id": 0}, {"id": 1}]
    texts = [[["a", "bb", "ccc"], ["dd", "e", ""]], [["a", "b", "cc"], ["", "eee", "f"]]]  # [agent][item][j]
    comparator = [[[Completion(ids=[1], text=t) for t in per_item] for per_item in agent] for agent in texts[::-1]]
    current = Candidates(
        prompts=[["p0", "p1"], ["q0", "q1"]],
        prompt_ids=[[[1], [2]], [[3], [4]]],
        completions=[[[Completion(ids=[1], text=t) for t in per_item] for per_item in agent] for agent in texts],
    )
    batch = BatchLengthReward()
    results = [
        build_pairs_against(
            current, comparator, Task(reward_func=f, num_agents=2).oracle, items, "all", None, RandomStream(0)
        )
        for f in (length_reward, batch)
    ]
    assert results[0].scores == results[1].scores and [p.to_record() for p in results[0].pairs] == [
        p.to_record() for p in results[1].pairs
    ]
    [(a, b, batch_items)] = batch.calls  # current and comparator of both items: 12 joint answers
    assert len(a) == len(b) == 12 and batch_items == [items[0]] * 6 + [items[1]] * 6
