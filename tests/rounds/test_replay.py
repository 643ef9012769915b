"""Round files, the replay rules and the replay buffer: file format, index, draws, resume."""

from __future__ import annotations

import collections
import hashlib
import json
import os
import pathlib
import random

import pytest
import torch

from comlrl_lightning.rounds.pairs import PreferencePair
from comlrl_lightning.rounds.replay import (
    AllHistoryReplay,
    CurrentReplay,
    LambdaDecayReplay,
    NearestKReplay,
    ReplayBuffer,
    ReplayIndexError,
    ReplayRule,
    Shard,
    lambda_decay_weights,
)
from comlrl_lightning.validation import OptionError


def tagged(shard: int, count: int) -> list:
    return [{"shard": shard, "index": index} for index in range(count)]


def filled(tmp_path, sizes, rule=None) -> ReplayBuffer:
    """A buffer under ``rule`` with one round per entry of ``sizes`` (iteration i+1 holds ``sizes[i]`` records)."""
    buffer = ReplayBuffer(tmp_path / "replay", rule=rule)
    for position, size in enumerate(sizes):
        buffer.write_round(position + 1, tagged(position + 1, size))
    return buffer


def shares(records) -> dict:
    counts = collections.Counter(record["shard"] for record in records)
    return {shard: count / len(records) for shard, count in counts.items()}


# ---------------------------------------------------------------------------------------------
# replay rules

K_MESSAGE = "k must be >= 1."
LAM_MESSAGE = "lam must be in [0, 1]."
SAMPLE_SIZE_MESSAGE = "sample_size must be >= 1 or null."


def hand_built(count: int) -> list:
    """``count`` shards for iterations 1..count, oldest first, without any file behind them."""
    return [Shard(i, f"iteration_{i:04d}.json", i, f"{i:064x}") for i in range(1, count + 1)]


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: NearestKReplay(0), K_MESSAGE),
        (lambda: NearestKReplay(-3), K_MESSAGE),
        (lambda: NearestKReplay(None), K_MESSAGE),
        (lambda: NearestKReplay(float("nan")), K_MESSAGE),
        (lambda: NearestKReplay(2, sample_size=0), SAMPLE_SIZE_MESSAGE),
        (lambda: NearestKReplay(2, sample_size=-1), SAMPLE_SIZE_MESSAGE),
        (lambda: AllHistoryReplay(sample_size=0), SAMPLE_SIZE_MESSAGE),
        (lambda: AllHistoryReplay(sample_size=-5), SAMPLE_SIZE_MESSAGE),
        (lambda: AllHistoryReplay(sample_size=float("nan")), SAMPLE_SIZE_MESSAGE),
        (lambda: LambdaDecayReplay(1.5), LAM_MESSAGE),
        (lambda: LambdaDecayReplay(-0.1), LAM_MESSAGE),
        (lambda: LambdaDecayReplay(float("nan")), LAM_MESSAGE),
        (lambda: LambdaDecayReplay(float("inf")), LAM_MESSAGE),
        (lambda: LambdaDecayReplay(None), LAM_MESSAGE),
        (lambda: LambdaDecayReplay(0.5, sample_size=0), SAMPLE_SIZE_MESSAGE),
        (lambda: LambdaDecayReplay(0.5, sample_size=-1), SAMPLE_SIZE_MESSAGE),
        (lambda: ReplayRule(sample_size=0), SAMPLE_SIZE_MESSAGE),
    ],
)
def test_rule_validation_messages(build, message):
    with pytest.raises(OptionError) as error:
        build()
    assert str(error.value) == message


def test_rules_accept_valid_options():
    assert CurrentReplay().sample_size is None
    nearest = NearestKReplay(1)
    assert (nearest.k, nearest.sample_size) == (1, None)
    nearest = NearestKReplay(3, sample_size=10)
    assert (nearest.k, nearest.sample_size) == (3, 10)
    assert AllHistoryReplay().sample_size is None and AllHistoryReplay(sample_size=1).sample_size == 1
    assert LambdaDecayReplay(0.0).lam == 0.0 and LambdaDecayReplay(0.0).sample_size is None
    decay = LambdaDecayReplay(1, sample_size=5)
    assert decay.lam == 1.0 and isinstance(decay.lam, float) and decay.sample_size == 5
    assert ReplayRule().sample_size is None and ReplayRule(sample_size=7).sample_size == 7


def test_only_current_replay_skips_history():
    assert CurrentReplay().uses_history is False
    for rule in [NearestKReplay(2), AllHistoryReplay(), LambdaDecayReplay(0.5), ReplayRule()]:
        assert rule.uses_history is True
    assert all(
        isinstance(rule, ReplayRule)
        for rule in [CurrentReplay(), NearestKReplay(2), AllHistoryReplay(), LambdaDecayReplay(0.5)]
    )


def test_rule_eligible_on_hand_built_shards():
    shards = hand_built(4)
    before = list(shards)
    iterations = lambda rule, given=shards: [s.iteration for s in rule.eligible(given)]  # noqa: E731
    assert iterations(NearestKReplay(2)) == [3, 4]  # the last k, oldest first
    assert iterations(NearestKReplay(1)) == [4]
    assert iterations(NearestKReplay(4)) == [1, 2, 3, 4]
    assert iterations(NearestKReplay(9)) == [1, 2, 3, 4]
    assert iterations(CurrentReplay()) == [4]  # the last one
    assert iterations(AllHistoryReplay()) == [1, 2, 3, 4]
    assert iterations(LambdaDecayReplay(0.5)) == [1, 2, 3, 4]
    assert iterations(ReplayRule()) == [1, 2, 3, 4]
    for rule in [CurrentReplay(), NearestKReplay(2), AllHistoryReplay(), LambdaDecayReplay(0.5), ReplayRule()]:
        assert rule.eligible([]) == []
        assert rule.eligible(shards) is not shards  # a new list, the index is left alone
    assert shards == before


def test_rule_weights():
    for count in range(6):
        assert LambdaDecayReplay(0.5).weights(count) == lambda_decay_weights(count, 0.5)
        assert LambdaDecayReplay(0.0).weights(count) == lambda_decay_weights(count, 0.0)
        assert LambdaDecayReplay(1.0).weights(count) == lambda_decay_weights(count, 1.0)
    assert LambdaDecayReplay(0.5).weights(4) == pytest.approx([1 / 15, 2 / 15, 4 / 15, 8 / 15])
    for rule in [AllHistoryReplay(), NearestKReplay(3), ReplayRule(), CurrentReplay()]:
        assert rule.weights(4) == [0.25] * 4
        assert rule.weights(1) == [1.0]
        assert rule.weights(0) == []


def test_round_weights_are_each_rounds_draw_probability_with_empty_rounds_at_zero():
    sizes = [2, 0, 3, 1]  # round 2 has no pairs: never indexed, never drawn
    assert ReplayRule().round_weights(sizes) == pytest.approx([1 / 3, 0.0, 1 / 3, 1 / 3])
    assert NearestKReplay(k=2).round_weights(sizes) == [0.0, 0.0, 0.5, 0.5]
    assert NearestKReplay(k=2).round_weights([1, 4, 0]) == [0.5, 0.5, 0.0]
    assert LambdaDecayReplay(lam=0.5).round_weights([1, 1, 1, 1]) == pytest.approx([1 / 15, 2 / 15, 4 / 15, 8 / 15])
    assert AllHistoryReplay().round_weights([]) == [] and AllHistoryReplay().round_weights([0, 0]) == [0.0, 0.0]


def test_current_replay_round_weights_are_the_last_round_only_and_nothing_when_it_is_empty():
    assert CurrentReplay().round_weights([2, 3, 4]) == [0.0, 0.0, 1.0]
    assert CurrentReplay().round_weights([0, 1]) == [0.0, 1.0]
    assert CurrentReplay().round_weights([5]) == [1.0]
    assert CurrentReplay().round_weights([2, 3, 0]) == [0.0, 0.0, 0.0]  # no fallback to an older round
    assert CurrentReplay().round_weights([]) == []


def test_a_rule_prints_as_its_class_and_options():
    assert repr(NearestKReplay(k=2, sample_size=8)) == "NearestKReplay(sample_size=8, k=2)"
    assert repr(CurrentReplay()) == "CurrentReplay(sample_size=None)"


class NewestTwoThreeToOne(ReplayRule):
    """A user-defined rule: the newest two rounds, the newest drawn three times as often."""

    def eligible(self, shards):
        return list(shards[-2:])

    def weights(self, count):
        return [1.0, 3.0][-count:]


def test_user_defined_rule_on_hand_built_shards():
    rule = NewestTwoThreeToOne(sample_size=10)
    assert rule.uses_history is True and rule.sample_size == 10
    assert [s.iteration for s in rule.eligible(hand_built(4))] == [3, 4]
    assert [s.iteration for s in rule.eligible(hand_built(1))] == [1]
    assert rule.weights(2) == [1.0, 3.0] and rule.weights(1) == [3.0]
    with pytest.raises(OptionError, match="sample_size must be >= 1 or null."):
        NewestTwoThreeToOne(sample_size=0)


def test_user_defined_rule_draws_expected_shares(tmp_path):
    buffer = filled(tmp_path, [2000] * 4, rule=NewestTwoThreeToOne(sample_size=4000))
    records = buffer.sample(0, random.Random(2024))
    assert len(records) == 4000
    observed = shares(records)
    assert set(observed) == {3, 4}
    assert abs(observed[3] - 0.25) <= 0.03 and abs(observed[4] - 0.75) <= 0.03


def test_user_defined_rule_matches_reference_procedure(tmp_path):
    sizes = [9, 4, 13]
    buffer = filled(tmp_path, sizes, rule=NewestTwoThreeToOne(sample_size=37))
    ours, theirs = random.Random(5), random.Random(5)
    expected = reference_sample([tagged(2, 4), tagged(3, 13)], [1.0, 3.0], 37, theirs)
    assert buffer.sample(0, ours) == expected
    assert ours.getstate() == theirs.getstate()


def test_buffer_rule_defaults_to_current(tmp_path):
    default = ReplayBuffer(tmp_path / "never")
    assert isinstance(default.rule, CurrentReplay) and default.rule.uses_history is False
    assert isinstance(ReplayBuffer(tmp_path / "never", rule=None).rule, CurrentReplay)
    rule = LambdaDecayReplay(0.3)
    assert ReplayBuffer(tmp_path / "never", rule=rule).rule is rule
    assert not (tmp_path / "never").exists() and default.shards == []  # created on the first write


# ---------------------------------------------------------------------------------------------
# lambda_decay weights


def test_lambda_decay_weights_documented_examples_oldest_first():
    assert lambda_decay_weights(4, 0.5) == pytest.approx([0.0667, 0.1333, 0.2667, 0.5333], abs=1e-4)
    assert lambda_decay_weights(4, 0.8) == pytest.approx([0.1734, 0.2168, 0.2710, 0.3388], abs=1e-4)
    assert lambda_decay_weights(4, 0.5) == pytest.approx([1 / 15, 2 / 15, 4 / 15, 8 / 15])


@pytest.mark.parametrize("lam", [0.0, 0.1, 0.5, 0.8, 0.99, 1.0])
@pytest.mark.parametrize("rounds", [1, 2, 5])
def test_lambda_decay_weights_sum_to_one_and_grow_towards_newest(lam, rounds):
    weights = lambda_decay_weights(rounds, lam)
    assert len(weights) == rounds and sum(weights) == pytest.approx(1.0)
    assert all(a <= b for a, b in zip(weights, weights[1:]))


def test_lambda_decay_weights_edges():
    assert lambda_decay_weights(4, 0.0) == [0.0, 0.0, 0.0, 1.0]
    assert lambda_decay_weights(4, 1.0) == [0.25] * 4
    assert lambda_decay_weights(1, 0.3) == [1.0]
    assert lambda_decay_weights(0, 0.5) == []
    # λ > 1 makes the normaliser negative: newest only.
    assert lambda_decay_weights(3, 2.0) == [0.0, 0.0, 1.0]


# ---------------------------------------------------------------------------------------------
# round files


def test_round_file_bytes_exact(tmp_path):
    record = PreferencePair(
        prompts=["Résumé → ok?", "b"],
        winner_completions=["ja", "oui"],
        loser_completions=["nein", "non"],
        winner_reward=1.0,
        loser_reward=0.25,
        candidate_reward_mean=0.5,
        raw_rewards=[2.0, -1.5],
        target_raw_reward=2.0,
        comparator_raw_reward=-1.5,
    ).to_record()
    buffer = ReplayBuffer(tmp_path / "replay")
    path = buffer.write_round(3, [record])
    assert path == tmp_path / "replay" / "iteration_0003.json" == buffer.round_path(3)
    expected = (
        '{"iteration": 3, "num_pairs": 1, "pairs": [{"prompts": ["Résumé → ok?", "b"], '
        '"winner_completions": ["ja", "oui"], "loser_completions": ["nein", "non"], "winner_reward": 1.0, '
        '"loser_reward": 0.25, "candidate_reward_mean": 0.5, "raw_rewards": [2.0, -1.5], '
        '"target_raw_reward": 2.0, "comparator_raw_reward": -1.5}]}'
    )
    assert path.read_bytes() == expected.encode("utf-8")
    assert [s.iteration for s in buffer.shards] == [3] and buffer.shards[0].filename == "iteration_0003.json"
    assert buffer.shards[0].num_pairs == 1 and len(buffer.shards[0].sha256) == 64
    assert sorted(os.listdir(tmp_path / "replay")) == ["iteration_0003.json"]  # no .tmp left
    assert (
        buffer.round_path(12).name == "iteration_0012.json" and buffer.round_path(12345).name == "iteration_12345.json"
    )


def test_empty_round_writes_file_but_no_shard(tmp_path):
    buffer = ReplayBuffer(tmp_path / "replay")
    path = buffer.write_round(1, [])
    assert path.read_bytes() == b'{"iteration": 1, "num_pairs": 0, "pairs": []}'
    assert buffer.shards == [] and buffer.total_pairs == 0
    assert os.listdir(tmp_path / "replay") == ["iteration_0001.json"]


def test_existing_file_is_overwritten(tmp_path):
    (tmp_path / "replay").mkdir()
    (tmp_path / "replay" / "iteration_0001.json").write_text("old garbage")
    buffer = ReplayBuffer(tmp_path / "replay")
    buffer.write_round(1, tagged(1, 2))
    assert json.loads((tmp_path / "replay" / "iteration_0001.json").read_text())["num_pairs"] == 2


def test_crash_before_replace_leaves_previous_file_and_index(tmp_path, monkeypatch):
    buffer = ReplayBuffer(tmp_path / "replay")
    buffer.write_round(1, tagged(1, 3))
    before_bytes = buffer.round_path(1).read_bytes()
    before_index = list(buffer.shards)

    def crash(src, dst):
        raise OSError("simulated crash")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        buffer.write_round(1, tagged(1, 5))  # redo of an existing round
    with pytest.raises(OSError, match="simulated crash"):
        buffer.write_round(2, tagged(2, 5))  # a brand-new round
    assert buffer.round_path(1).read_bytes() == before_bytes
    assert not buffer.round_path(2).exists()
    assert buffer.shards == before_index
    assert os.listdir(tmp_path / "replay") == ["iteration_0001.json"]


def test_redo_replaces_shard_and_drops_later_ones(tmp_path):
    buffer = filled(tmp_path, [2, 3, 4, 5])
    assert [s.iteration for s in buffer.shards] == [1, 2, 3, 4] and buffer.total_pairs == 14
    old = buffer.shards[1]
    buffer.write_round(2, tagged(2, 7))
    assert [(s.iteration, s.num_pairs) for s in buffer.shards] == [(1, 2), (2, 7)]
    assert buffer.shards[1].sha256 != old.sha256 and buffer.total_pairs == 9
    buffer.write_round(2, [])  # an empty redo removes the shard of that iteration
    assert [s.iteration for s in buffer.shards] == [1]
    buffer.write_round(3, tagged(3, 1))
    assert [s.iteration for s in buffer.shards] == [1, 3]


# ---------------------------------------------------------------------------------------------
# eligible shards, weights, sample size


def test_eligible_windows(tmp_path):
    sizes = [2, 3, 4, 5]

    def iterations(buffer):
        return [s.iteration for s in buffer.rule.eligible(buffer.shards)]

    assert iterations(filled(tmp_path / "a", sizes, rule=NearestKReplay(2))) == [3, 4]
    assert iterations(filled(tmp_path / "b", sizes, rule=NearestKReplay(9))) == [1, 2, 3, 4]
    assert iterations(filled(tmp_path / "c", sizes, rule=AllHistoryReplay())) == [1, 2, 3, 4]
    decay = filled(tmp_path / "d", sizes, rule=LambdaDecayReplay(0.5))
    assert iterations(decay) == [1, 2, 3, 4]
    assert decay.rule.weights(len(decay.rule.eligible(decay.shards))) == pytest.approx([1 / 15, 2 / 15, 4 / 15, 8 / 15])
    assert iterations(filled(tmp_path / "e", sizes)) == [4]  # the default rule: the current round
    assert iterations(ReplayBuffer(tmp_path / "f")) == []
    history = filled(tmp_path / "g", sizes, rule=AllHistoryReplay())
    assert history.rule.weights(len(history.rule.eligible(history.shards))) == [0.25] * 4


def test_empty_rounds_do_not_count_in_the_window(tmp_path):
    buffer = ReplayBuffer(tmp_path / "replay", rule=NearestKReplay(2))
    for iteration, size in [(1, 2), (2, 3), (3, 0), (4, 0)]:
        buffer.write_round(iteration, tagged(iteration, size))
    assert [s.iteration for s in buffer.rule.eligible(buffer.shards)] == [1, 2]
    assert {r["shard"] for r in buffer.sample(0, random.Random(0))} <= {1, 2}


def test_sample_size_defaults(tmp_path):
    buffer = ReplayBuffer(tmp_path / "replay", rule=AllHistoryReplay())
    assert buffer.sample_size_for(0) == 0  # nothing at all
    assert buffer.sample(0, random.Random(0)) == []
    buffer.write_round(1, tagged(1, 6))
    buffer.write_round(2, tagged(2, 4))
    buffer.write_round(3, [])
    assert buffer.sample_size_for(9) == 9  # the current round's count
    assert buffer.sample_size_for(0) == 4  # the newest non-empty shard
    assert len(buffer.sample(0, random.Random(0))) == 4
    fixed = ReplayBuffer(tmp_path / "replay", rule=AllHistoryReplay(sample_size=3))
    assert fixed.sample_size_for(9) == 3 and fixed.sample_size_for(0) == 3
    assert fixed.sample(9, random.Random(0)) == []  # empty index: nothing to draw from


def test_sample_size_of_one_current_pair_and_the_newest_of_three_shards(tmp_path):
    buffer = filled(tmp_path, [5, 2, 7], rule=AllHistoryReplay())
    assert buffer.sample_size_for(1) == 1  # one pair this round: one draw, not the newest shard's 7
    assert buffer.sample_size_for(0) == 7  # the newest of three (not the second, not the oldest)
    [record] = buffer.sample(1, random.Random(0))  # a draw of one record is made
    assert record["shard"] in (1, 2, 3)


# ---------------------------------------------------------------------------------------------
# sampling


def test_lambda_decay_shares_match_weights(tmp_path):
    buffer = filled(tmp_path, [2000] * 4, rule=LambdaDecayReplay(0.5, sample_size=4000))
    records = buffer.sample(0, random.Random(1234))
    assert len(records) == 4000
    observed = shares(records)
    for shard, weight in zip([1, 2, 3, 4], lambda_decay_weights(4, 0.5)):
        assert abs(observed.get(shard, 0.0) - weight) <= 0.03


def test_lambda_zero_draws_only_newest_and_one_is_uniform(tmp_path):
    newest = filled(tmp_path / "a", [50] * 4, rule=LambdaDecayReplay(0.0, sample_size=400))
    assert set(record["shard"] for record in newest.sample(0, random.Random(5))) == {4}
    uniform = filled(tmp_path / "b", [500] * 4, rule=LambdaDecayReplay(1.0, sample_size=2000))
    observed = shares(uniform.sample(0, random.Random(5)))
    assert all(abs(observed.get(shard, 0.0) - 0.25) <= 0.04 for shard in [1, 2, 3, 4])


def test_nearest_k_draws_only_from_window(tmp_path):
    buffer = filled(tmp_path, [100] * 4, rule=NearestKReplay(2, sample_size=200))
    observed = shares(buffer.sample(0, random.Random(3)))
    assert set(observed) == {3, 4} and abs(observed[3] - 0.5) <= 0.1


def test_without_replacement_when_count_fits(tmp_path):
    buffer = filled(tmp_path, [50], rule=AllHistoryReplay(sample_size=30))
    for seed in range(5):
        records = buffer.sample(0, random.Random(seed))
        keys = [(r["shard"], r["index"]) for r in records]
        assert len(keys) == 30 and len(set(keys)) == 30


def test_full_copies_plus_remainder_when_count_exceeds(tmp_path):
    buffer = filled(tmp_path, [7], rule=AllHistoryReplay(sample_size=24))  # 3 full copies + 3
    records = buffer.sample(0, random.Random(11))
    counts = collections.Counter(r["index"] for r in records)
    assert len(records) == 24 and set(counts) == set(range(7))
    assert sorted(counts.values()) == [3, 3, 3, 3, 4, 4, 4]
    exact = filled(tmp_path / "exact", [5], rule=AllHistoryReplay(sample_size=10))
    assert collections.Counter(r["index"] for r in exact.sample(0, random.Random(0))) == {i: 2 for i in range(5)}


def reference_sample(shard_records, weights, total, rng):
    """The reference draw written out literally, with ``rng`` in place of the global ``random``."""
    counts = [0] * len(shard_records)
    for _ in range(total):
        counts[rng.choices(range(len(shard_records)), weights=weights, k=1)[0]] += 1
    combined = []
    for records, count in zip(shard_records, counts):
        if count <= len(records):
            combined.extend(rng.sample(records, count))
        else:
            remaining = count
            while remaining >= len(records):
                copy = list(records)
                rng.shuffle(copy)
                combined.extend(copy)
                remaining -= len(records)
            combined.extend(rng.sample(records, remaining))
    rng.shuffle(combined)
    return combined


@pytest.mark.parametrize("sample_size", [5, 37, 200])
def test_sample_matches_reference_procedure_draw_for_draw(tmp_path, sample_size):
    sizes = [9, 4, 13]
    buffer = filled(tmp_path, sizes, rule=LambdaDecayReplay(0.6, sample_size=sample_size))
    ours, theirs = random.Random(77), random.Random(77)
    expected = reference_sample(
        [tagged(i + 1, n) for i, n in enumerate(sizes)], lambda_decay_weights(3, 0.6), sample_size, theirs
    )
    assert buffer.sample(0, ours) == expected
    assert ours.getstate() == theirs.getstate()


def test_combined_list_is_shuffled_across_shards(tmp_path):
    buffer = filled(tmp_path, [50, 50], rule=AllHistoryReplay(sample_size=60))
    order = [r["shard"] for r in buffer.sample(0, random.Random(2))]
    assert order != sorted(order)


def test_current_replay_sample_uses_last_shard(tmp_path):
    buffer = filled(tmp_path, [4, 6])
    records = buffer.sample(6, random.Random(0))
    assert sorted(r["index"] for r in records) == list(range(6)) and {r["shard"] for r in records} == {2}


def test_sampling_is_deterministic_per_seed(tmp_path):
    buffer = filled(tmp_path, [40, 30, 20], rule=LambdaDecayReplay(0.7, sample_size=60))
    first = buffer.sample(0, random.Random(42))
    assert first == buffer.sample(0, random.Random(42))
    assert first != buffer.sample(0, random.Random(43))


def test_files_outside_the_index_are_never_read(tmp_path, monkeypatch):
    directory = tmp_path / "replay"
    directory.mkdir()
    (directory / "iteration_0009.json").write_text("{not json")
    (directory / "iteration_0002.json").write_text(json.dumps({"iteration": 2, "num_pairs": 1, "pairs": [{"x": 1}]}))
    buffer = ReplayBuffer(directory, rule=AllHistoryReplay(sample_size=20))
    buffer.write_round(1, tagged(1, 5))
    read = []
    original_read_bytes, original_open = pathlib.Path.read_bytes, os.open

    def spy_read_bytes(self):
        read.append(self.name)
        return original_read_bytes(self)

    def spy_open(file, *args, **kwargs):
        read.append(os.path.basename(str(file)))
        return original_open(file, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "read_bytes", spy_read_bytes)
    monkeypatch.setattr(os, "open", spy_open)
    records = buffer.sample(0, random.Random(0))
    assert len(records) == 20 and {r["shard"] for r in records} == {1}
    assert set(read) == {"iteration_0001.json"}
    assert [s.iteration for s in buffer.shards] == [1]


# ---------------------------------------------------------------------------------------------
# resume


def test_state_dict_round_trip_samples_identically(tmp_path):
    buffer = filled(tmp_path, [30, 0, 20, 10], rule=LambdaDecayReplay(0.6))
    state = buffer.state_dict()
    assert state["shards"][0] == {
        "iteration": 1,
        "filename": "iteration_0001.json",
        "num_pairs": 30,
        "sha256": buffer.shards[0].sha256,
    }
    path = tmp_path / "state.pt"
    torch.save(state, path)
    loaded = torch.load(path, weights_only=True)
    assert loaded == state
    restored = ReplayBuffer(tmp_path / "replay", rule=LambdaDecayReplay(0.6))
    restored.load_state_dict(loaded)
    assert restored.shards == buffer.shards and restored.total_pairs == 60
    rng_a, rng_b = random.Random(9), random.Random(9)
    assert buffer.sample(15, rng_a) == restored.sample(15, rng_b)
    assert rng_a.getstate() == rng_b.getstate()


def test_load_keeps_the_directory_given_to_init(tmp_path):
    buffer = filled(tmp_path / "old", [5, 5], rule=AllHistoryReplay())
    state = buffer.state_dict()
    os.rename(tmp_path / "old", tmp_path / "moved")
    restored = ReplayBuffer(tmp_path / "moved" / "replay", rule=AllHistoryReplay())
    restored.load_state_dict(state)
    assert restored.directory == tmp_path / "moved" / "replay"
    assert len(restored.sample(0, random.Random(0))) == 5


def test_load_with_missing_file_names_it(tmp_path):
    buffer = filled(tmp_path, [3, 4], rule=AllHistoryReplay())
    state = buffer.state_dict()
    missing = buffer.round_path(2)
    missing.unlink()
    restored = ReplayBuffer(tmp_path / "replay", rule=AllHistoryReplay())
    with pytest.raises(ReplayIndexError) as error:
        restored.load_state_dict(state)
    assert str(missing) in str(error.value) and "replay index" in str(error.value)
    assert restored.shards == []  # nothing half-restored


def test_load_with_corrupted_file_names_it(tmp_path):
    buffer = filled(tmp_path, [3, 4], rule=AllHistoryReplay())
    state = buffer.state_dict()
    path = buffer.round_path(1)
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(ReplayIndexError) as error:
        ReplayBuffer(tmp_path / "replay", rule=AllHistoryReplay()).load_state_dict(state)
    assert str(path) in str(error.value) and "sha256" in str(error.value)
    with pytest.raises(ReplayIndexError, match="iteration_0001.json"):
        buffer.sample(0, random.Random(0))  # every read is verified, not only on resume


def test_index_mismatches_are_reported(tmp_path):
    buffer = filled(tmp_path, [3], rule=AllHistoryReplay())
    path = buffer.round_path(1)
    wrong_count = Shard(1, path.name, 4, buffer.shards[0].sha256)
    with pytest.raises(ReplayIndexError, match="expects 4"):
        buffer.read_records(wrong_count)
    path.write_bytes(b"{broken")
    broken = Shard(1, path.name, 3, hashlib.sha256(b"{broken").hexdigest())
    with pytest.raises(ReplayIndexError, match="not valid JSON") as error:
        buffer.read_records(broken)
    assert str(path) in str(error.value)


# ---------------------------------------------------------------------------------------------
# the record index: a draw reads only the records it takes


def test_a_draw_reads_only_the_records_it_takes(tmp_path, monkeypatch):
    buffer = filled(tmp_path, [400] * 5, rule=AllHistoryReplay(sample_size=10))
    reads = []
    original = os.pread

    def counting(descriptor, size, offset):
        data = original(descriptor, size, offset)
        reads.append(len(data))
        return data

    monkeypatch.setattr(os, "pread", counting)
    records = buffer.sample(0, random.Random(3))
    assert len(records) == 10 and len(reads) == len({(r["shard"], r["index"]) for r in records})
    total = sum((tmp_path / "replay" / f"iteration_{i:04d}.json").stat().st_size for i in range(1, 6))
    assert sum(reads) < total / 100  # about 10 records' bytes, not the 2,000 records of the history


def test_a_tampered_record_is_a_named_error_when_drawn(tmp_path):
    buffer = filled(tmp_path, [3], rule=AllHistoryReplay(sample_size=30))
    path = tmp_path / "replay" / "iteration_0001.json"
    path.write_bytes(path.read_bytes().replace(b'"index": 1', b'"index": 7'))
    with pytest.raises(ReplayIndexError, match=r"iteration_0001.json is corrupt: record 1 differs"):
        buffer.sample(0, random.Random(0))
    path.unlink()
    with pytest.raises(ReplayIndexError, match="iteration_0001.json is missing"):
        buffer.sample(0, random.Random(0))
