"""Pair construction and the pair record."""

from __future__ import annotations

import json
import random

import pytest

from comlrl_lightning.rounds.pairs import (
    ITERATIVE_PAIR_SELECTIONS,
    PAIR_SELECTIONS,
    PreferencePair,
    check_pair_selection,
    is_pair_selection,
    ordered_pairs,
    select_pairs,
)
from comlrl_lightning.validation import OptionError

# Exact binary fractions, so every gap is exact: gaps 0.75 (1>0, 3>0), 0.5 (1>2, 3>2), 0.25 (2>0); 1 == 3 tied.
SCORES = [0.25, 1.0, 0.5, 1.0]
ALL_PAIRS_SORTED = [(1, 0), (1, 2), (2, 0), (3, 0), (3, 2)]


# ---------------------------------------------------------------------------------------------
# ordered_pairs


def test_ordered_pairs_lists_every_non_tied_pair_in_index_order():
    assert ordered_pairs(SCORES) == [(0.75, 1, 0), (0.5, 1, 2), (0.25, 2, 0), (0.75, 3, 0), (0.5, 3, 2)]


def test_ordered_pairs_each_unordered_pair_once_winner_has_higher_score():
    scores = [3.0, -1.0, 2.5, 0.0, 7.0]
    result = ordered_pairs(scores)
    assert len(result) == 10  # 5 choose 2, no ties
    assert len({frozenset((w, l)) for _, w, l in result}) == 10
    for gap, winner, loser in result:
        assert scores[winner] > scores[loser]
        assert gap == scores[winner] - scores[loser]


def test_ordered_pairs_drops_ties():
    assert ordered_pairs([0.5, 0.5, 0.5]) == []
    assert ordered_pairs([1.0, 1.0, 0.0]) == [(1.0, 0, 2), (1.0, 1, 2)]
    assert ordered_pairs([]) == []
    assert ordered_pairs([2.0]) == []


# ---------------------------------------------------------------------------------------------
# select_pairs


def test_pair_selection_modes():
    assert PAIR_SELECTIONS == ("reward_gap", "all", "random")


def test_reward_gap_largest_first_stable_on_equal_gaps():
    # equal gaps keep (winner, loser) lexicographic order: (1,0) before (3,0), (1,2) before (3,2)
    assert select_pairs(SCORES, "reward_gap", None) == [(1, 0), (3, 0), (1, 2), (3, 2), (2, 0)]


def test_reward_gap_is_the_default_mode():
    assert select_pairs(SCORES) == [(1, 0), (3, 0), (1, 2), (3, 2), (2, 0)]


def test_reward_gap_limit_keeps_the_first_pairs():
    assert select_pairs(SCORES, "reward_gap", 3) == [(1, 0), (3, 0), (1, 2)]
    assert select_pairs(SCORES, "reward_gap", 1) == [(1, 0)]
    assert select_pairs(SCORES, "reward_gap", 16) == [(1, 0), (3, 0), (1, 2), (3, 2), (2, 0)]


def test_reward_gap_stable_with_many_equal_gaps():
    scores = [0.0, 1.0, 0.0, 1.0, 2.0]
    # gaps: 2>0,2>2 (2.0); 1>0,1>2,3>0,3>2,4>1,4>3 (1.0); ties dropped
    assert select_pairs(scores, "reward_gap", None) == [(4, 0), (4, 2), (1, 0), (1, 2), (3, 0), (3, 2), (4, 1), (4, 3)]


def test_all_sorted_by_winner_then_loser_and_ignores_the_limit():
    assert select_pairs(SCORES, "all", None) == ALL_PAIRS_SORTED
    assert select_pairs(SCORES, "all", 1) == ALL_PAIRS_SORTED
    assert select_pairs(SCORES, "all", 2, rng=random.Random(5)) == ALL_PAIRS_SORTED
    scores = [2.0, 5.0, 1.0, 3.0]
    assert select_pairs(scores, "all", None) == [(0, 2), (1, 0), (1, 2), (1, 3), (3, 0), (3, 2)]


def test_random_is_reproducible_with_the_same_seed():
    scores = [float(v) for v in [3, 1, 4, 1.5, 5, 9, 2, 6]]
    first = select_pairs(scores, "random", None, rng=random.Random(1234))
    second = select_pairs(scores, "random", None, rng=random.Random(1234))
    assert first == second


def test_random_is_a_permutation_of_the_non_tied_pairs():
    scores = [float(v) for v in [3, 1, 4, 1.5, 5, 9, 2, 6]]
    expected = sorted((w, l) for _, w, l in ordered_pairs(scores))
    assert len(expected) == 28
    for seed in range(5):
        result = select_pairs(scores, "random", None, rng=random.Random(seed))
        assert len(result) == len(expected)
        assert sorted(result) == expected


def test_random_depends_on_the_seed_and_shuffles():
    scores = [float(v) for v in [3, 1, 4, 1.5, 5, 9, 2, 6]]
    in_order = [(w, l) for _, w, l in ordered_pairs(scores)]
    orders = {tuple(select_pairs(scores, "random", None, rng=random.Random(seed))) for seed in range(6)}
    assert len(orders) > 1
    assert any(list(order) != in_order for order in orders)


def test_random_is_a_seeded_shuffle_of_the_candidate_list():
    # The reference shuffles the (i, j)-ordered candidate list; here with a seeded generator.
    scores = [float(v) for v in [3, 1, 4, 1.5, 5, 9, 2, 6]]
    expected = [(w, l) for _, w, l in ordered_pairs(scores)]
    random.Random(77).shuffle(expected)
    assert select_pairs(scores, "random", None, rng=random.Random(77)) == expected


def test_random_limit_keeps_the_first_of_the_shuffle():
    scores = [float(v) for v in [3, 1, 4, 1.5, 5, 9, 2, 6]]
    full = select_pairs(scores, "random", None, rng=random.Random(9))
    assert select_pairs(scores, "random", 4, rng=random.Random(9)) == full[:4]
    assert len(select_pairs(scores, "random", 100, rng=random.Random(9))) == 28


def test_random_advances_the_given_generator():
    scores = [float(v) for v in [3, 1, 4, 1.5, 5, 9, 2, 6]]
    rng = random.Random(42)
    first = select_pairs(scores, "random", None, rng=rng)
    second = select_pairs(scores, "random", None, rng=rng)
    assert sorted(first) == sorted(second)
    assert first != second  # the stream moved on; not a reseeded shuffle


@pytest.mark.parametrize("mode", ["reward_gap", "all", "random"])
def test_every_mode_drops_ties(mode):
    assert select_pairs([0.5, 0.5, 0.5, 0.5], mode, None, rng=random.Random(0)) == []
    result = select_pairs([1.0, 0.0, 1.0], mode, None, rng=random.Random(0))
    assert sorted(result) == [(0, 1), (2, 1)]


@pytest.mark.parametrize("mode", ["reward_gap", "random"])
def test_pairs_per_sample_limit(mode):
    scores = [float(v) for v in range(6)]  # 15 pairs
    for limit in (1, 2, 7, 15, 16):
        assert len(select_pairs(scores, mode, limit, rng=random.Random(3))) == min(limit, 15)
    assert len(select_pairs(scores, mode, None, rng=random.Random(3))) == 15


def test_the_default_limit_is_sixteen_pairs_and_the_default_generator_is_seeded_with_zero():
    scores = [float(v) for v in range(7)]  # 21 pairs
    assert len(select_pairs(scores)) == 16
    assert select_pairs(scores, "random", None) == select_pairs(scores, "random", None, rng=random.Random(0))
    assert select_pairs(scores, "random", None) != select_pairs(scores, "random", None, rng=random.Random(1))


def test_check_pair_selection_defaults_to_reward_gap_and_returns_the_allowed_entry():
    assert check_pair_selection(None, 4, PAIR_SELECTIONS) == "reward_gap"
    assert check_pair_selection("", None, PAIR_SELECTIONS) == "reward_gap"
    for selection in ITERATIVE_PAIR_SELECTIONS:
        assert check_pair_selection(selection, None, ITERATIVE_PAIR_SELECTIONS) == selection
    assert check_pair_selection("random", 3, PAIR_SELECTIONS) == "random"  # a limit with another mode is fine


def test_check_pair_selection_refuses_a_limit_with_all_and_an_unknown_mode():
    with pytest.raises(OptionError, match="preference_pairs_per_sample must be null when pair_selection='all'"):
        check_pair_selection("all", 2, PAIR_SELECTIONS)
    assert check_pair_selection("all", None, PAIR_SELECTIONS) == "all"
    with pytest.raises(OptionError, match="pair_selection"):
        check_pair_selection("comparator_reward", None, PAIR_SELECTIONS)


def test_is_pair_selection_is_every_within_side_mode_but_comparator_reward():
    assert [is_pair_selection(s) for s in ITERATIVE_PAIR_SELECTIONS] == [True, True, True, False]


def test_unknown_mode_is_rejected():
    with pytest.raises(ValueError, match="pair_selection must be one of: reward_gap, all, random."):
        select_pairs(SCORES, "comparator_reward_typo", None)


# ---------------------------------------------------------------------------------------------
# PreferencePair record

RECORD_KEYS = [
    "prompts",
    "winner_completions",
    "loser_completions",
    "winner_reward",
    "loser_reward",
    "candidate_reward_mean",
    "raw_rewards",
    "target_raw_reward",
    "comparator_raw_reward",
]


def base_pair(**overrides) -> PreferencePair:
    values = dict(
        prompts=["café?", "b"],
        winner_completions=["x", "y"],
        loser_completions=["z", "w"],
        winner_reward=1,
        loser_reward=0.5,
        candidate_reward_mean=0.75,
    )
    values.update(overrides)
    return PreferencePair(**values)


def test_to_record_keys_in_reference_order():
    assert list(base_pair().to_record().keys()) == RECORD_KEYS
    assert (
        list(base_pair(raw_rewards=[1.0, 0.5], target_raw_reward=1.0, comparator_raw_reward=0.5).to_record())
        == RECORD_KEYS
    )


def test_to_record_values_and_types():
    record = base_pair(winner_ids=[[1, 2]], loser_ids=[[3]], prompt_ids=[[4]]).to_record()
    assert record == {
        "prompts": ["café?", "b"],
        "winner_completions": ["x", "y"],
        "loser_completions": ["z", "w"],
        "winner_reward": 1.0,
        "loser_reward": 0.5,
        "candidate_reward_mean": 0.75,
        "raw_rewards": [],
        "target_raw_reward": None,
        "comparator_raw_reward": None,
    }
    assert isinstance(record["winner_reward"], float)  # int input stored as float
    # token ids are not part of the record
    assert "winner_ids" not in record and "prompt_ids" not in record and "loser_ids" not in record


def test_to_json_exact_string_base_record():
    expected = (
        '{"prompts": ["café?", "b"], "winner_completions": ["x", "y"], "loser_completions": ["z", "w"], '
        '"winner_reward": 1.0, "loser_reward": 0.5, "candidate_reward_mean": 0.75, "raw_rewards": [], '
        '"target_raw_reward": null, "comparator_raw_reward": null}'
    )
    assert base_pair().to_json() == expected
    assert base_pair(raw_rewards=None).to_json() == expected
    assert "\\u00e9" not in base_pair().to_json()  # non-ASCII kept literal (ensure_ascii=False)


def test_to_json_exact_string_iterative_record():
    pair = base_pair(
        winner_completions=["naïve\n", "日本"],
        loser_completions=['say "hi"', ""],
        winner_reward=0.25,
        loser_reward=-1,
        candidate_reward_mean=-0.375,
        raw_rewards=[0.5, -1],
        target_raw_reward=0.5,
        comparator_raw_reward=-1,
    )
    expected = (
        '{"prompts": ["café?", "b"], "winner_completions": ["naïve\\n", "日本"], '
        '"loser_completions": ["say \\"hi\\"", ""], "winner_reward": 0.25, "loser_reward": -1.0, '
        '"candidate_reward_mean": -0.375, "raw_rewards": [0.5, -1.0], "target_raw_reward": 0.5, '
        '"comparator_raw_reward": -1.0}'
    )
    assert pair.to_json() == expected
    assert pair.to_json() == json.dumps(pair.to_record(), ensure_ascii=False)
    assert json.loads(pair.to_json()) == pair.to_record()


def test_from_record_pads_and_truncates_to_num_agents():
    record = {
        "prompts": ["p0"],
        "winner_completions": ["w0", "w1", "w2"],
        "loser_completions": ["l0", "l1"],
        "winner_reward": 2,
        "loser_reward": 1.5,
        "candidate_reward_mean": 1.75,
        "raw_rewards": [2, 1.5],
        "target_raw_reward": 2,
        "comparator_raw_reward": 1.5,
    }
    pair = PreferencePair.from_record(record, num_agents=2)
    assert pair.prompts == ["p0", ""]
    assert pair.winner_completions == ["w0", "w1"]
    assert pair.loser_completions == ["l0", "l1"]
    assert pair.winner_reward == 2.0 and isinstance(pair.winner_reward, float)
    assert pair.loser_reward == 1.5
    assert pair.candidate_reward_mean == 1.75
    assert pair.raw_rewards == [2.0, 1.5]
    assert pair.target_raw_reward == 2.0
    assert pair.comparator_raw_reward == 1.5
    assert pair.prompt_ids == [] and pair.winner_ids == [] and pair.loser_ids == []


def test_from_record_defaults():
    pair = PreferencePair.from_record({}, num_agents=3)
    assert pair.prompts == ["", "", ""]
    assert pair.winner_completions == ["", "", ""]
    assert pair.loser_completions == ["", "", ""]
    assert pair.winner_reward == 0.0
    assert pair.loser_reward == 0.0
    assert pair.candidate_reward_mean == 0.0
    assert pair.raw_rewards == []
    assert pair.target_raw_reward is None
    assert pair.comparator_raw_reward is None


@pytest.mark.parametrize("raw", [None, "abc", 3.0, {"a": 1}])
def test_from_record_non_list_raw_rewards_become_empty(raw):
    pair = PreferencePair.from_record({"raw_rewards": raw, "winner_reward": 1.0}, num_agents=1)
    assert pair.raw_rewards == []
    assert pair.winner_reward == 1.0


def test_from_record_round_trips_to_record():
    pair = base_pair(raw_rewards=[1.0, 0.5], target_raw_reward=1.0, comparator_raw_reward=0.5)
    again = PreferencePair.from_record(json.loads(pair.to_json()), num_agents=2)
    assert again.to_json() == pair.to_json()
    plain = base_pair()
    assert PreferencePair.from_record(plain.to_record(), num_agents=2).to_json() == plain.to_json()
