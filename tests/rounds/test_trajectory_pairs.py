"""Trajectory pairs: the multi-turn record, reading it back, checkpoint state and scoring rows."""

from __future__ import annotations

import dataclasses
import json

from comlrl_lightning.rounds.pairs import PreferencePair
from comlrl_lightning.rounds.trajectory_pairs import (
    SideTurns,
    TrajectoryPair,
    is_trajectory_record,
    pair_from_state,
    trajectory_rows,
)


def _pair():
    return TrajectoryPair(
        prompts=["p0", "q0"],
        winner_completions=["a", "b"],
        loser_completions=["c", "d"],
        winner_reward=1.0,
        loser_reward=0.5,
        candidate_reward_mean=0.75,
        prompt_ids=[[1], [2]],
        winner_ids=[[3], [4]],
        loser_ids=[[5], [6]],
        winner_turns=SideTurns(
            prompts=[["p0", "p0a!"], ["q0", "q0b!"]],
            completions=[["a", "a2"], ["b", "b2"]],
            rewards=[0.0, 1.0],
            prompt_ids=[[[1], [1, 7]], [[2], [2, 8]]],
            ids=[[[3], [9]], [[4], [10]]],
        ),
        loser_turns=SideTurns(
            prompts=[["p0"], ["q0"]],
            completions=[["c"], ["d"]],
            rewards=[0.5],
            prompt_ids=[[[1]], [[2]]],
            ids=[[[5]], [[6]]],
        ),
        candidate_turn_reward_means=[0.25, 0.75],
    )


def test_record_keeps_the_single_turn_keys_then_every_agents_turns_and_rewards():
    record = _pair().to_record()
    single = PreferencePair(**{f.name: getattr(_pair(), f.name) for f in dataclasses.fields(PreferencePair)})
    assert list(record)[:9] == list(single.to_record())
    assert {k: record[k] for k in single.to_record()} == single.to_record()
    assert list(record)[9:] == [
        "winner_turns",
        "loser_turns",
        "winner_turn_rewards",
        "loser_turn_rewards",
        "candidate_turn_reward_means",
    ]
    assert record["winner_turns"] == [
        {"prompts": ["p0", "p0a!"], "completions": ["a", "a2"]},
        {"prompts": ["q0", "q0b!"], "completions": ["b", "b2"]},
    ]
    assert record["loser_turns"][1] == {"prompts": ["q0"], "completions": ["d"]}
    assert record["winner_turn_rewards"] == [0.0, 1.0] and record["loser_turn_rewards"] == [0.5]
    assert record["candidate_turn_reward_means"] == [0.25, 0.75]
    json.dumps(record)  # plain JSON, no token ids


def test_a_record_reads_back_to_the_same_record():
    record = _pair().to_record()
    assert is_trajectory_record(record) and not is_trajectory_record(PreferencePair(**_plain()).to_record())
    assert TrajectoryPair.from_record(record, 2).to_record() == record


def _plain():
    return dict(
        prompts=["p"],
        winner_completions=["a"],
        loser_completions=["b"],
        winner_reward=1.0,
        loser_reward=0.0,
        candidate_reward_mean=0.5,
    )


def test_checkpoint_state_restores_the_right_kind_of_pair():
    pair = _pair()
    restored = pair_from_state(dataclasses.asdict(pair))
    assert isinstance(restored, TrajectoryPair) and restored == pair
    plain = PreferencePair(**_plain())
    assert type(pair_from_state(dataclasses.asdict(plain))) is PreferencePair


def test_scoring_rows_list_every_turn_of_winners_then_losers_with_their_owner():
    plain = PreferencePair(**_plain(), prompt_ids=[[1], [2]], winner_ids=[[3], [4]], loser_ids=[[5], [6]])
    prompts, completions, owners = trajectory_rows([_pair(), plain], 0)
    assert owners == [0, 0, 1, 2, 3]
    assert prompts == [[1], [1, 7], [1], [1], [1]]
    assert completions == [[3], [9], [3], [5], [5]]


def test_turn_reward_means_average_each_turn_over_the_trajectories_that_reached_it():
    from comlrl_lightning.rounds.pairing import turn_reward_means
    from comlrl_lightning.rounds.trajectories import Trajectory

    trajectories = [Trajectory(rewards=[0.0, 1.0]), Trajectory(rewards=[0.5]), Trajectory(rewards=[-1.0, 0.0])]
    assert turn_reward_means(trajectories) == [(0.0 + 0.5 - 1.0) / 3, 0.5]
    assert turn_reward_means([]) == []


def test_training_logs_each_turns_reward_over_the_pairs_whose_item_reached_it():
    import torch

    from comlrl_lightning.modules.madpo import padded_turn_means, turn_reward_metrics

    plain = PreferencePair(**_plain())
    one_turn = TrajectoryPair(**_plain(), candidate_turn_reward_means=[0.1])
    means = padded_turn_means([_pair(), plain, one_turn])
    torch.testing.assert_close(means[:, 0], torch.tensor([0.25, 0.5, 0.1]))
    assert means[0, 1] == 0.75 and means[1:, 1].isnan().all()
    metrics = turn_reward_metrics(means)
    assert list(metrics) == ["turn_1/reward_mean", "turn_2/reward_mean"]
    assert metrics["turn_1/reward_mean"].item() == torch.tensor([0.25, 0.5, 0.1]).mean().item()
    assert metrics["turn_2/reward_mean"].item() == 0.75
