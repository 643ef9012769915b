"""The collector: a round's items sampled by one or two sides, scored, paired and merged."""

from __future__ import annotations

import pytest

from comlrl_lightning.rounds.collect import RoundSetup, Side, collect
from comlrl_lightning.rounds.pairing import PairsAgainst, PairsWithin
from comlrl_lightning.runtime.rng import RandomStream
from comlrl_lightning.tasks.task import Task
from comlrl_lightning.tasks.turns import Turns
from tests.rounds.test_pairing import Fixed, _encode, length_reward

ITEMS = [{"id": 0}, {"id": 1}]
TEXTS = [[["a", "bb", "ccc"], ["dd", "e", ""]], [["a", "b", "cc"], ["", "eee", "f"]]]  # [agent][item][j]
OTHER = [[["", "bbb", "c"], ["d", "e", "ff"]], [["a", "", "c"], ["", "e", "f"]]]
# the team's joint answers score [2, 3, 5] and [2, 4, 1] (length_reward), the comparator's [1, 3, 2] and [1, 2, 3]


class BatchLengthReward:
    """``length_reward`` in the batch form: one call for many joint answers, one value each."""

    accepts_batch = True

    def __init__(self):
        self.calls = []

    def __call__(self, a, b, batch_items=None):
        self.calls.append((list(a), list(b), list(batch_items)))
        return [float(len(x) + len(y)) for x, y in zip(a, b)]


class PromptTask(Task):
    """A task whose agents' prompts name the item."""

    def prompts(self, item):
        return [f"p{item['id']}", f"q{item['id']}"]


def _setup(reward, pairing, seed=0):
    task = PromptTask(reward_func=reward, num_agents=2)
    return RoundSetup(
        task=task, oracle=task.oracle, encode=_encode, tokenizers=lambda: None, pairing=pairing, seed=seed
    )


def _sides():
    return Side(lambda stream: Fixed(TEXTS), 3), Side(lambda stream: Fixed(OTHER), 3)


def test_a_batch_reward_scores_a_whole_round_in_one_call_with_the_same_pairs():
    batch = BatchLengthReward()
    results = [collect(ITEMS, *_sides(), Turns(), _setup(f, PairsAgainst("all", None))) for f in (length_reward, batch)]
    assert results[0].scores == results[1].scores and [p.to_record() for p in results[0].pairs] == [
        p.to_record() for p in results[1].pairs
    ]
    [(a, b, batch_items)] = batch.calls  # current and comparator of both items: 12 joint answers
    assert len(a) == len(b) == 12 and batch_items == [ITEMS[0]] * 6 + [ITEMS[1]] * 6
    assert results[0].scores == [[2.0, 3.0, 5.0, 1.0, 3.0, 2.0], [2.0, 4.0, 1.0, 1.0, 2.0, 3.0]]
    assert len(results[0].item_pairs[0]) == 2 and len(results[0].item_pairs[1]) == 3  # item 0's j=1 ties
    assert results[0].pairs[0].prompts == ["p0", "q0"] and results[0].comparator_raw_rewards[1] == [1.0, 2.0, 3.0]


def test_without_a_comparator_the_team_is_paired_within_each_item():
    team, _ = _sides()
    result = collect(ITEMS, team, None, Turns(), _setup(length_reward, PairsWithin("reward_gap", 1)))
    assert result.scores == [[2.0, 3.0, 5.0], [2.0, 4.0, 1.0]]
    assert [(p.winner_completions, p.loser_completions) for p in result.pairs] == [
        (["ccc", "cc"], ["a", "a"]),
        (["e", "eee"], ["", "f"]),
    ]
    assert result.comparator_raw_rewards == []


def test_the_round_stream_is_derived_from_the_seed_the_round_and_the_rank():
    seen = []

    def remembering(stream):
        seen.append(stream.seed)
        return Fixed(TEXTS)

    setup = _setup(length_reward, PairsWithin("random", 1), seed=7)
    collect(ITEMS, Side(remembering, 3), None, Turns(), setup)
    assert seen == [RandomStream.derive(7, "collect", 0, 0).seed]


def test_a_rule_that_pairs_another_number_of_sides_is_refused():
    team, comparator = _sides()
    with pytest.raises(ValueError, match="PairsWithin pairs 1 sides, not 2"):
        collect(ITEMS, team, comparator, Turns(), _setup(length_reward, PairsWithin("all", None)))
