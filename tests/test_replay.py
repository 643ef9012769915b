"""Round files and the replay buffer (SPEC 1.3 steps 2-3, 4, 5; DESIGN 6 items 2-3)."""

from __future__ import annotations

import collections
import hashlib
import json
import os
import pathlib
import random

import pytest
import torch

from comlrl_lightning.options import OptionError
from comlrl_lightning.pairs import PreferencePair
from comlrl_lightning.replay import (
    REPLAY_MODES,
    ReplayBuffer,
    ReplayIndexError,
    Shard,
    lambda_decay_weights,
    normalise_replay_mode,
    validate_replay_options,
)


def tagged(shard: int, count: int) -> list:
    return [{"shard": shard, "index": index} for index in range(count)]


def filled(tmp_path, sizes, **options) -> ReplayBuffer:
    """A buffer with one round per entry of ``sizes`` (iteration i+1 holds ``sizes[i]`` tagged records)."""
    buffer = ReplayBuffer(tmp_path / "replay", **options)
    for position, size in enumerate(sizes):
        buffer.write_round(position + 1, tagged(position + 1, size))
    return buffer


def shares(records) -> dict:
    counts = collections.Counter(record["shard"] for record in records)
    return {shard: count / len(records) for shard, count in counts.items()}


# ---------------------------------------------------------------------------------------------
# options


@pytest.mark.parametrize(
    "value, expected",
    [
        ("current", "current"), ("latest", "current"), ("new", "current"), (" Latest ", "current"),
        ("nearest_k", "nearest_k"), ("recent_k", "nearest_k"), ("last_k", "nearest_k"), ("k", "nearest_k"),
        ("K", "nearest_k"), ("all_history", "all_history"), ("ALL_HISTORY", "all_history"),
        ("lambda", "lambda_decay"), ("lambda_decay", "lambda_decay"), ("td_lambda", "lambda_decay"),
        ("td-lambda", "lambda_decay"), ("  TD-Lambda\n", "lambda_decay"),
    ],
)
def test_normalise_replay_mode_aliases(value, expected):
    assert normalise_replay_mode(value) == expected


@pytest.mark.parametrize("value", ["all", "history", "all-history", "decay", "nearest", "", None, "currentt"])
def test_normalise_replay_mode_rejects_unknown(value):
    with pytest.raises(OptionError) as error:
        normalise_replay_mode(value)
    assert str(error.value) == "preference_replay_mode must be one of: current, nearest_k, all_history, lambda_decay."


def test_replay_modes_constant():
    assert REPLAY_MODES == ("current", "nearest_k", "all_history", "lambda_decay")


ONLY_LAMBDA = "preference_replay_lambda is only valid when preference_replay_mode='lambda_decay'."
ONLY_K = "preference_replay_k is only valid when preference_replay_mode='nearest_k'."
SAMPLE_SIZE = "preference_replay_sample_size must be >= 1 or null."


@pytest.mark.parametrize(
    "mode, k, lam, sample_size, message",
    [
        ("current", 2, None, None, "preference_replay_k must be null or 1 when preference_replay_mode='current'."),
        ("latest", 0, None, None, "preference_replay_k must be null or 1 when preference_replay_mode='current'."),
        ("current", None, 0.5, None, ONLY_LAMBDA),
        ("current", 1, None, 8, "preference_replay_sample_size is only valid when preference_replay_mode is "
                                "'nearest_k', 'all_history', or 'lambda_decay'."),
        ("nearest_k", None, None, None, "preference_replay_k is required when preference_replay_mode='nearest_k'."),
        ("nearest_k", 0, None, None, "preference_replay_k must be >= 1."),
        ("recent_k", -3, None, None, "preference_replay_k must be >= 1."),
        ("nearest_k", 2, 0.5, None, ONLY_LAMBDA),
        ("nearest_k", 2, None, 0, SAMPLE_SIZE),
        ("all_history", 2, None, None, ONLY_K),
        ("all_history", None, 0.5, None, ONLY_LAMBDA),
        ("all_history", None, None, 0, SAMPLE_SIZE),
        ("lambda_decay", 2, 0.5, None, ONLY_K),
        ("lambda", None, None, None, "preference_replay_lambda is required when preference_replay_mode='lambda_decay'."),
        ("lambda_decay", None, 1.5, None, "preference_replay_lambda must be in [0, 1]."),
        ("lambda_decay", None, -0.1, None, "preference_replay_lambda must be in [0, 1]."),
        ("lambda_decay", None, float("nan"), None, "preference_replay_lambda must be in [0, 1]."),
        ("lambda_decay", None, 0.5, -1, SAMPLE_SIZE),
        ("bogus", None, None, None,
         "preference_replay_mode must be one of: current, nearest_k, all_history, lambda_decay."),
    ],
)
def test_validate_replay_options_messages(mode, k, lam, sample_size, message):
    with pytest.raises(OptionError) as error:
        validate_replay_options(mode, k, lam, sample_size)
    assert str(error.value) == message


@pytest.mark.parametrize(
    "mode, k, lam, sample_size, expected",
    [
        ("current", None, None, None, "current"), ("new", 1, None, None, "current"),
        ("last_k", 1, None, None, "nearest_k"), ("nearest_k", 3, None, 10, "nearest_k"),
        ("all_history", None, None, None, "all_history"), ("all_history", None, None, 1, "all_history"),
        ("td_lambda", None, 0.0, None, "lambda_decay"), ("lambda_decay", None, 1.0, 5, "lambda_decay"),
    ],
)
def test_validate_replay_options_accepts(mode, k, lam, sample_size, expected):
    assert validate_replay_options(mode, k, lam, sample_size) == expected


def test_buffer_validates_its_options(tmp_path):
    with pytest.raises(OptionError, match="preference_replay_k is required"):
        ReplayBuffer(tmp_path, mode="nearest_k")
    assert ReplayBuffer(tmp_path, mode="td-lambda", lam=0.3).mode == "lambda_decay"
    assert not (tmp_path / "never").exists() and ReplayBuffer(tmp_path / "never").shards == []


# ---------------------------------------------------------------------------------------------
# lambda_decay weights


def test_lambda_decay_weights_spec_examples_oldest_first():
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
        prompts=["Résumé → ok?", "b"], winner_completions=["ja", "oui"], loser_completions=["nein", "non"],
        winner_reward=1.0, loser_reward=0.25, candidate_reward_mean=0.5, raw_rewards=[2.0, -1.5],
        target_raw_reward=2.0, comparator_raw_reward=-1.5,
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
    assert buffer.round_path(12).name == "iteration_0012.json" and buffer.round_path(12345).name == "iteration_12345.json"


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
    assert [s.iteration for s in filled(tmp_path / "a", sizes, mode="nearest_k", k=2).eligible()] == [3, 4]
    assert [s.iteration for s in filled(tmp_path / "b", sizes, mode="nearest_k", k=9).eligible()] == [1, 2, 3, 4]
    assert [s.iteration for s in filled(tmp_path / "c", sizes, mode="all_history").eligible()] == [1, 2, 3, 4]
    decay = filled(tmp_path / "d", sizes, mode="lambda_decay", lam=0.5)
    assert [s.iteration for s in decay.eligible()] == [1, 2, 3, 4]
    assert decay.weights(decay.eligible()) == pytest.approx([1 / 15, 2 / 15, 4 / 15, 8 / 15])
    assert [s.iteration for s in filled(tmp_path / "e", sizes).eligible()] == [4]
    assert ReplayBuffer(tmp_path / "f").eligible() == []
    history = filled(tmp_path / "g", sizes, mode="all_history")
    assert history.weights(history.eligible()) == [0.25] * 4


def test_empty_rounds_do_not_count_in_the_window(tmp_path):
    buffer = ReplayBuffer(tmp_path / "replay", mode="nearest_k", k=2)
    for iteration, size in [(1, 2), (2, 3), (3, 0), (4, 0)]:
        buffer.write_round(iteration, tagged(iteration, size))
    assert [s.iteration for s in buffer.eligible()] == [1, 2]


def test_sample_size_defaults(tmp_path):
    buffer = ReplayBuffer(tmp_path / "replay", mode="all_history")
    assert buffer.sample_size_for(0) == 0  # nothing at all
    assert buffer.sample(0, random.Random(0)) == []
    buffer.write_round(1, tagged(1, 6))
    buffer.write_round(2, tagged(2, 4))
    buffer.write_round(3, [])
    assert buffer.sample_size_for(9) == 9  # the current round's count
    assert buffer.sample_size_for(0) == 4  # the newest non-empty shard
    assert len(buffer.sample(0, random.Random(0))) == 4
    fixed = ReplayBuffer(tmp_path / "replay", mode="all_history", sample_size=3)
    assert fixed.sample_size_for(9) == 3 and fixed.sample_size_for(0) == 3
    assert fixed.sample(9, random.Random(0)) == []  # empty index: nothing to draw from


# ---------------------------------------------------------------------------------------------
# sampling


def test_lambda_decay_shares_match_weights(tmp_path):
    buffer = filled(tmp_path, [2000] * 4, mode="lambda_decay", lam=0.5, sample_size=4000)
    records = buffer.sample(0, random.Random(1234))
    assert len(records) == 4000
    observed = shares(records)
    for shard, weight in zip([1, 2, 3, 4], lambda_decay_weights(4, 0.5)):
        assert abs(observed.get(shard, 0.0) - weight) <= 0.03


def test_lambda_zero_draws_only_newest_and_one_is_uniform(tmp_path):
    newest = filled(tmp_path / "a", [50] * 4, mode="lambda_decay", lam=0.0, sample_size=400)
    assert set(record["shard"] for record in newest.sample(0, random.Random(5))) == {4}
    uniform = filled(tmp_path / "b", [500] * 4, mode="lambda_decay", lam=1.0, sample_size=2000)
    observed = shares(uniform.sample(0, random.Random(5)))
    assert all(abs(observed.get(shard, 0.0) - 0.25) <= 0.04 for shard in [1, 2, 3, 4])


def test_nearest_k_draws_only_from_window(tmp_path):
    buffer = filled(tmp_path, [100] * 4, mode="nearest_k", k=2, sample_size=200)
    observed = shares(buffer.sample(0, random.Random(3)))
    assert set(observed) == {3, 4} and abs(observed[3] - 0.5) <= 0.1


def test_without_replacement_when_count_fits(tmp_path):
    buffer = filled(tmp_path, [50], mode="all_history", sample_size=30)
    for seed in range(5):
        records = buffer.sample(0, random.Random(seed))
        keys = [(r["shard"], r["index"]) for r in records]
        assert len(keys) == 30 and len(set(keys)) == 30


def test_full_copies_plus_remainder_when_count_exceeds(tmp_path):
    buffer = filled(tmp_path, [7], mode="all_history", sample_size=24)  # 3 full copies + 3
    records = buffer.sample(0, random.Random(11))
    counts = collections.Counter(r["index"] for r in records)
    assert len(records) == 24 and set(counts) == set(range(7))
    assert sorted(counts.values()) == [3, 3, 3, 3, 4, 4, 4]
    exact = filled(tmp_path / "exact", [5], mode="all_history", sample_size=10)
    assert collections.Counter(r["index"] for r in exact.sample(0, random.Random(0))) == {i: 2 for i in range(5)}


def spec_sample(shard_records, weights, total, rng):
    """SPEC 5.3 written out literally, with ``rng`` in place of the global ``random``."""
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
def test_sample_matches_spec_procedure_draw_for_draw(tmp_path, sample_size):
    sizes = [9, 4, 13]
    buffer = filled(tmp_path, sizes, mode="lambda_decay", lam=0.6, sample_size=sample_size)
    ours, theirs = random.Random(77), random.Random(77)
    expected = spec_sample([tagged(i + 1, n) for i, n in enumerate(sizes)], lambda_decay_weights(3, 0.6),
                           sample_size, theirs)
    assert buffer.sample(0, ours) == expected
    assert ours.getstate() == theirs.getstate()


def test_combined_list_is_shuffled_across_shards(tmp_path):
    buffer = filled(tmp_path, [50, 50], mode="all_history", sample_size=60)
    order = [r["shard"] for r in buffer.sample(0, random.Random(2))]
    assert order != sorted(order)


def test_current_mode_sample_uses_last_shard(tmp_path):
    buffer = filled(tmp_path, [4, 6])
    records = buffer.sample(6, random.Random(0))
    assert sorted(r["index"] for r in records) == list(range(6)) and {r["shard"] for r in records} == {2}


def test_sampling_is_deterministic_per_seed(tmp_path):
    buffer = filled(tmp_path, [40, 30, 20], mode="lambda_decay", lam=0.7, sample_size=60)
    first = buffer.sample(0, random.Random(42))
    assert first == buffer.sample(0, random.Random(42))
    assert first != buffer.sample(0, random.Random(43))


def test_files_outside_the_index_are_never_read(tmp_path, monkeypatch):
    directory = tmp_path / "replay"
    directory.mkdir()
    (directory / "iteration_0009.json").write_text("{not json")
    (directory / "iteration_0002.json").write_text(json.dumps({"iteration": 2, "num_pairs": 1, "pairs": [{"x": 1}]}))
    buffer = ReplayBuffer(directory, mode="all_history", sample_size=20)
    buffer.write_round(1, tagged(1, 5))
    read = []
    original = pathlib.Path.read_bytes

    def spy(self):
        read.append(self.name)
        return original(self)

    monkeypatch.setattr(pathlib.Path, "read_bytes", spy)
    records = buffer.sample(0, random.Random(0))
    assert len(records) == 20 and {r["shard"] for r in records} == {1}
    assert set(read) == {"iteration_0001.json"}
    assert [s.iteration for s in buffer.shards] == [1]


# ---------------------------------------------------------------------------------------------
# resume


def test_state_dict_round_trip_samples_identically(tmp_path):
    buffer = filled(tmp_path, [30, 0, 20, 10], mode="lambda_decay", lam=0.6)
    state = buffer.state_dict()
    assert state["shards"][0] == {"iteration": 1, "filename": "iteration_0001.json", "num_pairs": 30,
                                  "sha256": buffer.shards[0].sha256}
    path = tmp_path / "state.pt"
    torch.save(state, path)
    loaded = torch.load(path, weights_only=True)
    assert loaded == state
    restored = ReplayBuffer(tmp_path / "replay", mode="lambda_decay", lam=0.6)
    restored.load_state_dict(loaded)
    assert restored.shards == buffer.shards and restored.total_pairs == 60
    rng_a, rng_b = random.Random(9), random.Random(9)
    assert buffer.sample(15, rng_a) == restored.sample(15, rng_b)
    assert rng_a.getstate() == rng_b.getstate()


def test_load_keeps_the_directory_given_to_init(tmp_path):
    buffer = filled(tmp_path / "old", [5, 5], mode="all_history")
    state = buffer.state_dict()
    os.rename(tmp_path / "old", tmp_path / "moved")
    restored = ReplayBuffer(tmp_path / "moved" / "replay", mode="all_history")
    restored.load_state_dict(state)
    assert restored.directory == tmp_path / "moved" / "replay"
    assert len(restored.sample(0, random.Random(0))) == 5


def test_load_with_missing_file_names_it(tmp_path):
    buffer = filled(tmp_path, [3, 4], mode="all_history")
    state = buffer.state_dict()
    missing = buffer.round_path(2)
    missing.unlink()
    restored = ReplayBuffer(tmp_path / "replay", mode="all_history")
    with pytest.raises(ReplayIndexError) as error:
        restored.load_state_dict(state)
    assert str(missing) in str(error.value) and "replay index" in str(error.value)
    assert restored.shards == []  # nothing half-restored


def test_load_with_corrupted_file_names_it(tmp_path):
    buffer = filled(tmp_path, [3, 4], mode="all_history")
    state = buffer.state_dict()
    path = buffer.round_path(1)
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(ReplayIndexError) as error:
        ReplayBuffer(tmp_path / "replay", mode="all_history").load_state_dict(state)
    assert str(path) in str(error.value) and "sha256" in str(error.value)
    with pytest.raises(ReplayIndexError, match="iteration_0001.json"):
        buffer.sample(0, random.Random(0))  # every read is verified, not only on resume


def test_index_mismatches_are_reported(tmp_path):
    buffer = filled(tmp_path, [3], mode="all_history")
    path = buffer.round_path(1)
    wrong_count = Shard(1, path.name, 4, buffer.shards[0].sha256)
    with pytest.raises(ReplayIndexError, match="expects 4"):
        buffer.read_records(wrong_count)
    path.write_bytes(b"{broken")
    broken = Shard(1, path.name, 3, hashlib.sha256(b"{broken").hexdigest())
    with pytest.raises(ReplayIndexError, match="not valid JSON") as error:
        buffer.read_records(broken)
    assert str(path) in str(error.value)
